package tenantslo

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
)

// guarantees are what admitting a tenant reserves.
type guarantees struct {
	memory, bandwidth  int64
	minNodes, maxNodes int32
}

func guaranteesOf(t *v1.TenantSLO) guarantees {
	g := guarantees{minNodes: t.Spec.Placement.MinNodes, maxNodes: t.Spec.Placement.MaxNodes}
	if g.minNodes <= 0 {
		g.minNodes = v1.DefaultMinNodes
	}
	g.memory, g.bandwidth = t.Guarantees()
	return g
}

func isAdmitted(t *v1.TenantSLO) bool {
	return meta.IsStatusConditionTrue(t.Status.Conditions, v1.ConditionAdmitted)
}

// admissionOrder sorts tenants for admission: those admitted already keep their guarantees,
// so they come first; then first come, first served by creation time, then by namespace and
// name so the order never depends on the cache.
func admissionOrder(tenants []*v1.TenantSLO) {
	slices.SortStableFunc(tenants, func(a, b *v1.TenantSLO) int {
		if aa, ba := isAdmitted(a), isAdmitted(b); aa != ba {
			if aa {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.TenantID(), b.TenantID())
	})
}

// admission decides whether target fits in cluster next to the other tenants, walking them in
// admissionOrder and reserving each admitted tenant's guaranteed memory and bandwidth against
// the cluster's capacity (nodes x per-node partitionable memory and bandwidth). A tenant that
// does not fit is skipped, and later ones may still fit. The condition's message carries the
// numbers either way.
//
// The cluster's tenants governance comes first: tenants of namespaces it does not admit, or
// asking for a priority above its maximum, never count (allowedNamespace says which namespaces
// its namespaceSelector selects), and each namespace's admitted tenants and guaranteed memory
// are bounded before capacity is.
func admission(cluster *v1.CacheCluster, tenants []v1.TenantSLO, target *v1.TenantSLO, allowedNamespace func(string) bool) metav1.Condition {
	governance := cluster.Spec.Tenants
	var maxNamespaceMemory int64
	if m := governance.MaxGuaranteedMemoryPerNamespace; m != nil {
		maxNamespaceMemory = m.Value()
	}
	nodes := int64(cluster.Status.NodeCount)
	perNodeMemory := cluster.Spec.Capacity.PartitionableMemory()
	perNodeBandwidth := cluster.Spec.Capacity.Bandwidth.Value()
	memoryCapacity, bandwidthCapacity := nodes*perNodeMemory, nodes*perNodeBandwidth

	// Pointers, not copies: this runs on every reconcile, over every tenant of the cluster.
	candidates := make([]*v1.TenantSLO, 0, len(tenants)+1)
	for i := range tenants {
		t := &tenants[i]
		if t.DeletionTimestamp.IsZero() && t.TenantID() != target.TenantID() && supported(cluster, t) &&
			governanceRefusal(cluster, t, allowedNamespace) == nil {
			candidates = append(candidates, t)
		}
	}
	candidates = append(candidates, target)
	admissionOrder(candidates)

	var usedMemory, usedBandwidth int64
	admittedBefore := 0
	namespaceTenants, namespaceMemory := map[string]int32{}, map[string]int64{}
	for _, t := range candidates {
		g := guaranteesOf(t)
		reason, refusal := "", v1.ReasonInsufficientCapacity
		switch {
		case governance.MaxTenantsPerNamespace > 0 && namespaceTenants[t.Namespace] >= governance.MaxTenantsPerNamespace:
			refusal = v1.ReasonNamespaceQuotaExceeded
			reason = fmt.Sprintf("namespace %s already has %d TenantSLOs admitted on this cluster, the most its tenants.maxTenantsPerNamespace allows",
				t.Namespace, namespaceTenants[t.Namespace])
		case maxNamespaceMemory > 0 && namespaceMemory[t.Namespace]+g.memory > maxNamespaceMemory:
			refusal = v1.ReasonNamespaceQuotaExceeded
			reason = fmt.Sprintf("memory.min %s would bring namespace %s to %s guaranteed on this cluster, above its tenants.maxGuaranteedMemoryPerNamespace %s",
				objects.Bytes(g.memory), t.Namespace, objects.Bytes(namespaceMemory[t.Namespace]+g.memory), objects.Bytes(maxNamespaceMemory))
		case nodes == 0:
			reason = "the cluster runs on no nodes yet (its nodeSelector and tolerations select none)"
		case int64(g.minNodes) > nodes:
			reason = fmt.Sprintf("placement.minNodes %d exceeds the cluster's %d nodes", g.minNodes, nodes)
		case g.maxNodes > 0 && g.memory > int64(g.maxNodes)*perNodeMemory:
			reason = fmt.Sprintf("memory.min %s exceeds what placement.maxNodes %d nodes hold (%d x %s)",
				objects.Bytes(g.memory), g.maxNodes, g.maxNodes, objects.Bytes(perNodeMemory))
		case usedMemory+g.memory > memoryCapacity:
			reason = fmt.Sprintf("memory.min %s does not fit: the cluster has %s of partitionable memory (%d nodes x %s), %s is guaranteed to %d tenants admitted before it, %s is free",
				objects.Bytes(g.memory), objects.Bytes(memoryCapacity), nodes, objects.Bytes(perNodeMemory),
				objects.Bytes(usedMemory), admittedBefore, objects.Bytes(memoryCapacity-usedMemory))
		case usedBandwidth+g.bandwidth > bandwidthCapacity:
			reason = fmt.Sprintf("bandwidth.guaranteed %s does not fit: the cluster has %s bytes/s (%d nodes x %s), %s is guaranteed to %d tenants admitted before it, %s is free",
				objects.Rate(g.bandwidth), objects.Rate(bandwidthCapacity), nodes, objects.Rate(perNodeBandwidth),
				objects.Rate(usedBandwidth), admittedBefore, objects.Rate(bandwidthCapacity-usedBandwidth))
		}
		if t.TenantID() != target.TenantID() {
			if reason == "" {
				usedMemory += g.memory
				usedBandwidth += g.bandwidth
				admittedBefore++
				namespaceTenants[t.Namespace]++
				namespaceMemory[t.Namespace] += g.memory
			}
			continue
		}
		if reason != "" {
			return metav1.Condition{Type: v1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: refusal, Message: reason}
		}
		usedMemory += g.memory
		usedBandwidth += g.bandwidth
		break
	}
	g := guaranteesOf(target)
	return metav1.Condition{Type: v1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1.ReasonAdmitted,
		Message: fmt.Sprintf("guaranteed memory %s and bandwidth %s reserved; %s of %s memory and %s of %s bytes/s are now guaranteed",
			objects.Bytes(g.memory), objects.Rate(g.bandwidth), objects.Bytes(usedMemory), objects.Bytes(memoryCapacity),
			objects.Rate(usedBandwidth), objects.Rate(bandwidthCapacity))}
}

// supported reports whether the cluster's engine offers the tenant's eviction policy.
func supported(cluster *v1.CacheCluster, t *v1.TenantSLO) bool {
	return cluster.Spec.Engine != v1.EngineMemcached || t.Spec.EvictionPolicy != v1.EvictionLFU
}

// governanceRefusal is the Admitted=False condition for a tenant the cluster's governance
// excludes whatever the other tenants ask (nil when it does not).
func governanceRefusal(cluster *v1.CacheCluster, t *v1.TenantSLO, allowedNamespace func(string) bool) *metav1.Condition {
	governance := cluster.Spec.Tenants
	switch {
	case !allowedNamespace(t.Namespace):
		return notAdmitted(v1.ReasonNamespaceNotAllowed, fmt.Sprintf("CacheCluster %s admits tenants of the namespaces its tenants.namespaceSelector %s selects, and namespace %s is not one of them",
			t.ClusterKey(), metav1.FormatLabelSelector(governance.NamespaceSelector), t.Namespace))
	case governance.MaxPriority > 0 && t.Spec.Priority > governance.MaxPriority:
		return notAdmitted(v1.ReasonPriorityAboveLimit, fmt.Sprintf("priority %d is above %d, the tenants.maxPriority of CacheCluster %s",
			t.Spec.Priority, governance.MaxPriority, t.ClusterKey()))
	}
	return nil
}
