package tenantslo

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

func TestAdmissionDecisions(t *testing.T) {
	cluster := &v1.CacheCluster{
		Spec: v1.CacheClusterSpec{Capacity: v1.NodeCapacity{
			Memory: resource.MustParse("10Gi"), Bandwidth: resource.MustParse("100M"), HeadroomPercent: ptr.To[int32](0),
		}},
		Status: v1.CacheClusterStatus{NodeCount: 2},
	}
	t0 := time.Unix(1_700_000_000, 0)
	type spec struct {
		name      string
		age       int // seconds after t0 it was created
		memory    string
		bandwidth string
		class     v1.TenantClass
		minNodes  int32
		maxNodes  int32
		admitted  bool // its Admitted condition before this decision
		deleting  bool
	}
	build := func(s spec) v1.TenantSLO {
		tslo := v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: s.name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(s.age) * time.Second))}}
		tslo.Spec.Class = s.class
		if s.memory != "" {
			tslo.Spec.Memory.Min = ptr.To(resource.MustParse(s.memory))
		}
		if s.bandwidth != "" {
			tslo.Spec.Bandwidth.Guaranteed = ptr.To(resource.MustParse(s.bandwidth))
		}
		tslo.Spec.Placement = v1.Placement{MinNodes: s.minNodes, MaxNodes: s.maxNodes}
		if s.admitted {
			tslo.Status.Conditions = []metav1.Condition{{Type: v1.ConditionAdmitted, Status: metav1.ConditionTrue}}
		}
		if s.deleting {
			tslo.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return tslo
	}
	tests := []struct {
		name     string
		others   []spec
		target   spec
		admitted bool
		message  string
	}{
		{"fits", []spec{{name: "a", memory: "8Gi"}}, spec{name: "b", age: 1, memory: "12Gi"}, true,
			"guaranteed memory 12Gi and bandwidth 0 reserved; 20Gi of 20Gi memory"},
		{"first come first served", []spec{{name: "a", memory: "8Gi"}, {name: "b", age: 1, memory: "8Gi"}}, spec{name: "c", age: 2, memory: "8Gi"}, false,
			"memory.min 8Gi does not fit: the cluster has 20Gi of partitionable memory (2 nodes x 10Gi), 16Gi is guaranteed to 2 tenants admitted before it, 4Gi is free"},
		{"an older tenant does not push out an admitted one", []spec{{name: "young", age: 5, memory: "16Gi", admitted: true}}, spec{name: "old", memory: "8Gi"}, false,
			"16Gi is guaranteed to 1 tenants"},
		{"same second: by name", []spec{{name: "b", memory: "16Gi"}}, spec{name: "a", memory: "16Gi"}, true, ""},
		{"a refused tenant reserves nothing", []spec{{name: "huge", memory: "30Gi"}}, spec{name: "small", age: 1, memory: "20Gi"}, true, ""},
		{"deleting tenants reserve nothing", []spec{{name: "gone", memory: "20Gi", admitted: true, deleting: true}}, spec{name: "new", age: 1, memory: "20Gi"}, true, ""},
		{"bandwidth", []spec{{name: "a", bandwidth: "150M"}}, spec{name: "b", age: 1, bandwidth: "100M"}, false,
			"bandwidth.guaranteed 100M does not fit: the cluster has 200M bytes/s (2 nodes x 100M), 150M is guaranteed to 1 tenants admitted before it, 50M is free"},
		{"best effort reserves nothing", []spec{{name: "a", memory: "20Gi"}}, spec{name: "b", age: 1, class: v1.ClassBestEffort}, true, ""},
		{"spread wider than the cluster", nil, spec{name: "a", minNodes: 3}, false, "placement.minNodes 3 exceeds the cluster's 2 nodes"},
		{"minimum beyond its own spread", nil, spec{name: "a", memory: "15Gi", maxNodes: 1}, false, "memory.min 15Gi exceeds what placement.maxNodes 1 nodes hold (1 x 10Gi)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tenants []v1.TenantSLO
			for _, s := range tt.others {
				tenants = append(tenants, build(s))
			}
			target := build(tt.target)
			tenants = append(tenants, target)
			c := admission(cluster, tenants, &target, everyNamespace)
			if got := c.Status == metav1.ConditionTrue; got != tt.admitted {
				t.Fatalf("admitted = %v (%s), want %v", got, c.Message, tt.admitted)
			}
			if !strings.Contains(c.Message, tt.message) {
				t.Errorf("message %q lacks %q", c.Message, tt.message)
			}
		})
	}

	// Headroom makes the partitionable memory a number no unit divides: it is rounded for humans.
	tight := cluster.DeepCopy()
	tight.Spec.Capacity = v1.NodeCapacity{Memory: resource.MustParse("256Mi"), HeadroomPercent: ptr.To[int32](10)}
	tight.Status.NodeCount = 1
	small := build(spec{name: "a", memory: "16Mi"})
	if c := admission(tight, []v1.TenantSLO{small}, &small, everyNamespace); !strings.Contains(c.Message, "16Mi of 230.4 MiB memory") {
		t.Errorf("message %q does not round the partitionable memory", c.Message)
	}

	empty := cluster.DeepCopy()
	empty.Status.NodeCount = 0
	target := build(spec{name: "a"})
	if c := admission(empty, nil, &target, everyNamespace); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "no nodes") {
		t.Errorf("a cluster without nodes: %+v", c)
	}
}

// everyNamespace is the namespace selection of a cluster without tenants.namespaceSelector.
func everyNamespace(string) bool { return true }

// TestGovernance: the cluster's tenants rules refuse with their own reasons and messages, and
// tenants they exclude reserve nothing.
func TestGovernance(t *testing.T) {
	cluster := &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "shared"},
		Spec: v1.CacheClusterSpec{
			Capacity: v1.NodeCapacity{Memory: resource.MustParse("10Gi"), Bandwidth: resource.MustParse("100M"), HeadroomPercent: ptr.To[int32](0)},
			Tenants: v1.TenantGovernance{
				NamespaceSelector:               &metav1.LabelSelector{MatchLabels: map[string]string{"cache": "shared"}},
				MaxPriority:                     500,
				MaxTenantsPerNamespace:          2,
				MaxGuaranteedMemoryPerNamespace: ptr.To(resource.MustParse("4Gi")),
			},
		},
		Status: v1.CacheClusterStatus{NodeCount: 2},
	}
	selected := func(ns string) bool { return ns != "outsider" }
	t0 := time.Unix(1_700_000_000, 0)
	tenant := func(ns, name string, age int, memory string, priority int32) v1.TenantSLO {
		tslo := v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}}
		tslo.Spec.ClusterRef = v1.ClusterReference{Namespace: "platform", Name: "shared"}
		tslo.Spec.Priority = priority
		if memory != "" {
			tslo.Spec.Memory.Min = ptr.To(resource.MustParse(memory))
		}
		return tslo
	}
	for _, tt := range []struct {
		name         string
		others       []v1.TenantSLO
		target       v1.TenantSLO
		wantReason   string
		wantMessages []string
	}{
		{"namespace not selected", nil, tenant("outsider", "a", 0, "", 100), v1.ReasonNamespaceNotAllowed,
			[]string{"tenants.namespaceSelector cache=shared", "namespace outsider is not one of them"}},
		{"priority above the maximum", nil, tenant("team-a", "a", 0, "", 1000), v1.ReasonPriorityAboveLimit,
			[]string{"priority 1000 is above 500, the tenants.maxPriority of CacheCluster platform/shared"}},
		{"third tenant of a namespace", []v1.TenantSLO{tenant("team-a", "a", 0, "", 100), tenant("team-a", "b", 1, "", 100)},
			tenant("team-a", "c", 2, "", 100), v1.ReasonNamespaceQuotaExceeded,
			[]string{"namespace team-a already has 2 TenantSLOs admitted", "tenants.maxTenantsPerNamespace"}},
		{"another namespace is not counted", []v1.TenantSLO{tenant("team-a", "a", 0, "", 100), tenant("team-a", "b", 1, "", 100)},
			tenant("team-b", "c", 2, "", 100), v1.ReasonAdmitted, nil},
		{"namespace memory above the limit", []v1.TenantSLO{tenant("team-a", "a", 0, "3Gi", 100)},
			tenant("team-a", "b", 1, "2Gi", 100), v1.ReasonNamespaceQuotaExceeded,
			[]string{"memory.min 2Gi would bring namespace team-a to 5Gi guaranteed", "tenants.maxGuaranteedMemoryPerNamespace 4Gi"}},
		{"excluded tenants reserve nothing", []v1.TenantSLO{tenant("outsider", "x", 0, "4Gi", 100), tenant("team-a", "y", 0, "4Gi", 900)},
			tenant("team-a", "b", 1, "4Gi", 100), v1.ReasonAdmitted, nil},
		{"capacity still holds", []v1.TenantSLO{tenant("team-a", "a", 0, "4Gi", 100), tenant("team-b", "b", 0, "4Gi", 100), tenant("team-c", "c", 0, "4Gi", 100), tenant("team-d", "d", 0, "4Gi", 100), tenant("team-e", "e", 0, "4Gi", 100)},
			tenant("team-f", "f", 1, "4Gi", 100), v1.ReasonInsufficientCapacity, []string{"memory.min 4Gi does not fit"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := governanceRefusal(cluster, &tt.target, selected)
			if c == nil {
				decided := admission(cluster, append(tt.others, tt.target), &tt.target, selected)
				c = &decided
			}
			if c.Reason != tt.wantReason {
				t.Fatalf("reason %s (%s), want %s", c.Reason, c.Message, tt.wantReason)
			}
			for _, want := range tt.wantMessages {
				if !strings.Contains(c.Message, want) {
					t.Errorf("message %q lacks %q", c.Message, want)
				}
			}
		})
	}
}
