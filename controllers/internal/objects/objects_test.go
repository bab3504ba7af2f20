package objects

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

func TestNamesAreValid(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, cluster := range []string{"shared", "cache.prod", "1st", long, "a." + strings.Repeat("b", 70)} {
		for what, name := range map[string]string{
			"client service": ClientServiceName(cluster),
			"peer service":   PeerServiceName(cluster),
			"daemonset":      DaemonSetName(cluster),
		} {
			if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
				t.Errorf("%s of %q = %q: %v", what, cluster, name, errs)
			}
		}
		for what, name := range map[string]string{
			"service account": ServiceAccountName(cluster),
			"credentials":     CredentialsSecretName(cluster),
			"monitoring":      MonitoringName(cluster),
			"tenant secret":   TenantCredentialsSecretName(cluster),
			"tls secret":      TLSSecretName(cluster),
			"tls ca secret":   TLSCASecretName(cluster),
			"ca bundle":       TLSCABundleSecretName(cluster),
		} {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Errorf("%s of %q = %q: %v", what, cluster, name, errs)
			}
		}
		if errs := validation.IsValidLabelValue(LabelValue(cluster)); len(errs) > 0 {
			t.Errorf("label value of %q = %q: %v", cluster, LabelValue(cluster), errs)
		}
	}
	// Short valid names are kept as they are; shortened ones stay distinct.
	if ClientServiceName("shared") != "shared" || DaemonSetName("shared") != "shared-sidecar" || LabelValue("shared") != "shared" {
		t.Error("a short name was changed")
	}
	if LabelValue(long) == LabelValue(long+"b") {
		t.Error("two long names shortened to the same label value")
	}
}

func TestPlanName(t *testing.T) {
	if name, err := PlanName("shared", "node-1"); err != nil || name != "shared-node-1" {
		t.Errorf("PlanName = %q, %v", name, err)
	}
	if _, err := PlanName(strings.Repeat("c", 200), strings.Repeat("n", 60)); err == nil || !strings.Contains(err.Error(), "node "+strings.Repeat("n", 60)) {
		t.Errorf("an overlong plan name gave %v, want an error naming the node", err)
	}
}

func pod(node, ip string, ready bool, created time.Time) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func TestSidecarHosts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	terminating := pod("c", "10.0.0.9", true, t0)
	terminating.DeletionTimestamp = &metav1.Time{Time: t0}
	got := SidecarHosts([]corev1.Pod{
		pod("a", "10.0.0.1", true, t0),
		pod("b", "10.0.0.2", false, t0.Add(time.Minute)), // newer but not ready
		pod("b", "10.0.0.3", true, t0),
		pod("c", "", false, t0), // no address yet
		terminating,
		pod("d", "fd00::4", false, t0),
		pod("d", "fd00::5", false, t0.Add(time.Second)), // neither ready: the newer
	})
	want := map[string]string{"a": "10.0.0.1", "b": "10.0.0.3", "d": "fd00::5"}
	if len(got) != len(want) {
		t.Fatalf("hosts %v, want %v", got, want)
	}
	for node, host := range want {
		if got[node] != host {
			t.Errorf("node %s: %q, want %q", node, got[node], host)
		}
	}
}

func TestStaleRoutes(t *testing.T) {
	partition := func(tenant string, routes ...v1.TenantRoute) v1.PartitionPlan {
		return v1.PartitionPlan{Tenant: tenant, Memory: resource.MustParse("1Gi"), EvictionPolicy: v1.EvictionLRU, Routes: routes}
	}
	plan := func(node string, parts ...v1.PartitionPlan) v1.CacheNodePlan {
		return v1.CacheNodePlan{Spec: v1.CacheNodePlanSpec{NodeName: node, Partitions: parts}}
	}
	ra, rb := v1.TenantRoute{NodeName: "a", Host: "10.0.0.1", Port: PeerPort, Weight: 1}, v1.TenantRoute{NodeName: "b", Host: "10.0.0.2", Port: PeerPort, Weight: 1}
	plans := []v1.CacheNodePlan{plan("a", partition("ns/t", ra, rb)), plan("b", partition("ns/t", ra, rb))}
	tests := []struct {
		name  string
		plans []v1.CacheNodePlan
		hosts map[string]string
		stale bool
	}{
		{"in step", plans, map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}, false},
		{"a sidecar moved", plans, map[string]string{"a": "10.0.0.1", "b": "10.0.0.7"}, true},
		{"an address unknown for now", plans, map[string]string{"a": "10.0.0.1"}, false},
		{"a holder missing from the routes", []v1.CacheNodePlan{plan("a", partition("ns/t", ra)), plan("b", partition("ns/t", ra))},
			map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}, true},
		{"no partitions", []v1.CacheNodePlan{plan("a")}, map[string]string{"a": "10.0.0.1"}, false},
	}
	for _, tt := range tests {
		if got := StaleRoutes(tt.plans, tt.hosts); got != tt.stale {
			t.Errorf("%s: StaleRoutes = %v, want %v", tt.name, got, tt.stale)
		}
	}
}

func TestListNames(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	if got := ListNames(names[:2]); got != "a, b" {
		t.Errorf("ListNames = %q", got)
	}
	if got := ListNames(names); got != "a, b, c, d, e, f, g, h, i, j and 2 more" {
		t.Errorf("ListNames = %q", got)
	}
}

func TestTenantAdmissionIndexValues(t *testing.T) {
	now := metav1.Now()
	admitted := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1.ConditionAdmitted, Status: status, Reason: reason}}
	}
	cluster := []string{"cache/shared"}
	for _, tt := range []struct {
		name               string
		conditions         []metav1.Condition
		observedGeneration int64
		deleting           bool
		waiting, awaiting  []string
	}{
		{name: "never reconciled", observedGeneration: 0, waiting: cluster, awaiting: cluster},
		{name: "refused for capacity", conditions: admitted(metav1.ConditionFalse, v1.ReasonInsufficientCapacity), observedGeneration: 2, waiting: cluster},
		{name: "refused for a missing cluster", conditions: admitted(metav1.ConditionFalse, v1.ReasonClusterNotFound), observedGeneration: 2, waiting: cluster, awaiting: cluster},
		{name: "not decided", conditions: admitted(metav1.ConditionUnknown, v1.ReasonReconciling), observedGeneration: 2, waiting: cluster, awaiting: cluster},
		{name: "admitted", conditions: admitted(metav1.ConditionTrue, v1.ReasonAdmitted), observedGeneration: 2},
		{name: "admitted, spec changed since", conditions: admitted(metav1.ConditionTrue, v1.ReasonAdmitted), observedGeneration: 1, awaiting: cluster},
		{name: "refused and being deleted", conditions: admitted(metav1.ConditionFalse, v1.ReasonInsufficientCapacity), observedGeneration: 1, deleting: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tenant := &v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "t", Generation: 2},
				Spec:   v1.TenantSLOSpec{ClusterRef: v1.ClusterReference{Namespace: "cache", Name: "shared"}},
				Status: v1.TenantSLOStatus{Conditions: tt.conditions, ObservedGeneration: tt.observedGeneration}}
			if tt.deleting {
				tenant.DeletionTimestamp = &now
			}
			if got := TenantWaitingIndexValues(tenant); strings.Join(got, ",") != strings.Join(tt.waiting, ",") {
				t.Errorf("TenantWaitingIndexValues = %v, want %v", got, tt.waiting)
			}
			if got := TenantAwaitingAdmissionIndexValues(tenant); strings.Join(got, ",") != strings.Join(tt.awaiting, ",") {
				t.Errorf("TenantAwaitingAdmissionIndexValues = %v, want %v", got, tt.awaiting)
			}
		})
	}
}
