package mrc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// op is one request a recorder is told about.
type op struct {
	kind     byte // 'r' read, 'w' write, 'g' grow, 'd' delete
	key      string
	hit      bool
	valueLen int
}

func read(key string, hit bool, valueLen int) op { return op{'r', key, hit, valueLen} }
func write(key string, valueLen int) op          { return op{kind: 'w', key: key, valueLen: valueLen} }
func del(key string) op                          { return op{kind: 'd', key: key} }
func grow(key string, valueLen int) op           { return op{kind: 'g', key: key, valueLen: valueLen} }

func (o op) apply(r *Recorder) {
	h := keyhash.Sum64String(o.key)
	switch o.kind {
	case 'r':
		r.Read(h, o.hit, len(o.key), o.valueLen)
	case 'w':
		r.Write(h, len(o.key), o.valueLen)
	case 'g':
		r.Grow(h, len(o.key), o.valueLen)
	case 'd':
		r.Delete(h)
	}
}

func newFullRecorder(t testing.TB, maxKeys int) *Recorder {
	t.Helper()
	r, err := NewRecorder(Config{Sizes: []int64{1}, SampleRate: 1, MaxBytes: BudgetForKeys(maxKeys)}, NewRedisModel())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRecorderSequences: what each request sequence leaves in the curve (every key sampled):
// the objects' footprint in engine bytes, the keys tracked, the reads counted, and the hit
// ratio just below and just above the one read's stack distance (it hit or not there).
func TestRecorderSequences(t *testing.T) {
	m := NewRedisModel()
	// Engine bytes of a 2-byte key with a value of n bytes.
	b := func(n int) int64 { return m.ObjectBytes(2, n) }
	tests := []struct {
		name      string
		ops       []op
		footprint int64
		tracked   int
		reads     float64
		achieved  float64
		// distance is the one read's stack distance in bytes, where its hit ratio steps from 0
		// to 1; 0: it misses at every size.
		distance int64
	}{
		{"hit", []op{write("k1", 100), read("k1", true, 100)},
			b(100), 1, 1, 1, b(100)},
		{"miss then set", []op{read("k1", false, UnknownValue), write("k1", 100)},
			b(100), 1, 1, 0, 0},
		{"miss never set takes no room", []op{read("k1", false, UnknownValue)},
			0, 0, 1, 0, 0},
		{"set without read", []op{write("k1", 100)},
			b(100), 1, 0, 0, 0},
		{"miss of an evicted key is a reuse", []op{write("k1", 100), write("k2", 300), read("k1", false, UnknownValue), write("k1", 100)},
			b(100) + b(300), 2, 1, 0, b(100) + b(300)},
		{"delete, then a read is a first access", []op{write("k1", 100), write("k2", 300), del("k1"), read("k1", false, UnknownValue)},
			b(300), 1, 1, 0, 0},
		{"a deleted key leaves others' distances", []op{write("k1", 100), write("k2", 300), write("k3", 50), del("k2"), read("k1", true, 100)},
			b(100) + b(50), 2, 1, 1, b(100) + b(50)},
		{"delete of an untracked key", []op{write("k1", 100), del("k9")},
			b(100), 1, 0, 0, 0},
		{"overwrite with another size", []op{write("k1", 100), write("k1", 1000), read("k1", true, 1000)},
			b(1000), 1, 1, 1, b(1000)},
		{"hit without its value keeps the size", []op{write("k1", 1000), read("k1", true, UnknownValue)},
			b(1000), 1, 1, 1, b(1000)},
		{"write of unknown size moves a tracked key up", []op{write("k1", 100), write("k2", 300), write("k1", UnknownValue), read("k2", true, 300)},
			b(100) + b(300), 2, 1, 1, b(100) + b(300)},
		{"a grow keeps a larger size", []op{write("k1", 1000), grow("k1", 5), read("k1", true, UnknownValue)},
			b(1000), 1, 1, 1, b(1000)},
		{"a grow past the size takes the new one", []op{write("k1", 5), grow("k1", 1000), read("k1", true, UnknownValue)},
			b(1000), 1, 1, 1, b(1000)},
		{"a grow of an untracked key places it", []op{grow("k1", 100)},
			b(100), 1, 0, 0, 0},
		{"write of unknown size leaves an untracked key out", []op{write("k1", UnknownValue)},
			0, 0, 0, 0, 0},
		// A redis reply cannot tell how redis holds the value: the size a write told stays.
		{"a read keeps the size a write told", []op{write("k1", RawValue(5)), read("k1", true, IntegerValue)},
			m.ObjectBytes(2, RawValue(5)), 1, 1, 1, m.ObjectBytes(2, RawValue(5))},
		{"a read sizes a key of no known size", []op{write("k1", UnknownValue), read("k1", true, 100)},
			b(100), 1, 1, 1, 0},
		{"an append that fits the room keeps the size", []op{write("k1", 100), write("k1", GrownRawValue(104))},
			b(100), 1, 0, 0, 0},
		{"an append past the room grows the string", []op{write("k1", 100), write("k1", GrownRawValue(120))},
			m.ObjectBytes(2, GrownRawValue(120)), 1, 0, 0, 0},
		{"an append to an integer grows the string", []op{write("k1", IntegerValue), write("k1", GrownRawValue(6))},
			m.ObjectBytes(2, GrownRawValue(6)), 1, 0, 0, 0},
		// SETRANGE: a write within the length keeps a raw string, copies anything else to fit;
		// one up to the end creates a key to fit, and grows a string it lengthens past its room.
		{"a setrange within a raw string with room keeps it", []op{write("k1", GrownRawValue(60)), write("k1", RawValue(60))},
			m.ObjectBytes(2, GrownRawValue(60)), 1, 0, 0, 0},
		{"a setrange within an integer copies it to fit", []op{write("k1", IntegerValue), write("k1", RawValue(5))},
			m.ObjectBytes(2, RawValue(5)), 1, 0, 0, 0},
		{"a setrange within a one-allocation string copies it to fit", []op{write("k1", 13), write("k1", RawValue(13))},
			m.ObjectBytes(2, RawValue(13)), 1, 0, 0, 0},
		{"a setrange to the end of an untracked key creates it to fit", []op{write("k1", ExtendedRawValue(13))},
			m.ObjectBytes(2, RawValue(13)), 1, 0, 0, 0},
		{"a setrange lengthening a string without room grows it", []op{write("k1", ExtendedRawValue(13)), write("k1", ExtendedRawValue(14))},
			m.ObjectBytes(2, GrownRawValue(14)), 1, 0, 0, 0},
		{"a setrange lengthening a string within its room keeps it", []op{write("k1", ExtendedRawValue(13)), write("k1", ExtendedRawValue(14)), write("k1", ExtendedRawValue(20))},
			m.ObjectBytes(2, GrownRawValue(14)), 1, 0, 0, 0},
		{"a setrange lengthening an integer grows it", []op{write("k1", IntegerValue), write("k1", ExtendedRawValue(6))},
			m.ObjectBytes(2, GrownRawValue(6)), 1, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFullRecorder(t, 64)
			for _, o := range tt.ops {
				o.apply(r)
			}
			// The fine histogram's buckets are 2.2% wide: read the step 3% either side.
			below, above := max(tt.distance*97/100, 1), tt.distance*103/100+1
			if tt.distance == 0 {
				below, above = 1<<29, 1<<30
			}
			c := r.Tracker().SnapshotAt([]int64{below, above}, nil)
			if c.FootprintBytes != float64(tt.footprint) || c.TrackedKeys != tt.tracked {
				t.Errorf("footprint %v bytes of %d keys, want %d of %d", c.FootprintBytes, c.TrackedKeys, tt.footprint, tt.tracked)
			}
			if c.SampledAccesses != tt.reads || c.AchievedHitRatio != tt.achieved {
				t.Errorf("%v reads counted, achieved hit ratio %v; want %v and %v", c.SampledAccesses, c.AchievedHitRatio, tt.reads, tt.achieved)
			}
			want := 0.0
			if tt.distance > 0 {
				want = 1
			}
			if c.HitRatio[0] != 0 || c.HitRatio[1] != want {
				t.Errorf("hit ratio %v at %d bytes and %v at %d, want 0 and %v", c.HitRatio[0], below, c.HitRatio[1], above, want)
			}
		})
	}
}

// TestRecorderMatchesExactLRU records look-aside clients (GET, SET on a miss) that also
// overwrite objects with other sizes and delete them, in front of an LRU engine of a third of
// the footprint, and compares the curve with ExactLRU fed the true sizes by key (the engine's
// reads as accesses, its writes and deletes as such).
func TestRecorderMatchesExactLRU(t *testing.T) {
	const keys = 3000
	m := NewRedisModel()
	rng := rand.New(rand.NewPCG(7, 8))
	sizes, err := GeometricSizes(10000, 4<<20, 24)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := NewExactLRU(sizes)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := NewLRUCache(1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newFullRecorder(t, 2*keys)
	valueLen := make(map[string]int)
	zipf := rand.NewZipf(rng, 1.1, 4, keys-1)
	reads, hits := 0, 0
	for range 100000 {
		key := fmt.Sprintf("key-%d", zipf.Uint64())
		h := keyhash.Sum64String(key)
		switch rng.IntN(20) {
		case 0: // DEL
			delete(valueLen, key)
			engine.Remove(key)
			exact.Delete(key)
			r.Delete(h)
		case 1: // SET with another size
			n := 10 + rng.IntN(2000)
			valueLen[key] = n
			engine.Remove(key)
			engine.Access(key, m.ObjectBytes(len(key), n))
			exact.Write(key, m.ObjectBytes(len(key), n))
			r.Write(h, len(key), n)
		default: // GET, then SET on a miss
			n, ok := valueLen[key]
			if !ok {
				n = 10 + rng.IntN(2000)
				valueLen[key] = n
			}
			size := m.ObjectBytes(len(key), n)
			reads++
			exact.Access(key, size)
			if engine.Contains(key) {
				engine.Access(key, size)
				r.Read(h, true, len(key), n)
				hits++
				continue
			}
			r.Read(h, false, len(key), UnknownValue)
			engine.Access(key, size)
			r.Write(h, len(key), n)
		}
	}
	got, want := r.Tracker().SnapshotAt(sizes, nil), exact.Curve()
	for i := range sizes {
		if math.Abs(got.HitRatio[i]-want.HitRatio[i]) > 0.001 { // the tracker's buckets, 2.2% wide

			t.Errorf("%d bytes: hit ratio %v, exact LRU %v", sizes[i], got.HitRatio[i], want.HitRatio[i])
		}
	}
	if got.FootprintBytes != float64(exact.FootprintBytes()) {
		t.Errorf("footprint %v bytes, exact LRU %d", got.FootprintBytes, exact.FootprintBytes())
	}
	if math.Abs(got.AchievedHitRatio-float64(hits)/float64(reads)) > 1e-12 {
		t.Errorf("achieved hit ratio %v, the engine served %v", got.AchievedHitRatio, float64(hits)/float64(reads))
	}
}

// TestTrackerDeletesStayBounded deletes and re-adds keys under a small key bound: the
// tracker keeps at most its bound of keys and its heap of hashes does not grow with deletes.
func TestTrackerDeletesStayBounded(t *testing.T) {
	r := newFullRecorder(t, minTrackedKeys)
	tr := r.Tracker()
	for i := range 50000 {
		h := keyhash.Mix(uint64(i % 500))
		r.Write(h, 3, 100)
		if i%3 == 0 {
			r.Delete(h)
		}
		if i%5 == 0 {
			r.Read(keyhash.Mix(uint64(i%700)), false, 3, UnknownValue)
		}
	}
	c := tr.Snapshot()
	if c.TrackedKeys > tr.MaxTrackedKeys() || len(tr.largest) > 2*c.TrackedKeys+minTrackedKeys+1 {
		t.Errorf("%d keys tracked (bound %d), %d hashes on the heap", c.TrackedKeys, tr.MaxTrackedKeys(), len(tr.largest))
	}
	if !(c.SampleRate < 1) {
		t.Errorf("sampling rate %v, want it lowered to keep %d keys", c.SampleRate, tr.MaxTrackedKeys())
	}
	for s := range tr.stack.slotOf {
		if s > tr.limit.Load() {
			t.Errorf("tracked hash %x above the sampling limit %x", s, tr.limit.Load())
		}
	}
}
