package allocation

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
)

// memoryFloorShare of a node's partitionable memory: smaller memory changes are noise,
// however large relative to a small partition (the control loop's MinChangeBytes).
const memoryFloorShare = 0.01

// specHash identifies what a plan was made for: the cluster's and every admitted tenant's
// spec generation, and the nodes.
func specHash(in *inputs) string {
	h := sha256.New()
	fmt.Fprintf(h, "cluster %s %d\n", in.key, in.cluster.Generation)
	for _, t := range in.admitted {
		fmt.Fprintf(h, "tenant %s %s %d\n", t.TenantID(), t.UID, t.Generation)
	}
	for _, n := range in.nodes {
		fmt.Fprintf(h, "node %s\n", n)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// specsChanged reports whether some plan was made for other specs than hash.
func specsChanged(in *inputs, hash string) bool {
	return slices.ContainsFunc(in.plans, func(p v1.CacheNodePlan) bool {
		return p.Annotations[objects.AnnotationSpecHash] != hash
	})
}
