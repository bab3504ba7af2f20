package mrc

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
)

// EngineModel converts what clients store (key and value bytes) into what an engine's memory
// limit counts, so that a curve point at size S means "a partition whose limit is S achieves
// this hit ratio". Immutable: calibration returns a new model.
type EngineModel struct {
	// slabs are memcached's slab classes; nil for redis.
	slabs *memcachedSlabs
	// scale is the calibrated share of a partition's object memory the modelled object bytes
	// make up: what the static model does not see (redis: hash table buckets, expiry entries)
	// is spread over the objects in proportion to their size. Kept out of ObjectBytes, so the
	// sizes a tracker holds never depend on the calibration that reads them.
	scale float64
	// baseline is memory the engine spends whatever it stores (redis: its startup memory and
	// client buffers); a partition of limit S holds S-baseline bytes of objects.
	baseline int64
}

// Redis' allocations per string key (redis 7, jemalloc, 64-bit).
const (
	redisDictEntryBytes = 24 // the key's hash table entry
	redisObjectBytes    = 16 // the value's robj header
	// redisEmbstrMax is the longest value stored in one allocation with its robj (EMBSTR).
	redisEmbstrMax = 44
)

// NewRedisModel returns the model of a redis string cache, uncalibrated.
func NewRedisModel() *EngineModel { return &EngineModel{scale: 1} }

// jemallocSize is the size class jemalloc serves a request of n bytes from: multiples of 16
// up to 128, then four classes per doubling.
func jemallocSize(n int64) int64 {
	switch {
	case n <= 8:
		return 8
	case n <= 128:
		return (n + 15) &^ 15
	}
	spacing := int64(1) << (bits.Len64(uint64(n-1)) - 3)
	return (n + spacing - 1) &^ (spacing - 1) // a mask, not a division: this runs per request
}

// sdsBytes is the allocation of a redis dynamic string of n bytes: header, bytes, NUL.
func sdsBytes(n int64, keyString bool) int64 {
	header := int64(3) // sdshdr8
	switch {
	case keyString && n < 32:
		header = 1 // sdshdr5, used for keys
	case n >= 1<<32:
		header = 17
	case n >= 1<<16:
		header = 9
	case n >= 1<<8:
		header = 5
	}
	return header + n + 1
}

// redisStaticBytes is the memory redis allocates for a string key and its value.
func redisStaticBytes(key, value int64) int64 {
	b := jemallocSize(redisDictEntryBytes) + jemallocSize(sdsBytes(key, true))
	if value <= redisEmbstrMax {
		return b + jemallocSize(redisObjectBytes+sdsBytes(value, false))
	}
	return b + jemallocSize(redisObjectBytes) + jemallocSize(sdsBytes(value, false))
}

// redisIntegerBytes is the memory redis allocates for a string key whose value it stores as
// an integer: the value is the robj's pointer field (OBJ_ENCODING_INT), with no string.
// Partitions always run with maxmemory and an allkeys-lru or -lfu policy, under which redis
// gives every such value its own robj (for its LRU field) instead of sharing the integers
// below 10000.
func redisIntegerBytes(key int64) int64 {
	return jemallocSize(redisDictEntryBytes) + jemallocSize(sdsBytes(key, true)) + jemallocSize(redisObjectBytes)
}

// maxIntegerDigits is the longest value redis tries to store as an integer.
const maxIntegerDigits = 20

// RedisValueLen is the value length a Recorder is given for value as redis stores it from a
// SET (or an APPEND that creates the key): IntegerValue when redis keeps it as an integer (a
// decimal without sign "+", leading zeros or "-0" that fits in an int64, as its string2l reads
// it back exactly), else its length. Values that APPEND to an existing key, SETRANGE or
// INCRBYFLOAT leave stay strings in redis even when they read as integers: their writes say
// so (RawValue, GrownRawValue, ExtendedRawValue, a length), and a read, which cannot tell,
// sizes only a key whose size the curve does not know (Recorder.Read).
func RedisValueLen(value []byte) int {
	if len(value) == 0 || len(value) > maxIntegerDigits {
		return len(value)
	}
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil || !bytes.Equal(strconv.AppendInt(make([]byte, 0, maxIntegerDigits), n, 10), value) {
		return len(value)
	}
	return IntegerValue
}

// Value lengths of strings redis holds raw (an object and a separately allocated string)
// whatever their bytes look like: what APPEND to an existing key and SETRANGE leave. Below
// rawValueBase, a code holds the length and the rawWrite that left it.
const rawValueBase = -8

// rawWrite is how a write left a raw string, which decides whether the string kept the
// allocation it had (redisRewrite).
type rawWrite int

const (
	// rawWithin: SETRANGE within the string's length. A raw string stays as it was; an
	// integer or a one-allocation string becomes a copy allocated to fit.
	rawWithin rawWrite = iota
	// rawAppended: APPEND to an existing string, which reallocates (sdsMakeRoomFor: room for
	// twice the length, at least a 3-byte header) unless the string has room.
	rawAppended
	// rawExtended: SETRANGE that writes up to the string's end: it created the key
	// (allocated to fit), or lengthened a string as APPEND does, or rewrote its tail.
	rawExtended
	rawWrites
)

// RawValue is the value length of a raw string of n bytes that SETRANGE left writing within
// its length: allocated to fit n, unless the key already held a raw string.
func RawValue(n int) int { return rawCode(n, rawWithin) }

// GrownRawValue is the value length of a raw string that APPEND lengthened to n bytes: it
// allocates twice the length (n plus 1 MiB from 1 MiB on) when the string lacks room, and
// later appends that fit reuse that room.
func GrownRawValue(n int) int { return rawCode(n, rawAppended) }

// ExtendedRawValue is the value length of a raw string of n bytes that SETRANGE left writing
// up to its end: a key it created is allocated to fit n, a string it lengthened grows as
// GrownRawValue's does.
func ExtendedRawValue(n int) int { return rawCode(n, rawExtended) }

// rawCode is the value length of a raw string of n bytes left by how.
func rawCode(n int, how rawWrite) int { return rawValueBase - int(rawWrites)*max(n, 0) - int(how) }

// rawValue decodes rawCode.
func rawValue(value int) (n int, how rawWrite, ok bool) {
	if value > rawValueBase {
		return 0, 0, false
	}
	code := rawValueBase - value
	return code / int(rawWrites), rawWrite(code % int(rawWrites)), true
}

// redisGreedyMax is sds' SDS_MAX_PREALLOC: up to it a string that grows doubles, beyond it it
// gains that much.
const redisGreedyMax = 1 << 20

// redisRawBytes is the memory redis allocates for a string key whose value is a raw string of
// n bytes, allocated exactly (sdsnewlen: a 1-byte header below 32 bytes) or grown
// (sdsMakeRoomFor: room for twice n, at least a 3-byte header).
func redisRawBytes(key, n int64, grown bool) int64 {
	b := jemallocSize(redisDictEntryBytes) + jemallocSize(sdsBytes(key, true)) + jemallocSize(redisObjectBytes)
	if !grown {
		return b + jemallocSize(sdsBytes(n, n > 0))
	}
	room := 2 * n
	if n >= redisGreedyMax {
		room = n + redisGreedyMax
	}
	return b + jemallocSize(sdsBytes(room, false))
}

// redisRewrite sizes the raw string a write left from the bytes its key took before.
type redisRewrite struct {
	how rawWrite
	// exact is the key with its string allocated to fit; fits the least a key whose string
	// had room for the new length takes (allocated for it with at least a 3-byte header);
	// grown the key with its string reallocated with room to spare; embedded the key with a
	// one-allocation string of the new length (0 when too long for one), which SETRANGE copies
	// rather than keeps.
	exact, fits, grown, embedded int64
}

func newRedisRewrite(key, n int64, how rawWrite) redisRewrite {
	w := redisRewrite{how: how, exact: redisRawBytes(key, n, false), grown: redisRawBytes(key, n, true)}
	w.fits = w.exact - jemallocSize(sdsBytes(n, n > 0)) + jemallocSize(sdsBytes(n, false))
	if n <= redisEmbstrMax {
		w.embedded = redisStaticBytes(key, n)
	}
	return w
}

// size is the key's bytes after the write, prev its bytes before (0: the curve knows none). A
// key that took at least fits bytes had room: its string took the write as it was. Otherwise
// APPEND reallocates; SETRANGE within the length keeps a raw string (at least exact bytes) and
// copies anything else to fit; SETRANGE to the end reallocates a string it lengthened, and
// allocates to fit a key the curve knows no size of, taken for one it created.
func (w redisRewrite) size(prev int64) int64 {
	switch {
	case w.how == rawWithin && prev >= w.exact && prev != w.embedded:
		return prev
	case w.how == rawWithin || w.how == rawExtended && prev == 0:
		return w.exact
	case prev >= w.fits:
		return prev
	}
	return w.grown
}

// ObjectBytes is the memory the engine allocates for an object of key and value bytes; value
// may be IntegerValue (memcached, which stores every value as a string, counts it as the
// longest integer), RawValue, GrownRawValue or ExtendedRawValue (their size with no string
// before: allocated to fit, APPEND's grown; memcached counts the length).
func (m *EngineModel) ObjectBytes(key, value int) int64 {
	k := int64(max(key, 0))
	if n, how, raw := rawValue(value); raw {
		if m.slabs == nil {
			return redisRawBytes(k, int64(n), how == rawAppended)
		}
		value = n
	}
	if value == IntegerValue {
		if m.slabs == nil {
			return redisIntegerBytes(k)
		}
		value = maxIntegerDigits
	}
	v := int64(max(value, 0))
	if m.slabs != nil {
		return m.slabs.objectBytes(k, v)
	}
	return redisStaticBytes(k, v)
}

// Capacity is how many object bytes (as ObjectBytes counts them) a partition with a memory
// limit of limit bytes holds.
func (m *EngineModel) Capacity(limit int64) float64 {
	return float64(max(limit-m.baseline, 0)) * m.scale
}

// Scale is the calibrated share of object memory that ObjectBytes accounts for.
func (m *EngineModel) Scale() float64 { return m.scale }

// Baseline is the memory the engine uses whatever it stores.
func (m *EngineModel) Baseline() int64 { return m.baseline }

// minCalibrationKeys: fewer keys give a per-key figure dominated by noise.
const minCalibrationKeys = 100

// Calibrate returns the model fitted to an engine's own accounting: it uses used bytes of
// which baseline are not objects, for keys objects whose mean modelled size (ObjectBytes) is
// meanModelled. Their ratio becomes the scale; memcached's slab model is exact per item
// (whereas total_malloced counts partly filled pages) and keeps scale 1. ok is false (and m
// returned) when the figures cannot calibrate: too few keys, or more baseline than use.
func (m *EngineModel) Calibrate(used, baseline, keys int64, meanModelled float64) (calibrated *EngineModel, ok bool) {
	if keys < minCalibrationKeys || baseline < 0 || used <= baseline || !(meanModelled > 0) {
		return m, false
	}
	next := *m
	next.baseline = baseline
	if m.slabs == nil {
		next.scale = min(meanModelled*float64(keys)/float64(used-baseline), 1)
	}
	return &next, true
}

// memcachedItemHeader is sizeof(item) in memcached 1.6 on 64-bit; CAS adds 8, non-zero client
// flags 4, and the value is stored with its CRLF and the key with a NUL.
const memcachedItemHeader = 48

// Slabs returns the settings of a memcached model (nil for redis), to tell whether an engine's
// own differ.
func (m *EngineModel) Slabs() *MemcachedSettings {
	if m.slabs == nil {
		return nil
	}
	return &m.slabs.settings
}

// memcachedSlabs are memcached's slab classes: an item takes the smallest chunk that holds it,
// and a class's pages (of pageSize) hold a whole number of chunks.
type memcachedSlabs struct {
	settings MemcachedSettings
	chunks   []int64
	// chunkBytes[i] is an item's share of slab memory in class i (objectBytes).
	chunkBytes []int64
	// classOf[(n+7)/8] is the class of an item of n bytes, for items up to
	// memcachedClassTableMax and the largest chunk below slab_chunk_max (those chunks are
	// multiples of 8): objectBytes runs per request.
	classOf []uint8
}

// MemcachedSettings are the `stats settings` memcached sizes its slab classes from.
type MemcachedSettings struct {
	// ChunkSize is the smallest item data size (chunk_size, default 48).
	ChunkSize int64
	// GrowthFactor is the ratio between successive classes (growth_factor, default 1.25).
	GrowthFactor float64
	// SlabChunkMax is the largest chunk (slab_chunk_max, default half a page); larger items
	// are chained from such chunks.
	SlabChunkMax int64
	// PageSize is the slab page (item_size_max, 1 MiB by default).
	PageSize int64
	// CASEnabled adds the 8-byte CAS value to each item (cas_enabled).
	CASEnabled bool
}

// DefaultMemcachedSettings are memcached 1.6's defaults, in force until a partition's own
// are read.
var DefaultMemcachedSettings = MemcachedSettings{ChunkSize: 48, GrowthFactor: 1.25, SlabChunkMax: 512 << 10, PageSize: 1 << 20, CASEnabled: true}

// memcachedChunkAlign is memcached's CHUNK_ALIGN_BYTES; memcachedMaxSlabClasses the classes
// it has room for (MAX_NUMBER_OF_SLAB_CLASSES less the unused class 0).
const (
	memcachedChunkAlign     = 8
	memcachedMaxSlabClasses = 63
)

// memcachedClassTableMax is the largest item whose class a model looks up in a table (of one
// byte per 8 item bytes) rather than by binary search.
const memcachedClassTableMax = 16 << 10

// NewMemcachedModel returns the model of a memcached engine with settings s.
func NewMemcachedModel(s MemcachedSettings) (*EngineModel, error) {
	switch {
	case s.ChunkSize < 1:
		return nil, fmt.Errorf("mrc: memcached chunk_size %d is not positive", s.ChunkSize)
	case !(s.GrowthFactor > 1):
		return nil, fmt.Errorf("mrc: memcached growth_factor %v is not above 1", s.GrowthFactor)
	case s.PageSize < 1 || s.SlabChunkMax < 1 || s.SlabChunkMax > s.PageSize:
		return nil, fmt.Errorf("mrc: memcached slab_chunk_max %d must be in [1, page size %d]", s.SlabChunkMax, s.PageSize)
	}
	slabs := &memcachedSlabs{settings: s}
	// As memcached's slabs_init: from the header plus chunk_size, times the factor, aligned,
	// while below slab_chunk_max divided by the factor; the last class is slab_chunk_max.
	size := float64(memcachedItemHeader + s.ChunkSize)
	for size < float64(s.SlabChunkMax)/s.GrowthFactor {
		chunk := (int64(size) + memcachedChunkAlign - 1) / memcachedChunkAlign * memcachedChunkAlign
		if n := len(slabs.chunks); n > 0 && chunk <= slabs.chunks[n-1] || n+1 >= memcachedMaxSlabClasses {
			return nil, fmt.Errorf("mrc: memcached growth_factor %v makes more than %d slab classes", s.GrowthFactor, memcachedMaxSlabClasses)
		}
		slabs.chunks = append(slabs.chunks, chunk)
		size = float64(chunk) * s.GrowthFactor
	}
	slabs.chunks = append(slabs.chunks, s.SlabChunkMax)
	if len(slabs.chunks) > 1 && slabs.chunks[len(slabs.chunks)-2] >= s.SlabChunkMax {
		return nil, errors.New("mrc: memcached slab classes do not increase")
	}
	for _, chunk := range slabs.chunks {
		slabs.chunkBytes = append(slabs.chunkBytes, s.PageSize/(s.PageSize/chunk))
	}
	aligned := slabs.chunks[:len(slabs.chunks)-1]
	if len(aligned) > 0 {
		slabs.classOf = make([]uint8, min(aligned[len(aligned)-1], memcachedClassTableMax)/memcachedChunkAlign+1)
		class := 0
		for i := range slabs.classOf {
			for aligned[class] < int64(i)*memcachedChunkAlign {
				class++
			}
			slabs.classOf[i] = uint8(class)
		}
	}
	return &EngineModel{slabs: slabs, scale: 1}, nil
}

// objectBytes is an item's share of slab memory: its class's page divided by the chunks a
// page holds, since a limit counts whole pages.
func (s *memcachedSlabs) objectBytes(key, value int64) int64 {
	total := memcachedItemHeader + key + 1 + value + 2
	if s.settings.CASEnabled {
		total += 8
	}
	return s.bytesOfItem(total)
}

// bytesOfItem is objectBytes of an item of total bytes, header included.
func (s *memcachedSlabs) bytesOfItem(total int64) int64 {
	if slot := (total + memcachedChunkAlign - 1) / memcachedChunkAlign; slot < int64(len(s.classOf)) {
		return s.chunkBytes[s.classOf[slot]]
	}
	i, _ := slices.BinarySearch(s.chunks, total)
	if i == len(s.chunks) {
		// Chained from the largest chunks.
		largest := s.chunks[len(s.chunks)-1]
		return (total + largest - 1) / largest * largest
	}
	return s.chunkBytes[i]
}
