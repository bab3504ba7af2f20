package tenantslo_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// unparsable matches the old schema's quantity pattern, but resource.ParseQuantity refuses
// it, so the Go types cannot hold an object carrying it.
const unparsable = "1e1.5"

// badObject is a stored object of one kind whose quantity at path does not decode.
type badObject struct {
	crd  string
	obj  *unstructured.Unstructured
	path []string // into the CRD schema's properties; "[]" steps into list items
}

// TestBadStoredObjectsSkipped stores one undecodable object of each kind below validation (the
// CRD's schema loosened for the write, then restored, as before an upgrade that tightened
// it), restarts the operator, and checks that it still serves a good cluster and tenant, and
// reports each bad object with a metric and a Warning event.
func TestBadStoredObjectsSkipped(t *testing.T) {
	ns := env.Namespace(t, "poison")
	nodes(t, "poison", "poison-a")

	tenantObj := tenant(ns, "bad-tenant", "", "good", "")
	badCluster := &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-cluster"},
		Spec: v1.CacheClusterSpec{Engine: v1.EngineRedis, NodeSelector: map[string]v1.LabelValue{"pool": "nowhere"},
			Capacity: v1.NodeCapacity{Bandwidth: resource.MustParse("1G"), OpsPerSecond: 1000}},
	}
	plan := &v1.CacheNodePlan{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-plan"},
		Spec: v1.CacheNodePlanSpec{ClusterName: "bad-cluster", NodeName: "poison-a", Engine: v1.EngineRedis,
			CredentialsSecret: "bad-cluster-credentials"},
	}
	plan.Spec.SetPartitions([]v1.PartitionPlan{{Tenant: ns + "/bad-tenant", EvictionPolicy: v1.EvictionLRU,
		Routes: []v1.TenantRoute{{NodeName: "poison-a", Host: "poison-a", Port: 7380, Weight: 1}}}})
	bad := []badObject{
		{"tenantslos.cacheqos.io", unstructuredWith(t, tenantObj, unparsable, "spec", "memory", "max"), []string{"spec", "memory", "max"}},
		{"cacheclusters.cacheqos.io", unstructuredWith(t, badCluster, unparsable, "spec", "capacity", "memory"), []string{"spec", "capacity", "memory"}},
		{"cachenodeplans.cacheqos.io", planWithBandwidthLimit(t, plan, unparsable), []string{"spec", "partitions", "[]", "bandwidthLimit"}},
	}
	before := map[string]float64{}
	for _, kind := range []string{"TenantSLO", "CacheCluster", "CacheNodePlan"} {
		before[kind] = testutil.ToFloat64(opmetrics.UndecodableObjects.WithLabelValues(kind))
	}

	for _, b := range bad {
		restore := loosenSchema(t, b.crd, b.path)
		testenv.Eventually(t, timeout, func() error { return env.Client.Create(ctx(), b.obj.DeepCopy()) })
		restore()
		t.Cleanup(func() { _ = env.Client.Delete(ctx(), b.obj) })
	}

	// A new operator lists everything from scratch, as after an upgrade.
	if err := env.RestartOperator(controllers.Options{
		Images: testenv.Images, Allocation: allocation.Options{Debounce: 200 * time.Millisecond},
	}); err != nil {
		t.Fatal(err)
	}
	cluster(t, ns, "good", "poison", v1.EngineRedis, 1)
	good := tenant(ns, "good-tenant", "", "good", "64Mi")
	create(t, good)
	conditionOf(t, good, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted)

	// Uncached lists leave the bad objects out too.
	var plans v1.CacheNodePlanList
	if err := env.Client.List(ctx(), &plans, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing plans: %v", err)
	}
	for _, p := range plans.Items {
		if p.Name == "bad-plan" {
			t.Errorf("the list holds the undecodable plan")
		}
	}

	for _, kind := range []string{"TenantSLO", "CacheCluster", "CacheNodePlan"} {
		if got := testutil.ToFloat64(opmetrics.UndecodableObjects.WithLabelValues(kind)); got <= before[kind] {
			t.Errorf("%s: %s stays at %v", kind, "cacheqos_operator_undecodable_objects_total", got)
		}
	}
	for _, name := range []string{"bad-tenant", "bad-cluster"} {
		testenv.Eventually(t, timeout, func() error {
			var events corev1.EventList
			if err := env.Client.List(ctx(), &events, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.InvolvedObject.Name == name && e.Reason == controllers.ReasonUndecodable && e.Type == corev1.EventTypeWarning {
					return nil
				}
			}
			return fmt.Errorf("no %s event on %s", controllers.ReasonUndecodable, name)
		})
	}
}

func unstructuredWith(t *testing.T, obj client.Object, value string, path ...string) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	gvk, err := env.Client.GroupVersionKindFor(obj)
	if err != nil {
		t.Fatal(err)
	}
	u.SetGroupVersionKind(gvk)
	unstructured.RemoveNestedField(u.Object, "status")
	if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
		t.Fatal(err)
	}
	return u
}

func planWithBandwidthLimit(t *testing.T, plan *v1.CacheNodePlan, value string) *unstructured.Unstructured {
	t.Helper()
	u := unstructuredWith(t, plan, "bad-cluster", "spec", "clusterName")
	partitions, _, _ := unstructured.NestedSlice(u.Object, "spec", "partitions")
	partitions[0].(map[string]any)["memory"] = "64Mi"
	partitions[0].(map[string]any)["bandwidthLimit"] = value
	if err := unstructured.SetNestedSlice(u.Object, partitions, "spec", "partitions"); err != nil {
		t.Fatal(err)
	}
	return u
}

// loosenSchema replaces the schema of the field at path with a bare string, and returns a
// function that puts the CRD's schema back.
func loosenSchema(t *testing.T, name string, path []string) (restore func()) {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, &crd); err != nil {
		t.Fatal(err)
	}
	original := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.DeepCopy()
	setProperty(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, path, apiextensionsv1.JSONSchemaProps{Type: "string"})
	if err := env.Client.Update(ctx(), &crd); err != nil {
		t.Fatalf("loosening %s: %v", name, err)
	}
	return func() {
		testenv.Eventually(t, timeout, func() error {
			var current apiextensionsv1.CustomResourceDefinition
			if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, &current); err != nil {
				return err
			}
			current.Spec.Versions[0].Schema.OpenAPIV3Schema = original
			return env.Client.Update(ctx(), &current)
		})
	}
}

// setProperty replaces the schema at path ("[]" steps into list items).
func setProperty(schema *apiextensionsv1.JSONSchemaProps, path []string, leaf apiextensionsv1.JSONSchemaProps) {
	switch {
	case path[0] == "[]":
		setProperty(schema.Items.Schema, path[1:], leaf)
	case len(path) == 1:
		schema.Properties[path[0]] = leaf
	default:
		next := schema.Properties[path[0]]
		setProperty(&next, path[1:], leaf)
		schema.Properties[path[0]] = next
	}
}
