package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/plot"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// accuracyTrace is a workload the curve's prediction is checked on, at partition sizes (MiB)
// per engine below the trace's footprint.
type accuracyTrace struct {
	name string
	spec string
	// warmup accesses come before the measured window, and warmupPerMiB more per MiB of the
	// partition: enough misses to fill it.
	warmup, warmupPerMiB int
	measure              int
	// readsPerSecondPerMiB paces the clients, in proportion to the partition size: redis
	// orders keys for eviction by a clock of 1-second resolution, so a cache that turns over
	// within a second or two evicts nearly at random. Real partitions turn over in minutes;
	// this pace makes the test's turn over in about 5 seconds.
	readsPerSecondPerMiB float64
	sizes                map[Protocol][]int64
	// tolerance bounds |prediction - achieved|; 0: a loop, where only the side of the cliff
	// must match (both above or both below 0.5).
	tolerance float64
}

var accuracyTraces = []accuracyTrace{
	{name: "zipf-0.7", spec: "zipf:keys=40000,skew=0.7,value=200,prefix=z:", warmup: 60000, measure: 60000, readsPerSecondPerMiB: 1500,
		sizes: map[Protocol][]int64{Redis: {4, 6, 9}, Memcached: {4, 6, 9}}, tolerance: 0.02},
	{name: "zipf-1.0", spec: "zipf:keys=40000,skew=1.0,value=200,prefix=z:", warmup: 60000, measure: 60000, readsPerSecondPerMiB: 3000,
		sizes: map[Protocol][]int64{Redis: {2, 3, 4}, Memcached: {2, 3, 4}}, tolerance: 0.02},
	// The loop takes about 6 MiB in either engine: three sizes below its cliff and one above.
	{name: "loop", spec: "loop:keys=20000,value=200,prefix=l:", warmup: 40000, measure: 40000, readsPerSecondPerMiB: 1000,
		sizes: map[Protocol][]int64{Redis: {2, 3, 5, 10}, Memcached: {2, 3, 5, 10}}},
	{name: "mixed", spec: "phase:4@zipf:keys=20000,skew=0.9,value=200,prefix=h:;1@scan:keys=100000000,value=100-4000,prefix=s:",
		warmup: 100000, warmupPerMiB: 3000, measure: 60000, readsPerSecondPerMiB: 1000,
		// memcached keeps one LRU per slab class, over the pages each class got: the scans'
		// values span 15 classes, and with one or two pages a class (16-24 MiB) the hot keys'
		// class holds far fewer of them than one LRU would (0.05-0.09 below the curve).
		sizes: map[Protocol][]int64{Redis: {6, 10, 16}, Memcached: {32, 48, 64}}, tolerance: 0.03},
}

// TestCurvePredictsEngine replays traces through the proxy onto a real redis-server and a real
// memcached that evict, with look-aside clients (GET, then SET on a miss), and checks that the
// partition's curve read at the partition's own limit predicts the hit ratio the clients saw
// after warm-up. The cases run in parallel: paced clients mostly wait.
func TestCurvePredictsEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("replays traces on real engines")
	}
	var mu sync.Mutex
	var results []accuracyResult
	t.Run("cases", func(t *testing.T) {
		for _, protocol := range []Protocol{Redis, Memcached} {
			for _, tr := range accuracyTraces {
				for _, mib := range tr.sizes[protocol] {
					t.Run(fmt.Sprintf("%s/%s/%dMiB", protocol, tr.name, mib), func(t *testing.T) {
						t.Parallel()
						predicted, achieved := replayAside(t, protocol, tr, mib<<20)
						t.Logf("ACCURACY engine=%s trace=%s size=%dMiB predicted=%.4f achieved=%.4f error=%+.4f",
							protocol, tr.name, mib, predicted, achieved, predicted-achieved)
						switch {
						case tr.tolerance == 0 && (predicted > 0.5) != (achieved > 0.5):
							t.Errorf("predicted %.4f and achieved %.4f on different sides of the cliff", predicted, achieved)
						case tr.tolerance > 0 && math.Abs(predicted-achieved) > tr.tolerance:
							t.Errorf("predicted %.4f, achieved %.4f: off by more than %.2f", predicted, achieved, tr.tolerance)
						}
						mu.Lock()
						results = append(results, accuracyResult{protocol, tr.name, mib, predicted, achieved})
						mu.Unlock()
					})
				}
			}
		}
	})
	if *accuracyPlot != "" {
		if err := plotAccuracy(*accuracyPlot, results); err != nil {
			t.Error(err)
		}
	}
}

// accuracyPlot is where TestCurvePredictsEngine draws its results, when set.
var accuracyPlot = flag.String("accuracy-plot", "", "directory for TestCurvePredictsEngine's charts of predicted and achieved hit ratios")

// accuracyResult is one case of TestCurvePredictsEngine.
type accuracyResult struct {
	protocol            Protocol
	trace               string
	mib                 int64
	predicted, achieved float64
}

// plotAccuracy draws, per engine, each trace's predicted and achieved hit ratio against the
// partition size, into dir/mrc-accuracy-<engine>.png.
func plotAccuracy(dir string, results []accuracyResult) error {
	slices.SortFunc(results, func(a, b accuracyResult) int { return cmp.Compare(a.mib, b.mib) })
	for _, protocol := range []Protocol{Redis, Memcached} {
		chart := plot.Lines{Title: string(protocol) + ": the curve at each partition limit, and the hit ratio achieved there",
			XLabel: "partition limit (MiB)", YLabel: "hit ratio"}
		for _, tr := range accuracyTraces {
			predicted := plot.Series{Name: tr.name + " curve"}
			achieved := plot.Series{Name: tr.name + " achieved"}
			for _, r := range results {
				if r.protocol == protocol && r.trace == tr.name {
					predicted.X, predicted.Y = append(predicted.X, float64(r.mib)), append(predicted.Y, r.predicted)
					achieved.X, achieved.Y = append(achieved.X, float64(r.mib)), append(achieved.Y, r.achieved)
				}
			}
			chart.Series = append(chart.Series, predicted, achieved)
		}
		f, err := os.Create(filepath.Join(dir, "mrc-accuracy-"+string(protocol)+".png"))
		if err != nil {
			return err
		}
		if err := chart.WritePNG(f, 900, 500); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// replayAside runs tr on a fresh engine of limit bytes behind a proxy and returns the curve's
// prediction at limit and the clients' hit ratio, both over the accesses after warm-up.
func replayAside(t *testing.T, protocol Protocol, tr accuracyTrace, limit int64) (predicted, achieved float64) {
	var engineSocket string
	if protocol == Redis {
		engineSocket = startEngine(t, protocol, "--maxmemory", strconv.FormatInt(limit, 10), "--maxmemory-policy", "allkeys-lru")
	} else {
		engineSocket = startEngine(t, protocol, "-m", strconv.FormatInt(limit>>20, 10))
	}
	acct := newAccount(t, "team-a/cache")
	n := startNode(t, "node-a", Options{Protocol: protocol, MRCCalibrationInterval: 100 * time.Millisecond})
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engineSocket, LocalPartitionBytes: limit,
		Routes: []Route{n.route(1)}})
	spec, err := workload.ParseSpec(tr.spec)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := workload.New(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := newAsideClient(t, protocol, n, acct)
	c.readsPerSecond = tr.readsPerSecondPerMiB * float64(limit) / (1 << 20)
	c.run(gen, tr.warmup+tr.warmupPerMiB*int(limit>>20))
	ps := (*n.p.tenants.Load())[acct.id].part.Load()
	if err := ps.curves.Tracker().Decay(0); err != nil { // the measured window starts now
		t.Fatal(err)
	}
	reads, hits := c.run(gen, tr.measure)
	curve := ps.curves.Tracker().SnapshotAt([]int64{limit}, ps.curves.Model().Capacity)
	if math.Abs(curve.AchievedHitRatio-float64(hits)/float64(reads)) > 1e-9 {
		t.Errorf("the proxy counted a hit ratio of %.4f, the clients %.4f", curve.AchievedHitRatio, float64(hits)/float64(reads))
	}
	stats, err := n.p.engineStats(t.Context(), ps)
	if err != nil {
		t.Fatal(err)
	}
	// Below the footprint means evicting; only a partition the curve says holds everything
	// (the loop above its cliff) may evict nothing.
	if stats.Evictions == 0 && curve.HitRatio[0] < 0.99 {
		t.Errorf("the engine evicted nothing at %.4f predicted: the partition is not below the trace's footprint", curve.HitRatio[0])
	}
	return curve.HitRatio[0], float64(hits) / float64(reads)
}

// asideBatch is how many reads a look-aside client pipelines before writing their misses.
const asideBatch = 32

// asideClient is a look-aside cache client: it reads a batch of keys and writes the ones that
// missed.
type asideClient struct {
	t        *testing.T
	protocol Protocol
	nc       net.Conn
	br       *bufio.Reader
	rr       *resp.ReplyReader
	out      []byte
	value    []byte
	// readsPerSecond paces the reads.
	readsPerSecond float64
}

func newAsideClient(t *testing.T, protocol Protocol, n *testNode, acct account) *asideClient {
	c := &asideClient{t: t, protocol: protocol}
	if protocol == Redis {
		rc := loginRESP(t, n, acct)
		c.nc, c.br, c.rr = rc.nc, rc.br, rc.rr
	} else {
		mc := loginMC(t, n, acct)
		c.nc, c.br = mc.nc, mc.br
	}
	return c
}

// run makes count reads drawn from gen and returns how many found their key.
func (c *asideClient) run(gen workload.Generator, count int) (reads, hits int) {
	batch := make([]workload.Access, 0, asideBatch)
	began := time.Now()
	for reads < count {
		if ahead := time.Duration(float64(reads)/c.readsPerSecond*float64(time.Second)) - time.Since(began); ahead > 0 {
			time.Sleep(ahead)
		}
		batch = batch[:0]
		for len(batch) < asideBatch && reads+len(batch) < count {
			batch = append(batch, gen.Next())
		}
		c.out = c.out[:0]
		for _, a := range batch {
			c.appendGet(a.Key)
		}
		c.flush()
		missed := batch[:0:0]
		for _, a := range batch {
			if c.readGet() {
				hits++
			} else {
				missed = append(missed, a)
			}
		}
		reads += len(batch)
		c.out = c.out[:0]
		for _, a := range missed {
			c.appendSet(a.Key, int(a.Size))
		}
		c.flush()
		for range missed {
			c.readSet()
		}
	}
	return reads, hits
}

func (c *asideClient) appendGet(key string) {
	if c.protocol == Redis {
		c.out = resp.AppendCommandStrings(c.out, "GET", key)
	} else {
		c.out = append(append(append(c.out, "get "...), key...), "\r\n"...)
	}
}

func (c *asideClient) appendSet(key string, size int) {
	if len(c.value) < size {
		c.value = bytes.Repeat([]byte{'v'}, size)
	}
	if c.protocol == Redis {
		c.out = resp.AppendCommand(c.out, [][]byte{[]byte("SET"), []byte(key), c.value[:size]})
	} else {
		c.out = fmt.Appendf(c.out, "set %s 0 0 %d\r\n", key, size)
		c.out = append(append(c.out, c.value[:size]...), "\r\n"...)
	}
}

func (c *asideClient) flush() {
	c.nc.SetWriteDeadline(time.Now().Add(testIOTimeout))
	if _, err := c.nc.Write(c.out); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// readGet reads a read's reply and tells whether it found the key.
func (c *asideClient) readGet() bool {
	c.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
	if c.protocol == Redis {
		reply, err := c.rr.ReadReply()
		if err != nil {
			c.t.Fatalf("read GET reply: %v", err)
		}
		if reply.IsError() {
			c.t.Fatalf("GET: %s", reply.Raw())
		}
		return !bytes.HasPrefix(reply.Raw(), []byte("$-1"))
	}
	found := false
	for {
		line := c.line()
		if line == "END" {
			return found
		}
		fields := strings.Fields(line)
		if len(fields) != 4 || fields[0] != "VALUE" {
			c.t.Fatalf("get: unexpected %q", line)
		}
		size, _ := strconv.Atoi(fields[3])
		if _, err := io.CopyN(io.Discard, c.br, int64(size)+2); err != nil {
			c.t.Fatal(err)
		}
		found = true
	}
}

func (c *asideClient) readSet() {
	c.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
	if c.protocol == Redis {
		reply, err := c.rr.ReadReply()
		if err != nil || string(reply.Raw()) != "+OK\r\n" {
			c.t.Fatalf("SET: %q, %v", reply.Raw(), err)
		}
		return
	}
	if line := c.line(); line != "STORED" {
		c.t.Fatalf("set: %q", line)
	}
}

func (c *asideClient) line() string {
	line, err := protocol.AppendLine(c.br, nil, 1<<20)
	if err != nil {
		c.t.Fatalf("read line: %v", err)
	}
	return string(protocol.TrimEOL(line))
}
