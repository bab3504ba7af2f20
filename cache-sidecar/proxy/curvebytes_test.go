package proxy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/mrc"
)

// redisDictEntryRounding is what redis' own accounting leaves out of a key's memory: MEMORY
// USAGE and INFO's overhead count the hash table entry as sizeof(dictEntry), 24 bytes, where
// jemalloc serves it from its 32-byte class.
const redisDictEntryRounding = 32 - 24

// curveBytesNode is a proxy in front of a redis configured as the sidecar configures a
// partition (maxmemory with an allkeys policy, under which redis gives each integer value its
// own object), every key sampled and room for twice keys of them (0: the default); it returns a client of the proxy, a client of the engine and
// the curve's footprint.
func curveBytesNode(t *testing.T, keys int) (proxy, engine *respClient, footprint func() int64) {
	acct := newAccount(t, "team-a/ints")
	sock := startEngine(t, Redis, "--maxmemory", "512mb", "--maxmemory-policy", "allkeys-lru")
	n := startNode(t, "node-a", Options{Protocol: Redis, MRCSampleRate: 1, MRCMaxTrackedKeys: 2 * keys})
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: sock, Routes: []Route{n.route(1)}})
	ps := (*n.p.tenants.Load())[acct.id].part.Load()
	return loginRESP(t, n, acct), dialRESP(t, "unix", sock), func() int64 {
		return int64(ps.curves.Tracker().SnapshotAt([]int64{1 << 30}, nil).FootprintBytes)
	}
}

// TestCurveBytesAreRedisBytes stores values of every redis string encoding through the proxy
// and checks the bytes the partition's curve counts for each key against what the real redis
// reports for it: MEMORY USAGE plus the dictEntry's allocator rounding, to the byte. Redis keeps
// a canonical decimal that fits in an int64 as an integer (OBJECT ENCODING int, no string at
// all), strings of at most 44 bytes in one allocation with their object (embstr), longer ones
// in two (raw); non-canonical decimals ("007", "+5", "-0") and integers out of range stay strings.
// Keys of under 32 bytes have a 1-byte string header, longer ones 3 or 5.
func TestCurveBytesAreRedisBytes(t *testing.T) {
	proxy, engine, footprint := curveBytesNode(t, 0)
	for i, tc := range []struct {
		value, encoding string
		key             string // empty: key:<i>
	}{
		{"0", "int", ""},
		{"7", "int", ""},
		{"12345", "int", ""},
		{"-42", "int", ""},
		{"9223372036854775807", "int", ""},
		{"-9223372036854775808", "int", ""},
		{"9223372036854775808", "embstr", ""},
		{"007", "embstr", ""},
		{"+5", "embstr", ""},
		{"-0", "embstr", ""},
		{"1.5", "embstr", ""},
		{"12345 ", "embstr", ""},
		{"", "embstr", ""},
		{strings.Repeat("v", 20), "embstr", ""},
		{strings.Repeat("1", 21), "embstr", ""},
		{strings.Repeat("v", 44), "embstr", ""},
		{strings.Repeat("v", 45), "raw", ""},
		{strings.Repeat("v", 300), "raw", ""},
		{strings.Repeat("v", 5000), "raw", ""},
		{strings.Repeat("v", 40000), "raw", ""},
		{strings.Repeat("v", 100000), "raw", ""},
		{strings.Repeat("v", 1<<20), "raw", ""},
		{"12345", "int", strings.Repeat("k", 31)}, // the longest key with a 1-byte sds header
		{"12345", "int", strings.Repeat("k", 32)},
		{strings.Repeat("v", 100), "raw", strings.Repeat("k", 300)}, // a 5-byte header
	} {
		key := tc.key
		if key == "" {
			key = fmt.Sprintf("key:%06d", i)
		}
		before := footprint()
		if got := proxy.do("SET", key, tc.value); got != "+OK\r\n" {
			t.Fatalf("SET %s %q: %q", key, tc.value, got)
		}
		curve := footprint() - before
		if got := engine.do("OBJECT", "ENCODING", key); got != "$"+strconv.Itoa(len(tc.encoding))+"\r\n"+tc.encoding+"\r\n" {
			t.Errorf("%q: redis encodes it as %q, the test expects %s", tc.value, got, tc.encoding)
		}
		usage, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(engine.do("MEMORY", "USAGE", key), ":")), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := usage + redisDictEntryRounding; curve != want {
			t.Errorf("%q (%s): the curve counts %d bytes, redis %d (MEMORY USAGE %d + %d)", tc.value, tc.encoding, curve, want, usage, redisDictEntryRounding)
		}
		// A read of the key tells the curve the same size the write did.
		proxy.do("GET", key)
		if after := footprint() - before; after != curve {
			t.Errorf("%q: after a GET the curve counts %d bytes for it, after the SET %d", tc.value, after, curve)
		}
	}
}

// TestCurveBytesOfIntegersMatchRedisMemory fills a partition through the proxy with values
// redis keeps as strings ("+" and digits), then overwrites each with its digits, which redis
// keeps as integers, and compares what the curve's footprint lost with what INFO's
// used_memory_dataset lost: the keys, their hash table and entries stay as they were, so the
// difference is the values' encoding alone. Within 1%; counted as strings of their digits, as
// before redis' integer encoding was modelled, the curve would have lost far less.
func TestCurveBytesOfIntegersMatchRedisMemory(t *testing.T) {
	const keys, batch = 20000, 500
	proxy, engine, footprint := curveBytesNode(t, keys)
	// dataset is used_memory_dataset once it holds still for half a second: right after a
	// pipelined burst, redis holds a few kilobytes of buffers that its accounting does not
	// count as overhead, until its cron trims them.
	dataset := func() int64 {
		read := func() int64 {
			for _, line := range strings.Split(engine.do("INFO", "memory"), "\r\n") {
				if v, ok := strings.CutPrefix(line, "used_memory_dataset:"); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return n
				}
			}
			t.Fatal("INFO memory has no used_memory_dataset")
			return 0
		}
		last, still := read(), time.Duration(0)
		for deadline := time.Now().Add(10 * time.Second); still < 500*time.Millisecond && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			if n := read(); n == last {
				still += 100 * time.Millisecond
			} else {
				last, still = n, 0
			}
		}
		return last
	}
	rng := rand.New(rand.NewPCG(15, 20))
	values := make([]string, keys)
	for i := range values {
		values[i] = strconv.FormatInt(rng.Int64N(int64(math.Pow10(1+i%18)))-int64(i%3), 10)
	}
	key := func(i int) string { return fmt.Sprintf("user:%08d:visits", i) }
	setAll := func(value func(i int) string) {
		for i := 0; i < keys; i += batch {
			for j := i; j < i+batch; j++ {
				proxy.send("SET", key(j), value(j))
			}
			for j := i; j < i+batch; j++ {
				if got := proxy.read(); got != "+OK\r\n" {
					t.Fatalf("SET: %q", got)
				}
			}
		}
	}
	setAll(func(i int) string { return "+" + values[i] })
	stringDataset, stringCurve := dataset(), footprint()
	setAll(func(i int) string { return values[i] })

	redis, curve := stringDataset-dataset(), stringCurve-footprint()
	if ratio := float64(curve) / float64(redis); math.Abs(ratio-1) > 0.01 {
		t.Errorf("as integers, %d values take %d bytes less in redis and %d less in the curve (ratio %.4f, want within 1%%)", keys, redis, curve, ratio)
	}
	model := mrc.NewRedisModel()
	var asDigits int64
	for i, v := range values {
		asDigits += model.ObjectBytes(len(key(i)), len(v)+1) - model.ObjectBytes(len(key(i)), len(v))
	}
	t.Logf("%d values stored as integers instead of strings: redis used_memory_dataset -%d bytes, curve -%d; counted as strings of their digits the curve would lose %d",
		keys, redis, curve, asDigits)
}
