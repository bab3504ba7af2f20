package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
	cpu0 := processCPU(b)
	directTime := timeClients(b, direct, ops)
	cpu1 := processCPU(b)
	proxyTime := timeClients(b, proxied, ops)
	cpu2 := processCPU(b)
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
func dialProxy(b *testing.B, protocol Protocol, socket string, acct account) net.Conn {
	if protocol == Redis {
		c := dialRESP(b, "unix", socket)
		if got := c.do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
			b.Fatalf("AUTH: %q", got)
		}
		return c.nc
	}
	return loginMCOn(b, "unix", socket, acct).nc
}

// BenchmarkCurveAccounting measures the proxy's CPU per request with the miss-ratio curve's
// accounting (true sizes, engine bytes, tracker, ghost list) and without it, in the same run:
// two tenants on one proxy, identical but for the second having its curve state removed. The
// proxy runs in a process of its own (TestCurveAccountingProxyProcess), which reports its CPU
// time between phases, so the clients' CPU, several times the proxy's, adds none of its noise.
// Each round serves the two tenants in alternating order and yields one ratio of the proxy's
// CPU per request with the accounting to without; the median of the rounds is "x-proxy-cpu",
// their quartiles "x-proxy-cpu-p25" and "x-proxy-cpu-p75", so a noisy machine shows as spread.
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
	b.ReportMetric(float64(cpuOn)/total, "proxy-cpu-ns/op-curves")
	b.ReportMetric(float64(cpuOff)/total, "proxy-cpu-ns/op-none")
	slices.Sort(ratios)
	b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2, "x-proxy-cpu")
	b.ReportMetric(ratios[rounds/4], "x-proxy-cpu-p25")
	b.ReportMetric(ratios[rounds-1-rounds/4], "x-proxy-cpu-p75")
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
		fmt.Println(int64(processCPU(t)))
	}
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadWriteAccounting is the accounting of one look-aside pair (a read that hits and
// a write of the same key) alone, on a tenant with a local partition ("curves") and on the
// same tenant with its curve state removed ("none", the hit and value-size counters every
// tenant keeps): the part of the proxy's CPU per request the miss-ratio curve adds, without
// the noise of the whole request path.
func BenchmarkReadWriteAccounting(b *testing.B) {
	for _, curves := range []bool{true, false} {
		name := "none"
		if curves {
			name = "curves"
		}
		b.Run(name, func(b *testing.B) {
			acct := newAccount(b, "team-a/cache")
			n, _ := singleNode(b, Redis, acct, Options{})
			t := (*n.p.tenants.Load())[acct.id]
			if ps := t.part.Load(); !curves && ps != nil {
				t.part.Store(nil)
				ps.stop()
			}
			hashes := make([]uint64, 1024)
			for i := range hashes {
				hashes[i], _ = keyHashes([]byte("key:" + strconv.Itoa(i)))
			}
			i := 0
			cpu0 := processCPU(b)
			for b.Loop() {
				h := hashes[i&(len(hashes)-1)]
				t.recordRead(h, true, 8, 100)
				t.recordWrite(h, 8, 100)
				i++
			}
			// CPU time per pair: on a loaded machine steadier than ns/op, which counts waits
			// for a core.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
