package allocation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// nodeTenants is what one node's plan lists: its partitions, and the tenants with none there.
type nodeTenants struct {
	partitions []v1.PartitionPlan
	remote     []v1.RemoteTenant
}

// tenantsByNode turns an allocation into each of nodes' plan contents: partitions with memory,
// with the tenant's eviction policy and limits, and routes to every node holding a partition
// of the tenant whose sidecar address is known (weights from the allocation). Every
// partition's routes hold its own node (withOwnRoute). Every other node lists the tenant as
// remote with the same routes, so a client whose connection lands there can log in and be
// forwarded. While no node holding the tenant has a known address, the remote routes name
// those nodes by their node names (unroutable): the client still logs in, and each request
// gets the sidecar's error for a peer it cannot reach (retryable: the next plan carries the
// address), instead of WRONGPASS for a tenant the node does not know.
func tenantsByNode(v view, tenants map[string]*v1.TenantSLO, sidecarHosts map[string]string, nodes []string) map[string]*nodeTenants {
	out := make(map[string]*nodeTenants, len(nodes))
	for _, n := range nodes {
		out[n] = &nodeTenants{}
	}
	at := func(node string) *nodeTenants {
		if out[node] == nil {
			out[node] = &nodeTenants{}
		}
		return out[node]
	}
	for id, parts := range v {
		t := tenants[id]
		if t == nil {
			continue
		}
		eviction := t.Spec.EvictionPolicy
		if eviction == "" {
			eviction = v1.EvictionLRU
		}
		routes := routesOf(parts, sidecarHosts)
		held := make(map[string]bool, len(parts))
		for _, p := range parts {
			if p.MemoryBytes <= 0 {
				continue
			}
			held[p.Node] = true
			pp := v1.PartitionPlan{
				Tenant:         id,
				Memory:         *resource.NewQuantity(p.MemoryBytes, resource.BinarySI),
				EvictionPolicy: eviction,
				Routes:         withOwnRoute(routes, p),
			}
			if p.BandwidthLimitBytesPerSecond > 0 {
				pp.BandwidthLimit = resource.NewQuantity(p.BandwidthLimitBytesPerSecond, resource.DecimalSI)
			}
			if p.OpsLimitPerSecond > 0 {
				pp.OpsLimit = ptr.To(p.OpsLimitPerSecond)
			}
			at(p.Node).partitions = append(at(p.Node).partitions, pp)
		}
		if len(routes) == 0 {
			routes = unroutable(parts)
		}
		if len(routes) == 0 {
			continue // no partition with memory: no key has anywhere to go
		}
		for _, n := range nodes {
			if !held[n] {
				out[n].remote = append(out[n].remote, v1.RemoteTenant{Tenant: id, Routes: routes})
			}
		}
	}
	return out
}

// routesOf lists a tenant's partitions as routes, sorted by node, at most MaxRoutesPerTenant
// (the largest weights) of them.
func routesOf(parts []planning.Partition, sidecarHosts map[string]string) []v1.TenantRoute {
	var routes []v1.TenantRoute
	for _, p := range parts {
		host, known := sidecarHosts[p.Node]
		if p.MemoryBytes <= 0 || !known {
			continue
		}
		routes = append(routes, v1.TenantRoute{NodeName: p.Node, Host: host, Port: objects.PeerPort, Weight: p.RoutingWeight})
	}
	if len(routes) > v1.MaxRoutesPerTenant {
		slices.SortFunc(routes, func(a, b v1.TenantRoute) int { return cmp.Compare(b.Weight, a.Weight) })
		routes = routes[:v1.MaxRoutesPerTenant]
	}
	slices.SortFunc(routes, func(a, b v1.TenantRoute) int { return cmp.Compare(a.NodeName, b.NodeName) })
	return routes
}

// unroutable lists a tenant's partitions as routes to their node names, which stand for the
// sidecars' addresses while those are unknown, sorted by node, at most MaxRoutesPerTenant (the
// largest weights) of them.
func unroutable(parts []planning.Partition) []v1.TenantRoute {
	hosts := make(map[string]string, len(parts))
	for _, p := range parts {
		hosts[p.Node] = p.Node
	}
	return routesOf(parts, hosts)
}

// withOwnRoute returns routes with the route of p's own node first, as the schema requires;
// routesOf leaves it out when that node's sidecar has no address yet (or when more than
// MaxRoutesPerTenant nodes hold the tenant). A sidecar serves its own route from its local
// engine and never dials it, so without an address its host is the node name. When the list
// is full, the own route takes the place of the lightest other one.
func withOwnRoute(routes []v1.TenantRoute, p planning.Partition) []v1.TenantRoute {
	own := v1.TenantRoute{NodeName: p.Node, Host: p.Node, Port: objects.PeerPort, Weight: p.RoutingWeight}
	others := slices.DeleteFunc(slices.Clone(routes), func(r v1.TenantRoute) bool {
		if r.NodeName == p.Node {
			own = r
			return true
		}
		return false
	})
	if len(others) >= v1.MaxRoutesPerTenant {
		lightest := 0
		for i := range others {
			if others[i].Weight < others[lightest].Weight {
				lightest = i
			}
		}
		others = slices.Delete(others, lightest, lightest+1)
	}
	return append([]v1.TenantRoute{own}, others...)
}

// planApply is what the loop owns of a CacheNodePlan.
type planApply struct {
	Metadata planApplyMetadata `json:"metadata"`
	Spec     planApplySpec     `json:"spec"`
}

type planApplyMetadata struct {
	Annotations map[string]string `json:"annotations"`
}

type planApplySpec struct {
	PlanGeneration int64              `json:"planGeneration"`
	PartitionCount int32              `json:"partitionCount"`
	Partitions     []v1.PartitionPlan `json:"partitions"`
	RemoteTenants  []v1.RemoteTenant  `json:"remoteTenants"`
}

// writePlans writes every node's partitions and remote tenants where they changed, bumping planGeneration, and
// the spec hash where it changed; it returns each node's plan generation after the writes,
// and a problem when some plan lists fewer remote tenants than it should (capRemoteTenants).
func (l *Loop) writePlans(ctx context.Context, in *inputs, desired view, hash string) (map[string]int64, []problem, error) {
	tenants := make(map[string]*v1.TenantSLO, len(in.admitted))
	for _, t := range in.admitted {
		tenants[t.TenantID()] = t
	}
	nodes := make([]string, len(in.plans))
	for i := range in.plans {
		nodes[i] = in.plans[i].Spec.NodeName
	}
	byNode := tenantsByNode(desired, tenants, in.sidecarHosts, nodes)
	problems := capRemoteTenants(byNode, l.opts.MaxRemoteTenants)
	generations := make(map[string]int64, len(in.plans))
	now := time.Now().UTC().Format(time.RFC3339)
	gvk := v1.GroupVersion.WithKind("CacheNodePlan")
	var errs []error
	for i := range in.plans {
		p := &in.plans[i]
		var spec v1.CacheNodePlanSpec
		spec.SetPartitions(byNode[p.Spec.NodeName].partitions)
		spec.SetRemoteTenants(byNode[p.Spec.NodeName].remote)
		generations[p.Spec.NodeName] = p.Spec.PlanGeneration
		// The cache keeps only a digest of a plan's remote tenants (objects.CompactPlan).
		partitionsChanged := !equality.Semantic.DeepEqual(spec.Partitions, p.Spec.Partitions) ||
			objects.RemoteTenantsDigest(spec.RemoteTenants) != objects.PlanRemoteTenantsDigest(p)
		if !partitionsChanged && p.Annotations[objects.AnnotationSpecHash] == hash {
			continue
		}
		next, writtenAt := p.Spec.PlanGeneration, p.Annotations[objects.AnnotationPlanWrittenAt]
		if partitionsChanged {
			next = p.Spec.PlanGeneration + 1
		}
		if partitionsChanged || writtenAt == "" {
			writtenAt = now
		}
		body := planApply{
			Metadata: planApplyMetadata{Annotations: map[string]string{objects.AnnotationPlanWrittenAt: writtenAt, objects.AnnotationSpecHash: hash}},
			Spec:     planApplySpec{PlanGeneration: next, PartitionCount: *spec.PartitionCount, Partitions: spec.Partitions, RemoteTenants: spec.RemoteTenants},
		}
		if body.Spec.Partitions == nil {
			body.Spec.Partitions = []v1.PartitionPlan{}
		}
		if body.Spec.RemoteTenants == nil {
			body.Spec.RemoteTenants = []v1.RemoteTenant{}
		}
		if err := ssa.ApplyFields(ctx, l.client, gvk, client.ObjectKeyFromObject(p), body, objects.FieldOwnerAllocator); err != nil {
			errs = append(errs, err)
			continue
		}
		generations[p.Spec.NodeName] = next
	}
	return generations, problems, errors.Join(errs...)
}

// capRemoteTenants keeps at most limit remote tenants in each node's plan, the first by
// tenant ID, since the API server refuses a longer list and with it the node's partitions.
// It returns the problem that says which plans lost which tenants (none when all fit).
func capRemoteTenants(byNode map[string]*nodeTenants, limit int) []problem {
	var capped []string
	left := map[string]bool{}
	for node, nt := range byNode {
		if len(nt.remote) <= limit {
			continue
		}
		slices.SortFunc(nt.remote, func(a, b v1.RemoteTenant) int { return cmp.Compare(a.Tenant, b.Tenant) })
		for _, r := range nt.remote[limit:] {
			left[r.Tenant] = true
		}
		nt.remote = nt.remote[:limit]
		capped = append(capped, node)
	}
	if len(capped) == 0 {
		return nil
	}
	slices.Sort(capped)
	return []problem{{conditions.ReasonTooManyRemoteTenants, fmt.Sprintf(
		"the plans of %d nodes (%s) can list at most %d tenants without a partition there (the CacheNodePlan schema's bound) and leave out %d tenants (%s): their clients cannot log in on those nodes; split the tenants over more CacheClusters",
		len(capped), objects.ListNames(capped), limit, len(left), objects.ListNames(slices.Sorted(maps.Keys(left))))}}
}

// lateNodes lists the nodes whose sidecar has not applied a plan written more than deadline
// ago (plans written by this allocation are not late yet).
func lateNodes(plans []v1.CacheNodePlan, generations map[string]int64, deadline time.Duration, now time.Time) []string {
	var late []string
	for i := range plans {
		p := &plans[i]
		if generations[p.Spec.NodeName] != p.Spec.PlanGeneration || p.Status.AppliedGeneration >= p.Spec.PlanGeneration {
			continue
		}
		written, err := time.Parse(time.RFC3339, p.Annotations[objects.AnnotationPlanWrittenAt])
		if err != nil || now.Sub(written) > deadline {
			late = append(late, p.Spec.NodeName)
		}
	}
	return late
}
