package chart

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// warningRecorder keeps the warnings the API server sends (PodSecurity's among them).
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}

// warningClient is a client whose warnings go to a recorder instead of the log.
func warningClient(t *testing.T) (client.Client, *warningRecorder) {
	t.Helper()
	recorder := &warningRecorder{}
	cfg := rest.CopyConfig(fixture.config)
	cfg.WarningHandler = recorder
	c, err := client.New(cfg, client.Options{Scheme: fixture.client.Scheme(), Mapper: fixture.client.RESTMapper()})
	if err != nil {
		t.Fatal(err)
	}
	return c, recorder
}

// podSecurityLabels make the API server warn about every pod template that the restricted
// Pod Security Standard would reject.
var podSecurityLabels = map[string]string{
	"pod-security.kubernetes.io/warn":    "restricted",
	"pod-security.kubernetes.io/enforce": "restricted",
}

// ensureNamespace creates a namespace (labelled for PodSecurity) unless it exists.
func ensureNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: podSecurityLabels}}
	if err := fixture.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// dryRunApply applies every object as a server-side apply dry run: the API server validates
// it completely (schemas, CRD schemas, admission) and stores nothing. Namespaces the objects
// live in are created for real. Any warning (a restricted Pod Security violation, a
// deprecated API, an unknown field) fails the test.
func dryRunApply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := t.Context()
	c, warnings := warningClient(t)
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" {
			ensureNamespace(ctx, t, ns)
		}
	}
	for _, o := range objs {
		obj := o.DeepCopy()
		err := c.Patch(ctx, obj, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner("chart-test"))
		if err != nil {
			t.Errorf("the API server refuses %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		for _, w := range warnings.take() {
			t.Errorf("the API server warns about %s %s/%s: %s", o.GetKind(), o.GetNamespace(), o.GetName(), w)
		}
	}
}

// TestPodSecurityWarningsAreSeen proves that dryRunApply would notice a pod template the
// restricted profile rejects: the same path with a privileged pod must warn.
func TestPodSecurityWarningsAreSeen(t *testing.T) {
	ctx := t.Context()
	ensureNamespace(ctx, t, testNamespace)
	c, warnings := warningClient(t)
	pod := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "privileged", "namespace": testNamespace},
		"spec": map[string]any{"containers": []any{map[string]any{
			"name": "c", "image": "example/image:1", "securityContext": map[string]any{"privileged": true},
		}}},
	}}
	err := c.Patch(ctx, pod, client.Apply, client.DryRunAll, client.FieldOwner("chart-test"))
	if err == nil && len(warnings.take()) == 0 {
		t.Fatal("a privileged pod in a restricted namespace was accepted without a warning: PodSecurity admission is not active, so dryRunApply checks nothing")
	}
}

// TestRenderedCRDsMatchGenerated checks that the chart's CRDs are exactly config/crd/bases
// (controller-gen's output) plus the chart's labels and, with crds.keep, the keep policy.
func TestRenderedCRDsMatchGenerated(t *testing.T) {
	generated := map[string]*unstructured.Unstructured{}
	for _, name := range repoFiles(t, "config/crd/bases", ".yaml") {
		objs, err := decodeManifests(readRepoFile(t, "config/crd/bases/"+name))
		if err != nil || len(objs) != 1 {
			t.Fatalf("config/crd/bases/%s: %d objects, %v", name, len(objs), err)
		}
		generated[objs[0].GetName()] = objs[0]
	}
	for _, keep := range []bool{true, false} {
		objs := release{name: "crds", namespace: testNamespace, values: values{"crds.keep": boolJSON(keep)}}.mustRender(t)
		rendered := find(objs, "CustomResourceDefinition")
		if len(rendered) != len(generated) {
			t.Fatalf("rendered %d CRDs, config/crd/bases has %d", len(rendered), len(generated))
		}
		for _, crd := range rendered {
			want, ok := generated[crd.GetName()]
			if !ok {
				t.Errorf("rendered CRD %s is not in config/crd/bases", crd.GetName())
				continue
			}
			got := crd.DeepCopy()
			annotations := got.GetAnnotations()
			if _, has := annotations[keepPolicy]; has != keep {
				t.Errorf("CRD %s with crds.keep=%v: has %s: %v", crd.GetName(), keep, keepPolicy, has)
			}
			delete(annotations, keepPolicy)
			got.SetAnnotations(annotations)
			if got.GetLabels()["app.kubernetes.io/part-of"] != "cacheqos" {
				t.Errorf("CRD %s lacks the chart's labels: %v", crd.GetName(), got.GetLabels())
			}
			got.SetLabels(nil)
			if diff := jsonDiff(want.Object, got.Object); diff != "" {
				t.Errorf("CRD %s differs from config/crd/bases: %s", crd.GetName(), diff)
			}
		}
	}
}

// TestChartFilesInSync checks that files/crds and files/rbac are byte-for-byte copies of what
// controller-gen wrote into config/ (`make chart-sync` copies them).
func TestChartFilesInSync(t *testing.T) {
	generated := repoFiles(t, "config/crd/bases", ".yaml")
	copied := repoFiles(t, "charts/cacheqos/files/crds", ".yaml")
	if !slices.Equal(generated, copied) {
		t.Fatalf("charts/cacheqos/files/crds has %v, config/crd/bases has %v: run make chart-sync", copied, generated)
	}
	pairs := map[string]string{"config/rbac/role.yaml": "charts/cacheqos/files/rbac/role.yaml"}
	for _, name := range generated {
		pairs["config/crd/bases/"+name] = "charts/cacheqos/files/crds/" + name
	}
	for source, copy := range pairs {
		if string(readRepoFile(t, source)) != string(readRepoFile(t, copy)) {
			t.Errorf("%s differs from %s: run make chart-sync", copy, source)
		}
	}
}

func boolJSON(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestNetworkPolicyMatchesOperatorPods checks the sidecar NetworkPolicy's pod selector and
// port names against the labels and ports the operator gives the sidecar pods
// (controllers/internal/objects and controllers/cachecluster), so the policy selects them.
func TestNetworkPolicyMatchesOperatorPods(t *testing.T) {
	objs := release{name: "netpol", namespace: testNamespace}.mustRender(t)
	checkNetworkPolicies(t, objs, []string{testNamespace}, map[string]any{"cacheqos.io/tenant": "true"})
}

// checkNetworkPolicies checks the sidecar policies (one per namespace) and the operator's.
func checkNetworkPolicies(t *testing.T, objs []*unstructured.Unstructured, namespaces []string, tenantLabels map[string]any) {
	t.Helper()
	objectsFile := "controllers/internal/objects/objects.go"
	sidecarLabels := map[string]any{
		goStringConst(t, objectsFile, "LabelName"):      goStringConst(t, objectsFile, "SidecarName"),
		goStringConst(t, objectsFile, "LabelManagedBy"): goStringConst(t, objectsFile, "ManagedBy"),
	}
	daemonSetFile := "controllers/cachecluster/daemonset.go"
	ports := map[string]string{
		"client":  goStringConst(t, daemonSetFile, "portClient"),
		"peer":    goStringConst(t, daemonSetFile, "portPeer"),
		"metrics": goStringConst(t, daemonSetFile, "portMetrics"),
	}
	var sidecarNamespaces []string
	operatorPolicies := 0
	for _, policy := range find(objs, "NetworkPolicy") {
		selector := nested[map[string]any](t, policy.Object, "spec", "podSelector", "matchLabels")
		if selector["app.kubernetes.io/component"] == "operator" {
			operatorPolicies++
			continue
		}
		sidecarNamespaces = append(sidecarNamespaces, policy.GetNamespace())
		if diff := jsonDiff(sidecarLabels, selector); diff != "" {
			t.Errorf("NetworkPolicy %s/%s selects %v, the operator labels sidecar pods %v", policy.GetNamespace(), policy.GetName(), selector, sidecarLabels)
		}
		ingress := nested[[]any](t, policy.Object, "spec", "ingress")
		if len(ingress) != 3 {
			t.Fatalf("NetworkPolicy %s has %d ingress rules, want client, peer and metrics", policy.GetName(), len(ingress))
		}
		rule := func(i int) (from map[string]any, port string) {
			r := ingress[i].(map[string]any)
			return r["from"].([]any)[0].(map[string]any), r["ports"].([]any)[0].(map[string]any)["port"].(string)
		}
		from, port := rule(0)
		if port != ports["client"] || jsonDiff(map[string]any{"namespaceSelector": map[string]any{"matchLabels": tenantLabels}}, from) != "" {
			t.Errorf("client rule: port %q from %v, want port %q from namespaces labelled %v", port, from, ports["client"], tenantLabels)
		}
		from, port = rule(1)
		if port != ports["peer"] || jsonDiff(map[string]any{"podSelector": map[string]any{"matchLabels": sidecarLabels}}, from) != "" {
			t.Errorf("peer rule: port %q from %v, want port %q from sidecar pods", port, from, ports["peer"])
		}
		if _, port = rule(2); port != ports["metrics"] {
			t.Errorf("metrics rule: port %q, want %q", port, ports["metrics"])
		}
	}
	slices.Sort(sidecarNamespaces)
	if !slices.Equal(sidecarNamespaces, namespaces) {
		t.Errorf("sidecar NetworkPolicies in %v, want %v", sidecarNamespaces, namespaces)
	}
	if operatorPolicies != 1 {
		t.Errorf("%d NetworkPolicies select the operator, want 1", operatorPolicies)
	}
}

// TestDeploymentFlagsExistInOperator checks every flag the chart passes against the flags
// cmd/operator defines: an unknown flag stops the operator at start.
func TestDeploymentFlagsExistInOperator(t *testing.T) {
	defined := operatorFlags(t)
	for i, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			objs := release{name: "flags" + strings.Repeat("x", i), namespace: testNamespace, values: c.values}.mustRender(t)
			for flag := range operatorArgs(t, objs) {
				if !defined[flag] {
					t.Errorf("the chart passes --%s, which cmd/operator does not define (it defines %v)", flag, sortedKeys(defined))
				}
			}
		})
	}
}
