package proxy

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/mrc"
)

// curveStep is one request a client sends through the proxy and what it does to the curve's
// keys: reads (hit or miss as the engine has them), writes (the value the engine holds
// afterwards), moves (written, their new size told by neither request nor reply: the curve
// keeps the size it last learned) and deletes.
type curveStep struct {
	redis                        []string // a redis command
	memcached                    string   // a memcached request, CRLF-terminated
	reads, writes, moves, delete []string
}

// TestCommandSizesReachTheCurve sends each command family through the proxy to a real engine
// (every key sampled) and checks the partition's curve against ExactLRU fed, by key, the
// sizes the engine itself reports after each request (redis' MEMORY USAGE, or a get on
// memcached and its slab class): the
// footprint and keys tracked are equal, the reads counted are the requests' reads, and the hit
// ratios agree wherever no reuse distance lies within the tracker's bucket width.
func TestCommandSizesReachTheCurve(t *testing.T) {
	v := func(n int) string { return strings.Repeat("v", n) }
	const num = "n"
	mcSet := func(key string, n int) string { return fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, n, v(n)) }
	tests := []struct {
		protocol Protocol
		steps    []curveStep
	}{
		{Redis, []curveStep{
			{redis: []string{"SET", "a", v(100)}, writes: []string{"a"}},
			{redis: []string{"GET", "a"}, reads: []string{"a"}},
			{redis: []string{"APPEND", "a", v(50)}, writes: []string{"a"}},
			{redis: []string{"GET", "a"}, reads: []string{"a"}},
			{redis: []string{"SETRANGE", "a", "300", "xyz"}, writes: []string{"a"}},
			{redis: []string{"INCR", "n"}, writes: []string{"n"}},
			{redis: []string{"INCRBY", "n", "12345"}, writes: []string{"n"}},
			{redis: []string{"DECR", "n"}, writes: []string{"n"}},
			{redis: []string{"DECRBY", "n", "12000"}, writes: []string{"n"}},
			{redis: []string{"INCRBYFLOAT", "f", "1.5"}, writes: []string{"f"}},
			{redis: []string{"INCR", "a"}}, // not an integer: an error, nothing written
			{redis: []string{"MGET", "a", "n", "f", "m"}, reads: []string{"a", "n", "f", "m"}},
			{redis: []string{"SET", "m", v(70)}, writes: []string{"m"}},
			{redis: []string{"DEL", "a"}, delete: []string{"a"}},
			{redis: []string{"GET", "a"}, reads: []string{"a"}},
			{redis: []string{"SET", "a", v(20)}, writes: []string{"a"}},
			{redis: []string{"UNLINK", "n", "f"}, delete: []string{"n", "f"}},
			{redis: []string{"GET", "n"}, reads: []string{"n"}},
			{redis: []string{"SET", "n", v(5)}, writes: []string{"n"}},
			{redis: []string{"SET", "b", v(400)}, writes: []string{"b"}},
			{redis: []string{"GETDEL", "b"}, reads: []string{"b"}, delete: []string{"b"}}, // a read that hits, then gone
			{redis: []string{"GETDEL", "b"}, reads: []string{"b"}, delete: []string{"b"}}, // a read that misses
			{redis: []string{"MGET", "a", "b"}, reads: []string{"a", "b"}},
			{redis: []string{"SET", "b", v(30)}, writes: []string{"b"}},
			{redis: []string{"GET", "m"}, reads: []string{"m"}},
			{redis: []string{"GET", "b"}, reads: []string{"b"}},
		}},
		{Memcached, []curveStep{
			{memcached: mcSet("a", 100), writes: []string{"a"}},
			{memcached: "get a\r\n", reads: []string{"a"}},
			{memcached: "gets a\r\n", reads: []string{"a"}},
			{memcached: "append a 0 0 50\r\n" + v(50) + "\r\n", moves: []string{"a"}},
			{memcached: "prepend a 0 0 25\r\n" + v(25) + "\r\n", moves: []string{"a"}},
			{memcached: "gat 0 a\r\n", reads: []string{"a"}}, // the value's size is learned here
			// decr pads the number to the length it had when it rewrites it in place, and makes
			// a new item of the number's own length when another connection holds the item (as
			// this test's own reads on the engine may, for a moment): both lengths keep this
			// key's item in the same slab class, so either is the engine's truth here.
			{memcached: "set " + num + " 0 0 6\r\n123456\r\n", writes: []string{num}},
			{memcached: "get a\r\n", reads: []string{"a"}},
			{memcached: "decr " + num + " 123450\r\n", writes: []string{num}},
			{memcached: "get a\r\n", reads: []string{"a"}},
			{memcached: "incr " + num + " 3\r\n", writes: []string{num}},
			{memcached: "ma " + num + " v\r\n", writes: []string{num}},
			{memcached: "touch a 0\r\n", moves: []string{"a"}},
			{memcached: "get a m\r\n", reads: []string{"a", "m"}},
			{memcached: mcSet("m", 70), writes: []string{"m"}},
			{memcached: "delete a\r\n", delete: []string{"a"}},
			{memcached: "get a\r\n", reads: []string{"a"}},
			{memcached: mcSet("a", 20), writes: []string{"a"}},
			{memcached: mcSet("b", 400), writes: []string{"b"}},
			{memcached: "md b\r\n", delete: []string{"b"}},
			{memcached: "mg b v\r\n", reads: []string{"b"}},
			{memcached: mcSet("b", 30), writes: []string{"b"}},
			{memcached: "gets m b\r\n", reads: []string{"m", "b"}},
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.protocol), func(t *testing.T) {
			acct := newAccount(t, "team-a/cache")
			n, engine := singleNode(t, tt.protocol, acct, Options{MRCSampleRate: 1})
			ps := (*n.p.tenants.Load())[acct.id].part.Load()
			send, objectBytes := curveClients(t, tt.protocol, n, acct, engine, ps.curves.Model())
			sizes, err := mrc.GeometricSizes(64, 1<<16, 16)
			if err != nil {
				t.Fatal(err)
			}
			// Each size with sizes 3% either side: the tracker's buckets are 2.2% wide.
			var around []int64
			for _, s := range sizes {
				around = append(around, s*97/100, s, s*103/100)
			}
			exact, err := mrc.NewExactLRU(around)
			if err != nil {
				t.Fatal(err)
			}
			known := map[string]int64{} // the object bytes the curve last learned, for moves
			reads := 0
			for _, step := range tt.steps {
				for _, key := range step.reads {
					reads++
					if size, ok := objectBytes(key); ok {
						exact.Access(key, size)
						known[key] = size
					} else {
						exact.Access(key, 1) // a miss: the write that follows sizes it
					}
				}
				send(step)
				for _, key := range step.writes {
					size, ok := objectBytes(key)
					if !ok {
						t.Fatalf("after %q%q the engine has no %s", step.redis, step.memcached, key)
					}
					exact.Write(key, size)
					known[key] = size
				}
				for _, key := range step.moves {
					exact.Write(key, known[key])
				}
				for _, key := range step.delete {
					exact.Delete(key)
				}
			}
			got, want := ps.curves.Tracker().SnapshotAt(around, nil), exact.Curve()
			if got.FootprintBytes != float64(exact.FootprintBytes()) || got.TrackedKeys != want.TrackedKeys {
				t.Errorf("the curve holds %v bytes in %d keys, the engine's sizes %d in %d", got.FootprintBytes, got.TrackedKeys, exact.FootprintBytes(), want.TrackedKeys)
			}
			if got.SampledAccesses != float64(reads) {
				t.Errorf("%v reads counted, the requests made %d", got.SampledAccesses, reads)
			}
			for i := 1; i < len(around); i += 3 {
				if want.HitRatio[i-1] == want.HitRatio[i+1] && got.HitRatio[i] != want.HitRatio[i] {
					t.Errorf("hit ratio %v at %d bytes, exact LRU %v", got.HitRatio[i], around[i], want.HitRatio[i])
				}
			}
		})
	}
}

// curveClients returns a function that sends a step through the proxy and reads its reply,
// and one that asks the engine itself what a key takes: redis' MEMORY USAGE and the hash
// entry's rounding it leaves out (TestCurveBytesAreRedisBytes), or the memcached value's
// length in model's slab classes.
func curveClients(t *testing.T, protocol Protocol, n *testNode, acct account, engine string, model *mrc.EngineModel) (send func(curveStep), objectBytes func(string) (int64, bool)) {
	if protocol == Redis {
		c, direct := loginRESP(t, n, acct), dialRESP(t, "unix", engine)
		return func(s curveStep) { c.do(s.redis...) }, func(key string) (int64, bool) {
			if direct.do("EXISTS", key) != ":1\r\n" {
				return 0, false
			}
			usage, err := strconv.ParseInt(strings.TrimSpace(direct.do("MEMORY", "USAGE", key)[1:]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return usage + redisDictEntryRounding, true
		}
	}
	c, direct := loginMC(t, n, acct), dialMC(t, "unix", engine)
	return func(s curveStep) {
			c.write(s.memcached)
			readMCResponse(t, c)
		}, func(key string) (int64, bool) {
			value, ok := direct.get(key)[key]
			return model.ObjectBytes(len(key), len(value)), ok
		}
}

// readMCResponse reads one memcached response: value blocks up to END, or one line (with
// its data block for a meta VA).
func readMCResponse(t *testing.T, c *mcClient) {
	for {
		line := c.line()
		var size int
		switch {
		case strings.HasPrefix(line, "VALUE "):
			fields := strings.Fields(line)
			size, _ = strconv.Atoi(fields[3])
		case strings.HasPrefix(line, "VA "):
			size, _ = strconv.Atoi(strings.Fields(line)[1])
		default:
			return
		}
		if _, err := io.ReadFull(c.br, make([]byte, size+2)); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "VA ") {
			return
		}
	}
}

// TestSplitDeleteLeavesEachNodesCurve: a DEL whose keys live on two nodes takes each key off
// the curve of the node that holds it.
func TestSplitDeleteLeavesEachNodesCurve(t *testing.T) {
	c := startCluster(t, Redis, 1, 1)
	client := loginRESP(t, c.a, c.acct)
	del := []string{"DEL"}
	var sets [][]string
	for i := range 400 {
		key := "k" + strconv.Itoa(i)
		sets = append(sets, []string{"SET", key, "value"})
		del = append(del, key)
	}
	pipeline(client, sets)
	tracked := func(n *testNode) int {
		return (*n.p.tenants.Load())[c.acct.id].part.Load().curves.Tracker().Snapshot().TrackedKeys
	}
	if tracked(c.a) == 0 || tracked(c.b) == 0 {
		t.Fatalf("after the writes the nodes' curves track %d and %d keys, want some on each", tracked(c.a), tracked(c.b))
	}
	if got := client.do(del...); got != ":400\r\n" {
		t.Fatalf("DEL of 400 keys over two nodes: %q", got)
	}
	if tracked(c.a) != 0 || tracked(c.b) != 0 {
		t.Errorf("after the DEL the nodes' curves track %d and %d keys, want none", tracked(c.a), tracked(c.b))
	}
}
