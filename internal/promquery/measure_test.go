package promquery_test

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// within reports whether got is within frac of want.
func within(got, want, frac float64) bool {
	return math.Abs(got-want) <= frac*math.Abs(want)
}

// TestMeasureAgainstPrometheus scrapes two real exporters (two nodes, two tenants) with a
// real Prometheus and checks that Measure reads back the rates, hit ratios, latencies and
// curves the exporters replay; then stops Prometheus and checks the error.
func TestMeasureAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	nodeA, nodeB := promtest.NewSidecar(t, "node-a"), promtest.NewSidecar(t, "node-b")
	web := promtest.Traffic{RequestsPerSecond: 200, HitRatio: 0.8, BytesInPerSecond: 20000, BytesOutPerSecond: 60000,
		HitLatency: 300 * time.Microsecond, MissLatency: 3 * time.Millisecond}
	nodeA.SetTraffic("shop/web", web)
	nodeB.SetTraffic("shop/web", web)
	nodeA.SetTraffic("ads/batch", promtest.Traffic{RequestsPerSecond: 100, HitRatio: 0.5, BytesInPerSecond: 1000, BytesOutPerSecond: 1000,
		HitLatency: 200 * time.Microsecond, MissLatency: time.Millisecond, ThrottledPerSecond: 10})
	nodeA.SetCurve("shop/web", []promquery.CurvePoint{{SizeBytes: 1 << 20, HitRatio: 0.3}, {SizeBytes: 1 << 30, HitRatio: 0.9}})
	nodeA.SetCurveCheck("shop/web", promquery.CurveCheck{Predicted: 0.8, Achieved: 0.7, SampledReads: 300})
	nodeB.SetCurveCheck("shop/web", promquery.CurveCheck{Predicted: 0.6, Achieved: 0.6, SampledReads: 100})
	for _, s := range []*promtest.Sidecar{nodeA, nodeB} {
		s.SetPlanGeneration(1)
	}
	prom := promtest.Start(t, []string{nodeA.Address(), nodeB.Address()}, time.Second)
	// rate() reads the configured rates once every series spans more than the window.
	prom.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 7`, 3, 30*time.Second)

	client, err := promquery.New(prom.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := promquery.Measure(ctx, client, promquery.Scope{Nodes: []string{"node-a", "node-b"}, Window: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Problems) != 0 {
		t.Errorf("problems: %v", m.Problems)
	}
	for _, node := range []string{"node-a", "node-b"} {
		if age, ok := m.NodeSampleAge[node]; !ok || age < 0 || age > 5*time.Second {
			t.Errorf("sample age of %s = %v (reported %v)", node, age, ok)
		}
	}
	webM, batchM := m.Tenants["shop/web"], m.Tenants["ads/batch"]
	if webM == nil || batchM == nil {
		t.Fatalf("tenants measured: %v", m.Tenants)
	}
	if got := webM.RequestsPerSecond(); !within(got, 400, 0.15) {
		t.Errorf("shop/web requests %v/s, want ~400", got)
	}
	if got := webM.Nodes["node-a"].BytesPerSecond; !within(got, 80000, 0.15) {
		t.Errorf("shop/web bytes on node-a %v/s, want ~80000", got)
	}
	if h, ok := webM.HitRatio(); !ok || !within(h, 0.8, 0.03) {
		t.Errorf("shop/web hit ratio %v (%v), want ~0.8", h, ok)
	}
	if got := batchM.ThrottledPerSecond; !within(got, 10, 0.2) {
		t.Errorf("ads/batch throttled %v/s, want ~10", got)
	}
	if _, ok := batchM.Nodes["node-b"]; ok {
		t.Error("ads/batch measured on node-b where it has no traffic")
	}
	mean, ok := webM.MeanLatency()
	if wantMean := 0.8*300e-6 + 0.2*3e-3; !ok || !within(mean, wantMean, 0.1) {
		t.Errorf("shop/web mean latency %v (%v), want ~%v", mean, ok, wantMean)
	}
	hit, miss, ok := webM.HitMissLatency()
	if !ok || hit > 500e-6 || miss < 2e-3 {
		t.Errorf("shop/web hit/miss latency %v/%v (%v), want a fast hit and a slow miss", hit, miss, ok)
	}
	if p99, ok := webM.LatencyQuantile(0.99); !ok || p99 < 2e-3 || p99 > 6.4e-3 {
		t.Errorf("shop/web p99 %v (%v), want in the miss bucket", p99, ok)
	}
	curve := webM.Nodes["node-a"].Curve
	if len(curve) != 2 || curve[0] != (promquery.CurvePoint{SizeBytes: 1 << 20, HitRatio: 0.3}) || curve[1].SizeBytes != 1<<30 {
		t.Errorf("shop/web curve on node-a = %v", curve)
	}
	// The curve checks of both partitions, weighted by their sampled reads.
	if c, ok := webM.CurveCheck(); !ok || !within(c.Predicted, 0.75, 1e-9) || !within(c.Achieved, 0.675, 1e-9) || c.SampledReads != 400 {
		t.Errorf("shop/web curve check %+v (%v), want predicted 0.75, achieved 0.675 over 400 reads", c, ok)
	}
	if _, ok := batchM.CurveCheck(); ok {
		t.Error("ads/batch has a curve check although its sidecar exports none")
	}

	// Only the nodes in scope are read.
	onlyB, err := promquery.Measure(ctx, client, promquery.Scope{Nodes: []string{"node-b"}, Window: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := onlyB.Tenants["ads/batch"]; ok {
		t.Error("a tenant of node-a was measured when only node-b was in scope")
	}

	prom.Stop()
	_, err = promquery.Measure(ctx, client, promquery.Scope{Nodes: []string{"node-a"}, Window: 4 * time.Second})
	// A kept-alive connection that the stopped server closed reads EOF; a new one is refused.
	connectionLost := err != nil && (strings.Contains(err.Error(), "connect") || errors.Is(err, io.EOF))
	if !connectionLost {
		t.Fatalf("error with Prometheus stopped = %v, want a connection error", err)
	}
}

func TestMeasureRejectsEmptyScope(t *testing.T) {
	client, err := promquery.New("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := promquery.Measure(context.Background(), client, promquery.Scope{Window: time.Second}); err == nil {
		t.Error("measured without nodes")
	}
	if _, err := promquery.Measure(context.Background(), client, promquery.Scope{Nodes: []string{"a"}}); err == nil {
		t.Error("measured without a window")
	}
}
