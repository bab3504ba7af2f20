package loadgen

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// errorKind classifies failures; see the package documentation.
type errorKind int

const (
	errAuth errorKind = iota
	errConnect
	errReply
	errIO
	numErrorKinds
)

var errorKindNames = [numErrorKinds]string{errAuth: "auth", errConnect: "connect", errReply: "reply", errIO: "io"}

func (k errorKind) String() string { return errorKindNames[k] }

// tenantStats are a tenant's cumulative counts, updated by its connections without locks and
// read by the reporter and the Prometheus collector.
type tenantStats struct {
	ops         atomic.Uint64 // accesses completed: a GET or a write SET got its reply
	gets        atomic.Uint64
	hits        atomic.Uint64
	misses      atomic.Uint64
	sets        atomic.Uint64 // fills after a miss and writes
	throttled   atomic.Uint64
	errors      [numErrorKinds]atomic.Uint64
	connections atomic.Int64 // connections open (authenticated) now
	latency     liveHistogram
	lastError   atomic.Pointer[string]

	getSeconds, setSeconds prometheus.Observer
}

// counts is a snapshot of a tenant's cumulative counters.
type counts struct {
	ops, gets, hits, misses, sets, throttled uint64
	errors                                   [numErrorKinds]uint64
}

func (s *tenantStats) snapshot() counts {
	c := counts{
		ops: s.ops.Load(), gets: s.gets.Load(), hits: s.hits.Load(), misses: s.misses.Load(),
		sets: s.sets.Load(), throttled: s.throttled.Load(),
	}
	for k := range c.errors {
		c.errors[k] = s.errors[k].Load()
	}
	return c
}

// minus returns the counts of the interval from prev to c.
func (c counts) minus(prev counts) counts {
	d := counts{
		ops: c.ops - prev.ops, gets: c.gets - prev.gets, hits: c.hits - prev.hits, misses: c.misses - prev.misses,
		sets: c.sets - prev.sets, throttled: c.throttled - prev.throttled,
	}
	for k := range d.errors {
		d.errors[k] = c.errors[k] - prev.errors[k]
	}
	return d
}

func (c counts) totalErrors() uint64 {
	var n uint64
	for _, e := range c.errors {
		n += e
	}
	return n
}

// hitRatio is hits / (hits + misses); ok is false without reads.
func (c counts) hitRatio() (float64, bool) {
	if c.hits+c.misses == 0 {
		return 0, false
	}
	return float64(c.hits) / float64(c.hits+c.misses), true
}

func (s *tenantStats) fail(kind errorKind, err error) {
	s.errors[kind].Add(1)
	msg := kind.String() + ": " + err.Error()
	s.lastError.Store(&msg)
}

// takeLastError returns the last error recorded since the previous call.
func (s *tenantStats) takeLastError() string {
	if p := s.lastError.Swap(nil); p != nil {
		return *p
	}
	return ""
}

// observe records a request's latency.
func (s *tenantStats) observe(op opKind, d time.Duration) {
	s.latency.record(d)
	if op == opGet {
		s.getSeconds.Observe(d.Seconds())
	} else {
		s.setSeconds.Observe(d.Seconds())
	}
}

// Metric names (all with a tenant label).
const (
	metricPrefix = "cacheqos_loadgen_"
	// MetricRequestSeconds is the latency histogram, labelled op="get" or op="set".
	MetricRequestSeconds = metricPrefix + "request_duration_seconds"
)

var (
	descOps = prometheus.NewDesc(metricPrefix+"operations_total",
		"Accesses completed (a GET, or a SET for the write fraction, got its reply).", []string{"tenant"}, nil)
	descRequests = prometheus.NewDesc(metricPrefix+"requests_total",
		"Requests that got a reply or failed, by op (get, or set: fills after a miss and writes).", []string{"tenant", "op"}, nil)
	descHits = prometheus.NewDesc(metricPrefix+"hits_total",
		"GETs that found a value.", []string{"tenant"}, nil)
	descMisses = prometheus.NewDesc(metricPrefix+"misses_total",
		"GETs that found none (each followed by a fill SET).", []string{"tenant"}, nil)
	descThrottled = prometheus.NewDesc(metricPrefix+"throttled_total",
		"Requests the sidecar proxy refused as throttled.", []string{"tenant"}, nil)
	descErrors = prometheus.NewDesc(metricPrefix+"errors_total",
		"Failures by kind: auth, connect, reply (other error replies), io (timeouts, malformed replies, requests lost with their connection).",
		[]string{"tenant", "kind"}, nil)
	descConnections = prometheus.NewDesc(metricPrefix+"connections",
		"Connections open and authenticated.", []string{"tenant"}, nil)
	descTargetRate = prometheus.NewDesc(metricPrefix+"target_rate",
		"Configured target accesses per second (0: as fast as possible).", []string{"tenant"}, nil)
)

// collector exports the tenants' cumulative counters.
type collector struct {
	tenants []*tenantRun
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOps, descRequests, descHits, descMisses, descThrottled, descErrors, descConnections, descTargetRate} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, tr := range c.tenants {
		id, s := tr.id, tr.stats.snapshot()
		counter(descOps, s.ops, id)
		counter(descRequests, s.gets, id, "get")
		counter(descRequests, s.sets, id, "set")
		counter(descHits, s.hits, id)
		counter(descMisses, s.misses, id)
		counter(descThrottled, s.throttled, id)
		for k, n := range s.errors {
			counter(descErrors, n, id, errorKind(k).String())
		}
		ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(tr.stats.connections.Load()), id)
		ch <- prometheus.MustNewConstMetric(descTargetRate, prometheus.GaugeValue, tr.rate, id)
	}
}

// latencyBuckets span a local engine's tens of microseconds to the proxy's throttle wait and
// the request timeout.
var latencyBuckets = []float64{
	25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10,
}

func newLatencyVec() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricRequestSeconds,
		Help:    "Request latency from write to reply, by op (get, set).",
		Buckets: latencyBuckets,
	}, []string{"tenant", "op"})
}
