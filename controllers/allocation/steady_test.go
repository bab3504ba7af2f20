package allocation_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// TestSteadyAllocationsWriteNoTenantStatus: once the tenants are placed and nothing changes,
// the allocations that follow (every 5 s) write no tenant's status, not even an apply that
// would change nothing: over two intervals the allocation loop sends no TenantSLO status
// request and the TenantSLOs keep their resourceVersions, while the cluster's status (its
// lastPlan.time moves on) shows the allocations ran.
func TestSteadyAllocationsWriteNoTenantStatus(t *testing.T) {
	cacheNS, teamNS, versions := placedStrictTenants(t, "steady", "10.9.0.1", "one", "two", "three")
	expectNoSteadyWrites(t, cacheNS, teamNS, 2, 11*time.Second, versions)
}

// placedStrictTenants sets up, under names starting with prefix, one node with a sidecar pod
// at podIP, an equal-policy cluster of 100,000 ops/s and a strict 64Mi tenant per name, waits
// until every tenant is placed and the allocation that placed them has finished its writes,
// and returns the namespaces and a function reading the tenants' resourceVersions.
func placedStrictTenants(t *testing.T, prefix, podIP string, names ...string) (cacheNS, teamNS string, versions func() (map[string]string, error)) {
	cacheNS, teamNS = env.Namespace(t, prefix+"-cache"), env.Namespace(t, prefix+"-team")
	node := prefix + "-a"
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"pool": prefix}}})
	sidecarPod(t, cacheNS, "shared", node, podIP)
	create(t, sharedCluster(cacheNS, prefix, "", 100000, v1.PolicyEqual))
	for _, name := range names {
		create(t, strictTenant(teamNS, name, cacheNS, "64Mi", v1.Placement{}))
	}
	versions = func() (map[string]string, error) { return placedVersions(teamNS, names, map[string]string{}) }
	testenv.Eventually(t, timeout, func() error {
		_, err := versions()
		return err
	})
	time.Sleep(6 * time.Second) // the writes of the allocation that placed them
	return cacheNS, teamNS, versions
}

// TestAnotherManagersStatusWrites: after another field manager writes a TenantSLO's status,
// the allocations write the tenant's status only where a field the allocation loop owns
// changed. A condition of the other manager's own makes no allocator request over two
// intervals (the loop re-sent its identical status once when it compared with its own last
// apply instead of with the object: the flake of TestSteadyMeasuredPlansStay, where the
// TenantSLO reconciler's Ready came late); an allocation decision the other manager
// overwrote is written back by the next allocation, with one request.
func TestAnotherManagersStatusWrites(t *testing.T) {
	cacheNS, teamNS, versions := placedStrictTenants(t, "other", "10.9.1.1", "one", "two")

	applyStatusAs(t, teamNS, "one", map[string]any{"conditions": []any{map[string]any{
		"type": "Reviewed", "status": "True", "reason": "Reviewed", "message": "checked by hand",
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
	}}})
	expectNoSteadyWrites(t, cacheNS, teamNS, 2, 11*time.Second, versions)

	slo := &v1.TenantSLO{}
	if err := get(slo, teamNS, "one"); err != nil {
		t.Fatal(err)
	}
	decision := slo.Status.Allocation.Decision
	overwritten := "Raised"
	if decision == overwritten {
		overwritten = "Lowered"
	}
	mark := env.Requests.Mark()
	applyStatusAs(t, teamNS, "one", map[string]any{"allocation": map[string]any{"decision": overwritten}})
	testenv.Eventually(t, timeout, func() error {
		if err := get(slo, teamNS, "one"); err != nil {
			return err
		}
		if got := slo.Status.Allocation.Decision; got != decision {
			return fmt.Errorf("allocation.decision %q, want %q written back", got, decision)
		}
		return nil
	})
	time.Sleep(6 * time.Second) // one more allocation, which has nothing to correct
	writes := env.Requests.Since(mark, func(r testenv.Request) bool {
		return r.FieldManager == objects.FieldOwnerAllocator && testenv.WritesUnder("/apis/cacheqos.io/v1alpha1/namespaces/"+teamNS+"/tenantslos/")(r)
	})
	if len(writes) != 1 || !strings.HasSuffix(writes[0].Path, "/one/status") {
		t.Errorf("allocator writes after one's decision was overwritten: %v, want one, to one's status", writes)
	}
}

// applyStatusAs server-side applies status to the TenantSLO ns/name as a field manager of
// the test's, taking the fields it sends from whoever owned them.
func applyStatusAs(t *testing.T, ns, name string, status map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.GroupVersion.String(), "kind": "TenantSLO",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"status":   status,
	}}
	if err := env.Client.Status().Patch(ctx(), u, client.Apply, client.FieldOwner("steady-test"), client.ForceOwnership); err != nil {
		t.Fatalf("applying the status of %s/%s: %v", ns, name, err)
	}
}

// TestSteadyMeasuredPlansStay: under the optimal policy, with a real Prometheus measuring
// every tenant at its objective and nothing changing, the allocations after the first keep
// the plan in force: over three intervals no plan and no tenant status is written, and the
// plans and TenantSLOs keep their resourceVersions, although the measured rates wobble from
// one window to the next (19 or 20 requests/s) and so do the kept plan's expected hits. (With
// the same fleet measured below its targets whatever memory it gets, the control loop
// replaces the plan every interval.)
func TestSteadyMeasuredPlansStay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	nodes := []string{"stay-a", "stay-b", "stay-c"}
	var targets []string
	sidecars := make([]*promtest.Sidecar, len(nodes))
	for i, n := range nodes {
		sidecars[i] = promtest.NewSidecar(t, n)
		sidecars[i].SetPlanGeneration(0)
		targets = append(targets, sidecars[i].Address())
	}
	cacheNS, teamNS := env.Namespace(t, "stay-cache"), env.Namespace(t, "stay-team")
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("t%02d", i)
		id := teamNS + "/" + names[i]
		s := sidecars[i%len(nodes)]
		s.SetTraffic(id, promtest.Traffic{RequestsPerSecond: float64(20 + 10*(i%7)), HitRatio: 0.9,
			BytesInPerSecond: 2000, BytesOutPerSecond: 8000, HitLatency: 200 * time.Microsecond, MissLatency: 2 * time.Millisecond})
		s.SetCurve(id, []promquery.CurvePoint{{SizeBytes: 32 << 20, HitRatio: 0.4}, {SizeBytes: 128 << 20, HitRatio: 0.75}, {SizeBytes: 512 << 20, HitRatio: 0.9}})
	}
	prom := promtest.Start(t, targets, time.Second)
	prom.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 7`, len(names), 30*time.Second)
	for i, n := range nodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool": "stay"}}})
		sidecarPod(t, cacheNS, "shared", n, fmt.Sprintf("10.7.0.%d", i+1))
	}
	cluster := sharedCluster(cacheNS, "stay", prom.URL, 100000, v1.PolicyOptimal)
	cluster.Spec.Allocation.MaxChurnPercent = 0
	create(t, cluster)
	for i, name := range names {
		slo := strictTenant(teamNS, name, cacheNS, "64Mi", v1.Placement{})
		slo.Spec.Objective.HitRatio.Ratio = []string{"0.7", "0.8"}[i%2]
		create(t, slo)
	}
	versions := func() (map[string]string, error) {
		out := map[string]string{}
		for _, n := range nodes {
			p := &v1.CacheNodePlan{}
			if err := get(p, cacheNS, "shared-"+n); err != nil {
				return nil, err
			}
			out["plan "+n] = p.ResourceVersion
		}
		return placedVersions(teamNS, names, out)
	}
	// Wait for an allocation that kept the plan in force: the first after the tenants were placed.
	testenv.Eventually(t, 2*timeout, func() error {
		if _, err := versions(); err != nil {
			return err
		}
		c := &v1.CacheCluster{}
		if err := get(c, cacheNS, "shared"); err != nil {
			return err
		}
		if c.Status.LastPlan == nil || !strings.HasPrefix(c.Status.LastPlan.Message, "kept the plan in force") {
			return fmt.Errorf("no allocation has kept the plan yet: %+v", c.Status.LastPlan)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // that allocation's status writes
	expectNoSteadyWrites(t, cacheNS, teamNS, 3, 16*time.Second, versions)
}

// expectNoSteadyWrites checks that over window the allocations ran (at least intervals
// cluster status writes) but wrote no plan in cacheNS and no TenantSLO status in teamNS, and
// that versions did not change.
func expectNoSteadyWrites(t *testing.T, cacheNS, teamNS string, intervals int, window time.Duration, versions func() (map[string]string, error)) {
	t.Helper()
	before, err := versions()
	if err != nil {
		t.Fatal(err)
	}
	mark := env.Requests.Mark()
	time.Sleep(window)
	allocatorWrites := func(prefix string) []testenv.Request {
		return env.Requests.Since(mark, func(r testenv.Request) bool {
			return r.FieldManager == objects.FieldOwnerAllocator && testenv.WritesUnder(prefix)(r)
		})
	}
	if n := len(allocatorWrites("/apis/cacheqos.io/v1alpha1/namespaces/" + cacheNS + "/cacheclusters/shared/status")); n < intervals {
		t.Fatalf("%d cluster status writes in %d intervals: the allocations did not run", n, intervals)
	}
	if w := allocatorWrites("/apis/cacheqos.io/v1alpha1/namespaces/" + cacheNS + "/cachenodeplans/"); len(w) != 0 {
		t.Errorf("steady allocations wrote plans %d times: %v", len(w), w)
	}
	if w := allocatorWrites("/apis/cacheqos.io/v1alpha1/namespaces/" + teamNS + "/tenantslos/"); len(w) != 0 {
		t.Errorf("steady allocations wrote tenant statuses %d times: %v", len(w), w)
	}
	after, err := versions()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Errorf("resourceVersions changed in steady state: %v then %v", before, after)
	}
}

// placedVersions adds to out the resourceVersion of each named TenantSLO in teamNS, or fails
// while one has no allocation yet, or its Ready condition does not describe the allocation
// yet: the TenantSLO reconciler rewrites Ready after the plans change (5 s after, later under
// load), the last write of a placement, which a steady window must not count.
func placedVersions(teamNS string, names []string, out map[string]string) (map[string]string, error) {
	for _, name := range names {
		slo := &v1.TenantSLO{}
		if err := get(slo, teamNS, name); err != nil {
			return nil, err
		}
		a := slo.Status.Allocation
		if a == nil || a.Memory.Value() == 0 {
			return nil, fmt.Errorf("%s has no allocation yet", name)
		}
		if err := readyDescribes(slo, a); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out["tenant "+name] = slo.ResourceVersion
	}
	return out, nil
}

// readyDescribes fails unless the tenant's Ready condition names the partitions of allocation
// a as not running (no sidecar runs partitions in envtest).
func readyDescribes(slo *v1.TenantSLO, a *v1.TenantAllocation) error {
	ready := condition(slo.Status.Conditions, v1.ConditionReady)
	held := fmt.Sprintf("of %d partitions not running yet, on ", a.NodeCount)
	if ready.Reason != conditions.ReasonPartitionsPending || !strings.Contains(ready.Message, held) {
		return fmt.Errorf("Ready %q (%s) does not describe the %d partitions allocated yet", ready.Message, ready.Reason, a.NodeCount)
	}
	for _, n := range a.Nodes {
		if !strings.Contains(ready.Message, n.NodeName) {
			return fmt.Errorf("Ready %q does not name %s, where the tenant is allocated, yet", ready.Message, n.NodeName)
		}
	}
	return nil
}
