package proxy

import (
	"bufio"
	"bytes"
	"container/list"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// benchClient sends a fixed batch of requests and reads their replies with the protocol's
// reply reader; the same client code runs against the engine and the proxy.
type benchClient struct {
	nc    net.Conn
	br    *bufio.Reader
	batch []byte
	read  func() error
	count int // requests per batch
}

// newBenchClient makes a client whose batch alternates SET and GET of the same key; each
// SET/GET pair of a batch has its own key, keyPrefix followed by the pair's number.
func newBenchClient(b *testing.B, protocol Protocol, nc net.Conn, depth int, keyPrefix string) *benchClient {
	c := &benchClient{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), count: depth}
	value := strings.Repeat("v", 100)
	key := func(i int) string { return keyPrefix + strconv.Itoa(i/2) }
	if protocol == Redis {
		rr := resp.NewReplyReader(c.br, resp.ReplyLimits{})
		for i := range depth {
			if i%2 == 0 {
				c.batch = resp.AppendCommandStrings(c.batch, "SET", key(i), value)
			} else {
				c.batch = resp.AppendCommandStrings(c.batch, "GET", key(i))
			}
		}
		c.read = func() error { _, err := rr.ReadReply(); return err }
		return c
	}
	rr := memcache.NewResponseReader(c.br, memcache.ResponseLimits{})
	var expects []memcache.Expect
	for i := range depth {
		if i%2 == 0 {
			c.batch = fmt.Appendf(c.batch, "set %s 0 0 %d\r\n%s\r\n", key(i), len(value), value)
			expects = append(expects, memcache.Expect{Command: memcache.CmdSet})
		} else {
			c.batch = fmt.Appendf(c.batch, "get %s\r\n", key(i))
			expects = append(expects, memcache.Expect{Command: memcache.CmdGet})
		}
	}
	next := 0
	c.read = func() error {
		_, err := rr.ReadResponse(expects[next%len(expects)])
		next++
		return err
	}
	return c
}

// run sends ops requests (whole batches) and waits for every reply.
func (c *benchClient) run(b *testing.B, ops int) {
	for done := 0; done < ops; done += c.count {
		if _, err := c.nc.Write(c.batch); err != nil {
			b.Fatal(err)
		}
		for range c.count {
			if err := c.read(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// timeClients runs ops requests spread over clients concurrently and returns the elapsed time.
func timeClients(b *testing.B, clients []*benchClient, ops int) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(b, ops/len(clients))
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkGetSet alternates SET and GET of a 100-byte value, directly on an engine and
// through the proxy in front of another engine of the same kind, in the same run, and reports
// the proxy's throughput relative to the engine's ("x-direct").
func BenchmarkGetSet(b *testing.B) {
	for _, protocol := range []Protocol{Redis, Memcached} {
		for _, shape := range []struct{ clients, depth int }{{1, 1}, {16, 1}, {1, 32}, {16, 32}} {
			name := fmt.Sprintf("%s/clients=%d/pipeline=%d", protocol, shape.clients, shape.depth)
			b.Run(name, func(b *testing.B) {
				benchmarkGetSet(b, protocol, shape.clients, shape.depth)
			})
		}
	}
}

func benchmarkGetSet(b *testing.B, protocol Protocol, clients, depth int) {
	acct := newAccount(b, "team-a/cache")
	n, _ := singleNode(b, protocol, acct, Options{})
	directEngine := startEngine(b, protocol)
	// Clients reach the proxy over a unix socket too, so both sides pay the same transport.
	proxySocket := n.socketPath
	var direct, proxied []*benchClient
	for range clients {
		dc, err := net.Dial("unix", directEngine)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dc.Close() })
		direct = append(direct, newBenchClient(b, protocol, dc, depth, "bench"))
		proxied = append(proxied, newBenchClient(b, protocol, dialProxy(b, protocol, proxySocket, acct), depth, "bench"))
	}
	ops := max(b.N, clients*depth)
	b.ResetTimer()
	cpu0 := cpuTime(b, syscall.RUSAGE_SELF)
	directTime := timeClients(b, direct, ops)
	cpu1 := cpuTime(b, syscall.RUSAGE_SELF)
	proxyTime := timeClients(b, proxied, ops)
	cpu2 := cpuTime(b, syscall.RUSAGE_SELF)
	b.StopTimer()
	// The clients run in this process for both phases, the proxy only in the second: the
	// difference is the proxy's CPU per request, which a loaded machine disturbs less than
	// the ratio of throughputs.
	b.ReportMetric(float64((cpu2-cpu1)-(cpu1-cpu0))/float64(ops), "proxy-cpu-ns/op")
	b.ReportMetric(directTime.Seconds()/proxyTime.Seconds(), "x-direct")
	b.ReportMetric(float64(ops)/proxyTime.Seconds(), "proxy-ops/s")
	b.ReportMetric(float64(ops)/directTime.Seconds(), "direct-ops/s")
}

// dialProxy connects to a proxy's unix socket and authenticates as acct.
func dialProxy(b *testing.B, protocol Protocol, socket string, acct account) (nc net.Conn) {
	if protocol == Redis {
		c := dialRESP(b, "unix", socket)
		if got := c.do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
			b.Fatalf("AUTH: %q", got)
		}
		nc = c.nc
	} else {
		nc = loginMCOn(b, "unix", socket, acct).nc
	}
	// The benchmark runs longer than the login's I/O timeout.
	if err := nc.SetDeadline(time.Time{}); err != nil {
		b.Fatal(err)
	}
	return nc
}

// BenchmarkCurveAccounting measures the proxy's CPU per request with the miss-ratio curve's
// accounting (true sizes, engine bytes, tracker, ghost list) and without it, in the same run:
// two tenants on one proxy, identical but for the second having its curve state removed. The
// proxy runs in a process of its own (TestCurveAccountingProxyProcess), which reports its CPU
// time between phases, so the clients' CPU, several times the proxy's, adds none of its noise.
// Each round serves the two tenants in alternating order and yields one ratio of the proxy's
// CPU per request with the accounting to without; the median of the rounds is "x-proxy-cpu",
// their quartiles "x-proxy-cpu-p25" and "x-proxy-cpu-p75", so a noisy machine shows as spread.
//
// That ratio cannot resolve a few percent on a loaded machine; the decomposition can. In the
// same run the benchmark replays accountingStream in-process (measureAccounting) and divides
// the accounting's CPU per request by the proxy's without curves ("proxy-cpu-ns/op-none"):
// "recorder-share" is the share of the proxy's CPU the recorder's accounting (true object
// sizes in engine bytes) adds, "curve-share" the share all of the curve state adds, ghost
// list and eviction watcher included.
func BenchmarkCurveAccounting(b *testing.B) {
	for _, protocol := range []Protocol{Redis, Memcached} {
		b.Run(string(protocol), func(b *testing.B) { benchmarkCurveAccounting(b, protocol) })
	}
}

// curveAccountingEnv passes a proxy process its configuration: protocol, then for the tenant
// with curves and the one without, id, credential hash and engine socket, space-separated.
const curveAccountingEnv = "CACHEQOS_BENCH_CURVE_PROXY"

func benchmarkCurveAccounting(b *testing.B, protocol Protocol) {
	const clients, depth, rounds = 4, 32, 48
	on, off := newAccount(b, "team-a/on"), newAccount(b, "team-b/off")
	proxyCPU, socket := startCurveAccountingProxy(b, strings.Join([]string{string(protocol),
		on.id, on.hash, startEngine(b, protocol), off.id, off.hash, startEngine(b, protocol)}, " "))
	tenantClients := func(acct account) []*benchClient {
		var out []*benchClient
		for i := range clients {
			// 16 keys per client, 64 in all: about 6 of them sampled at the default rate.
			out = append(out, newBenchClient(b, protocol, dialProxy(b, protocol, socket, acct), depth, fmt.Sprintf("k%d:", i)))
		}
		return out
	}
	withCurves, without := tenantClients(on), tenantClients(off)
	ops := max(b.N/rounds, clients*depth)
	cpuOf := func(clients []*benchClient) time.Duration {
		before := proxyCPU()
		timeClients(b, clients, ops)
		return proxyCPU() - before
	}
	var cpuOn, cpuOff time.Duration
	ratios := make([]float64, rounds)
	b.ResetTimer()
	for round := range ratios {
		var roundOn, roundOff time.Duration
		if round%2 == 0 {
			roundOn, roundOff = cpuOf(withCurves), cpuOf(without)
		} else {
			roundOff, roundOn = cpuOf(without), cpuOf(withCurves)
		}
		ratios[round] = float64(roundOn) / float64(roundOff)
		cpuOn += roundOn
		cpuOff += roundOff
	}
	b.StopTimer()
	total := float64(rounds * ops)
	perRequestOff := float64(cpuOff) / total
	b.ReportMetric(float64(cpuOn)/total, "proxy-cpu-ns/op-curves")
	b.ReportMetric(perRequestOff, "proxy-cpu-ns/op-none")
	slices.Sort(ratios)
	b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2, "x-proxy-cpu")
	b.ReportMetric(ratios[rounds/4], "x-proxy-cpu-p25")
	b.ReportMetric(ratios[rounds-1-rounds/4], "x-proxy-cpu-p75")
	stream := newAccountingStream(protocol)
	costs := measureAccounting(b, stream)
	stream.report(b, costs)
	b.ReportMetric(costs.recorder/perRequestOff, "recorder-share")
	b.ReportMetric(costs.curves/perRequestOff, "curve-share")
}

// startCurveAccountingProxy starts TestCurveAccountingProxyProcess with config and returns a
// function reading the process's CPU time, and its client socket. The process ends when its
// input closes, at the end of the benchmark.
func startCurveAccountingProxy(b *testing.B, config string) (cpu func() time.Duration, socket string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCurveAccountingProxyProcess$")
	cmd.Env = append(os.Environ(), curveAccountingEnv+"="+config)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("proxy process: %v", err)
		}
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		b.Fatalf("proxy process: no socket: %v", lines.Err())
	}
	socket = lines.Text()
	cpu = func() time.Duration {
		if _, err := io.WriteString(in, "cpu\n"); err != nil {
			b.Fatal(err)
		}
		if !lines.Scan() {
			b.Fatalf("proxy process: no CPU time: %v", lines.Err())
		}
		ns, err := strconv.ParseInt(lines.Text(), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(ns)
	}
	return cpu, socket
}

// TestCurveAccountingProxyProcess is BenchmarkCurveAccounting's proxy process: it serves the
// two tenants curveAccountingEnv names, the second without curve state, prints its client
// socket, then its CPU time for each line it reads, until its input closes. Run without
// curveAccountingEnv (as a test) it does nothing: it is a process entry point, not a test.
func TestCurveAccountingProxyProcess(t *testing.T) {
	config := strings.Fields(os.Getenv(curveAccountingEnv))
	if len(config) == 0 {
		return
	}
	if len(config) != 7 {
		t.Fatalf("%s: %d fields, want 7", curveAccountingEnv, len(config))
	}
	protocol := Protocol(config[0])
	n := startNode(t, "node-a", Options{Protocol: protocol})
	n.update(t,
		Tenant{ID: config[1], CredentialHash: config[2], LocalEngine: config[3], LocalPartitionBytes: 64 << 20, Routes: []Route{n.route(1)}},
		Tenant{ID: config[4], CredentialHash: config[5], LocalEngine: config[6], LocalPartitionBytes: 64 << 20, Routes: []Route{n.route(1)}})
	if ps := (*n.p.tenants.Load())[config[4]].part.Swap(nil); ps != nil {
		ps.stop()
	}
	fmt.Println(n.socketPath)
	requests := bufio.NewScanner(os.Stdin)
	for requests.Scan() {
		fmt.Println(int64(cpuTime(t, syscall.RUSAGE_SELF)))
	}
}

// cpuTime returns the user and system CPU time used by this process (syscall.RUSAGE_SELF) or
// by the calling thread (syscall.RUSAGE_THREAD).
func cpuTime(b testing.TB, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// accountingStream is a tenant's look-aside request stream, for replaying in-process the
// accounting calls the proxy makes for it: reads of Zipf(0.9)-popular keys, out of 2^20 with
// values of 32 to 2,048 bytes in steps of 32, from an engine that holds the most recently
// used eighth of them (an LRU of that many objects), each miss followed by a write of the
// key, which evicts the least recently used object once the engine is full.
type accountingStream struct {
	protocol Protocol
	steps    []accountingStep
	requests int      // reads and writes in steps
	replies  [][]byte // redis: a GET reply by value length
	// evictions is the engine's eviction notifications for the steps' evictions, in order:
	// redis' pub/sub messages, memcached's eviction log lines.
	evictions []byte
}

// accountingStep is a read of a key, and when it misses the write and the eviction that
// follow. It holds what the proxy has at hand when it accounts for a request (the key's
// hash, the lengths in the request and reply), so the replay reads the stream in order.
type accountingStep struct {
	hash             uint64 // as keyHashes returns it
	keyLen, valueLen int32
	hit              bool
	evicted          bool // the write evicted a key, whose notification is next in evictions
}

func newAccountingStream(protocol Protocol) *accountingStream {
	const keys, cached, steps, zipf = 1 << 20, 1 << 17, 1 << 20, 0.9
	rng := rand.New(rand.NewPCG(15, 15))
	s := &accountingStream{protocol: protocol, replies: make([][]byte, 2049)}
	var keyNames [][]byte
	var step accountingStep
	objects := make([]accountingStep, keys) // a read of each key that hits
	popularity := make([]float64, keys)     // cumulative
	total := 0.0
	for k := range keys {
		key := fmt.Appendf(nil, "object:%d", k)
		_, full := keyHashes(key)
		keyNames = append(keyNames, key)
		objects[k] = accountingStep{hash: full, keyLen: int32(len(key)), valueLen: int32(32 * (1 + rng.IntN(64))), hit: true}
		total += 1 / math.Pow(float64(k+1), zipf)
		popularity[k] = total
	}
	lru := list.New()
	inCache := make(map[int]*list.Element, cached)
	// The first steps fill the engine; the stream is what follows.
	for n := range 2 * steps {
		key := min(sort.SearchFloat64s(popularity, rng.Float64()*total), keys-1)
		step = objects[key]
		if el, hit := inCache[key]; hit {
			lru.MoveToFront(el)
		} else {
			step.hit = false
			inCache[key] = lru.PushFront(key)
		}
		if !step.hit && lru.Len() > cached {
			out := lru.Remove(lru.Back()).(int)
			delete(inCache, out)
			step.evicted = true
			if n >= steps {
				s.evictions = s.appendEviction(s.evictions, keyNames[out], objects[out])
			}
		}
		if n >= steps {
			s.steps = append(s.steps, step)
			s.requests++
			if !step.hit {
				s.requests++ // the write
			}
		}
	}
	// 64 replies, about 64 KiB: the proxy reads a reply's value length from the buffer it
	// just read the reply into, which a replay through megabytes of replies would not.
	if protocol == Redis {
		for _, o := range objects {
			if s.replies[o.valueLen] == nil {
				s.replies[o.valueLen] = resp.AppendBulk(nil, bytes.Repeat([]byte("v"), int(o.valueLen)))
			}
		}
	}
	return s
}

// appendEviction appends the engine's notification of the eviction of key, last read as
// object.
func (s *accountingStream) appendEviction(buf, key []byte, object accountingStep) []byte {
	if s.protocol == Redis {
		return resp.AppendCommandStrings(buf, "message", evictedChannel, string(key))
	}
	return fmt.Appendf(buf, "ts=1.2 gid=7 type=eviction key=%s fetch=no ttl=-1 la=1 clsid=12 size=%d\r\n",
		bytes.ReplaceAll(key, []byte(":"), []byte("%3A")), object.keyLen+object.valueLen+50)
}

// accountingMode is what replay does for each request.
type accountingMode int

const (
	// accountNone: the tenant's accounting without curve state, its hit and value-size
	// counters from the lengths on the wire, as every tenant keeps.
	accountNone accountingMode = iota
	// accountCurves: the tenant's accounting with its curve state (the recorder, the ghost
	// list and the eviction watcher's reading and recording of each eviction), and the value
	// sizes as the engine holds them (redis: mrc.RedisValueLen of a write's value,
	// readValueLen of a reply; memcached's are the lengths on the wire).
	accountCurves
	// accountRecorder: the recorder's calls alone (mrc.Recorder Read and Write, with true
	// object sizes in engine bytes), with the value sizes they need.
	accountRecorder
	// accountNothing: the stream read and nothing done, accountRecorder's baseline.
	accountNothing
)

// replay makes on t the accounting calls of mode for the stream, as countRESP and
// countMemcache make them, and returns the CPU time the calling thread spent. t must have its
// curve state but for accountNone.
func (s *accountingStream) replay(b testing.TB, t *tenant, mode accountingMode) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ps := t.part.Load()
	if (ps == nil) != (mode == accountNone) {
		b.Fatalf("replay mode %d on a tenant with curve state %v", mode, ps != nil)
	}
	events := bufio.NewReader(bytes.NewReader(s.evictions))
	redisEvents := resp.NewReplyReader(events, resp.ReplyLimits{})
	var line []byte
	miss := resp.AppendNull(nil, resp.RESP2)
	value := bytes.Repeat([]byte("v"), 2048)
	engineSizes := mode == accountCurves || mode == accountRecorder
	start := cpuTime(b, syscall.RUSAGE_THREAD)
	for i := range s.steps {
		step := &s.steps[i]
		h, keyLen := step.hash, int(step.keyLen)
		readLen, writeLen := int(step.valueLen), int(step.valueLen)
		switch {
		case !step.hit:
			readLen = 0
			if engineSizes && s.protocol == Redis {
				readLen, writeLen = readValueLen(miss), mrc.RedisValueLen(value[:writeLen])
			}
		case engineSizes && s.protocol == Redis:
			readLen = readValueLen(s.replies[readLen])
		}
		switch mode {
		case accountNone, accountCurves:
			t.recordRead(h, step.hit, keyLen, readLen)
			if !step.hit {
				t.recordWrite(h, keyLen, writeLen)
			}
		case accountRecorder:
			ps.curves.Read(h, step.hit, keyLen, readLen)
			if !step.hit {
				ps.curves.Write(h, keyLen, writeLen)
			}
		}
		if mode != accountCurves || !step.evicted {
			continue
		}
		var err error
		if s.protocol == Redis {
			err = recordRedisEviction(redisEvents, t, ps)
		} else {
			line, err = recordMemcachedEviction(events, line[:0], ps)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return cpuTime(b, syscall.RUSAGE_THREAD) - start
}

// accountingCosts are the CPU times per request, in nanoseconds, of the accounting on an
// accountingStream: the median over rounds of each round's difference.
type accountingCosts struct {
	// curves is what the curve state adds to the tenant's accounting (accountCurves less
	// accountNone).
	curves float64
	// recorder is the recorder's part of it (accountRecorder less accountNothing): the
	// accounting of true object sizes in engine bytes.
	recorder float64
}

// accountingRounds is how many times measureAccounting replays the stream in each mode: the
// median of 9 differences shrugs off a few rounds slowed by other work on the machine.
const accountingRounds = 9

// measureAccounting replays stream on a tenant of an in-process proxy, in accountingRounds
// rounds that run each mode once, and returns the accounting's costs.
func measureAccounting(b *testing.B, stream *accountingStream) accountingCosts {
	acct := newAccount(b, "team-c/replay")
	n := startNode(b, "node-a", Options{Protocol: stream.protocol})
	// A partition the size of the objects the stream's engine holds (2^17 of about 1 KiB):
	// the ghost list remembers the evictions of a quarter of it.
	n.update(b, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: startEngine(b, stream.protocol),
		LocalPartitionBytes: 160 << 20, Routes: []Route{n.route(1)}})
	t := (*n.p.tenants.Load())[acct.id]
	curves := t.part.Load()
	stream.replay(b, t, accountCurves) // fills the tracker and the ghost list
	added, recorder := make([]float64, accountingRounds), make([]float64, accountingRounds)
	perRequest := func(d time.Duration) float64 { return float64(d) / float64(stream.requests) }
	for round := range accountingRounds {
		with := stream.replay(b, t, accountCurves)
		recorder[round] = perRequest(stream.replay(b, t, accountRecorder) - stream.replay(b, t, accountNothing))
		t.part.Store(nil)
		added[round] = perRequest(with - stream.replay(b, t, accountNone))
		t.part.Store(curves)
	}
	slices.Sort(added)
	slices.Sort(recorder)
	return accountingCosts{curves: added[accountingRounds/2], recorder: recorder[accountingRounds/2]}
}

// BenchmarkAccountingStream is the in-process half of BenchmarkCurveAccounting alone: the CPU
// time per request of the accounting on accountingStream, the curve state's
// ("curve-cpu-ns/op") and the recorder's ("recorder-cpu-ns/op"), medians of accountingRounds.
func BenchmarkAccountingStream(b *testing.B) {
	for _, protocol := range []Protocol{Redis, Memcached} {
		b.Run(string(protocol), func(b *testing.B) {
			stream := newAccountingStream(protocol)
			b.ResetTimer()
			var costs accountingCosts
			for range b.N {
				costs = measureAccounting(b, stream)
			}
			stream.report(b, costs)
		})
	}
}

// report reports costs and the stream's shape.
func (s *accountingStream) report(b *testing.B, costs accountingCosts) {
	b.ReportMetric(costs.curves, "curve-cpu-ns/op")
	b.ReportMetric(costs.recorder, "recorder-cpu-ns/op")
	b.ReportMetric(float64(2*len(s.steps)-s.requests)/float64(len(s.steps)), "stream-hit-ratio")
}
