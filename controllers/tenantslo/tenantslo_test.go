package tenantslo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

// One control plane and one operator (no Prometheus: plans come from the tenants' specs) for
// every test of the package.
var env *testenv.Env

const timeout = 20 * time.Second

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(controllers.Options{
		Images:     testenv.Images,
		Allocation: allocation.Options{Debounce: 200 * time.Millisecond},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping:", err)
	}
	os.Exit(code)
}

func ctx() context.Context { return context.Background() }

func get(obj client.Object, ns, name string) error {
	return env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// nodes creates Nodes labelled pool=<pool>, deleted when the test ends.
func nodes(t *testing.T, pool string, names ...string) {
	t.Helper()
	for _, name := range names {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
		create(t, n)
		t.Cleanup(func() { _ = env.Client.Delete(ctx(), n) })
	}
}

// cluster creates a CacheCluster over the pool's nodes, each giving 10Gi (no headroom) and
// 1G bytes/s to partitions, and waits until it counts its nodes.
func cluster(t *testing.T, ns, name, pool string, engine v1.Engine, wantNodes int32) *v1.CacheCluster {
	t.Helper()
	c := &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.CacheClusterSpec{
			Engine:       engine,
			NodeSelector: map[string]v1.LabelValue{"pool": v1.LabelValue(pool)},
			Capacity: v1.NodeCapacity{
				Memory: resource.MustParse("10Gi"), Bandwidth: resource.MustParse("1G"), OpsPerSecond: 100000,
				HeadroomPercent: ptr.To[int32](0),
			},
			Allocation: v1.AllocationSettings{Interval: &metav1.Duration{Duration: time.Hour}, Policy: v1.PolicyEqual},
		},
	}
	create(t, c)
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, ns, name); err != nil {
			return err
		}
		if c.Status.NodeCount != wantNodes {
			return fmt.Errorf("cluster counts %d nodes, want %d", c.Status.NodeCount, wantNodes)
		}
		return nil
	})
	return c
}

// tenant is a strict hit-ratio tenant of clusterNS/clusterName guaranteed minMemory.
func tenant(ns, name, clusterNS, clusterName, minMemory string) *v1.TenantSLO {
	t := &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Name: clusterName, Namespace: clusterNS},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.9"}},
		},
	}
	if minMemory != "" {
		t.Spec.Memory.Min = ptr.To(resource.MustParse(minMemory))
	}
	return t
}

// conditionOf waits for the tenant's condition to have status and reason, and returns it.
func conditionOf(t *testing.T, tslo *v1.TenantSLO, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	testenv.Eventually(t, timeout, func() error {
		if err := get(tslo, tslo.Namespace, tslo.Name); err != nil {
			return err
		}
		c := meta.FindStatusCondition(tslo.Status.Conditions, typ)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("%s of %s is %+v, want %s/%s", typ, tslo.Name, c, status, reason)
		}
		got = *c
		return nil
	})
	return got
}

// credentialsOf returns the tenant's password and the hash stored for it, once both exist.
func credentialsOf(t *testing.T, tslo *v1.TenantSLO, clusterNS, secretName string) (password, hash string) {
	t.Helper()
	key, err := credentials.SecretKey(tslo.TenantID())
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		own, hashes := &corev1.Secret{}, &corev1.Secret{}
		if err := errors.Join(get(own, tslo.Namespace, tslo.Name+"-cache-credentials"), get(hashes, clusterNS, secretName)); err != nil {
			return err
		}
		password, hash = string(own.Data["password"]), string(hashes.Data[key])
		if !credentials.Verify(hash, password) {
			return fmt.Errorf("stored hash %q does not verify the password", hash)
		}
		return nil
	})
	return password, hash
}

// TestCredentials: the tenant gets a generated password in its own namespace, the cluster's
// Secret gets only a salted hash of it; both survive reconciles, and are repaired when
// someone removes them.
func TestCredentials(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "creds-cache"), env.Namespace(t, "creds-team")
	nodes(t, "creds", "creds-a")
	cluster(t, cacheNS, "shared", "creds", v1.EngineRedis, 1)
	web := tenant(teamNS, "web", cacheNS, "shared", "1Gi")
	create(t, web)

	password, hash := credentialsOf(t, web, cacheNS, "shared-tenant-credentials")
	own := &corev1.Secret{}
	if err := get(own, teamNS, "web-cache-credentials"); err != nil {
		t.Fatal(err)
	}
	if len(password) != 43 || string(own.Data["username"]) != "creds-team/web" || string(own.Data["endpoint"]) != "shared."+cacheNS+".svc:6379" {
		t.Errorf("credentials Secret data: username %q endpoint %q password length %d", own.Data["username"], own.Data["endpoint"], len(password))
	}
	if ref := metav1.GetControllerOf(own); ref == nil || ref.Kind != "TenantSLO" || ref.UID != web.UID {
		t.Errorf("credentials Secret controlled by %+v", ref)
	}
	if strings.Contains(hash, password) || !strings.HasPrefix(hash, "sha256:") {
		t.Errorf("stored hash %q is not a salted hash", hash)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := get(web, teamNS, "web"); err != nil {
			return err
		}
		if web.Status.CredentialsSecret != "web-cache-credentials" || web.Status.Endpoint != "shared."+cacheNS+".svc:6379" {
			return fmt.Errorf("status credentialsSecret %q endpoint %q", web.Status.CredentialsSecret, web.Status.Endpoint)
		}
		if !slices.Contains(web.Finalizers, "cacheqos.io/tenant-cleanup") {
			return fmt.Errorf("finalizers %v", web.Finalizers)
		}
		return nil
	})

	// A spec change reconciles again and changes neither the password nor its hash.
	if err := env.Client.Patch(ctx(), web, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"priority":500}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := get(web, teamNS, "web"); err != nil {
			return err
		}
		if web.Status.ObservedGeneration != web.Generation {
			return fmt.Errorf("observedGeneration %d of %d", web.Status.ObservedGeneration, web.Generation)
		}
		return nil
	})
	if p, h := credentialsOf(t, web, cacheNS, "shared-tenant-credentials"); p != password || h != hash {
		t.Errorf("a reconcile changed the credentials: password %v, hash %q -> %q", p != password, hash, h)
	}

	// Someone removes the hash: it comes back for the same password.
	hashes := &corev1.Secret{}
	if err := get(hashes, cacheNS, "shared-tenant-credentials"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Patch(ctx(), hashes, client.RawPatch("application/merge-patch+json", []byte(`{"data":{"creds-team.web":null}}`))); err != nil {
		t.Fatal(err)
	}
	if p, _ := credentialsOf(t, web, cacheNS, "shared-tenant-credentials"); p != password {
		t.Error("restoring the hash changed the password")
	}

	// Someone deletes the tenant's Secret: a new password, and its hash replaces the old one.
	if err := env.Client.Delete(ctx(), own); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		p, _ := credentialsOf(t, web, cacheNS, "shared-tenant-credentials")
		if p == password {
			return errors.New("the password was not regenerated")
		}
		return nil
	})
	// Placed by the allocation loop, but no sidecar runs the partition.
	conditionOf(t, web, v1.ConditionReady, metav1.ConditionFalse, conditions.ReasonPartitionsPending)
}

// TestAdmission: three strict tenants whose minimums exceed the cluster; the last one waits
// with the numbers in its condition, and gets in once an earlier one leaves; the others keep
// their guarantees throughout.
func TestAdmission(t *testing.T) {
	ns := env.Namespace(t, "admission")
	nodes(t, "admission", "admission-a")
	cluster(t, ns, "small", "admission", v1.EngineRedis, 1)
	first, second, third := tenant(ns, "t-1", "", "small", "4Gi"), tenant(ns, "t-2", "", "small", "4Gi"), tenant(ns, "t-3", "", "small", "4Gi")
	for _, tslo := range []*v1.TenantSLO{first, second, third} {
		create(t, tslo)
	}
	conditionOf(t, first, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
	conditionOf(t, second, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
	if first.Status.Objective != "hit>=0.9" {
		t.Errorf("status.objective = %q, want hit>=0.9", first.Status.Objective)
	}
	refused := conditionOf(t, third, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonInsufficientCapacity)
	for _, want := range []string{"memory.min 4Gi does not fit", "10Gi of partitionable memory (1 nodes x 10Gi)", "8Gi is guaranteed to 2 tenants", "2Gi is free"} {
		if !strings.Contains(refused.Message, want) {
			t.Errorf("Admitted message %q lacks %q", refused.Message, want)
		}
	}
	conditionOf(t, third, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonInsufficientCapacity)
	testenv.Eventually(t, timeout, func() error {
		var events corev1.EventList
		if err := env.Client.List(ctx(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "t-3" && e.Reason == v1.ReasonInsufficientCapacity && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no InsufficientCapacity event for t-3")
	})

	// A best-effort tenant reserves nothing and is admitted into the full cluster.
	spare := tenant(ns, "spare", "", "small", "")
	spare.Spec.Class = v1.ClassBestEffort
	create(t, spare)
	conditionOf(t, spare, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)

	if err := env.Client.Delete(ctx(), first); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := get(&v1.TenantSLO{}, ns, "t-1"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("t-1 still exists (get: %w)", err)
		}
		return nil
	})
	conditionOf(t, third, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
	conditionOf(t, second, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
}

// TestAdmissionRefusals: a missing cluster, an eviction policy the engine lacks, and a spread
// wider than the cluster are refused with their reasons.
func TestAdmissionRefusals(t *testing.T) {
	ns := env.Namespace(t, "refusals")
	nodes(t, "refusals", "refusals-a")
	cluster(t, ns, "mc", "refusals", v1.EngineMemcached, 1)

	orphan := tenant(ns, "orphan", "", "nonexistent", "")
	create(t, orphan)
	msg := conditionOf(t, orphan, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonClusterNotFound).Message
	if !strings.Contains(msg, ns+"/nonexistent") {
		t.Errorf("ClusterNotFound message %q does not name the cluster", msg)
	}

	lfu := tenant(ns, "lfu", "", "mc", "")
	lfu.Spec.EvictionPolicy = v1.EvictionLFU
	create(t, lfu)
	conditionOf(t, lfu, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonUnsupportedEvictionPolicy)

	wide := tenant(ns, "wide", "", "mc", "")
	wide.Spec.Placement.MinNodes = 3
	create(t, wide)
	msg = conditionOf(t, wide, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonInsufficientCapacity).Message
	if !strings.Contains(msg, "placement.minNodes 3 exceeds the cluster's 1 nodes") {
		t.Errorf("message %q", msg)
	}
}

// TestReadyAndDeletion: an admitted tenant is placed by the allocation loop, is Ready once the
// sidecar reports its partition running, and on deletion loses its hash and its partitions
// before the TenantSLO goes away.
func TestReadyAndDeletion(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "lifecycle-cache"), env.Namespace(t, "lifecycle-team")
	nodes(t, "lifecycle", "lifecycle-a")
	cluster(t, cacheNS, "shared", "lifecycle", v1.EngineRedis, 1)
	web := tenant(teamNS, "web", cacheNS, "shared", "1Gi")
	create(t, web)
	credentialsOf(t, web, cacheNS, "shared-tenant-credentials")
	conditionOf(t, web, v1.ConditionReady, metav1.ConditionFalse, conditions.ReasonPartitionsPending)

	// Play the sidecar: apply the plan and report the partition running.
	plan := &v1.CacheNodePlan{}
	testenv.Eventually(t, timeout, func() error {
		if err := get(plan, cacheNS, "shared-lifecycle-a"); err != nil {
			return err
		}
		if len(plan.Spec.Partitions) != 1 || plan.Spec.Partitions[0].Tenant != "lifecycle-team/web" {
			return fmt.Errorf("plan partitions %+v", plan.Spec.Partitions)
		}
		plan.Status.AppliedGeneration = plan.Spec.PlanGeneration
		plan.Status.Partitions = []v1.PartitionStatus{{Tenant: "lifecycle-team/web", State: v1.PartitionRunning, MemoryLimitBytes: plan.Spec.Partitions[0].Memory.Value()}}
		return env.Client.Status().Update(ctx(), plan)
	})
	conditionOf(t, web, v1.ConditionReady, metav1.ConditionTrue, conditions.ReasonPartitionsRunning)

	if err := env.Client.Delete(ctx(), web); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		hashes, p := &corev1.Secret{}, &v1.CacheNodePlan{}
		if err := errors.Join(get(hashes, cacheNS, "shared-tenant-credentials"), get(p, cacheNS, "shared-lifecycle-a")); err != nil {
			return err
		}
		if _, ok := hashes.Data["lifecycle-team.web"]; ok {
			return errors.New("the hash is still stored")
		}
		if len(p.Spec.Partitions) != 0 {
			return fmt.Errorf("the plan still holds %+v", p.Spec.Partitions)
		}
		if err := get(&v1.TenantSLO{}, teamNS, "web"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the TenantSLO still exists (get: %w)", err)
		}
		return nil
	})
}

// TestGovernanceOnAPIServer: a cluster's tenants.namespaceSelector and maxPriority, read
// against real Namespace labels, refuse tenants with reasons a tenant can act on.
func TestGovernanceOnAPIServer(t *testing.T) {
	platform := env.Namespace(t, "gov-platform")
	member, outsider := env.Namespace(t, "gov-member"), env.Namespace(t, "gov-outsider")
	setNamespaceLabels(t, member, map[string]string{"cacheqos.io/tenant": "true"})
	nodes(t, "gov", "gov-a")
	c := cluster(t, platform, "governed", "gov", v1.EngineRedis, 1)
	c.Spec.Tenants = v1.TenantGovernance{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cacheqos.io/tenant": "true"}},
		MaxPriority:       200,
	}
	if err := env.Client.Update(ctx(), c); err != nil {
		t.Fatal(err)
	}
	welcome := tenant(member, "welcome", platform, "governed", "64Mi")
	stranger := tenant(outsider, "stranger", platform, "governed", "64Mi")
	pushy := tenant(member, "pushy", platform, "governed", "")
	pushy.Spec.Priority = 900
	for _, tslo := range []*v1.TenantSLO{welcome, stranger, pushy} {
		create(t, tslo)
	}
	conditionOf(t, welcome, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
	refused := conditionOf(t, stranger, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonNamespaceNotAllowed)
	if !strings.Contains(refused.Message, "namespace gov-outsider is not one of them") {
		t.Errorf("NamespaceNotAllowed message %q does not name the namespace", refused.Message)
	}
	conditionOf(t, stranger, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonNamespaceNotAllowed)
	conditionOf(t, pushy, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonPriorityAboveLimit)

	// Relabelling a namespace, and nothing else, re-decides its tenants' admission. Once the
	// allocation loop has placed welcome (its interval is an hour, so no later plan comes) and
	// neither welcome nor the plan holding it changes any more, nothing but the relabelling
	// brings the admitted welcome back to its reconciler.
	testenv.Eventually(t, timeout, func() error {
		if err := get(welcome, member, "welcome"); err != nil {
			return err
		}
		if welcome.Status.Allocation == nil {
			return errors.New("welcome has no allocation yet")
		}
		return nil
	})
	settled(t, welcome, &v1.CacheNodePlan{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: "governed-gov-a"}})
	setNamespaceLabels(t, member, map[string]string{"cacheqos.io/tenant": "false"})
	conditionOf(t, welcome, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonNamespaceNotAllowed)
	conditionOf(t, welcome, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonNamespaceNotAllowed)
	conditionOf(t, pushy, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonNamespaceNotAllowed)
	setNamespaceLabels(t, outsider, map[string]string{"cacheqos.io/tenant": "true"})
	conditionOf(t, stranger, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
}

// settled waits until none of objs changes for a second.
func settled(t *testing.T, objs ...client.Object) {
	t.Helper()
	versions := func() (string, error) {
		out := ""
		for _, obj := range objs {
			if err := get(obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return "", err
			}
			out += obj.GetResourceVersion() + " "
		}
		return out, nil
	}
	testenv.Eventually(t, timeout, func() error {
		before, err := versions()
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		after, err := versions()
		if err != nil {
			return err
		}
		if before != after {
			return fmt.Errorf("resource versions %s became %s within a second", before, after)
		}
		return nil
	})
}

// setNamespaceLabels replaces a namespace's labels.
func setNamespaceLabels(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	var ns corev1.Namespace
	if err := get(&ns, "", name); err != nil {
		t.Fatal(err)
	}
	ns.Labels = labels
	if err := env.Client.Update(ctx(), &ns); err != nil {
		t.Fatal(err)
	}
}

// TestClusterRefWrittenOut: the operator resolves a clusterRef without namespace into
// status.clusterNamespace, after which the tenant may write that namespace out in its spec and
// stays admitted on the same cluster.
func TestClusterRefWrittenOut(t *testing.T) {
	ns := env.Namespace(t, "ref-written-out")
	nodes(t, "ref", "ref-a")
	cluster(t, ns, "local", "ref", v1.EngineRedis, 1)
	tslo := tenant(ns, "implicit", "", "local", "64Mi")
	create(t, tslo)
	conditionOf(t, tslo, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
	testenv.Eventually(t, timeout, func() error {
		if err := get(tslo, ns, "implicit"); err != nil {
			return err
		}
		if tslo.Status.ClusterNamespace != ns {
			return fmt.Errorf("status.clusterNamespace %q, want %q", tslo.Status.ClusterNamespace, ns)
		}
		tslo.Spec.ClusterRef.Namespace = ns
		return env.Client.Update(ctx(), tslo)
	})
	testenv.Eventually(t, timeout, func() error {
		if err := get(tslo, ns, "implicit"); err != nil {
			return err
		}
		if tslo.Status.ObservedGeneration != tslo.Generation {
			return fmt.Errorf("observed generation %d of %d", tslo.Status.ObservedGeneration, tslo.Generation)
		}
		return nil
	})
	conditionOf(t, tslo, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)
	if tslo.Spec.ClusterRef.Namespace != ns || tslo.Status.ClusterNamespace != ns {
		t.Errorf("clusterRef %+v, status.clusterNamespace %q", tslo.Spec.ClusterRef, tslo.Status.ClusterNamespace)
	}
}
