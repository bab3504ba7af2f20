package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
)

// TestProduct drives the installed chart the way its users do. The tenant scenarios share the
// operator and run in parallel, each with its own CacheCluster; the faults then restart
// shared components, so they run alone; uninstalling comes last.
func TestProduct(t *testing.T) {
	t.Run("tenants", func(t *testing.T) {
		t.Run("FeasibleSLOsAreMet", testFeasibleSLOsAreMet)
		t.Run("NoisyNeighbour", testNoisyNeighbour)
		t.Run("Isolation", testIsolation)
		t.Run("StrictTenantHoldsUnderFlood", testStrictTenantHoldsUnderFlood)
		t.Run("TenantWithEditRole", testTenantWithEditRole)
		t.Run("ClientTLS", testClientTLS)
		t.Run("Scheduling", testScheduling)
		t.Run("Routing", testRouting)
		t.Run("PlanPropagation", testPlanPropagation)
	})
	// Alone, after the tenants: the upgrade's failure count and hit ratio are measured under
	// its own load only (the latency SLO of FeasibleSLOsAreMet missed once beside it), and
	// cordoning and killing nodes changes every cluster's plans.
	t.Run("UpgradeUnderLoad", testUpgradeUnderLoad)
	t.Run("NodeDrainAndLoss", testNodeDrainAndLoss)
	t.Run("Faults", testFaults)
	t.Run("DeletingFreesEverything", testDeletingFreesEverything)
	t.Run("UninstallLeavesNothingBehind", testUninstallLeavesNothingBehind)
}

// testIsolation: wrong credentials are refused, and two tenants using the same key names never
// see each other's data.
func testIsolation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "isolation")
	// Every node: clients reach the cluster through its Service, whichever sidecar it picks.
	c := testCluster(ns, "iso", nil)
	readyCluster(t, c)
	nsA, nsB := tenantNamespace(t, "team-a"), tenantNamespace(t, "team-b")
	a, b := tenant(nsA, "web", c, "0.5", "8Mi", "32Mi"), tenant(nsB, "web", c, "0.5", "8Mi", "32Mi")
	admittedTenant(t, a)
	admittedTenant(t, b)
	userA, passA := credentials(t, a)
	userB, passB := credentials(t, b)
	if userA != nsA+"/web" || userB != nsB+"/web" || passA == passB {
		t.Fatalf("credentials: %q and %q, passwords equal: %v", userA, userB, passA == passB)
	}
	addr := clientAddress(t, c)

	anonymous := dialRedis(t, addr)
	anonymous.expect("NOAUTH", "GET", "k")
	anonymous.expect("NOAUTH", "SET", "k", "v")
	// One connection per wrong pair: the proxy closes a connection after a few failures.
	for _, pair := range [][2]string{{userA, passB}, {userA, "not-the-password"}, {"nobody/none", passA}} {
		dialRedis(t, addr).expect("WRONGPASS", "AUTH", pair[0], pair[1])
	}

	clientA, clientB := login(t, addr, userA, passA), login(t, addr, userB, passB)
	clientA.expect("OK", "SET", "shared-name", "from-a")
	clientB.expect("OK", "SET", "shared-name", "from-b")
	clientA.expect("OK", "SET", "only-a", "secret")
	clientA.expect("from-a", "GET", "shared-name")
	clientB.expect("from-b", "GET", "shared-name")
	if v := clientB.do("GET", "only-a"); !v.Null {
		t.Errorf("tenant B read tenant A's key only-a: %q", v.Str)
	}
	clientB.expect("0", "EXISTS", "only-a")
	clientB.expect("0", "DEL", "only-a")
	clientA.expect("secret", "GET", "only-a")
	// SCAN walks the tenant's partitions one node after another, until the cursor is 0 again.
	var keys []string
	for cursor := "0"; ; {
		scan := clientB.do("SCAN", cursor, "COUNT", "1000")
		if len(scan.Elems) != 2 {
			t.Fatalf("SCAN reply %q", scan.Raw)
		}
		for _, k := range scan.Elems[1].Elems {
			keys = append(keys, string(k.Str))
		}
		if cursor = string(scan.Elems[0].Str); cursor == "0" {
			break
		}
	}
	if !slices.Equal(keys, []string{"shared-name"}) {
		t.Errorf("tenant B's SCAN sees %q, want only its own key", keys)
	}
}

// testFaults: the product keeps its plans through a sidecar pod deletion, an operator restart
// and a Prometheus outage, and an infeasible tenant gets a condition without disturbing others.
func testFaults(t *testing.T) {
	c, tns := readyClusterForTenants(t, "faults", "faults")
	web := tenant(tns, "web", c, "0.5", "16Mi", "64Mi")
	admittedTenant(t, web)
	addr := clientAddress(t, c)
	user, password := credentials(t, web)
	login(t, addr, user, password).expect("OK", "SET", "before-faults", "1")

	t.Run("sidecar pod deleted", func(t *testing.T) {
		before := plans(t, c)
		pods := sidecarPods(t, c)
		for _, p := range pods {
			if err := cluster.client.CoreV1().Pods(c.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		deleted := map[string]bool{}
		for _, p := range pods {
			deleted[p.Name] = true
		}
		waitFor(t, 2*time.Minute, fmt.Sprintf("%d new ready sidecar pods", len(pods)), func() (bool, error) {
			now := sidecarPods(t, c)
			for _, p := range now {
				if deleted[p.Name] || !podReady(&p) {
					return false, nil
				}
			}
			return len(now) == len(pods), nil
		})
		applied := func() (bool, error) {
			for _, p := range plans(t, c) {
				if p.Status.AppliedGeneration != p.Spec.PlanGeneration || p.Status.ObservedGeneration != p.Generation {
					return false, nil
				}
			}
			return true, nil
		}
		waitFor(t, time.Minute, "every plan applied again", applied)
		after := plans(t, c)
		if fmt.Sprint(partitionsOf(before)) != fmt.Sprint(partitionsOf(after)) {
			t.Errorf("partitions before %v, after the sidecar's restart %v", partitionsOf(before), partitionsOf(after))
		}
		waitCondition(t, tenantObject{web}, v1.ConditionReady, metav1.ConditionTrue, "", time.Minute)
		// The Service may send the client to a node without the tenant's partition, whose plan
		// lists it only once the operator knows the restarted sidecar's address to route to.
		settledPlanGenerations(t, c)
		waitFor(t, time.Minute, "every plan with the new addresses applied", applied)
		// Cache contents are soft state: the key may be gone, but the tenant is served again.
		login(t, addr, user, password).expect("OK", "SET", "after-sidecar-restart", "1")
	})

	t.Run("operator restarted without plan churn", func(t *testing.T) {
		// First let the running operator catch up with the sidecar's restart (its new pod
		// address is in the plans' routes).
		generations := settledPlanGenerations(t, c)
		operators, err := cluster.client.CoreV1().Pods(productNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
		if err != nil || len(operators.Items) == 0 {
			t.Fatalf("operator pods: %v (%d)", err, len(operators.Items))
		}
		for _, p := range operators.Items {
			if err := cluster.client.CoreV1().Pods(productNamespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		replaced := map[string]bool{}
		for _, p := range operators.Items {
			replaced[p.Name] = true
		}
		waitFor(t, 2*time.Minute, "a new operator pod ready", func() (bool, error) {
			pods, err := cluster.client.CoreV1().Pods(productNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
			if err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if !replaced[p.Name] && podReady(&p) {
					return true, nil
				}
			}
			return false, nil
		})
		// Three intervals: the new leader has allocated at least twice.
		time.Sleep(3 * allocationInterval)
		if after := planGenerations(t, c); fmt.Sprint(after) != fmt.Sprint(generations) {
			t.Errorf("plan generations before the restart %v, after %v: the new operator churned the plans", generations, after)
		}
	})

	t.Run("Prometheus down keeps the plan", func(t *testing.T) {
		generations := planGenerations(t, c)
		scalePrometheus(t, 0)
		t.Cleanup(func() { scalePrometheus(t, 1) })
		cond := waitCondition(t, clusterObject{c}, conditions.MetricsAvailable, metav1.ConditionFalse, v1.ReasonPrometheusUnavailable, 3*allocationInterval+time.Minute)
		if !strings.Contains(cond.Message, "plan in force is kept") {
			t.Errorf("MetricsAvailable message %q does not say the plan is kept", cond.Message)
		}
		waitCondition(t, clusterObject{c}, v1.ConditionDegraded, metav1.ConditionTrue, v1.ReasonPrometheusUnavailable, time.Minute)
		if after := planGenerations(t, c); fmt.Sprint(after) != fmt.Sprint(generations) {
			t.Errorf("plan generations changed while Prometheus was down: %v -> %v", generations, after)
		}
		login(t, addr, user, password).expect("OK", "SET", "while-prometheus-down", "1")
		scalePrometheus(t, 1)
		waitCondition(t, clusterObject{c}, conditions.MetricsAvailable, metav1.ConditionTrue, "", 3*time.Minute)
	})

	t.Run("infeasible SLO gets a condition, others unaffected", func(t *testing.T) {
		before := allocationOf(t, web)
		greedy := tenant(tns, "greedy", c, "0.9", "10Gi", "")
		create(t, greedy)
		cond := waitCondition(t, tenantObject{greedy}, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonInsufficientCapacity, time.Minute)
		if !strings.Contains(cond.Message, "10Gi") {
			t.Errorf("Admitted message %q does not name the guarantee it cannot fit", cond.Message)
		}
		if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(greedy), greedy); err != nil {
			t.Fatal(err)
		}
		if a := greedy.Status.Allocation; a != nil && !a.Memory.IsZero() {
			t.Errorf("the refused tenant got memory %s", a.Memory.String())
		}
		time.Sleep(2 * allocationInterval)
		if after := allocationOf(t, web); after != before {
			t.Errorf("the admitted tenant's allocation changed from %s to %s when an infeasible tenant arrived", before, after)
		}
	})
}

// testDeletingFreesEverything: a deleted TenantSLO's partitions disappear from every plan and
// its engines stop; a deleted CacheCluster takes its sidecars, Services and plans with it.
func testDeletingFreesEverything(t *testing.T) {
	c, tns := readyClusterForTenants(t, "lifecycle", "life")
	keep, leave := tenant(tns, "keep", c, "0.5", "16Mi", "32Mi"), tenant(tns, "leave", c, "0.5", "16Mi", "32Mi")
	admittedTenant(t, keep)
	admittedTenant(t, leave)
	leaving := tns + "/leave"
	waitFor(t, time.Minute, "partitions of both tenants running", func() (bool, error) {
		return countPartitions(plans(t, c), leaving, true) >= 1, nil
	})

	deleteAndWait(t, leave)
	waitFor(t, 2*time.Minute, "the deleted tenant's partition gone from every plan and its status", func() (bool, error) {
		return countPartitions(plans(t, c), leaving, false) == 0, nil
	})
	if _, err := cluster.client.CoreV1().Secrets(tns).Get(t.Context(), "leave-cache-credentials", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted tenant's credentials Secret: %v, want NotFound", err)
	}
	waitCondition(t, tenantObject{keep}, v1.ConditionReady, metav1.ConditionTrue, "", time.Minute)

	deleteAndWait(t, keep)
	deleteAndWait(t, c)
	var daemonSets appsv1.DaemonSetList
	var services corev1.ServiceList
	for _, list := range []ctrlclient.ObjectList{&daemonSets, &services} {
		if err := cluster.kube.List(t.Context(), list, ctrlclient.InNamespace(c.Namespace)); err != nil {
			t.Fatal(err)
		}
	}
	if len(daemonSets.Items)+len(services.Items) != 0 || len(plans(t, c)) != 0 {
		t.Errorf("left behind by the deleted CacheCluster: %d DaemonSets, %d Services, %d plans",
			len(daemonSets.Items), len(services.Items), len(plans(t, c)))
	}
}

// testUninstallLeavesNothingBehind: `helm uninstall` removes every object of the release; the
// CRDs stay (crds.keep, so tenants' objects survive an uninstall by mistake) and are the only
// cacheqos thing left.
func testUninstallLeavesNothingBehind(t *testing.T) {
	if _, err := tool(t.Context(), "helm", "uninstall", releaseName, "--namespace", productNamespace, "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	resources, err := tool(t.Context(), "kubectl", "api-resources", "--verbs=list", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range strings.Fields(resources) {
		if r != "events" && r != "events.events.k8s.io" && r != "componentstatuses" {
			kinds = append(kinds, r)
		}
	}
	// Objects the release owned through others (the operator's pods) go by garbage collection
	// after helm returns.
	var unexpected []string
	defer func() {
		if t.Failed() {
			t.Logf("left behind by helm uninstall: %v", unexpected)
		}
	}()
	waitFor(t, 2*time.Minute, "no object of the release left", func() (bool, error) {
		left, err := tool(t.Context(), "kubectl", "get", strings.Join(kinds, ","), "-A", "--ignore-not-found",
			"-l", "app.kubernetes.io/instance="+releaseName, "-o", "name")
		if err != nil {
			return false, err
		}
		unexpected = unexpected[:0]
		for _, name := range strings.Fields(left) {
			if !strings.HasPrefix(name, "customresourcedefinition.apiextensions.k8s.io/") {
				unexpected = append(unexpected, name)
			}
		}
		return len(unexpected) == 0, nil
	})
	for _, crd := range []string{"cacheclusters", "tenantslos", "cachenodeplans"} {
		if _, err := tool(t.Context(), "kubectl", "get", "crd", crd+".cacheqos.io"); err != nil {
			t.Errorf("CRD %s.cacheqos.io is gone after uninstall, but crds.keep is true: %v", crd, err)
		}
	}
	// The columns tell a finalizer that never ran (deleted, finalizer still there) from an
	// object created again after its test (created late) or never deleted.
	columns := "custom-columns=KIND:.kind,NAMESPACE:.metadata.namespace,NAME:.metadata.name,CREATED:.metadata.creationTimestamp,DELETED:.metadata.deletionTimestamp,FINALIZERS:.metadata.finalizers"
	if out, err := tool(t.Context(), "kubectl", "get", "cacheqos", "-A", "--no-headers", "-o", columns); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("cacheqos objects left after every test deleted its own (KIND NAMESPACE NAME CREATED DELETED FINALIZERS):\n%s%v", out, err)
	}
}

// ---------------------------------------------------------------------------------------------
// helpers of the scenarios

func sidecarPods(t *testing.T, c *v1.CacheCluster) []corev1.Pod {
	t.Helper()
	pods, err := cluster.client.CoreV1().Pods(c.Namespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=cacheqos-sidecar,app.kubernetes.io/instance=" + c.Name,
	})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// planGenerations maps each node to its plan's generation.
func planGenerations(t *testing.T, c *v1.CacheCluster) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range plans(t, c) {
		out[p.Spec.NodeName] = p.Spec.PlanGeneration
	}
	return out
}

// settledPlanGenerations waits until no plan of c changes over two allocation intervals and
// returns their generations.
func settledPlanGenerations(t *testing.T, c *v1.CacheCluster) map[string]int64 {
	t.Helper()
	last := planGenerations(t, c)
	waitFor(t, 2*time.Minute, "plans unchanged for two intervals", func() (bool, error) {
		time.Sleep(2 * allocationInterval)
		now := planGenerations(t, c)
		settled := fmt.Sprint(now) == fmt.Sprint(last)
		last = now
		return settled, nil
	})
	return last
}

// countPartitions counts the nodes whose plan (and, with running, whose applied status)
// holds a partition of tenant.
func countPartitions(ps []v1.CacheNodePlan, tenant string, running bool) int {
	n := 0
	for _, p := range ps {
		planned := slices.ContainsFunc(p.Spec.Partitions, func(x v1.PartitionPlan) bool { return x.Tenant == tenant })
		applied := slices.ContainsFunc(p.Status.Partitions, func(x v1.PartitionStatus) bool { return x.Tenant == tenant })
		if running && planned && applied || !running && (planned || applied) {
			n++
		}
	}
	return n
}

// allocationOf is the tenant's allocated memory as its status shows it.
func allocationOf(t *testing.T, s *v1.TenantSLO) string {
	t.Helper()
	if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	if s.Status.Allocation == nil {
		return "none"
	}
	return s.Status.Allocation.Memory.String()
}

// scalePrometheus sets the replicas of the monitoring stack's Prometheus; 0 is an outage.
func scalePrometheus(t *testing.T, replicas int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := tool(ctx, "kubectl", "-n", monitoringNamespace, "patch", "prometheus", prometheusService, "--type=merge", "-p", patch); err != nil {
		t.Fatal(err)
	}
	if replicas == 0 {
		return
	}
	waitFor(t, 2*time.Minute, "Prometheus ready again", func() (bool, error) {
		_, err := get(&http.Client{Timeout: 5 * time.Second}, cluster.prometheusURL+"/-/ready")
		return err == nil, nil
	})
}
