package allocation_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// TestRemoteTenantsBoundIsTheSchemas: the API server takes a plan listing
// DefaultMaxRemoteTenants remote tenants and refuses one more, so the loop's bound is the
// schema's.
func TestRemoteTenantsBoundIsTheSchemas(t *testing.T) {
	ns := env.Namespace(t, "remote-bound")
	plan := &v1.CacheNodePlan{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bound"},
		Spec:       v1.CacheNodePlanSpec{ClusterName: "shared", NodeName: "bound-a", Engine: v1.EngineRedis, CredentialsSecret: "shared-credentials"},
	}
	remote := make([]v1.RemoteTenant, allocation.DefaultMaxRemoteTenants+1)
	for i := range remote {
		remote[i] = v1.RemoteTenant{Tenant: fmt.Sprintf("team/t-%05d", i), Routes: []v1.TenantRoute{{NodeName: "bound-b", Host: "10.0.0.2", Port: 7380, Weight: 1_000_000}}}
	}
	plan.Spec.SetPartitions(nil)
	plan.Spec.SetRemoteTenants(remote)
	if err := env.Client.Create(ctx(), plan.DeepCopy()); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "remoteTenants") {
		t.Fatalf("a plan with %d remote tenants: %v, want refused as invalid", len(remote), err)
	}
	plan.Spec.SetRemoteTenants(remote[:allocation.DefaultMaxRemoteTenants])
	create(t, plan)
}

// TestTooManyRemoteTenantsIsReported: with a bound of one remote tenant per plan, four
// tenants confined to one node each on two nodes cannot all be listed where they have no
// partition. Every plan is still written with its partitions and at most one remote tenant,
// and the cluster is Degraded TooManyRemoteTenants, naming the tenants left out, which are
// exactly those some plan does not list. With the schema's bound again, every plan lists
// every tenant and the condition clears; then two more allocations write no plan (the cache
// keeps only the remote tenants' digest, and it tells the loop nothing changed).
func TestTooManyRemoteTenantsIsReported(t *testing.T) {
	capped := operatorOptions
	capped.Allocation.MaxRemoteTenants = 1
	if err := env.RestartOperator(capped); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.RestartOperator(operatorOptions); err != nil {
			t.Fatal(err)
		}
	}()
	cacheNS, teamNS := env.Namespace(t, "remote-cache"), env.Namespace(t, "remote-team")
	nodes := []string{"remote-a", "remote-b"}
	for i, name := range nodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "remote"}}})
		sidecarPod(t, cacheNS, "shared", name, fmt.Sprintf("10.6.0.%d", i+1))
	}
	create(t, sharedCluster(cacheNS, "remote", "", 100000, v1.PolicyEqual))
	tenants := []string{"t1", "t2", "t3", "t4"}
	for _, name := range tenants {
		create(t, strictTenant(teamNS, name, cacheNS, "64Mi", v1.Placement{MaxNodes: 1}))
	}
	// unlisted returns the tenants some written plan lists neither as a partition nor as a
	// remote tenant, after checking every plan is written, within bound and places everyone.
	unlisted := func(bound int) ([]string, error) {
		plans, err := plansOf(cacheNS, nodes...)
		if err != nil {
			return nil, err
		}
		placed, missing := map[string]bool{}, map[string]bool{}
		for node, spec := range plans {
			if spec.PlanGeneration < 1 {
				return nil, fmt.Errorf("plan of %s not written yet", node)
			}
			if len(spec.RemoteTenants) > bound {
				return nil, fmt.Errorf("plan of %s lists %d remote tenants, above %d", node, len(spec.RemoteTenants), bound)
			}
			listed := map[string]bool{}
			for _, p := range spec.Partitions {
				listed[p.Tenant], placed[p.Tenant] = true, true
			}
			for _, r := range spec.RemoteTenants {
				listed[r.Tenant] = true
			}
			for _, name := range tenants {
				if id := teamNS + "/" + name; !listed[id] {
					missing[id] = true
				}
			}
		}
		if len(placed) != len(tenants) {
			return nil, fmt.Errorf("the plans place %d of %d tenants", len(placed), len(tenants))
		}
		var out []string
		for id := range missing {
			out = append(out, id)
		}
		return out, nil
	}
	cluster := &v1.CacheCluster{}
	testenv.Eventually(t, timeout, func() error {
		missing, err := unlisted(1)
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			return fmt.Errorf("every plan lists every tenant, with a bound of 1 for %d tenants on %d nodes", len(tenants), len(nodes))
		}
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		// The cluster names no Prometheus: that problem comes first and gives the reason.
		c := condition(cluster.Status.Conditions, v1.ConditionDegraded)
		if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "can list at most 1 tenants without a partition there") {
			return fmt.Errorf("Degraded %+v, want True and saying the plans cannot list every tenant", c)
		}
		want := fmt.Sprintf("leave out %d tenants (", len(missing))
		for _, id := range missing {
			if !strings.Contains(c.Message, id) {
				return fmt.Errorf("Degraded message %q does not name %s, left out of a plan", c.Message, id)
			}
		}
		if !strings.Contains(c.Message, want) {
			return fmt.Errorf("Degraded message %q, want it to say %q", c.Message, want)
		}
		return nil
	})

	if err := env.RestartOperator(operatorOptions); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		missing, err := unlisted(allocation.DefaultMaxRemoteTenants)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("plans still leave out %v", missing)
		}
		if err := get(cluster, cacheNS, "shared"); err != nil {
			return err
		}
		if c := condition(cluster.Status.Conditions, v1.ConditionDegraded); strings.Contains(c.Message, "tenants without a partition there") {
			return fmt.Errorf("Degraded %+v after the bound was raised", c)
		}
		return nil
	})
	// Let the allocation that listed everyone finish its writes.
	time.Sleep(6 * time.Second)
	mark := env.Requests.Mark()
	time.Sleep(11 * time.Second)
	planWrites := env.Requests.Since(mark, testenv.WritesUnder("/apis/cacheqos.io/v1alpha1/namespaces/"+cacheNS+"/cachenodeplans/"))
	clusterWrites := env.Requests.Since(mark, func(r testenv.Request) bool {
		return r.FieldManager == objects.FieldOwnerAllocator && testenv.WritesUnder("/apis/cacheqos.io/v1alpha1/namespaces/"+cacheNS+"/cacheclusters/shared/status")(r)
	})
	if len(clusterWrites) < 2 {
		t.Fatalf("%d cluster status writes in two intervals: the allocations did not run", len(clusterWrites))
	}
	if len(planWrites) != 0 {
		t.Errorf("steady allocations sent %d plan writes: %v", len(planWrites), planWrites)
	}
}
