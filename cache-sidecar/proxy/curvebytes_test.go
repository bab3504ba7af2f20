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
	dataset := func() int64 { return settledDataset(t, engine) }
	rng := rand.New(rand.NewPCG(15, 20))
	values := make([]string, keys)
	for i := range values {
		values[i] = strconv.FormatInt(rng.Int64N(int64(math.Pow10(1+i%18)))-int64(i%3), 10)
	}
	key := func(i int) string { return fmt.Sprintf("user:%08d:visits", i) }
	setAll := func(value func(i int) string) { pipelineEach(t, proxy, keys, batch, "SET", key, value) }
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

// TestCurveBytesOfRewritesAreRedisBytes: the writes whose request does not hold the value they
// leave are counted as redis holds that value, checked per key against MEMORY USAGE as
// TestCurveBytesAreRedisBytes does. APPEND that creates its key holds the argument as SET
// would (an integer for digits); APPEND to an existing value holds a raw string grown with room
// for twice its length; SETRANGE creates a raw string allocated to its length, copies an
// integer or a one-allocation string it writes within to such a string, keeps a raw string
// that has room, and grows one it lengthens past its room as APPEND does (SETRANGE of nothing
// changes nothing); INCRBYFLOAT a string (embstr), also when it reads as an integer. A later
// GET, whose reply cannot tell these apart from a SET's, leaves the size as the write told it.
func TestCurveBytesOfRewritesAreRedisBytes(t *testing.T) {
	proxy, engine, footprint := curveBytesNode(t, 0)
	for i, tc := range []struct {
		name     string
		commands [][]string // the key is appended to each command's name
		encoding string
		value    string
	}{
		{"APPEND creating a key with digits", [][]string{{"APPEND", "12345"}}, "int", "12345"},
		{"APPEND creating a key with letters", [][]string{{"APPEND", "abc"}}, "embstr", "abc"},
		{"APPEND creating a key with 50 bytes", [][]string{{"APPEND", strings.Repeat("a", 50)}}, "raw", strings.Repeat("a", 50)},
		{"APPEND of digits to an integer", [][]string{{"SET", "123"}, {"APPEND", "45"}}, "raw", "12345"},
		{"APPEND to a short string", [][]string{{"SET", "abc"}, {"APPEND", "d"}}, "raw", "abcd"},
		{"APPEND to a raw string without room", [][]string{{"SET", strings.Repeat("v", 100)}, {"APPEND", strings.Repeat("w", 10)}}, "raw", strings.Repeat("v", 100) + strings.Repeat("w", 10)},
		{"APPEND growing past 1 MiB", [][]string{{"SET", "x"}, {"APPEND", strings.Repeat("y", 1<<20)}}, "raw", "x" + strings.Repeat("y", 1<<20)},
		{"SETRANGE creating a key with digits", [][]string{{"SETRANGE", "0", "12345"}}, "raw", "12345"},
		{"SETRANGE creating a key at an offset", [][]string{{"SETRANGE", "10", "xyz"}}, "raw", strings.Repeat("\x00", 10) + "xyz"},
		{"SETRANGE creating a key of 40 bytes", [][]string{{"SETRANGE", "0", strings.Repeat("s", 40)}}, "raw", strings.Repeat("s", 40)},
		{"SETRANGE within an integer", [][]string{{"SET", "12345"}, {"SETRANGE", "0", "9"}}, "raw", "92345"},
		{"SETRANGE within a short string", [][]string{{"SET", "abcdef"}, {"SETRANGE", "2", "XY"}}, "raw", "abXYef"},
		{"SETRANGE within a 13-byte string", [][]string{{"SET", "abcdefghijklm"}, {"SETRANGE", "0", "x"}}, "raw", "xbcdefghijklm"},
		{"SETRANGE to the end of a raw string", [][]string{{"SET", strings.Repeat("v", 100)}, {"SETRANGE", "97", "xyz"}}, "raw", strings.Repeat("v", 97) + "xyz"},
		{"SETRANGE within a string APPEND grew", [][]string{{"SET", "x"}, {"APPEND", strings.Repeat("y", 50)}, {"SETRANGE", "0", "z"}}, "raw", "z" + strings.Repeat("y", 50)},
		{"SETRANGE of nothing on an integer", [][]string{{"SET", "12345"}, {"SETRANGE", "0", ""}}, "int", "12345"},
		{"SETRANGE lengthening an integer", [][]string{{"SET", "12345"}, {"SETRANGE", "3", "999"}}, "raw", "123999"},
		{"SETRANGE lengthening a string it created", [][]string{{"SETRANGE", "0", "abcdefghijklm"}, {"SETRANGE", "13", "x"}}, "raw", "abcdefghijklmx"},
		{"SETRANGE lengthening within the room it grew", [][]string{{"SETRANGE", "0", "abcdefghijklm"}, {"SETRANGE", "13", "x"}, {"SETRANGE", "14", "yz"}}, "raw", "abcdefghijklmxyz"},
		{"SETRANGE lengthening within a raw string's allocation", [][]string{{"SET", strings.Repeat("v", 100)}, {"SETRANGE", "100", "z"}}, "raw", strings.Repeat("v", 100) + "z"},
		{"SETRANGE lengthening a raw string past its allocation", [][]string{{"SET", strings.Repeat("v", 100)}, {"SETRANGE", "100", strings.Repeat("z", 10)}}, "raw", strings.Repeat("v", 100) + strings.Repeat("z", 10)},
		{"SETRANGE lengthening past 1 MiB", [][]string{{"SET", strings.Repeat("v", 100)}, {"SETRANGE", "100", strings.Repeat("z", 1<<20)}}, "raw", strings.Repeat("v", 100) + strings.Repeat("z", 1<<20)},
		{"INCRBYFLOAT to an integer's digits", [][]string{{"INCRBYFLOAT", "2.5"}, {"INCRBYFLOAT", "0.5"}}, "embstr", "3"},
		{"INCRBYFLOAT to a fraction", [][]string{{"INCRBYFLOAT", "1.25"}}, "embstr", "1.25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("rewrite:%03d", i)
			before := footprint()
			for _, cmd := range tc.commands {
				if got := proxy.do(append([]string{cmd[0], key}, cmd[1:]...)...); strings.HasPrefix(got, "-") {
					t.Fatalf("%s %s: %q", cmd[0], key, got)
				}
			}
			curve := footprint() - before
			if got := engine.do("OBJECT", "ENCODING", key); got != "$"+strconv.Itoa(len(tc.encoding))+"\r\n"+tc.encoding+"\r\n" {
				t.Errorf("redis encodes it as %q, the test expects %s", got, tc.encoding)
			}
			want := "$" + strconv.Itoa(len(tc.value)) + "\r\n" + tc.value + "\r\n"
			if got := proxy.do("GET", key); got != want {
				t.Fatalf("GET: %.60q, want %.60q", got, want)
			}
			usage, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(engine.do("MEMORY", "USAGE", key), ":")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if want := usage + redisDictEntryRounding; curve != want {
				t.Errorf("the curve counts %d bytes, redis %d (MEMORY USAGE %d + %d)", curve, want, usage, redisDictEntryRounding)
			}
			if after := footprint() - before; after != curve {
				t.Errorf("after a GET the curve counts %d bytes for it, after the writes %d", after, curve)
			}
		})
	}
}

// settledDataset is INFO's used_memory_dataset once it holds still for half a second: right
// after a pipelined burst, redis holds a few kilobytes of buffers that its accounting does not
// count as overhead, until its cron trims them.
func settledDataset(t *testing.T, engine *respClient) int64 {
	t.Helper()
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

// pipelineEach sends command key(i) value(i) for i below keys through proxy, batch requests at a
// time, and fails on an error reply.
func pipelineEach(t *testing.T, proxy *respClient, keys, batch int, command string, key, value func(i int) string) {
	t.Helper()
	for i := 0; i < keys; i += batch {
		for j := i; j < min(i+batch, keys); j++ {
			proxy.send(command, key(j), value(j))
		}
		for j := i; j < min(i+batch, keys); j++ {
			if got := proxy.read(); strings.HasPrefix(got, "-") {
				t.Fatalf("%s: %q", command, got)
			}
		}
	}
}

// TestCurveBytesOfAppendsMatchRedisMemory appends to every key of a partition again and again
// through the proxy and compares what the curve's footprint gained with what INFO's
// used_memory_dataset gained: redis reallocates a string that lacks room with room for twice
// its length, and later appends that fit take nothing, so the bytes grow in steps. Within 1%
// after each number of appends; counted as a string of its length at every append, the curve
// would be far off (TestCurveBytesOfRewritesAreRedisBytes checks single keys to the byte).
func TestCurveBytesOfAppendsMatchRedisMemory(t *testing.T) {
	const keys, batch = 5000, 500
	proxy, engine, footprint := curveBytesNode(t, keys)
	key := func(i int) string { return fmt.Sprintf("log:%06d", i) }
	pipelineEach(t, proxy, keys, batch, "SET", key, func(int) string { return "0" })
	// redis allocates some 24 KB once, at its first APPEND: not the keys' bytes.
	pipelineEach(t, proxy, 1, 1, "APPEND", func(int) string { return "warmup" }, func(int) string { return "x" })
	redisBefore, curveBefore := settledDataset(t, engine), footprint()
	for appends := 1; appends <= 20; appends++ {
		pipelineEach(t, proxy, keys, batch, "APPEND", key, func(int) string { return "event" })
		if appends != 1 && appends != 2 && appends != 5 && appends != 20 {
			continue
		}
		redis, curve := settledDataset(t, engine)-redisBefore, footprint()-curveBefore
		t.Logf("%d appends of 5 bytes to %d integers: redis used_memory_dataset +%d bytes, curve +%d", appends, keys, redis, curve)
		if ratio := float64(curve) / float64(redis); math.Abs(ratio-1) > 0.01 {
			t.Errorf("after %d appends the curve gained %d bytes, redis %d (ratio %.4f, want within 1%%)", appends, curve, redis, ratio)
		}
	}
}

// TestCurveBytesAreMemcachedSlabs stores values of sizes that span memcached's slab classes
// through the proxy and checks the bytes the partition's curve counts for each against the
// class the real memcached put the item in, as its `stats slabs` lists it: a page divided by
// the chunks the page holds.
func TestCurveBytesAreMemcachedSlabs(t *testing.T) {
	acct := newAccount(t, "team-a/slabs")
	sock := startEngine(t, Memcached, "-m", "64")
	n := startNode(t, "node-a", Options{Protocol: Memcached, MRCSampleRate: 1})
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: sock, Routes: []Route{n.route(1)}})
	ps := (*n.p.tenants.Load())[acct.id].part.Load()
	footprint := func() int64 {
		return int64(ps.curves.Tracker().SnapshotAt([]int64{1 << 30}, nil).FootprintBytes)
	}
	proxy, engine := loginMC(t, n, acct), dialMC(t, "unix", sock)
	// usedChunks is each class's used_chunks, chunkBytes its page share, from `stats slabs`.
	slabs := func() (usedChunks map[string]int64, chunkBytes map[string]int64) {
		usedChunks, perPage := map[string]int64{}, map[string]int64{}
		engine.write("stats slabs\r\n")
		for line := engine.line(); line != "END"; line = engine.line() {
			var class, stat string
			var v int64
			if _, err := fmt.Sscanf(strings.Replace(line, ":", " ", 1), "STAT %s %s %d", &class, &stat, &v); err != nil {
				continue
			}
			switch stat {
			case "used_chunks":
				usedChunks[class] = v
			case "chunks_per_page":
				perPage[class] = v
			}
		}
		chunkBytes = map[string]int64{}
		for class, chunks := range perPage {
			chunkBytes[class] = (1 << 20) / chunks
		}
		return usedChunks, chunkBytes
	}
	for i, size := range []int{0, 1, 10, 40, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 400000, 500000} {
		key := fmt.Sprintf("slab:%03d", i)
		before, _ := slabs()
		curveBefore := footprint()
		proxy.set(key, strings.Repeat("v", size))
		curve := footprint() - curveBefore
		after, chunkBytes := slabs()
		var grown []string
		for class, used := range after {
			if used > before[class] {
				grown = append(grown, class)
			}
		}
		if len(grown) != 1 {
			t.Errorf("a %d-byte value took chunks of classes %v, want one class", size, grown)
			continue
		}
		if want := chunkBytes[grown[0]]; curve != want {
			t.Errorf("a %d-byte value: the curve counts %d bytes, memcached's class %s %d", size, curve, grown[0], want)
		}
	}
}
