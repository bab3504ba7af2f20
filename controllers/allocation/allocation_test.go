package allocation_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

var env *testenv.Env

// operatorOptions allocate soon after changes and report a sidecar that has not applied its
// plan within one interval.
var operatorOptions = controllers.Options{
	Images:     testenv.Images,
	Allocation: allocation.Options{Debounce: 300 * time.Millisecond, ApplyDeadlineIntervals: 1},
}

const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(operatorOptions)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping:", err)
	}
	os.Exit(code)
}

func ctx() context.Context { return context.Background() }

func get(obj client.Object, ns, name string) error {
	return env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// sidecarPod stands in for the DaemonSet pod on node (envtest runs no DaemonSet controller
// or kubelet): the labels the DaemonSet gives its pods, and an address.
func sidecarPod(t *testing.T, ns, cluster, node, ip string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + "-sidecar-" + node, Labels: objects.SidecarLabels(cluster)},
		Spec: corev1.PodSpec{
			NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "sidecar", Image: "test/sidecar:v1"}},
		},
	}
	create(t, p)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(ctx(), p); err != nil {
		t.Fatal(err)
	}
}

// sharedCluster is the CacheCluster "shared" in ns on the nodes labelled pool, planned by
// policy every 5 s from the Prometheus at promURL; each node gives caching 1Gi, 100M bytes/s
// and opsPerSecond.
// strictTenant is a strict TenantSLO of the CacheCluster "shared" in cacheNS with a
// hit-ratio objective of 0.8, a memory minimum and a placement.
func strictTenant(teamNS, name, cacheNS, minMemory string, placement v1.Placement) *v1.TenantSLO {
	return &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: name},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.8"}},
			Memory:     v1.MemoryRange{Min: ptr.To(resource.MustParse(minMemory))},
			Placement:  placement,
		},
	}
}

func sharedCluster(ns, pool, promURL string, opsPerSecond int64, policy v1.AllocationPolicy) *v1.CacheCluster {
	return &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: v1.CacheClusterSpec{
			Engine:       v1.EngineRedis,
			NodeSelector: map[string]v1.LabelValue{"pool": v1.LabelValue(pool)},
			Capacity: v1.NodeCapacity{Memory: resource.MustParse("1Gi"), Bandwidth: resource.MustParse("100M"), OpsPerSecond: opsPerSecond,
				HeadroomPercent: ptr.To[int32](0)},
			Allocation: v1.AllocationSettings{Interval: &metav1.Duration{Duration: 5 * time.Second}, SolverTimeLimit: &metav1.Duration{Duration: 2 * time.Second},
				Policy: policy, MaxChurnPercent: 100},
			Monitoring: v1.MonitoringSettings{PrometheusURL: promURL, ServiceMonitor: v1.ServiceMonitorSettings{Interval: &metav1.Duration{Duration: time.Second}}},
		},
	}
}

type plansSnapshot map[string]v1.CacheNodePlanSpec

func plansOf(ns string, nodes ...string) (plansSnapshot, error) {
	out := plansSnapshot{}
	for _, n := range nodes {
		p := &v1.CacheNodePlan{}
		if err := get(p, ns, "shared-"+n); err != nil {
			return nil, err
		}
		out[n] = p.Spec
	}
	return out, nil
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{Type: typ, Status: "absent"}
}

// TestAllocationWithPrometheus runs the loop against a real Prometheus scraping two real
// exporters that replay two tenants' traffic on two nodes. Plans are computed from those
// metrics and written to the nodes' CacheNodePlans with routes to the sidecars, and the
// TenantSLOs and the CacheCluster report the result; a restarted operator keeps the plans as
// they are; with stale metrics and then with Prometheus stopped the plan is kept and
// MetricsAvailable says why, while a tenant that leaves still loses its partitions.
func TestAllocationWithPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	nodeA, nodeB := promtest.NewSidecar(t, "alloc-a"), promtest.NewSidecar(t, "alloc-b")
	web := promtest.Traffic{RequestsPerSecond: 200, HitRatio: 0.9, BytesInPerSecond: 20000, BytesOutPerSecond: 80000,
		HitLatency: 200 * time.Microsecond, MissLatency: 2 * time.Millisecond}
	batch := promtest.Traffic{RequestsPerSecond: 100, HitRatio: 0.4, BytesInPerSecond: 5000, BytesOutPerSecond: 5000,
		HitLatency: 300 * time.Microsecond, MissLatency: 3 * time.Millisecond, ThrottledPerSecond: 20}
	webCurve := []promquery.CurvePoint{{SizeBytes: 64 << 20, HitRatio: 0.5}, {SizeBytes: 256 << 20, HitRatio: 0.85}, {SizeBytes: 512 << 20, HitRatio: 0.92}}
	for _, s := range []*promtest.Sidecar{nodeA, nodeB} {
		s.SetTraffic("alloc-team/web", web)
		s.SetCurve("alloc-team/web", webCurve)
		s.SetCurveCheck("alloc-team/web", promquery.CurveCheck{Predicted: 0.91, Achieved: 0.9, SampledReads: 2000})
		s.SetPlanGeneration(0)
	}
	nodeA.SetTraffic("alloc-team/batch", batch)
	nodeA.SetCurveCheck("alloc-team/batch", promquery.CurveCheck{Predicted: 0.7, Achieved: 0.4, SampledReads: 800})
	prom := promtest.Start(t, []string{nodeA.Address(), nodeB.Address()}, time.Second)
	prom.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 7`, 3, 30*time.Second)

	cacheNS, teamNS := env.Namespace(t, "alloc-cache"), env.Namespace(t, "alloc-team")
	for _, name := range []string{"alloc-a", "alloc-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "alloc"}}}
		create(t, n)
	}
	sidecarPod(t, cacheNS, "shared", "alloc-a", "10.1.0.1")
	sidecarPod(t, cacheNS, "shared", "alloc-b", "10.1.0.2")
	cluster := sharedCluster(cacheNS, "alloc", prom.URL, 100000, v1.PolicyOptimal)
	create(t, cluster)
	webSLO := &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "web"},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.8"}},
			Memory:     v1.MemoryRange{Min: ptr.To(resource.MustParse("256Mi"))},
		},
	}
	batchSLO := &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "batch"},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.6"}},
			Class:      v1.ClassBestEffort,
			Bandwidth:  v1.BandwidthRange{Limit: ptr.To(resource.MustParse("1M"))},
		},
	}
	create(t, webSLO)
	create(t, batchSLO)

	// Plans from the measured traffic: both tenants placed, routes to the sidecars. Every
	// node's plan lists every admitted tenant, as a partition or, where it has none, as a
	// remote tenant with the same routes, so a client landing on any sidecar can log in.
	testenv.Eventually(t, timeout, func() error {
		plans, err := plansOf(cacheNS, "alloc-a", "alloc-b")
		if err != nil {
			return err
		}
		tenants := map[string]bool{}
		for node, spec := range plans {
			if spec.PlanGeneration < 1 {
				return fmt.Errorf("plan of %s not written yet", node)
			}
			listed := map[string]int{}
			for _, r := range spec.RemoteTenants {
				listed[r.Tenant]++
				if slices.ContainsFunc(r.Routes, func(r v1.TenantRoute) bool { return r.NodeName == node }) || len(r.Routes) == 0 {
					return fmt.Errorf("remote tenant %s on %s routes to %s or nowhere: %+v", r.Tenant, node, node, r.Routes)
				}
			}
			for _, p := range spec.Partitions {
				listed[p.Tenant]++
			}
			for _, id := range []string{"alloc-team/web", "alloc-team/batch"} {
				if listed[id] != 1 {
					return fmt.Errorf("plan of %s lists %s %d times (partitions %d, remote tenants %d), want once", node, id, listed[id], len(spec.Partitions), len(spec.RemoteTenants))
				}
			}
			for _, p := range spec.Partitions {
				tenants[p.Tenant] = true
				for _, r := range p.Routes {
					if want := map[string]string{"alloc-a": "10.1.0.1:7380", "alloc-b": "10.1.0.2:7380"}[r.NodeName]; r.Address() != want {
						return fmt.Errorf("route of %s to %s is %s, want %s", p.Tenant, r.NodeName, r.Address(), want)
					}
				}
				if !slices.ContainsFunc(p.Routes, func(r v1.TenantRoute) bool { return r.NodeName == node }) {
					return fmt.Errorf("routes of %s's partition on %s do not hold %s: %+v", p.Tenant, node, node, p.Routes)
				}
			}
		}
		if !tenants["alloc-team/web"] || !tenants["alloc-team/batch"] {
			return fmt.Errorf("plans hold %v, want both tenants", tenants)
		}
		return nil
	})

	// TenantSLO status: allocation, observations, SLOMet with target and observed, Throttled.
	testenv.Eventually(t, timeout, func() error {
		if err := errors.Join(get(webSLO, teamNS, "web"), get(batchSLO, teamNS, "batch")); err != nil {
			return err
		}
		a, obs := webSLO.Status.Allocation, webSLO.Status.Observed
		if a == nil || a.Memory.Cmp(resource.MustParse("256Mi")) < 0 || a.NodeCount == 0 || a.PlanGeneration < 1 {
			return fmt.Errorf("web allocation %+v", a)
		}
		if obs == nil {
			return errors.New("web has no observations")
		}
		if h, err := strconv.ParseFloat(obs.HitRatio, 64); err != nil || h < 0.85 || h > 0.95 || obs.ObjectiveValue != obs.HitRatio {
			return fmt.Errorf("web observed hit ratio %q objective value %q, want ~0.9", obs.HitRatio, obs.ObjectiveValue)
		}
		if obs.OpsPerSecond < 300 || obs.MeanLatency == nil || obs.P99Latency == nil || webSLO.Status.PredictedHitRatio == "" {
			return fmt.Errorf("web observations %+v predicted %q", obs, webSLO.Status.PredictedHitRatio)
		}
		slo := condition(webSLO.Status.Conditions, v1.ConditionSLOMet)
		if slo.Status != metav1.ConditionTrue || !strings.Contains(slo.Message, "meets target 0.8") || !strings.Contains(slo.Message, "observed hit ratio 0.") {
			return fmt.Errorf("web SLOMet %+v", slo)
		}
		batchSLOMet := condition(batchSLO.Status.Conditions, v1.ConditionSLOMet)
		if batchSLOMet.Status != metav1.ConditionFalse || batchSLOMet.Reason != v1.ReasonTargetMissed || !strings.Contains(batchSLOMet.Message, "misses target 0.6") {
			return fmt.Errorf("batch SLOMet %+v", batchSLOMet)
		}
		if thr := condition(batchSLO.Status.Conditions, v1.ConditionThrottled); thr.Status != metav1.ConditionTrue {
			return fmt.Errorf("batch Throttled %+v", thr)
		}
		if thr := condition(webSLO.Status.Conditions, v1.ConditionThrottled); thr.Status != metav1.ConditionFalse {
			return fmt.Errorf("web Throttled %+v", thr)
		}
		// The sidecars' curve checks: web's curve holds on both nodes, batch's is off.
		if c := condition(webSLO.Status.Conditions, v1.ConditionCurveAccurate); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "achieved 0.900") {
			return fmt.Errorf("web CurveAccurate %+v", c)
		}
		if c := condition(batchSLO.Status.Conditions, v1.ConditionCurveAccurate); c.Reason != v1.ReasonCurveOff || !strings.Contains(c.Message, "predicts hit ratio 0.700") {
			return fmt.Errorf("batch CurveAccurate %+v", c)
		}
		return nil
	})
	checkEvents(t, teamNS, map[string]string{"web": allocation.EventSLOMet, "batch": allocation.EventThrottled})

	// Every tenant's status says why its memory is what it is. web was placed, then met its
	// objective: from then on it keeps its memory, protected or with the plan in force.
	testenv.Eventually(t, timeout, func() error {
		if err := get(webSLO, teamNS, "web"); err != nil {
			return err
		}
		c, a := condition(webSLO.Status.Conditions, v1.ConditionAllocated), webSLO.Status.Allocation
		if c.Status != metav1.ConditionTrue || a == nil || c.Reason != a.Decision {
			return fmt.Errorf("web Allocated %+v, decision %+v", c, a)
		}
		if c.Reason != "Protected" && c.Reason != "Kept" {
			return fmt.Errorf("web's decision is %s (%s), want Protected or Kept once it met its objective", c.Reason, c.Message)
		}
		if !strings.Contains(c.Message, "iB") || c.Reason == "Protected" && !strings.Contains(c.Message, "observed hit ratio 0.9") {
			return fmt.Errorf("web's decision %s says %q, want the numbers", c.Reason, c.Message)
		}
		return nil
	})

	// CacheCluster status: the last plan, metrics available, tenant counts, node loads.
	testenv.Eventually(t, timeout, func() error {
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		s := cluster.Status
		if s.LastPlan == nil || s.LastPlan.Policy != v1.PolicyOptimal || s.LastPlan.SolverStatus == "" || s.LastPlan.Objective == "" {
			return fmt.Errorf("lastPlan %+v", s.LastPlan)
		}
		if m := condition(s.Conditions, conditions.MetricsAvailable); m.Status != metav1.ConditionTrue {
			return fmt.Errorf("MetricsAvailable %+v", m)
		}
		if s.Tenants.Total != 2 || s.Tenants.Admitted != 2 || s.Tenants.MeetingSLO != 1 || s.Tenants.Throttled != 1 {
			return fmt.Errorf("tenant counts %+v", s.Tenants)
		}
		if len(s.Nodes) != 2 || s.Nodes[0].Observed.OpsPerSecond < 250 || s.Nodes[0].Allocated.Memory.IsZero() || s.Nodes[0].Capacity.Memory.IsZero() {
			return fmt.Errorf("nodes %+v", s.Nodes)
		}
		return nil
	})
	checkOperatorMetrics(t, cacheNS+"/shared")
	checkObjectiveMetrics(t, cacheNS, teamNS)

	// The sidecars never apply their plans: after one interval the cluster says so.
	testenv.Eventually(t, timeout, func() error {
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		d := condition(cluster.Status.Conditions, v1.ConditionDegraded)
		if d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, "have not applied their plans") || !strings.Contains(d.Message, "alloc-a") {
			return fmt.Errorf("Degraded %+v", d)
		}
		return nil
	})
	// Acknowledge as the sidecars would, so the plans in force are the applied ones.
	acknowledge(t, cacheNS, "alloc-a", "alloc-b")

	// A restarted operator reads the plans in force and keeps them.
	before, err := plansOf(cacheNS, "alloc-a", "alloc-b")
	if err != nil {
		t.Fatal(err)
	}
	lastPlan := cluster.Status.LastPlan.Time
	if err := env.RestartOperator(operatorOptions); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		if !lastPlan.Before(&cluster.Status.LastPlan.Time) {
			return errors.New("the restarted operator has not planned yet")
		}
		return nil
	})
	if after, err := plansOf(cacheNS, "alloc-a", "alloc-b"); err != nil || !equality.Semantic.DeepEqual(before, after) {
		t.Errorf("the restart changed the plans (err %v):\n%+v\n%+v", err, before, after)
	}

	// The sidecars stop being scraped: Prometheus answers, but its data is stale.
	nodeA.Close()
	nodeB.Close()
	testenv.Eventually(t, timeout, func() error {
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		m := condition(cluster.Status.Conditions, conditions.MetricsAvailable)
		if m.Status != metav1.ConditionFalse || m.Reason != conditions.ReasonMetricsStale || !strings.Contains(m.Message, "is it scraping the sidecars?") {
			return fmt.Errorf("MetricsAvailable %+v", m)
		}
		return nil
	})
	if kept, err := plansOf(cacheNS, "alloc-a", "alloc-b"); err != nil || !equality.Semantic.DeepEqual(before, kept) {
		t.Errorf("the plans changed with stale metrics (err %v):\n%+v\n%+v", err, before, kept)
	}

	// Prometheus goes away: the plan in force is kept, and the cluster says why.
	prom.Stop()
	testenv.Eventually(t, timeout, func() error {
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		m := condition(cluster.Status.Conditions, conditions.MetricsAvailable)
		if m.Status != metav1.ConditionFalse || m.Reason != v1.ReasonPrometheusUnavailable || !strings.Contains(m.Message, "connect") || !strings.Contains(m.Message, "kept") {
			return fmt.Errorf("MetricsAvailable %+v", m)
		}
		if d := condition(cluster.Status.Conditions, v1.ConditionDegraded); d.Status != metav1.ConditionTrue || d.Reason != v1.ReasonPrometheusUnavailable {
			return fmt.Errorf("Degraded %+v", d)
		}
		return nil
	})
	if kept, err := plansOf(cacheNS, "alloc-a", "alloc-b"); err != nil || !equality.Semantic.DeepEqual(before, kept) {
		t.Errorf("the plans changed without metrics (err %v):\n%+v\n%+v", err, before, kept)
	}
	if err := get(webSLO, teamNS, "web"); err != nil || condition(webSLO.Status.Conditions, v1.ConditionSLOMet).Status != metav1.ConditionTrue {
		t.Errorf("web's SLOMet changed without metrics: %v %+v", err, webSLO.Status.Conditions)
	}

	// Still without metrics, a tenant that leaves frees its partitions everywhere.
	if err := env.Client.Delete(ctx(), batchSLO); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		plans, err := plansOf(cacheNS, "alloc-a", "alloc-b")
		if err != nil {
			return err
		}
		for node, spec := range plans {
			for _, p := range spec.Partitions {
				if p.Tenant == "alloc-team/batch" {
					return fmt.Errorf("%s still holds batch", node)
				}
			}
		}
		if err := get(&v1.TenantSLO{}, teamNS, "batch"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("batch still exists (get: %w)", err)
		}
		return nil
	})
	// ... and its series leave the operator's metrics, judged or not.
	testenv.Eventually(t, timeout, func() error {
		for metric, series := range clusterSeries(t, cacheNS+"/shared") {
			for labels := range series {
				if strings.Contains(labels, "tenant="+teamNS+"/batch") {
					return fmt.Errorf("%s{%s} remains", metric, labels)
				}
			}
		}
		return nil
	})
}

// acknowledge plays the sidecars applying their plans.
func acknowledge(t *testing.T, ns string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		testenv.Eventually(t, timeout, func() error {
			p := &v1.CacheNodePlan{}
			if err := get(p, ns, "shared-"+n); err != nil {
				return err
			}
			p.Status.AppliedGeneration = p.Spec.PlanGeneration
			p.Status.Partitions = nil
			for _, pp := range p.Spec.Partitions {
				p.Status.Partitions = append(p.Status.Partitions, v1.PartitionStatus{Tenant: pp.Tenant, State: v1.PartitionRunning, MemoryLimitBytes: pp.Memory.Value()})
			}
			return env.Client.Status().Update(ctx(), p)
		})
	}
}

// checkEvents waits for an event of each reason on each TenantSLO.
func checkEvents(t *testing.T, ns string, want map[string]string) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		var events corev1.EventList
		if err := env.Client.List(ctx(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for name, reason := range want {
			found := false
			for _, e := range events.Items {
				found = found || (e.InvolvedObject.Name == name && e.Reason == reason)
			}
			if !found {
				return fmt.Errorf("no %s event for %s", reason, name)
			}
		}
		return nil
	})
}

// checkOperatorMetrics reads the operator's own metrics from controller-runtime's registry.
func checkOperatorMetrics(t *testing.T, cluster string) {
	t.Helper()
	// The loop exports a plan's metrics after writing the statuses the caller waited for.
	testenv.Eventually(t, timeout, func() error {
		families, err := crmetrics.Registry.Gather()
		if err != nil {
			return err
		}
		seen := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels[promquery.LabelCluster] != cluster {
					continue
				}
				switch {
				case m.GetHistogram() != nil:
					seen[f.GetName()] += float64(m.GetHistogram().GetSampleCount())
				case m.GetGauge() != nil && (f.GetName() != promquery.OperatorSolverStatus || m.GetGauge().GetValue() == 1):
					seen[f.GetName()] += m.GetGauge().GetValue()
				}
			}
		}
		if seen[promquery.OperatorPlanDuration] < 1 || seen[promquery.OperatorSolverStatus] != 1 || seen[promquery.OperatorPlanObjective] <= 0 ||
			seen[promquery.OperatorTenantsMeetingSLO] != 1 || seen[promquery.OperatorTenantSLOMet] != 1 {
			return fmt.Errorf("operator metrics of %s: %v", cluster, seen)
		}
		return nil
	})
}
