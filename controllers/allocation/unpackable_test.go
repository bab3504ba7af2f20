package allocation_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// TestUnpackableMinimumsAreReported: three strict tenants confined to one node each, with
// memory minimums of 700Mi, 600Mi and 600Mi on two nodes of 1Gi. Admission lets all three in
// (1900Mi of 2Gi, each within one node), but no two of them fit on one node. The third one's
// arrival makes no new plan: the plan in force is kept (nobody below its minimum), the three
// TenantSLOs say Allocated=False MinimumsUnpackable naming the others with the numbers and
// get a Warning event, the best-effort tenant outside the set keeps its condition, and the
// cluster is Degraded (its metrics are not configured either: the message says both). Lowering one minimum lets the next plan place everyone and clears it.
func TestUnpackableMinimumsAreReported(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "unpack-cache"), env.Namespace(t, "unpack-team")
	nodes := []string{"unpack-a", "unpack-b"}
	for i, name := range nodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "unpack"}}})
		sidecarPod(t, cacheNS, "shared", name, fmt.Sprintf("10.4.0.%d", i+1))
	}
	cluster := sharedCluster(cacheNS, "unpack", "", 100000, v1.PolicyOptimal)
	create(t, cluster)
	minimums := map[string]string{"big": "700Mi", "mid": "600Mi", "late": "600Mi"}
	strict := func(name string) *v1.TenantSLO {
		slo := &v1.TenantSLO{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: name},
			Spec: v1.TenantSLOSpec{
				ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
				Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.8"}},
				Memory:     v1.MemoryRange{Min: ptr.To(resource.MustParse(minimums[name]))},
				Placement:  v1.Placement{MaxNodes: 1},
			},
		}
		create(t, slo)
		return slo
	}
	strict("big")
	strict("mid")
	create(t, &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "free"},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.5"}},
			Class:      v1.ClassBestEffort,
		},
	})

	tenant := func(name string) (*v1.TenantSLO, error) {
		slo := &v1.TenantSLO{}
		return slo, get(slo, teamNS, name)
	}
	// minimumsHeld checks every plan holds each strict tenant it places at least its minimum,
	// and returns the tenants the plans place.
	minimumsHeld := func() ([]string, error) {
		plans, err := plansOf(cacheNS, nodes...)
		if err != nil {
			return nil, err
		}
		held := map[string]int64{}
		for _, spec := range plans {
			for _, p := range spec.Partitions {
				held[strings.TrimPrefix(p.Tenant, teamNS+"/")] += p.Memory.Value()
			}
		}
		var placed []string
		for name, bytes := range held {
			placed = append(placed, name)
			if m, ok := minimums[name]; ok && bytes < ptr.To(resource.MustParse(m)).Value() {
				return nil, fmt.Errorf("the plans give %s %d bytes, below its memory.min %s", name, bytes, m)
			}
		}
		slices.Sort(placed)
		return placed, nil
	}
	allocatedTrue := func(names ...string) error {
		for _, name := range names {
			slo, err := tenant(name)
			if err != nil {
				return err
			}
			if c := condition(slo.Status.Conditions, v1.ConditionAllocated); c.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s Allocated %+v", name, c)
			}
		}
		return nil
	}

	// Two of them and the best-effort tenant fit: one strict tenant per node.
	testenv.Eventually(t, timeout, func() error {
		placed, err := minimumsHeld()
		if err != nil {
			return err
		}
		if !slices.Equal(placed, []string{"big", "free", "mid"}) {
			return fmt.Errorf("the plans place %v", placed)
		}
		return allocatedTrue("big", "mid", "free")
	})
	free, err := tenant("free")
	if err != nil {
		t.Fatal(err)
	}
	freeAllocated := condition(free.Status.Conditions, v1.ConditionAllocated)

	late := strict("late")
	testenv.Eventually(t, timeout, func() error {
		for name, others := range map[string][]string{"big": {"mid", "late"}, "mid": {"big", "late"}, "late": {"big", "mid"}} {
			slo, err := tenant(name)
			if err != nil {
				return err
			}
			if a := condition(slo.Status.Conditions, v1.ConditionAdmitted); a.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s Admitted %+v: the example must pass admission", name, a)
			}
			c := condition(slo.Status.Conditions, v1.ConditionAllocated)
			if c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonMinimumsUnpackable {
				return fmt.Errorf("%s Allocated %+v, want False %s", name, c, v1.ReasonMinimumsUnpackable)
			}
			want := []string{"memory.min " + strings.Replace(minimums[name], "Mi", ".0 MiB", 1), "2 nodes of 1.0 GiB", "on 1 node", "plan in force is kept"}
			for _, other := range others {
				want = append(want, fmt.Sprintf("%s/%s (memory.min %s", teamNS, other, strings.Replace(minimums[other], "Mi", ".0 MiB", 1)))
			}
			for _, w := range want {
				if !strings.Contains(c.Message, w) {
					return fmt.Errorf("%s Allocated message %q lacks %q", name, c.Message, w)
				}
			}
			if strings.Contains(c.Message, teamNS+"/free") {
				return fmt.Errorf("%s Allocated message %q names the best-effort tenant", name, c.Message)
			}
		}
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		d := condition(cluster.Status.Conditions, v1.ConditionDegraded)
		if d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, "no plan: infeasible snapshot: the memory minimums of "+teamNS+"/big, "+teamNS+"/late, "+teamNS+"/mid") {
			return fmt.Errorf("Degraded %+v", d)
		}
		return nil
	})
	checkEvents(t, teamNS, map[string]string{"big": v1.ReasonMinimumsUnpackable, "mid": v1.ReasonMinimumsUnpackable, "late": v1.ReasonMinimumsUnpackable})
	var events corev1.EventList
	if err := env.Client.List(ctx(), &events, client.InNamespace(teamNS)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == v1.ReasonMinimumsUnpackable && (e.Type != corev1.EventTypeWarning || e.InvolvedObject.Name == "free") {
			t.Errorf("%s event %s on %s", e.Type, e.Reason, e.InvolvedObject.Name)
		}
	}
	// No new plan: the one in force still holds the first three, each at its minimum or more.
	if placed, err := minimumsHeld(); err != nil || !slices.Equal(placed, []string{"big", "free", "mid"}) {
		t.Errorf("with unpackable minimums the plans place %v (%v), want the plan in force", placed, err)
	}
	if free, err = tenant("free"); err != nil {
		t.Fatal(err)
	}
	if c := condition(free.Status.Conditions, v1.ConditionAllocated); c.Status != freeAllocated.Status || c.Reason != freeAllocated.Reason || c.Message != freeAllocated.Message {
		t.Errorf("the best-effort tenant's Allocated changed to %+v from %+v", c, freeAllocated)
	}

	// 700Mi and 300Mi share a node: the next plan places everyone and clears the conditions.
	if err := get(late, teamNS, "late"); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(late.DeepCopy())
	minimums["late"] = "300Mi"
	late.Spec.Memory.Min = ptr.To(resource.MustParse("300Mi"))
	if err := env.Client.Patch(ctx(), late, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		placed, err := minimumsHeld()
		if err != nil {
			return err
		}
		if !slices.Equal(placed, []string{"big", "free", "late", "mid"}) {
			return fmt.Errorf("the plans place %v", placed)
		}
		if err := allocatedTrue("big", "mid", "late", "free"); err != nil {
			return err
		}
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		if d := condition(cluster.Status.Conditions, v1.ConditionDegraded); strings.Contains(d.Message, "no plan") {
			return fmt.Errorf("Degraded %+v", d)
		}
		return nil
	})
}
