package chart

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestUpgradeAndUninstallKeepTenantsObjects installs the chart with helm for real, creates a
// CacheCluster, then upgrades to crds.enabled=false and uninstalls: with crds.keep the CRDs,
// and so the CacheCluster, survive both.
func TestUpgradeAndUninstallKeepTenantsObjects(t *testing.T) {
	ctx := t.Context()
	const name, namespace = "lifecycle", "cacheqos-lifecycle"
	ensureNamespace(ctx, t, namespace)
	kube := []string{"--namespace", namespace, "--kubeconfig", fixture.kubeconfig}

	crdNames := map[string]bool{}
	for _, o := range (release{name: name, namespace: namespace}).mustRender(t) {
		if o.GetKind() == "CustomResourceDefinition" {
			crdNames[o.GetName()] = true
		}
	}
	if len(crdNames) == 0 {
		t.Fatal("the chart renders no CRDs by default")
	}

	// The test API server installed the CRDs before helm, as kubectl would have: helm
	// adopts them.
	if _, err := helm(append([]string{"install", name, fixture.chartDir, "--take-ownership"}, kube...)...); err != nil {
		t.Fatal(err)
	}
	for crd := range crdNames {
		expectCRD(t, crd)
	}
	samples, err := decodeManifests(readRepoFile(t, "config/samples/cacheqos_v1alpha1_cachecluster.yaml"))
	if err != nil || len(samples) != 1 {
		t.Fatalf("config/samples/cacheqos_v1alpha1_cachecluster.yaml: %d objects, %v", len(samples), err)
	}
	cluster := samples[0]
	cluster.SetNamespace(namespace)
	if err := fixture.client.Create(ctx, cluster); err != nil {
		t.Fatalf("creating a CacheCluster: %v", err)
	}

	if _, err := helm(append([]string{"upgrade", name, fixture.chartDir, "--set", "crds.enabled=false"}, kube...)...); err != nil {
		t.Fatal(err)
	}
	for crd := range crdNames {
		expectCRD(t, crd)
	}
	expectObject(t, cluster, "after an upgrade that stops managing the CRDs")

	if _, err := helm(append([]string{"uninstall", name, "--wait"}, kube...)...); err != nil {
		t.Fatal(err)
	}
	for crd := range crdNames {
		expectCRD(t, crd)
	}
	expectObject(t, cluster, "after helm uninstall")
	deployment := &unstructured.Unstructured{}
	deployment.SetAPIVersion("apps/v1")
	deployment.SetKind("Deployment")
	err = fixture.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name + "-cacheqos-operator"}, deployment)
	if !apierrors.IsNotFound(err) {
		t.Errorf("the operator Deployment is still there after helm uninstall (error %v): the test did not uninstall anything", err)
	}
}

// TestInstallRejectsWrongValueByName runs `helm install` against the API server with values
// the schema refuses: helm names each value and installs nothing.
func TestInstallRejectsWrongValueByName(t *testing.T) {
	const name, namespace = "wrong", "cacheqos-wrong-values"
	ensureNamespace(t.Context(), t, namespace)
	kube := []string{"--namespace", namespace, "--kubeconfig", fixture.kubeconfig}
	for _, c := range []struct {
		set  []string
		want []string
	}{
		{set: []string{"--set", "operator.replicas=0"}, want: []string{"operator.replicas"}},
		{set: []string{"--set", "operator.prometheusAuth.httpConfig.basicauth.username=a"}, want: []string{"operator.prometheusAuth.httpConfig", `"basicauth"`}},
		{set: []string{"--set", "operatr.logLevel=debug"}, want: []string{"operatr"}},
	} {
		_, err := helm(append(append([]string{"install", name, fixture.chartDir}, c.set...), kube...)...)
		if err == nil {
			t.Fatalf("helm install %v succeeded", c.set)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("helm install %v: the error does not name %s:\n%v", c.set, w, err)
			}
		}
		if out, err := helm(append([]string{"status", name}, kube...)...); err == nil {
			t.Fatalf("helm install %v left a release:\n%s", c.set, out)
		}
	}
}

func expectCRD(t *testing.T, name string) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := fixture.client.Get(t.Context(), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("CRD %s: %v", name, err)
	}
	if crd.DeletionTimestamp != nil {
		t.Fatalf("CRD %s is being deleted", name)
	}
}

func expectObject(t *testing.T, obj *unstructured.Unstructured, when string) {
	t.Helper()
	got := obj.DeepCopy()
	if err := fixture.client.Get(t.Context(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatalf("%s %s/%s %s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), when, err)
	}
}
