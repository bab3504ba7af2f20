package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
)

// agentMetrics exports what the agent learned in its last pass: the applied plan generation
// and each local partition's engine numbers. It is a collector over that snapshot rather
// than gauges set in place, so a partition that left the node leaves /metrics with it. (The
// proxy exports the engines' eviction counters, read at scrape time.)
type agentMetrics struct {
	planGeneration *prometheus.Desc
	limitBytes     *prometheus.Desc
	usedBytes      *prometheus.Desc

	mu         sync.Mutex
	generation int64
	stats      map[string]engine.Stats
}

func newAgentMetrics(node string) *agentMetrics {
	constLabels := prometheus.Labels{"node": node}
	tenant := []string{"tenant"}
	return &agentMetrics{
		planGeneration: prometheus.NewDesc("cacheqos_sidecar_plan_generation",
			"The CacheNodePlan generation the sidecar has applied.", nil, constLabels),
		limitBytes: prometheus.NewDesc("cacheqos_sidecar_partition_limit_bytes",
			"Memory limit the local engine enforces.", tenant, constLabels),
		usedBytes: prometheus.NewDesc("cacheqos_sidecar_partition_used_bytes",
			"Memory the local engine uses.", tenant, constLabels),
	}
}

// observe replaces the snapshot.
func (m *agentMetrics) observe(generation int64, stats map[string]engine.Stats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.generation = generation
	m.stats = stats
}

// Describe implements prometheus.Collector.
func (m *agentMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.planGeneration
	ch <- m.limitBytes
	ch <- m.usedBytes
}

// Collect implements prometheus.Collector.
func (m *agentMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.planGeneration, prometheus.GaugeValue, float64(m.generation))
	for tenant, s := range m.stats {
		ch <- prometheus.MustNewConstMetric(m.limitBytes, prometheus.GaugeValue, float64(s.LimitBytes), tenant)
		ch <- prometheus.MustNewConstMetric(m.usedBytes, prometheus.GaugeValue, float64(s.UsedBytes), tenant)
	}
}
