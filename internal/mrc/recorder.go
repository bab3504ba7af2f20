package mrc

import "sync/atomic"

// Value lengths that are not lengths.
const (
	// UnknownValue is the value length of a reply or request that does not tell the size of
	// the value the engine holds (a read that missed, mg without v, memcached append or touch).
	UnknownValue = -1
	// IntegerValue is the value length of a value redis stores as an integer rather than as a
	// string (RedisValueLen; INCR's result): its bytes do not depend on its digits.
	IntegerValue = -4
)

// Recorder turns one partition's requests and the engine's replies into its Tracker's reads,
// writes and deletes, with object sizes in the bytes the engine's limit counts (its
// EngineModel, which calibration may replace at any time). The sidecar records what its
// clients send and the engine answers; the simulator records its simulated clients through the
// same type, so both draw the same curve from the same requests. Safe for concurrent use.
//
// What each request tells the curve:
//   - a read that hits carries the object's size when the reply holds the value, and keeps
//     the size the curve knows otherwise;
//   - a read that misses carries no size: the object is not in the engine, so the read moves
//     nothing new onto the stack, and the write that follows it (look-aside) brings the size;
//   - a write places the object, with the size it has after the write, at the top of the LRU
//     order, without counting as a read; a write whose resulting size is unknown moves a
//     tracked object to the top with the size it had;
//   - a write that leaves the value at least some length (memcached's incr and decr) keeps
//     a larger size the object had;
//   - a delete takes the object off the stack, so it no longer counts in other reads'
//     distances and its next read is a first access.
type Recorder struct {
	tracker *Tracker
	model   atomic.Pointer[EngineModel]
}

// NewRecorder returns a recorder of an empty tracker configured by cfg, counting sizes with
// model until SetModel replaces it.
func NewRecorder(cfg Config, model *EngineModel) (*Recorder, error) {
	tracker, err := NewTracker(cfg)
	if err != nil {
		return nil, err
	}
	r := &Recorder{tracker: tracker}
	r.model.Store(model)
	return r, nil
}

// Tracker is the curve the recorder feeds.
func (r *Recorder) Tracker() *Tracker { return r.tracker }

// Model is the engine model sizes are counted with now.
func (r *Recorder) Model() *EngineModel { return r.model.Load() }

// SetModel counts the sizes of later requests with model.
func (r *Recorder) SetModel(model *EngineModel) { r.model.Store(model) }

// knownObjectBytes is the engine bytes of an object of keyLen and valueLen bytes (or
// IntegerValue, RawValue, GrownRawValue, ExtendedRawValue), 0 when valueLen is UnknownValue.
func (m *EngineModel) knownObjectBytes(keyLen, valueLen int) int64 {
	if _, _, raw := rawValue(valueLen); valueLen < 0 && valueLen != IntegerValue && !raw {
		return 0
	}
	return m.ObjectBytes(keyLen, valueLen)
}

// Read records a read of the key hashed h (keyhash.Sum64) whose key is keyLen bytes: hit is
// whether the engine found it, valueLen the length of the value the reply carried
// (UnknownValue when it carried none; for redis RedisValueLen of it). It returns the object's
// engine bytes, 0 when unknown. memcached stores the bytes a reply carries, so the read's size
// is the object's; a redis reply cannot tell how redis holds the value (12345 SET is an
// integer, the same digits APPENDed a raw string), so for redis the read's size only stands in
// for a key whose size the curve does not know, and the size the last write told stays.
func (r *Recorder) Read(h uint64, hit bool, keyLen, valueLen int) int64 {
	model := r.model.Load()
	var size int64
	if hit {
		size = model.knownObjectBytes(keyLen, valueLen)
	}
	if model.slabs == nil {
		r.tracker.ReadHashGuess(h, size, hit)
	} else {
		r.tracker.ReadHash(h, size, hit)
	}
	return size
}

// Write records that the key hashed h now holds a value of valueLen bytes (UnknownValue: a
// write that does not tell the resulting size; RawValue, GrownRawValue, ExtendedRawValue: a
// redis string whose bytes depend on the allocation it had, judged from the size the curve
// knows for the key). It returns the object's engine bytes, 0 when unknown.
func (r *Recorder) Write(h uint64, keyLen, valueLen int) int64 {
	model := r.model.Load()
	if n, how, raw := rawValue(valueLen); raw && model.slabs == nil {
		return r.tracker.RewriteHash(h, newRedisRewrite(int64(max(keyLen, 0)), int64(n), how).size)
	}
	size := model.knownObjectBytes(keyLen, valueLen)
	r.tracker.WriteHash(h, size)
	return size
}

// Grow records a write that leaves the key hashed h a value of at least valueLen bytes
// (memcached's incr and decr, which tell the number but pad it to the length it had).
func (r *Recorder) Grow(h uint64, keyLen, valueLen int) int64 {
	size := r.model.Load().knownObjectBytes(keyLen, valueLen)
	r.tracker.GrowHash(h, size)
	return size
}

// Delete records that the key hashed h is no longer in the engine.
func (r *Recorder) Delete(h uint64) { r.tracker.DeleteHash(h) }
