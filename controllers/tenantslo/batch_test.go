package tenantslo_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

// TestCredentialsWrittenOnceForManyTenants: twelve tenants get their passwords before their
// cluster exists; when it comes, its credentials Secret is created once with all twelve
// hashes (each verifying its tenant's password) and not written again, and every tenant
// goes past CredentialsPending.
func TestCredentialsWrittenOnceForManyTenants(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "batch-cache"), env.Namespace(t, "batch-team")
	nodes(t, "batch", "batch-a")
	const n = 12
	tenants := make([]*v1.TenantSLO, n)
	for i := range tenants {
		tenants[i] = tenant(teamNS, fmt.Sprintf("t%02d", i), cacheNS, "shared", "")
		create(t, tenants[i])
	}
	passwords := map[string]string{}
	testenv.Eventually(t, timeout, func() error {
		for _, slo := range tenants {
			own := &corev1.Secret{}
			if err := get(own, teamNS, slo.Name+"-cache-credentials"); err != nil {
				return err
			}
			passwords[slo.TenantID()] = string(own.Data["password"])
		}
		return nil
	})
	// Let the operator's cache hold every tenant's Secret before the cluster comes.
	time.Sleep(time.Second)
	mark := env.Requests.Mark()
	cluster(t, cacheNS, "shared", "batch", v1.EngineRedis, 1)
	for _, slo := range tenants {
		conditionOf(t, slo, v1.ConditionReady, metav1.ConditionFalse, conditions.ReasonPartitionsPending)
	}
	hashes := &corev1.Secret{}
	if err := get(hashes, cacheNS, "shared-tenant-credentials"); err != nil {
		t.Fatal(err)
	}
	if len(hashes.Data) != n+1 {
		t.Errorf("the credentials Secret has %d keys, want %d tenants and the peer token", len(hashes.Data), n)
	}
	for id, password := range passwords {
		key, _ := credentials.SecretKey(id)
		if !credentials.Verify(string(hashes.Data[key]), password) {
			t.Errorf("the hash of %s does not verify its password", id)
		}
	}
	// A create names its Secret in the body, not the path: the namespace's creates are
	// counted against the Secrets it holds (the cluster's CA and peer certificate too), each
	// created once, and the credentials Secret is never written after its create.
	creates := env.Requests.Since(mark, func(r testenv.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/namespaces/"+cacheNS+"/secrets")
	})
	rewrites := env.Requests.Since(mark, func(r testenv.Request) bool {
		return r.Write() && strings.HasSuffix(r.Path, "/namespaces/"+cacheNS+"/secrets/shared-tenant-credentials")
	})
	var secrets corev1.SecretList
	if err := env.Client.List(ctx(), &secrets, client.InNamespace(cacheNS)); err != nil {
		t.Fatal(err)
	}
	if len(creates) != len(secrets.Items) || len(rewrites) != 0 {
		t.Errorf("%d creates for the %d Secrets of the cluster's namespace and %d writes of the credentials Secret after its create for %d tenants, want one create each and no write: %v %v",
			len(creates), len(secrets.Items), len(rewrites), n, creates, rewrites)
	}
}

// TestPlanEventsWakeOnlyChangedTenants: eight tenants share one node's plan; once the
// operator has settled, the sidecar reports one tenant's partition running: that tenant
// becomes Ready and the TenantSLO controller reconciles it (and after its own status write),
// not the seven tenants whose partitions did not change.
func TestPlanEventsWakeOnlyChangedTenants(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "wake-cache"), env.Namespace(t, "wake-team")
	nodes(t, "wake", "wake-a")
	cluster(t, cacheNS, "shared", "wake", v1.EngineRedis, 1)
	const n = 8
	tenants := make([]*v1.TenantSLO, n)
	for i := range tenants {
		tenants[i] = tenant(teamNS, fmt.Sprintf("t%d", i), cacheNS, "shared", "")
		create(t, tenants[i])
	}
	for _, slo := range tenants {
		conditionOf(t, slo, v1.ConditionReady, metav1.ConditionFalse, conditions.ReasonPartitionsPending)
	}
	plan := &v1.CacheNodePlan{}
	if err := get(plan, cacheNS, "shared-wake-a"); err != nil {
		t.Fatal(err)
	}
	if len(plan.Spec.Partitions) != n {
		t.Fatalf("the plan holds %d partitions, want %d", len(plan.Spec.Partitions), n)
	}
	// Settled: no reconcile for longer than the plan batch delay.
	before := testenv.Reconciles(t, "tenantslo")
	testenv.Eventually(t, time.Minute, func() error {
		time.Sleep(6 * time.Second)
		now := testenv.Reconciles(t, "tenantslo")
		if now != before {
			before = now
			return errors.New("the TenantSLO controller is still reconciling")
		}
		return nil
	})
	running := tenants[0].TenantID()
	plan.Status.AppliedGeneration = plan.Spec.PlanGeneration
	for _, p := range plan.Spec.Partitions {
		if p.Tenant == running {
			plan.Status.Partitions = []v1.PartitionStatus{{Tenant: p.Tenant, State: v1.PartitionRunning, MemoryLimitBytes: p.Memory.Value()}}
		}
	}
	if err := env.Client.Status().Update(ctx(), plan); err != nil {
		t.Fatal(err)
	}
	conditionOf(t, tenants[0], v1.ConditionReady, metav1.ConditionTrue, conditions.ReasonPartitionsRunning)
	time.Sleep(6 * time.Second)
	if woken := testenv.Reconciles(t, "tenantslo") - before; woken > 3 {
		t.Errorf("one tenant's partition started and the TenantSLO controller reconciled %v times (%d tenants in the plan)", woken, n)
	}
}
