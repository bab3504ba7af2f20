package mrc

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"testing"
)

// TestMemcachedModelMatchesSlabs: the slab classes of memcached 1.6's defaults, as a real
// memcached listed them in `stats slabs` (class 4: 192-byte chunks, 5461 a page; class 17:
// 3632, 288 a page).
func TestMemcachedModelMatchesSlabs(t *testing.T) {
	m, err := NewMemcachedModel(DefaultMemcachedSettings)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key, value int
		want       int64
	}{
		{12, 100, (1 << 20) / 5461},        // 48+8+13+102 = 171 bytes: class 4
		{12, 3000, (1 << 20) / 288},        // class 17
		{1, 1, (1 << 20) / (1 << 20 / 96)}, // the smallest class
	}
	for _, tt := range tests {
		if got := m.ObjectBytes(tt.key, tt.value); got != tt.want {
			t.Errorf("key %d value %d: %d bytes, want %d", tt.key, tt.value, got, tt.want)
		}
	}
	if got := m.slabs.chunks[3]; got != 192 {
		t.Errorf("class 4 chunk %d, want 192", got)
	}
	if got := m.slabs.chunks[16]; got != 3632 {
		t.Errorf("class 17 chunk %d, want 3632", got)
	}
}

func TestNewMemcachedModelErrors(t *testing.T) {
	for _, s := range []MemcachedSettings{
		{ChunkSize: 0, GrowthFactor: 1.25, SlabChunkMax: 1 << 19, PageSize: 1 << 20},
		{ChunkSize: 48, GrowthFactor: 1, SlabChunkMax: 1 << 19, PageSize: 1 << 20},
		{ChunkSize: 48, GrowthFactor: 1.25, SlabChunkMax: 1 << 21, PageSize: 1 << 20},
		{ChunkSize: 48, GrowthFactor: 1.0000001, SlabChunkMax: 1 << 19, PageSize: 1 << 20}, // classes would not grow
		{ChunkSize: 48, GrowthFactor: 1.01, SlabChunkMax: 1 << 19, PageSize: 1 << 20},      // more than 63 classes
	} {
		if _, err := NewMemcachedModel(s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

// TestRedisModel: a real redis 7 (jemalloc) holding 18651 keys of 12 bytes with 256-byte values
// used 402.8 bytes per key beyond its startup memory; the static model gives 384 and the
// calibration scales the capacity by 384/402.8.
func TestRedisModel(t *testing.T) {
	m := NewRedisModel()
	if got := redisStaticBytes(12, 256); got != 384 {
		t.Errorf("static bytes %d, want 384 (entry 32, key 16, robj 16, value 320)", got)
	}
	if got := redisStaticBytes(10, 20); got != 32+16+48 {
		t.Errorf("embstr static bytes %d, want 96", got)
	}
	cal, ok := m.Calibrate(8388608, 876224, 18651, float64(m.ObjectBytes(12, 256)))
	if !ok {
		t.Fatal("calibration refused")
	}
	if got := cal.Capacity(8388608) / float64(cal.ObjectBytes(12, 256)); math.Abs(got-18651) > 1 {
		t.Errorf("the calibrated limit holds %.1f objects, want 18651", got)
	}
	for _, bad := range [][3]int64{{100, 200, 1000}, {8388608, 876224, 10}} {
		if _, ok := m.Calibrate(bad[0], bad[1], bad[2], 300); ok {
			t.Errorf("calibrated from %v", bad)
		}
	}
}

func TestJemallocSize(t *testing.T) {
	for n, want := range map[int64]int64{1: 8, 9: 16, 24: 32, 128: 128, 129: 160, 260: 320, 513: 640, 4097: 5120} {
		if got := jemallocSize(n); got != want {
			t.Errorf("jemallocSize(%d) = %d, want %d", n, got, want)
		}
	}
	// Above 128 bytes the size is n rounded up to a multiple of its class spacing.
	for n := int64(129); n < 1<<40; n += 1 + n/4099 {
		spacing := int64(1) << (bits.Len64(uint64(n-1)) - 3)
		if got, want := jemallocSize(n), (n+spacing-1)/spacing*spacing; got != want {
			t.Fatalf("jemallocSize(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestRedisValueLen: the values redis 7's string2l reads back exactly, and only those, are
// integers (cache-sidecar/proxy's TestCurveBytesAreRedisBytes checks them against OBJECT
// ENCODING on a real redis).
func TestRedisValueLen(t *testing.T) {
	for value, want := range map[string]int{
		"0": IntegerValue, "7": IntegerValue, "-42": IntegerValue, "12345": IntegerValue,
		"9223372036854775807": IntegerValue, "-9223372036854775808": IntegerValue,
		"9223372036854775808": 19, "-9223372036854775809": 20, "007": 3, "+5": 2, "-0": 2, "-": 1,
		"1.5": 3, " 1": 2, "1 ": 2, "1e3": 3, "": 0, "0x10": 4, "１": 3, "123456789012345678901": 21,
	} {
		if got := RedisValueLen([]byte(value)); got != want {
			t.Errorf("RedisValueLen(%q) = %d, want %d", value, got, want)
		}
	}
}

func FuzzRedisValueLen(f *testing.F) {
	for _, seed := range []string{"0", "-1", "007", "+5", "9223372036854775808", "1.5", ""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		got := RedisValueLen(value)
		if got != IntegerValue {
			if got != len(value) {
				t.Fatalf("RedisValueLen(%q) = %d, neither IntegerValue nor its length", value, got)
			}
			return
		}
		// An integer is a decimal that prints back as itself.
		n, err := strconv.ParseInt(string(value), 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != string(value) {
			t.Fatalf("RedisValueLen(%q) says integer; ParseInt gives %d, %v", value, n, err)
		}
	})
}

// TestRawValueBytes: the bytes of strings redis holds raw (against a real redis:
// TestCurveBytesOfRewritesAreRedisBytes), their codes apart from every other value length, and
// memcached counting their length.
func TestRawValueBytes(t *testing.T) {
	redis := NewRedisModel()
	const base = 32 + 16 + 16 // entry, a 10-byte key, robj
	for _, tc := range []struct {
		value int
		want  int64
	}{
		{RawValue(5), base + 8},                                      // 1+5+1 bytes
		{RawValue(40), base + 48},                                    // 3+40+1
		{RawValue(0), base + 8},                                      // 3+0+1
		{GrownRawValue(5), base + 16},                                // room for 10: 3+10+1
		{GrownRawValue(100), base + 224},                             // room for 200: 3+200+1
		{GrownRawValue(1 << 20), base + jemallocSize(9+2<<20+1)},     // room for n + 1 MiB
		{GrownRawValue(1<<20 - 1), base + jemallocSize(9+2<<20-2+1)}, // doubled
		{ExtendedRawValue(5), base + 8},                              // created to fit: 1+5+1
		{ExtendedRawValue(100), base + 112},                          // 3+100+1
	} {
		if got := redis.ObjectBytes(10, tc.value); got != tc.want {
			n, how, _ := rawValue(tc.value)
			t.Errorf("%d bytes (write %d): %d, want %d", n, how, got, tc.want)
		}
	}
	for _, n := range []int{0, 1, 31, 32, 1 << 20, 512 << 20} {
		for how, code := range []int{RawValue(n), GrownRawValue(n), ExtendedRawValue(n)} {
			if gotN, gotHow, ok := rawValue(code); !ok || gotN != n || gotHow != rawWrite(how) {
				t.Errorf("raw code of %d bytes, write %d, decodes as %d bytes, write %d (%v)", n, how, gotN, gotHow, ok)
			}
		}
	}
	for _, v := range []int{UnknownValue, -2, -3, IntegerValue, -5, -6, -7, 0, 100} {
		if _, _, raw := rawValue(v); raw {
			t.Errorf("value length %d reads as a raw string", v)
		}
	}
	mc, err := NewMemcachedModel(DefaultMemcachedSettings)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mc.ObjectBytes(10, GrownRawValue(300)), mc.ObjectBytes(10, 300); got != want {
		t.Errorf("memcached: %d bytes, want %d (the length)", got, want)
	}
}

// TestIntegerObjectBytes: redis holds an integer value in its 16-byte object alone, whatever
// its digits (against a real redis: TestCurveBytesAreRedisBytes); memcached, which stores the
// digits, counts the longest integer.
func TestIntegerObjectBytes(t *testing.T) {
	if got := NewRedisModel().ObjectBytes(10, IntegerValue); got != 32+16+16 {
		t.Errorf("redis integer: %d bytes, want 64 (entry 32, key 16, robj 16)", got)
	}
	mc, err := NewMemcachedModel(DefaultMemcachedSettings)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mc.ObjectBytes(10, IntegerValue), mc.ObjectBytes(10, maxIntegerDigits); got != want {
		t.Errorf("memcached integer: %d bytes, want %d (20 digits)", got, want)
	}
}

// TestMemcachedClassTable: the class table objectBytes reads gives every item size the
// smallest chunk that holds it, as a search of the chunks does, for default and odd settings.
func TestMemcachedClassTable(t *testing.T) {
	for _, s := range []MemcachedSettings{
		DefaultMemcachedSettings,
		{ChunkSize: 1, GrowthFactor: 1.2, SlabChunkMax: 64 << 10, PageSize: 1 << 20},
		{ChunkSize: 500, GrowthFactor: 3, SlabChunkMax: 1000, PageSize: 1000, CASEnabled: true},
		{ChunkSize: 48, GrowthFactor: 2, SlabChunkMax: 1 << 20, PageSize: 1 << 20},
	} {
		m, err := NewMemcachedModel(s)
		if err != nil {
			t.Fatal(err)
		}
		chunks := m.slabs.chunks
		for total := int64(1); total <= 2*chunks[len(chunks)-1]; total++ {
			// The reference: the smallest chunk that holds the item, or whole largest chunks.
			want := (total + chunks[len(chunks)-1] - 1) / chunks[len(chunks)-1] * chunks[len(chunks)-1]
			if i, _ := slices.BinarySearch(chunks, total); i < len(chunks) {
				want = s.PageSize / (s.PageSize / chunks[i])
			}
			if got := m.slabs.bytesOfItem(total); got != want {
				t.Fatalf("%+v: item of %d bytes takes %d, want %d", s, total, got, want)
			}
		}
	}
}
