package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
)

const applyTimeout = 60 * time.Second

func conditionIs(plan *v1.CacheNodePlan, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(plan.Status.Conditions, typ)
	return c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == plan.Generation
}

// appliedAndRunning is true once the plan's generation is applied and each listed tenant runs
// with engine numbers in status. (An empty memcached uses no slab pages yet: used bytes may be
// 0 there; redis always counts its own overhead.)
func appliedAndRunning(gen int64, tenants ...string) func(*v1.CacheNodePlan) bool {
	return appliedWithUsage(gen, 1, tenants...)
}

func appliedWithUsage(gen, minUsed int64, tenants ...string) func(*v1.CacheNodePlan) bool {
	return func(plan *v1.CacheNodePlan) bool {
		if plan.Status.AppliedGeneration != gen || !conditionIs(plan, v1.ConditionReady, metav1.ConditionTrue, ReasonPartitionsRunning) {
			return false
		}
		for _, tenant := range tenants {
			ps, ok := partitionStatus(plan, tenant)
			if !ok || ps.State != v1.PartitionRunning || ps.UsedBytes < minUsed || ps.MemoryLimitBytes <= 0 || ps.RSSBytes <= 0 {
				return false
			}
		}
		return len(plan.Status.Partitions) == len(tenants)
	}
}

func authRESP(t *testing.T, addr, tenant, password string) *respClient {
	t.Helper()
	c := dialRESP(t, addr)
	if reply, err := c.do("AUTH", tenant, password); err != nil || reply != "OK" {
		t.Fatalf("AUTH %s: %q, %v", tenant, reply, err)
	}
	return c
}

func mustDo(t *testing.T, c *respClient, want string, args ...string) {
	t.Helper()
	got, err := c.do(args...)
	if err != nil || got != want {
		t.Fatalf("%s: got %q, %v; want %q", strings.Join(args, " "), got, err, want)
	}
}

// TestRedisPlanLifecycle follows one redis plan through its life: first apply, clients
// through the proxy, a live resize that keeps the keys, a tenant removed, and an agent restart
// that adopts the running engines.
func TestRedisPlanLifecycle(t *testing.T) {
	ns := newNamespace(t)
	const cluster, secret = "shared", "creds"
	orders, cart := "team-a/orders", "team-b/cart"
	passwords, data := tenantCredentials(t, orders, cart)
	createSecret(t, ns, secret, data)
	// A Secret the sidecar must not read; its Role does not allow it, so any attempt to list
	// Secrets beyond its own would fail the test's agent.
	createSecret(t, ns, "unrelated", map[string][]byte{"x": []byte("y")})

	peer := listen(t)
	createPlan(t, ns, cluster, v1.EngineRedis, secret, 1,
		partition(orders, "16Mi", peer.Addr().String()),
		partition(cart, "8Mi", peer.Addr().String()))
	kube := &KubeConfig{RestConfig: sidecarUser(t, ns, planName(cluster), secret), Namespace: ns, PlanName: planName(cluster)}
	root := engineRoot(t)
	sc := startSidecar(t, sidecarSpec{engine: engine.Redis, root: root, peer: peer, kube: kube})

	plan := waitForPlan(t, ns, cluster, applyTimeout, "generation 1 applied", appliedAndRunning(1, orders, cart))
	if ps, _ := partitionStatus(plan, orders); ps.MemoryLimitBytes != 16<<20 {
		t.Errorf("orders' memory limit is %d, want %d", ps.MemoryLimitBytes, 16<<20)
	}
	if plan.Status.LastAppliedTime == nil || !conditionIs(plan, v1.ConditionPlanApplied, metav1.ConditionTrue, v1.ReasonPlanApplied) {
		t.Errorf("PlanApplied/lastAppliedTime not set: %+v", plan.Status)
	}

	// Clients authenticate with the password whose hash is in the Secret.
	c := authRESP(t, sc.clientAddr, orders, passwords[orders])
	for i := range 100 {
		mustDo(t, c, "OK", "SET", fmt.Sprintf("key:%d", i), fmt.Sprintf("value-%d", i))
	}
	mustDo(t, c, "value-42", "GET", "key:42")
	bad := dialRESP(t, sc.clientAddr)
	if _, err := bad.do("AUTH", orders, passwords[cart]); err == nil {
		t.Fatal("AUTH with another tenant's password succeeded")
	}
	if _, err := bad.do("GET", "key:42"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("GET without authentication: %v, want NOAUTH", err)
	}
	if n, err := testutil.GatherAndCount(sc.registry, "cacheqos_sidecar_partition_used_bytes"); err != nil || n != 2 {
		t.Errorf("partition_used_bytes series: %d, %v; want 2", n, err)
	}

	// Generation 2: orders grows live (keys kept), cart leaves the node.
	cartPID := sc.enginePID(cart)
	ordersPID := sc.enginePID(orders)
	updatePlan(t, ns, cluster, 2, partition(orders, "32Mi", peer.Addr().String()))
	plan = waitForPlan(t, ns, cluster, applyTimeout, "generation 2 applied", appliedAndRunning(2, orders))
	if ps, _ := partitionStatus(plan, orders); ps.MemoryLimitBytes != 32<<20 {
		t.Errorf("after the resize orders' memory limit is %d, want %d", ps.MemoryLimitBytes, 32<<20)
	}
	if _, listed := partitionStatus(plan, cart); listed {
		t.Errorf("the removed tenant is still in status: %+v", plan.Status.Partitions)
	}
	if pid := sc.enginePID(orders); pid != ordersPID {
		t.Errorf("orders' engine was restarted to resize it (pid %d -> %d)", ordersPID, pid)
	}
	if processAlive(cartPID) {
		t.Errorf("the removed tenant's engine (pid %d) still runs", cartPID)
	}
	mustDo(t, c, "value-42", "GET", "key:42")
	if v, err := testutil.GatherAndCount(sc.registry, "cacheqos_sidecar_plan_generation"); err != nil || v != 1 {
		t.Errorf("plan_generation series: %d, %v", v, err)
	}
	if got := gaugeValue(t, sc, "cacheqos_sidecar_plan_generation"); got != 2 {
		t.Errorf("cacheqos_sidecar_plan_generation = %v, want 2", got)
	}
	cartClient := dialRESP(t, sc.clientAddr)
	if _, err := cartClient.do("AUTH", cart, passwords[cart]); err == nil {
		t.Error("the removed tenant can still authenticate")
	}

	// A restarted sidecar adopts the running engine: same process, keys still there.
	sc.stop(false)
	sc2 := startSidecar(t, sidecarSpec{engine: engine.Redis, root: root, peer: listen(t), kube: kube})
	waitReady(t, sc2)
	if pid := sc2.enginePID(orders); pid != ordersPID {
		t.Errorf("after the restart orders' engine is pid %d, want the adopted %d", pid, ordersPID)
	}
	c2 := authRESP(t, sc2.clientAddr, orders, passwords[orders])
	mustDo(t, c2, "value-7", "GET", "key:7")
}

// waitReady waits until the sidecar's proxy has a tenant table and reaches every engine.
func waitReady(t *testing.T, sc *sidecar) {
	t.Helper()
	deadline := time.Now().Add(applyTimeout)
	for {
		err := sc.proxy.Ready(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy is not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func gaugeValue(t *testing.T, sc *sidecar, name string) float64 {
	t.Helper()
	families, err := sc.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s", name)
	return 0
}

// TestMissingSecret: a plan whose credentials Secret does not exist runs its engines but
// reports CredentialsMissing naming the Secret; creating the Secret completes the plan
// without any change to the plan (the agent watches the Secret).
func TestMissingSecret(t *testing.T) {
	ns := newNamespace(t)
	const cluster, secret = "shared", "late-creds"
	tenant := "team-a/orders"
	peer := listen(t)
	createPlan(t, ns, cluster, v1.EngineRedis, secret, 1, partition(tenant, "8Mi", peer.Addr().String()))
	kube := &KubeConfig{RestConfig: sidecarUser(t, ns, planName(cluster), secret), Namespace: ns, PlanName: planName(cluster)}
	sc := startSidecar(t, sidecarSpec{engine: engine.Redis, peer: peer, kube: kube, refresh: time.Hour})

	plan := waitForPlan(t, ns, cluster, applyTimeout, "CredentialsMissing", func(p *v1.CacheNodePlan) bool {
		return conditionIs(p, v1.ConditionPlanApplied, metav1.ConditionFalse, ReasonCredentialsMissing)
	})
	c := meta.FindStatusCondition(plan.Status.Conditions, v1.ConditionPlanApplied)
	if !strings.Contains(c.Message, secret) || !strings.Contains(c.Message, "not found") {
		t.Errorf("PlanApplied message %q does not name the Secret and the cause", c.Message)
	}
	if !conditionIs(plan, v1.ConditionReady, metav1.ConditionFalse, ReasonCredentialsMissing) {
		t.Errorf("Ready: %+v", plan.Status.Conditions)
	}
	if plan.Status.AppliedGeneration != 0 {
		t.Errorf("appliedGeneration = %d without credentials", plan.Status.AppliedGeneration)
	}
	if ps, ok := partitionStatus(plan, tenant); !ok || ps.State != v1.PartitionRunning {
		t.Errorf("the partition should run while credentials are missing: %+v", plan.Status.Partitions)
	}

	passwords, data := tenantCredentials(t, tenant)
	createSecret(t, ns, secret, data)
	waitForPlan(t, ns, cluster, applyTimeout, "applied once the Secret exists", appliedAndRunning(1, tenant))
	client := authRESP(t, sc.clientAddr, tenant, passwords[tenant])
	mustDo(t, client, "OK", "SET", "k", "v")
}

// TestEngineCrashIsReported: an engine killed behind the agent's back shows in status without
// waiting for the periodic refresh (which is an hour here), and recovers.
func TestEngineCrashIsReported(t *testing.T) {
	ns := newNamespace(t)
	const cluster, secret = "shared", "creds"
	tenant := "team-a/orders"
	_, data := tenantCredentials(t, tenant)
	createSecret(t, ns, secret, data)
	peer := listen(t)
	createPlan(t, ns, cluster, v1.EngineRedis, secret, 1, partition(tenant, "8Mi", peer.Addr().String()))
	kube := &KubeConfig{RestConfig: sidecarUser(t, ns, planName(cluster), secret), Namespace: ns, PlanName: planName(cluster)}
	// A long restart backoff keeps the crashed state visible long enough to observe.
	sc := startSidecar(t, sidecarSpec{engine: engine.Redis, peer: peer, kube: kube, refresh: time.Hour, backoff: 4 * time.Second})
	waitForPlan(t, ns, cluster, applyTimeout, "generation 1 applied", appliedAndRunning(1, tenant))

	pid := sc.enginePID(tenant)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitForPlan(t, ns, cluster, 20*time.Second, "the crash in status", func(p *v1.CacheNodePlan) bool {
		ps, _ := partitionStatus(p, tenant)
		return ps.State != v1.PartitionRunning && !conditionIs(p, v1.ConditionReady, metav1.ConditionTrue, ReasonPartitionsRunning)
	})
	waitForPlan(t, ns, cluster, 30*time.Second, "recovery in status", appliedAndRunning(1, tenant))
	if newPID := sc.enginePID(tenant); newPID == pid || newPID == 0 {
		t.Errorf("engine pid after the restart: %d (was %d)", newPID, pid)
	}
}

// TestWrongNodeAndEngine: a plan for another node, or for the other engine, is refused as a
// whole and says why.
func TestWrongNodeAndEngine(t *testing.T) {
	peer := listen(t)
	sc := startSidecar(t, sidecarSpec{engine: engine.Redis, peer: peer})
	creds := Credentials{Err: errors.New("unused")}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.CacheNodePlan)
		reason string
		want   string
	}{
		{"other node", func(p *v1.CacheNodePlan) { p.Spec.NodeName = "node-b" }, ReasonWrongNode, `for node "node-b"`},
		{"other engine", func(p *v1.CacheNodePlan) { p.Spec.Engine = v1.EngineMemcached }, v1.ReasonApplyFailed, "runs redis engines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := statusTestPlan("team-a/orders")
			plan.Spec.NodeName = testNode
			tc.mutate(plan)
			st := sc.agent.Apply(context.Background(), plan, creds)
			c := meta.FindStatusCondition(st.Conditions, v1.ConditionPlanApplied)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.want) {
				t.Fatalf("PlanApplied = %+v, want False/%s mentioning %q", c, tc.reason, tc.want)
			}
			if len(sc.agent.engines.List()) != 0 {
				t.Fatalf("engines started for a refused plan: %+v", sc.agent.engines.List())
			}
		})
	}
}

// TestMemcachedPlan: the memcached variant starts, reports status and serves an authenticated
// client through the proxy.
func TestMemcachedPlan(t *testing.T) {
	ns := newNamespace(t)
	const cluster, secret = "mc", "creds"
	tenant := "team-c/sessions"
	passwords, data := tenantCredentials(t, tenant)
	createSecret(t, ns, secret, data)
	peer := listen(t)
	createPlan(t, ns, cluster, v1.EngineMemcached, secret, 1, partition(tenant, "16Mi", peer.Addr().String()))
	kube := &KubeConfig{RestConfig: sidecarUser(t, ns, planName(cluster), secret), Namespace: ns, PlanName: planName(cluster)}
	sc := startSidecar(t, sidecarSpec{engine: engine.Memcached, peer: peer, kube: kube})

	plan := waitForPlan(t, ns, cluster, applyTimeout, "generation 1 applied", appliedWithUsage(1, 0, tenant))
	if ps, _ := partitionStatus(plan, tenant); ps.MemoryLimitBytes != 16<<20 {
		t.Errorf("memory limit %d, want %d", ps.MemoryLimitBytes, 16<<20)
	}
	c := dialMemcache(t, sc.clientAddr)
	if reply, err := c.set("k", "v"); err != nil || !strings.Contains(reply, "ERROR") {
		t.Fatalf("set before authenticating: %q, %v; want an error", reply, err)
	}
	if reply, err := c.auth(tenant, passwords[tenant]); err != nil || reply != "STORED" {
		t.Fatalf("authenticating: %q, %v", reply, err)
	}
	if reply, err := c.set("greeting", "hello"); err != nil || reply != "STORED" {
		t.Fatalf("set: %q, %v", reply, err)
	}
	if v, found, err := c.get("greeting"); err != nil || !found || v != "hello" {
		t.Fatalf("get: %q, %v, %v", v, found, err)
	}
	// The periodic refresh (every second here) brings the slab page now in use into status.
	waitForPlan(t, ns, cluster, 10*time.Second, "used bytes refreshed", appliedWithUsage(1, 1, tenant))
}

// TestStandalonePlanFile: the plan-file mode runs the same pass from a CacheNodePlan manifest
// and a Secret manifest, and writes the status file.
func TestStandalonePlanFile(t *testing.T) {
	dir := t.TempDir()
	tenant := "team-a/orders"
	passwords, data := tenantCredentials(t, tenant)
	peer := listen(t)
	plan := &v1.CacheNodePlan{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "CacheNodePlan"},
		ObjectMeta: metav1.ObjectMeta{Name: "local-" + testNode},
		Spec:       v1.CacheNodePlanSpec{ClusterName: "local", NodeName: testNode, Engine: v1.EngineRedis, PlanGeneration: 5},
	}
	plan.Spec.SetPartitions([]v1.PartitionPlan{partition(tenant, "8Mi", peer.Addr().String())})
	planFile, secretFile, statusFile := dir+"/plan.yaml", dir+"/secret.yaml", dir+"/status.yaml"
	if err := writeManifest(planFile, plan); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: data}
	if err := writeManifest(secretFile, secret); err != nil {
		t.Fatal(err)
	}

	sc := startSidecar(t, sidecarSpec{engine: engine.Redis, peer: peer})
	ctx, cancel := context.WithCancel(context.Background())
	applied := make(chan v1.CacheNodePlanStatus, 100)
	done := make(chan error, 1)
	go func() {
		done <- sc.agent.RunStandalone(ctx, StandaloneConfig{PlanFile: planFile, CredentialsFile: secretFile, StatusFile: statusFile,
			Applied: func(st v1.CacheNodePlanStatus) { applied <- st }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case st := <-applied:
		if st.AppliedGeneration != 5 {
			t.Fatalf("first pass: %+v", st)
		}
	case <-time.After(applyTimeout):
		t.Fatal("no pass within the timeout")
	}
	written, err := LoadPlan(statusFile)
	if err != nil {
		t.Fatal(err)
	}
	if written.Status.AppliedGeneration != 5 || len(written.Status.Partitions) != 1 {
		t.Fatalf("status file: %+v", written.Status)
	}
	c := authRESP(t, sc.clientAddr, tenant, passwords[tenant])
	mustDo(t, c, "OK", "SET", "k", "v")
}

// TestLoadManifestErrors: bad files give errors that say what is wrong.
func TestLoadManifestErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name, content string
		load          func(string) error
		want          string
	}{
		{"plan typo", "apiVersion: cacheqos.io/v1alpha1\nkind: CacheNodePlan\nspec:\n  nodeNme: x\n", loadPlanErr, `unknown field "nodeNme"`},
		{"plan wrong kind", "apiVersion: v1\nkind: Secret\n", loadPlanErr, `want cacheqos.io/v1alpha1 CacheNodePlan`},
		{"plan not yaml", "{{{", loadPlanErr, "plan file"},
		{"secret wrong kind", "apiVersion: cacheqos.io/v1alpha1\nkind: CacheNodePlan\n", loadSecretErr, "want v1 Secret"},
		{"secret bad base64", "apiVersion: v1\nkind: Secret\ndata:\n  k: '!!'\n", loadSecretErr, "credentials file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.load(write(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.content))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := LoadPlan(dir + "/missing.yaml"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing plan file: %v", err)
	}
}

func loadPlanErr(path string) error   { _, err := LoadPlan(path); return err }
func loadSecretErr(path string) error { _, err := LoadSecret(path); return err }

// TestTenantWithoutPartitionOnTheNode: a client whose connection lands on a node without its
// tenant's partition logs in there and reads and writes its keys, every request forwarded to
// the node holding the partition (real engines, real proxies, the peer port between them).
func TestTenantWithoutPartitionOnTheNode(t *testing.T) {
	const tenant = "team-a/orders"
	passwords, data := tenantCredentials(t, tenant)
	creds := Credentials{Secret: "creds", Data: data}
	holder := startSidecar(t, sidecarSpec{engine: engine.Redis, node: "node-a"})
	visited := startSidecar(t, sidecarSpec{engine: engine.Redis, node: "node-b"})
	routes := []v1.TenantRoute{routeTo("node-a", holder.peerAddr)}
	withPartition := &v1.CacheNodePlan{Spec: v1.CacheNodePlanSpec{NodeName: "node-a", Engine: v1.EngineRedis, PlanGeneration: 1}}
	withPartition.Spec.SetPartitions([]v1.PartitionPlan{{Tenant: tenant, Memory: resource.MustParse("8Mi"), EvictionPolicy: v1.EvictionLRU, Routes: routes}})
	withoutPartition := &v1.CacheNodePlan{Spec: v1.CacheNodePlanSpec{NodeName: "node-b", Engine: v1.EngineRedis, PlanGeneration: 1}}
	withoutPartition.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: tenant, Routes: routes}})

	for _, sc := range []struct {
		s    *sidecar
		plan *v1.CacheNodePlan
	}{{holder, withPartition}, {visited, withoutPartition}} {
		if r := sc.s.agent.apply(context.Background(), sc.plan, creds); !r.applied() {
			t.Fatalf("applying the plan of %s: %+v", sc.plan.Spec.NodeName, r)
		}
	}
	if engines := visited.agent.engines.List(); len(engines) != 0 {
		t.Errorf("node-b runs engines %+v for a tenant without a partition there", engines)
	}

	c := authRESP(t, visited.clientAddr, tenant, passwords[tenant])
	for i := range 20 {
		mustDo(t, c, "OK", "SET", fmt.Sprintf("key:%d", i), fmt.Sprintf("value-%d", i))
	}
	mustDo(t, c, "value-7", "GET", "key:7")
	// The keys are in node-a's engine: a client of node-a reads them too.
	mustDo(t, authRESP(t, holder.clientAddr, tenant, passwords[tenant]), "value-13", "GET", "key:13")
	if got := counterSum(t, visited, "cacheqos_sidecar_forwarded_requests_total"); got != 21 {
		t.Errorf("node-b forwarded %v requests, want its 20 SETs and 1 GET", got)
	}
}

// counterSum is the sum of a counter's series.
func counterSum(t *testing.T, sc *sidecar, name string) float64 {
	t.Helper()
	families, err := sc.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
