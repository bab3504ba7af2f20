package allocation_test

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// planWatch counts, per CacheNodePlan of a namespace, the writes that changed it (each
// MODIFIED event of a watch is one new resourceVersion) and the planGeneration it has.
type planWatch struct {
	mu          sync.Mutex
	writes      map[string]int
	generations map[string]int64
}

func watchPlans(t *testing.T, ns string) *planWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx(), &v1.CacheNodePlanList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	pw := &planWatch{writes: map[string]int{}, generations: map[string]int64{}}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.CacheNodePlan)
			if !ok {
				continue
			}
			pw.mu.Lock()
			if ev.Type == watch.Modified {
				pw.writes[p.Name]++
			}
			pw.generations[p.Name] = p.Spec.PlanGeneration
			pw.mu.Unlock()
		}
	}()
	return pw
}

// take returns the writes and generations counted so far and starts counting writes anew.
func (pw *planWatch) take() (writes map[string]int, generations map[string]int64) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	writes, generations = pw.writes, maps.Clone(pw.generations)
	pw.writes = map[string]int{}
	return writes, generations
}

// TestPlansWrittenOncePerDecision: a cluster whose 40 tenants exist before it, over 20 nodes,
// has every plan written once in its cold start (one allocation, after the tenants' admission,
// not one per batch of admitted tenants: each plan lists every admitted tenant, so each such
// allocation rewrote every plan), and once more when 10% of the tenants change at once, the
// allocations of the two intervals after each included. Writes are counted as the plans'
// resourceVersion changes seen by a watch.
func TestPlansWrittenOncePerDecision(t *testing.T) {
	const nodes, tenants = 20, 40
	cacheNS, teamNS := env.Namespace(t, "once-cache"), env.Namespace(t, "once-team")
	for i := range nodes {
		node := fmt.Sprintf("once-%02d", i)
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"pool": "once"}}})
		sidecarPod(t, cacheNS, "shared", node, fmt.Sprintf("10.7.0.%d", i+1))
	}
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("t-%02d", i)
		create(t, strictTenant(teamNS, names[i], cacheNS, "64Mi", v1.Placement{}))
	}
	plans := watchPlans(t, cacheNS)
	create(t, sharedCluster(cacheNS, "once", "", 100000, v1.PolicyEqual))

	// settle waits until every tenant is placed with its current spec and then for two more
	// allocation intervals (5 s each), and returns the plan writes of the phase.
	settle := func(phase string) (map[string]int, map[string]int64) {
		t.Helper()
		testenv.Eventually(t, time.Minute, func() error {
			var list v1.TenantSLOList
			if err := env.Client.List(ctx(), &list, client.InNamespace(teamNS)); err != nil {
				return err
			}
			for _, s := range list.Items {
				if s.Status.Allocation == nil || s.Status.Allocation.PlanGeneration < 1 || s.Status.ObservedGeneration != s.Generation {
					return fmt.Errorf("%s: %s not placed with its current spec", phase, s.Name)
				}
			}
			return nil
		})
		time.Sleep(11 * time.Second)
		return plans.take()
	}
	check := func(phase string, writes map[string]int, generations map[string]int64, wantGeneration int64) {
		t.Helper()
		if len(generations) != nodes {
			t.Fatalf("%s: %d plans, want %d", phase, len(generations), nodes)
		}
		for _, name := range slices.Sorted(maps.Keys(generations)) {
			if writes[name] != 1 || generations[name] != wantGeneration {
				t.Errorf("%s: plan %s written %d times, planGeneration %d; want once, %d", phase, name, writes[name], generations[name], wantGeneration)
			}
		}
	}
	writes, generations := settle("cold start")
	check("cold start", writes, generations, 1)

	// 10% of the tenants raise their minimum at once.
	for _, name := range names[:tenants/10] {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			slo := &v1.TenantSLO{}
			if err := get(slo, teamNS, name); err != nil {
				return err
			}
			slo.Spec.Memory.Min = ptr.To(resource.MustParse("96Mi"))
			return env.Client.Update(ctx(), slo)
		}); err != nil {
			t.Fatal(err)
		}
	}
	writes, _ = settle("10% change")
	// Each plan carries the hash of the specs it was made for, so the change writes every
	// plan once, bumping planGeneration where its partitions or routes changed.
	if len(writes) != nodes {
		t.Errorf("10%% change: %d plans written, want all %d (the spec hash changed): %v", len(writes), nodes, writes)
	}
	for name, n := range writes {
		if n != 1 {
			t.Errorf("10%% change: plan %s written %d times, want once", name, n)
		}
	}
}
