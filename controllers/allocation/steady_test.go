package allocation_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// TestSteadyAllocationsWriteNoTenantStatus: once the tenants are placed and nothing changes,
// the allocations that follow (every 5 s) write no tenant's status, not even an apply that
// would change nothing: over two intervals the allocation loop sends no TenantSLO status
// request and the TenantSLOs keep their resourceVersions, while the cluster's status (its
// lastPlan.time moves on) shows the allocations ran.
func TestSteadyAllocationsWriteNoTenantStatus(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "steady-cache"), env.Namespace(t, "steady-team")
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "steady-a", Labels: map[string]string{"pool": "steady"}}})
	sidecarPod(t, cacheNS, "shared", "steady-a", "10.9.0.1")
	create(t, sharedCluster(cacheNS, "steady", "", 100000, v1.PolicyEqual))
	names := []string{"one", "two", "three"}
	for _, name := range names {
		create(t, strictTenant(teamNS, name, cacheNS, "64Mi", v1.Placement{}))
	}
	versions := func() (map[string]string, error) {
		out := map[string]string{}
		for _, name := range names {
			slo := &v1.TenantSLO{}
			if err := get(slo, teamNS, name); err != nil {
				return nil, err
			}
			if slo.Status.Allocation == nil || slo.Status.Allocation.Memory.Value() == 0 {
				return nil, fmt.Errorf("%s has no allocation yet", name)
			}
			out[name] = slo.ResourceVersion
		}
		return out, nil
	}
	var before map[string]string
	testenv.Eventually(t, timeout, func() (err error) {
		before, err = versions()
		return err
	})
	// Let the allocation that placed them finish its writes.
	time.Sleep(6 * time.Second)
	before, err := versions()
	if err != nil {
		t.Fatal(err)
	}
	mark := env.Requests.Mark()
	time.Sleep(11 * time.Second)

	allocator := func(r testenv.Request) bool { return r.Write() && r.FieldManager == objects.FieldOwnerAllocator }
	tenantWrites := env.Requests.Since(mark, func(r testenv.Request) bool {
		return allocator(r) && testenv.WritesUnder("/apis/cacheqos.io/v1alpha1/namespaces/"+teamNS+"/tenantslos/")(r)
	})
	clusterWrites := env.Requests.Since(mark, func(r testenv.Request) bool {
		return allocator(r) && testenv.WritesUnder("/apis/cacheqos.io/v1alpha1/namespaces/"+cacheNS+"/cacheclusters/shared/status")(r)
	})
	if len(clusterWrites) < 2 {
		t.Fatalf("%d cluster status writes in two intervals: the allocations did not run", len(clusterWrites))
	}
	if len(tenantWrites) != 0 {
		t.Errorf("steady allocations sent %d tenant status requests: %v", len(tenantWrites), tenantWrites)
	}
	after, err := versions()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Errorf("tenant resourceVersions changed in steady state: %v then %v", before, after)
	}
}
