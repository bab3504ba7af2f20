package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestLargeReplyIsStreamed probes the proxy (in this process) with one request whose reply is
// about 64 MiB, on real engines: the "get big big ..." (memcached, 64 values of 1 MB),
// "MGET big ..." (redis, the same) and one GET of a 64 MiB value, while another tenant on the
// same sidecar keeps reading. The reply is streamed in chunks, so the heap's peak during the
// probe stays within streamedReplyHeapBound of what it was before (replies held whole made it
// 160-222 MiB); once the reply is read the heap is back within 20% (plus 4 MiB of slack for the
// test's own allocations). The other tenant's p99 is logged and must stay under 100ms.
func TestLargeReplyIsStreamed(t *testing.T) {
	const valueLen, copies = 1000 * 1000, 64
	cases := []struct {
		name     string
		proto    Protocol
		valueLen int
		keys     int
		list     bool // a list of keys elements, read with LRANGE
		set      bool // a set of keys elements, read with SMEMBERS
		meta     bool // memcached: read with mg
		engine   []string
	}{
		{name: "memcached get of 64 values of 1 MB", proto: Memcached, valueLen: valueLen, keys: copies},
		{name: "memcached mg of a 64 MiB value", proto: Memcached, valueLen: 64 << 20, keys: 1, meta: true,
			engine: []string{"-m", "256", "-I", "128m"}},
		{name: "redis MGET of 64 values of 1 MB", proto: Redis, valueLen: valueLen, keys: copies},
		{name: "redis GET of a 64 MiB value", proto: Redis, valueLen: 64 << 20, keys: 1},
		{name: "redis LRANGE of a list of 1024 values of 64 KB", proto: Redis, valueLen: 64 << 10, keys: 1024, list: true},
		{name: "redis LRANGE of a list of 4 values of 16 MiB", proto: Redis, valueLen: 16 << 20, keys: 4, list: true},
		{name: "redis SMEMBERS of a set of 4 values of 16 MiB", proto: Redis, valueLen: 16 << 20, keys: 4, set: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			acct, other := newAccount(t, "team-a/app"), newAccount(t, "team-b/other")
			n := startNode(t, "node-a", Options{Protocol: tc.proto})
			engine := startEngine(t, tc.proto, tc.engine...)
			n.update(t,
				Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}},
				Tenant{ID: other.id, CredentialHash: other.hash, LocalEngine: startEngine(t, tc.proto), Routes: []Route{n.route(1)}})
			bystander := newReadProbe(t, n, tc.proto, other, other, 1).bystanderOp
			switch {
			case tc.list:
				pushDirectly(t, engine, "RPUSH", "big", tc.keys, tc.valueLen)
			case tc.set:
				pushDirectly(t, engine, "SADD", "big", tc.keys, tc.valueLen)
			default:
				storeDirectly(t, tc.proto, engine, "big", tc.valueLen)
			}
			keys := strings.Repeat(" big", tc.keys)
			var write func([]byte) (int, error)
			var read func() int64
			if tc.proto == Memcached {
				c := loginMC(t, n, acct)
				request, valueHeader, trailer := "get"+keys+"\r\n", fmt.Sprintf("VALUE big 0 %d\r\n", tc.valueLen), "END\r\n"
				if tc.meta {
					request, valueHeader, trailer = "mg big v\r\n", fmt.Sprintf("VA %d\r\n", tc.valueLen), ""
				}
				write, read = c.nc.Write, func() int64 {
					return readValues(t, c.br, "", valueHeader, tc.keys, tc.valueLen, trailer)
				}
				probeStreamed(t, write, []byte(request), read, bystander, int64(tc.keys*tc.valueLen))
				return
			}
			c := loginRESP(t, n, acct)
			request := resp.AppendCommandStrings(nil, "GET", "big")
			header := ""
			switch {
			case tc.list:
				request = resp.AppendCommandStrings(nil, "LRANGE", "big", "0", "-1")
				header = fmt.Sprintf("*%d\r\n", tc.keys)
			case tc.set:
				request = resp.AppendCommandStrings(nil, "SMEMBERS", "big")
				header = fmt.Sprintf("*%d\r\n", tc.keys)
			case tc.keys > 1:
				request = resp.AppendCommandStrings(nil, strings.Fields("MGET"+keys)...)
				header = fmt.Sprintf("*%d\r\n", tc.keys)
			}
			read = func() int64 {
				return readValues(t, c.br, header, fmt.Sprintf("$%d\r\n", tc.valueLen), tc.keys, tc.valueLen, "")
			}
			probeStreamed(t, c.nc.Write, request, read, bystander, int64(tc.keys*tc.valueLen))
			if tc.list || tc.set {
				// The streamed collection counts as one hit of its key, as one read whole does.
				hits := &n.p.lookupTenant([]byte(acct.id)).stats.hits
				waitFor(t, "the LRANGE to count as a hit", func() bool { return hits.Load() == 1 })
			}
		})
	}
}

// streamedReplyHeapBound is how much the heap may grow while one streamed reply is copied: a
// chunk buffer and the reader's buffers, with the garbage collector's slack, are far below it.
const streamedReplyHeapBound = 32 << 20

// storeDirectly stores a value of valueLen bytes under key on the engine itself, so that the
// proxy's heap does not carry the request.
func storeDirectly(t *testing.T, proto Protocol, engine, key string, valueLen int) {
	t.Helper()
	value := strings.Repeat("v", valueLen)
	if proto == Memcached {
		c := dialMC(t, "unix", engine)
		c.set(key, value)
		return
	}
	if got := dialRESP(t, "unix", engine).do("SET", key, value); got != "+OK\r\n" {
		t.Fatalf("SET %s on the engine: %q", key, got)
	}
}

// pushDirectly adds n distinct values of valueLen bytes to key, on the engine itself, with add
// (RPUSH: a list, SADD: a set).
func pushDirectly(t *testing.T, engine, add, key string, n, valueLen int) {
	t.Helper()
	c := dialRESP(t, "unix", engine)
	value := []byte(strings.Repeat("v", valueLen))
	for i := range n {
		copy(value, strconv.Itoa(i)+":")
		if got := c.do(add, key, string(value)); got[0] != ':' {
			t.Fatalf("%s %s on the engine: %q", add, key, got)
		}
	}
}

// readValues reads a reply of n values of valueLen bytes, each after valueHeader, between
// header and trailer, and returns the values' bytes.
func readValues(t *testing.T, br *bufio.Reader, header, valueHeader string, n, valueLen int, trailer string) int64 {
	t.Helper()
	expectLine := func(want string) {
		if line, err := br.ReadString('\n'); err != nil || line != want {
			t.Fatalf("line %q (%v), want %q", line, err, want)
		}
	}
	if header != "" {
		expectLine(header)
	}
	var total int64
	for range n {
		expectLine(valueHeader)
		m, err := io.CopyN(io.Discard, br, int64(valueLen)+2)
		if err != nil {
			t.Fatal(err)
		}
		total += m - 2
	}
	if trailer != "" {
		expectLine(trailer)
	}
	return total
}

// probeStreamed measures the heap before, during and after one request whose reply read
// consumes, and the latency of the other tenant's reads meanwhile.
func probeStreamed(t *testing.T, write func([]byte) (int, error), request []byte, read func() int64, bystander func(), want int64) {
	t.Helper()
	before := settledHeap()
	peak := sampleHeapPeak()
	var latencies []time.Duration
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			bystander()
			latencies = append(latencies, time.Since(start))
		}
	}()
	start := time.Now()
	if _, err := write(request); err != nil {
		t.Fatal(err)
	}
	got := read()
	elapsed := time.Since(start)
	close(stop)
	<-stopped
	if got != want {
		t.Fatalf("read %d value bytes, want %d", got, want)
	}
	peakHeap := peak()
	after := settledHeap()
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100]
	t.Logf("heap in use: %.1f MiB before, peak %.1f MiB during a %.1f MiB reply (read in %v), %.1f MiB after; other tenant: %d reads, p99 %v",
		mib(before), mib(peakHeap), float64(want)/(1<<20), elapsed.Round(time.Millisecond), mib(after), len(latencies), p99)
	if peakHeap > before+streamedReplyHeapBound {
		t.Errorf("heap peaked at %.1f MiB, more than %.0f MiB over the %.1f MiB before", mib(peakHeap), mib(streamedReplyHeapBound), mib(before))
	}
	if p99 > 100*time.Millisecond {
		t.Errorf("the other tenant's p99 was %v during the reply, want under 100ms", p99)
	}
	checkHeapReturned(t, before, after)
}

// checkHeapReturned fails the test unless the heap after a probe is within 20% (plus 4 MiB of
// slack for the test's own allocations) of what it was before.
func checkHeapReturned(t *testing.T, before, after uint64) {
	t.Helper()
	if limit := before + before/5 + 4<<20; after > limit {
		t.Errorf("heap in use after the probe: %.1f MiB, want at most %.1f MiB (before: %.1f MiB)", mib(after), mib(limit), mib(before))
	}
}

// sampleHeapPeak samples the heap in use every 5ms until the returned function is called,
// which returns the largest sample.
func sampleHeapPeak() func() uint64 {
	var peak atomic.Uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak.Load()
	}
}

// settledHeap is the heap in use once garbage is collected (twice: sync.Pool keeps objects
// through one collection).
func settledHeap() uint64 {
	var ms runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond) // let the link's reader reach its wait
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestSplitReadsAreStreamed reads, through node A of a two-node tenant on real engines, 64
// values of 1 MB spread over both nodes with one multi-key read (redis MGET, memcached get),
// which the proxy splits into one part per node: each part's reply is streamed and the writer
// merges them value by value in key order, so the heap's peak stays within
// streamedReplyHeapBound of what it was before (merging the parts whole peaked at 334-518 MiB).
// The reply is whole and in key order; the connection and its links stay in step (a split
// read of two small values and a miss after it are answered).
func TestSplitReadsAreStreamed(t *testing.T) {
	const valueLen, count = 1000 * 1000, 64
	for _, proto := range []Protocol{Redis, Memcached} {
		t.Run(string(proto), func(t *testing.T) {
			cl := startCluster(t, proto, 1, 1)
			keys := make([]string, count)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
			}
			// Made when needed: 64 MB held by the test would let the heap's garbage grow as much
			// before a collection, hiding the proxy's peak.
			value := func(k string, n int) string { return k + strings.Repeat("v", n-len(k)) }
			held := placeKeys(t, cl, keys)
			if held.counts[0] < 8 || held.counts[1] < 8 {
				t.Fatalf("keys per node %v: want both nodes' parts large", held.counts)
			}
			var request []byte
			var conn net.Conn
			var br *bufio.Reader
			var after func() string
			if proto == Redis {
				c := loginRESP(t, cl.a, cl.acct)
				for _, k := range keys {
					if got := c.do("SET", k, value(k, valueLen)); got != "+OK\r\n" {
						t.Fatalf("SET %s: %q", k, got)
					}
				}
				c.do("SET", held.onA+"s", "a")
				c.do("SET", held.onB+"s", "b")
				conn, br = c.nc, c.br
				request = resp.AppendCommandStrings(nil, append([]string{"MGET"}, keys...)...)
				after = func() string { return c.do("MGET", held.onA+"s", "missing", held.onB+"s") }
			} else {
				c := loginMC(t, cl.a, cl.acct)
				for _, k := range keys {
					c.set(k, value(k, valueLen))
				}
				c.set(held.onA+"s", "a")
				c.set(held.onB+"s", "b")
				conn, br = c.nc, c.br
				request = []byte("get " + strings.Join(keys, " ") + "\r\n")
				after = func() string { return fmt.Sprint(c.get(held.onA+"s", "missing", held.onB+"s")) }
			}
			before := settledHeap()
			peak := sampleHeapPeak()
			if _, err := conn.Write(request); err != nil {
				t.Fatal(err)
			}
			readSplitReply(t, proto, br, keys, valueLen)
			peakHeap := peak()
			afterHeap := settledHeap()
			t.Logf("heap in use: %.1f MiB before, peak %.1f MiB during a split read of %.1f MiB, %.1f MiB after",
				mib(before), mib(peakHeap), float64(count*valueLen)/(1<<20), mib(afterHeap))
			if peakHeap > before+streamedReplyHeapBound {
				t.Errorf("heap peaked at %.1f MiB, more than %.0f MiB over the %.1f MiB before", mib(peakHeap), mib(streamedReplyHeapBound), mib(before))
			}
			checkHeapReturned(t, before, afterHeap)
			want := map[Protocol]string{
				Redis:     "*3\r\n$1\r\na\r\n$-1\r\n$1\r\nb\r\n",
				Memcached: fmt.Sprint(map[string]string{held.onA + "s": "a", held.onB + "s": "b"}),
			}[proto]
			if got := after(); got != want {
				t.Errorf("split read after the large one: %q, want %q", got, want)
			}
		})
	}
}

// readSplitReply reads the reply to a multi-key read of keys, each holding its name and then
// "v" up to valueLen bytes, checking every value in key order without holding the reply.
func readSplitReply(t *testing.T, proto Protocol, br *bufio.Reader, keys []string, valueLen int) {
	t.Helper()
	expectLine := func(want string) {
		t.Helper()
		if line, err := br.ReadString('\n'); err != nil || line != want {
			t.Fatalf("line %.80q (%v), want %q", line, err, want)
		}
	}
	if proto == Redis {
		expectLine(fmt.Sprintf("*%d\r\n", len(keys)))
	}
	data := make([]byte, valueLen+2)
	for _, k := range keys {
		if proto == Redis {
			expectLine(fmt.Sprintf("$%d\r\n", valueLen))
		} else {
			expectLine(fmt.Sprintf("VALUE %s 0 %d\r\n", k, valueLen))
		}
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatal(err)
		}
		// Checked without making the value: its garbage would count in the heap's peak.
		if !bytes.HasPrefix(data, []byte(k)) || bytes.Count(data[len(k):valueLen], []byte("v")) != valueLen-len(k) {
			t.Fatalf("value of %s: not its own (%.20q...)", k, data)
		}
	}
	if proto == Memcached {
		expectLine("END\r\n")
	}
}

// keyPlacement is how many of some keys each node of a cluster owns, and one key of each.
type keyPlacement struct {
	counts   [2]int
	onA, onB string
}

// placeKeys places keys as node A's routes for the cluster's tenant do.
func placeKeys(t *testing.T, cl *cluster, keys []string) keyPlacement {
	t.Helper()
	var kp keyPlacement
	rt := cl.a.p.lookupTenant([]byte(cl.acct.id)).cfg.Load().routes
	for _, k := range keys {
		routing, _ := keyHashes([]byte(k))
		i, ok := rt.owner(routing)
		if !ok {
			t.Fatalf("no node owns %s", k)
		}
		kp.counts[i]++
		switch {
		case rt.nodes[i].local && kp.onA == "":
			kp.onA = k
		case !rt.nodes[i].local && kp.onB == "":
			kp.onB = k
		}
	}
	return kp
}
