package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/protocol"
)

// numClasses is the number of command classes (protocol.Class values).
const numClasses = int(protocol.ClassAdmin) + 1

// latencyBuckets are the upper bounds of the request latency histogram, in seconds: few, so the
// histogram stays a small part of a tenant's series, spread from a pipelined cache hit to a
// request that waited for its tenant's tokens.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.025, 0.1, 1}

// latencyHistogram is a fixed-bucket histogram updated with atomics.
type latencyHistogram struct {
	counts   [9]atomic.Uint64 // len(latencyBuckets) + the +Inf bucket
	sumNanos atomic.Uint64
}

// bucketNanos are latencyBuckets in nanoseconds.
var bucketNanos = func() []int64 {
	out := make([]int64, len(latencyBuckets))
	for i, b := range latencyBuckets {
		out[i] = int64(b * 1e9)
	}
	return out
}()

func (h *latencyHistogram) observe(d time.Duration) {
	i := 0
	for i < len(bucketNanos) && int64(d) > bucketNanos[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNanos.Add(uint64(max(d, 0)))
}

func (h *latencyHistogram) snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(latencyBuckets))
	for i, b := range latencyBuckets {
		count += h.counts[i].Load()
		buckets[b] = count
	}
	count += h.counts[len(latencyBuckets)].Load()
	return count, float64(h.sumNanos.Load()) / 1e9, buckets
}

// tenantStats are a tenant's counters on this node. Ingress counters (requests, latency,
// connections, forwarded, auth failures) count where clients connect; serving counters (served,
// hits, misses, bytes, ghost hits, throttling) count where the partition that serves the
// request lives, whichever node the client connected to.
type tenantStats struct {
	requests                [numClasses]atomic.Uint64
	served, hits, misses    atomic.Uint64
	bytesIn, bytesOut       atomic.Uint64
	ghostHits, authFailures atomic.Uint64
	connections             atomic.Int64
	latency                 latencyHistogram
	peersMu                 sync.Mutex
	peers                   map[string]*peerStats // by peer node
}

// peerStats are a tenant's counters of one peer node, where its clients connect.
type peerStats struct {
	forwarded atomic.Uint64
	// unreachableMisses and unreachableErrors count the requests for the peer answered without
	// it (peerUnreachableError: it could not be reached, or it closed the link they were sent
	// on) as misses (plain reads) or with the error.
	unreachableMisses, unreachableErrors atomic.Uint64
	// rerouted counts the keys of requests routed to another node while this sidecar ejected
	// the peer (eject.go).
	rerouted atomic.Uint64
}

func (s *tenantStats) init() { s.peers = make(map[string]*peerStats) }

// peer returns the counters of a peer node.
func (s *tenantStats) peer(node string) *peerStats {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	c := s.peers[node]
	if c == nil {
		c = new(peerStats)
		s.peers[node] = c
	}
	return c
}

// forwardedTo returns the counter of requests forwarded to a peer node.
func (s *tenantStats) forwardedTo(node string) *atomic.Uint64 { return &s.peer(node).forwarded }

// countUnreachable counts a request answered without its node because err says the node is
// unreachable (see peerUnreachableError), as a miss or with the error; it reports whether
// err says so.
func (s *tenantStats) countUnreachable(err error, miss bool) bool {
	node, ok := unreachablePeer(err)
	if !ok {
		return false
	}
	if c := s.peer(node); miss {
		c.unreachableMisses.Add(1)
	} else {
		c.unreachableErrors.Add(1)
	}
	return true
}

// proxyStats are the proxy's counters that belong to no tenant.
type proxyStats struct {
	unauthenticated     atomic.Int64
	protocolErrors      atomic.Uint64
	authFailuresUnknown atomic.Uint64
	authBackoffRefusals atomic.Uint64
	connectionsRejected atomic.Uint64
	// replyBytes is what the proxy holds of all connections' replies (Options.MaxReplyBytesInFlight).
	replyBytes atomic.Int64
}

// The outcomes of cacheqos_sidecar_peer_unreachable_total.
const (
	outcomeMiss     = "miss"
	outcomeError    = "error"
	outcomeRerouted = "rerouted"
)

// unknownTenant labels authentication failures for a user name that is no tenant: the claimed
// name itself must not become a label value, or anyone could create series at will.
const unknownTenant = "unknown"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("cacheqos_sidecar_"+name, help, labels, nil)
}

// The metrics. A tenant's series exist on a node only while it holds a partition of the tenant
// or the tenant's clients use the node; with the default 12 curve sizes they are:
//   - ingress, on any node a client of the tenant uses: requests 5 (one per class) + latency
//     histogram 11 (8 buckets, +Inf, sum, count) + connections 1 + auth failures 1 +
//     forwarded requests P (one per peer node the tenant's keys are forwarded to) + requests
//     for unreachable peers 3U (three outcomes per peer found unreachable, or closing a link
//     with requests due, since the tenant's series appeared) = 18 + P + 3U;
//   - serving, on a node holding a partition: served 1 + hits 1 + misses 1 + bytes 2 +
//     throttled, refused and waited seconds 3 + ghost hits 1 + evictions 1 + curve hit ratios
//     (16 by default, at most 64) + predicted and achieved hit ratio 2 + sampling rate,
//     tracked keys, sampled accesses, footprint 4 + engine bytes per object 1 = 34.
//
// So 52 + P + 3U series per tenant-partition with the default 16 curve points, under the budget of
// ~100.
var (
	descRequests = desc("requests_total",
		"Requests received from the tenant's clients on this node, by command class.", "tenant", "class")
	descServed = desc("served_requests_total",
		"Requests served by the tenant's partition on this node, from local clients and peer sidecars.", "tenant")
	descHits = desc("hits_total",
		"Reads served by the tenant's partition on this node that found their key (per key for multi-key reads).", "tenant")
	descMisses = desc("misses_total",
		"Reads served by the tenant's partition on this node that did not find their key.", "tenant")
	descBytesIn = desc("bytes_in_total",
		"Request bytes sent to the tenant's partition on this node.", "tenant")
	descBytesOut = desc("bytes_out_total",
		"Reply bytes from the tenant's partition on this node.", "tenant")
	descLatency = desc("request_duration_seconds",
		"Time from reading a request of the tenant's client on this node to queueing its reply.", "tenant")
	descThrottled = desc("throttled_requests_total",
		"Requests for the tenant's partition on this node its limits held back: delayed for tokens, or refused.", "tenant")
	descRefused = desc("refused_requests_total",
		"Requests for the tenant's partition on this node refused because they would have waited too long for tokens.", "tenant")
	descThrottleSeconds = desc("throttled_seconds_total",
		"Time requests for the tenant's partition on this node spent waiting for tokens.", "tenant")
	descConnections = desc("connections",
		"Client connections authenticated as the tenant on this node.", "tenant")
	descForwarded = desc("forwarded_requests_total",
		"Requests of the tenant's clients on this node forwarded to the partition on a peer node.", "tenant", "peer")
	descPeerUnreachable = desc("peer_unreachable_total",
		"Requests of the tenant's clients on this node for keys a peer node owns answered without it, because it could not be reached (at once unless it had announced a restart, then after the peer retry window) or closed the connection they were sent on: plain reads answered as misses (outcome \""+outcomeMiss+"\"), the others with an error (\""+outcomeError+"\"); and the keys of requests routed to the tenant's other nodes while this sidecar ejected the peer (\""+outcomeRerouted+"\", per key).",
		"tenant", "peer", "outcome")
	descAuthFailures = desc("auth_failures_total",
		"Failed authentications as the tenant on this node (tenant \""+unknownTenant+"\": user names that are no tenant).", "tenant")
	descGhostHits = desc("ghost_hits_total",
		"Reads that missed in the tenant's partition on this node but would have hit in a partition a quarter larger.", "tenant")
	descMRC = desc("mrc_hit_ratio",
		"Estimated hit ratio of the tenant's partition on this node if its memory limit were size_bytes (sampled LRU miss-ratio curve in the engine's bytes).", "tenant", "size_bytes")
	descPredicted = desc("mrc_predicted_hit_ratio",
		"The curve's hit ratio at the partition's current memory limit, over the curve's (decayed) window.", "tenant")
	descAchieved = desc("mrc_achieved_hit_ratio",
		"The hit ratio the partition achieved over the curve's (decayed) window: reads that found their key.", "tenant")
	descSamplingRate = desc("mrc_sampling_rate",
		"Fraction of the tenant's keys the partition's curve samples now (lowered when the tracked keys reach their bound).", "tenant")
	descTrackedKeys = desc("mrc_tracked_keys",
		"Sampled keys whose last access the partition's curve remembers.", "tenant")
	descSampledAccesses = desc("mrc_sampled_accesses",
		"Sampled reads the partition's curve rests on, over its (decayed) window.", "tenant")
	descFootprint = desc("mrc_footprint_bytes",
		"Estimated engine bytes of every object the tenant stored in the partition (its working set), from the sample.", "tenant")
	descBytesPerObject = desc("engine_bytes_per_object",
		"Memory the local engine spends per stored object beyond its baseline, read at scrape time; it calibrates the curve's sizes.", "tenant")
	descEvictions = desc("evictions_total",
		"Keys the local engine evicted, read from the engine at scrape time.", "tenant")
	descUnauthenticated = desc("unauthenticated_connections",
		"Client connections that have not authenticated.")
	descProtocolErrors = desc("protocol_errors_total",
		"Requests refused as malformed.")
	descAuthBackoffRefusals = desc("auth_backoff_refusals_total",
		"Logins refused unchecked because their source address failed too many in a row and is backing off.")
	descConnectionsRejected = desc("connections_rejected_total",
		"Client connections closed at once because the sidecar had its maximum of client connections open.")
	descReplyBytesInFlight = desc("reply_bytes_in_flight",
		"Reply bytes the sidecar holds: read from engines or peers and not yet taken by the clients.")
	descEjectedPeerWrites = desc("ejected_peer_writes",
		"Keys of the peer node, ejected now, that requests wrote or deleted on the tenants' other nodes meanwhile: deleted from both when the peer is reached again (the series exists while it is ejected).", "peer")
)

// collector exports the proxy's counters at scrape time, so a removed tenant's series vanish
// with it and the request path only touches atomics.
type collector struct{ p *Proxy }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descRequests, descServed, descHits, descMisses, descBytesIn, descBytesOut, descLatency,
		descThrottled, descRefused, descThrottleSeconds, descConnections, descForwarded, descPeerUnreachable, descAuthFailures,
		descGhostHits, descMRC, descPredicted, descAchieved, descSamplingRate, descTrackedKeys,
		descSampledAccesses, descFootprint, descBytesPerObject, descEvictions, descUnauthenticated, descProtocolErrors,
		descAuthBackoffRefusals, descConnectionsRejected, descReplyBytesInFlight, descEjectedPeerWrites,
	} {
		ch <- d
	}
}

// collectCurve exports a partition's curve, at the grid that follows its size and its
// tenant's footprint, and the engine's numbers read now.
func (p *Proxy) collectCurve(ch chan<- prometheus.Metric, id string, ps *partitionState) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	model := ps.curves.Model()
	now := ps.curves.Tracker().SnapshotAt([]int64{max(ps.bytes, 1)}, model.Capacity)
	gauge(descPredicted, now.HitRatio[0], id)
	gauge(descAchieved, now.AchievedHitRatio, id)
	gauge(descSamplingRate, now.SampleRate, id)
	gauge(descTrackedKeys, float64(now.TrackedKeys), id)
	gauge(descSampledAccesses, now.SampledAccesses, id)
	gauge(descFootprint, now.FootprintBytes, id)
	footprint := int64(now.FootprintBytes) + model.Baseline()
	if grid, err := mrc.PartitionSizes(max(ps.bytes, 1), footprint, p.opts.MRCCurvePoints); err == nil {
		curve := ps.curves.Tracker().SnapshotAt(grid, model.Capacity)
		for i, size := range curve.Sizes {
			gauge(descMRC, curve.HitRatio[i], id, strconv.FormatInt(size, 10))
		}
	}
	if stats, err := p.engineStats(p.ctx, ps); err == nil {
		gauge(descBytesPerObject, bytesPerObject(stats), id)
		ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(stats.Evictions), id)
	} else {
		p.log.Debug("reading the engine's numbers at scrape time", "tenant", id, "err", err)
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for id, t := range *p.tenants.Load() {
		s := &t.stats
		ps := t.part.Load()
		var requests uint64
		for class := range numClasses {
			requests += s.requests[class].Load()
		}
		if ps == nil && requests == 0 && s.connections.Load() == 0 && s.authFailures.Load() == 0 {
			continue
		}
		for class := range numClasses {
			counter(descRequests, s.requests[class].Load(), id, protocol.Class(class).String())
		}
		count, sum, buckets := s.latency.snapshot()
		ch <- prometheus.MustNewConstHistogram(descLatency, count, sum, buckets, id)
		ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(s.connections.Load()), id)
		counter(descAuthFailures, s.authFailures.Load(), id)
		s.peersMu.Lock()
		for node, c := range s.peers {
			counter(descForwarded, c.forwarded.Load(), id, node)
			if misses, errs, rerouted := c.unreachableMisses.Load(), c.unreachableErrors.Load(), c.rerouted.Load(); misses+errs+rerouted > 0 {
				counter(descPeerUnreachable, misses, id, node, outcomeMiss)
				counter(descPeerUnreachable, errs, id, node, outcomeError)
				counter(descPeerUnreachable, rerouted, id, node, outcomeRerouted)
			}
		}
		s.peersMu.Unlock()
		if ps == nil {
			continue
		}
		counter(descServed, s.served.Load(), id)
		counter(descHits, s.hits.Load(), id)
		counter(descMisses, s.misses.Load(), id)
		counter(descBytesIn, s.bytesIn.Load(), id)
		counter(descBytesOut, s.bytesOut.Load(), id)
		limiter := t.limiter.Stats()
		counter(descThrottled, limiter.Delayed+limiter.Throttled, id)
		counter(descRefused, limiter.Throttled, id)
		ch <- prometheus.MustNewConstMetric(descThrottleSeconds, prometheus.CounterValue, limiter.WaitedSeconds, id)
		counter(descGhostHits, s.ghostHits.Load(), id)
		p.collectCurve(ch, id, ps)
	}
	counter(descAuthFailures, p.stats.authFailuresUnknown.Load(), unknownTenant)
	ch <- prometheus.MustNewConstMetric(descUnauthenticated, prometheus.GaugeValue, float64(p.stats.unauthenticated.Load()))
	counter(descProtocolErrors, p.stats.protocolErrors.Load())
	counter(descAuthBackoffRefusals, p.stats.authBackoffRefusals.Load())
	counter(descConnectionsRejected, p.stats.connectionsRejected.Load())
	ch <- prometheus.MustNewConstMetric(descReplyBytesInFlight, prometheus.GaugeValue, float64(p.stats.replyBytes.Load()))
	for node, writes := range p.ejections.snapshot() {
		ch <- prometheus.MustNewConstMetric(descEjectedPeerWrites, prometheus.GaugeValue, float64(writes), node)
	}
}
