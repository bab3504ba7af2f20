package objects

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// ClusterPlans lists the CacheNodePlans of cluster in namespace without copying them out of
// the operator's cache: the plans returned share their contents with the cache, so callers
// only read them. (Every plan lists every tenant of the cluster: at 2,000 tenants and 200
// nodes, one copy of all plans was tens of MiB, and the TenantSLO reconciler made one per
// reconcile.)
func ClusterPlans(ctx context.Context, c client.Reader, namespace, cluster string) ([]v1.CacheNodePlan, error) {
	var list v1.CacheNodePlanList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing CacheNodePlans: %w", err)
	}
	var out []v1.CacheNodePlan
	for _, p := range list.Items {
		if p.Spec.ClusterName == cluster {
			out = append(out, p)
		}
	}
	return out, nil
}

// AnnotationRemoteTenantsDigest exists only in the operator's cache, never on the API server:
// the cache keeps a CacheNodePlan's spec.remoteTenants as this digest of the list
// (RemoteTenantsDigest) and drops the list itself (CompactPlan). Only the allocation loop
// needs the list, to know whether its own would change the plan; for that the digest is
// enough, while the lists of every plan took tens of MiB at 2,000 tenants and 200 nodes.
const AnnotationRemoteTenantsDigest = "cacheqos.io/remote-tenants-digest"

// RemoteTenantsDigest identifies a list of remote tenants; an empty list and nil have the same.
func RemoteTenantsDigest(remote []v1.RemoteTenant) string {
	if remote == nil {
		remote = []v1.RemoteTenant{}
	}
	h := sha256.New()
	// Encoding plain structs of strings and numbers cannot fail, and hash.Hash never does.
	_ = json.NewEncoder(h).Encode(remote)
	return hex.EncodeToString(h.Sum(nil))
}

// PlanRemoteTenantsDigest is the digest of p's remote tenants: the one the cache kept for a
// plan read from the cache, or that of its list for a plan read from the API server.
func PlanRemoteTenantsDigest(p *v1.CacheNodePlan) string {
	if d, ok := p.Annotations[AnnotationRemoteTenantsDigest]; ok && p.Spec.RemoteTenants == nil {
		return d
	}
	return RemoteTenantsDigest(p.Spec.RemoteTenants)
}

// CompactPlan is the cache's transform for CacheNodePlans: it replaces spec.remoteTenants by
// AnnotationRemoteTenantsDigest. Applied again to a compacted plan, it keeps the digest.
func CompactPlan(obj any) (any, error) {
	p, ok := obj.(*v1.CacheNodePlan)
	if !ok {
		return obj, nil
	}
	digest := PlanRemoteTenantsDigest(p)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationRemoteTenantsDigest] = digest
	p.Spec.RemoteTenants = nil
	return p, nil
}
