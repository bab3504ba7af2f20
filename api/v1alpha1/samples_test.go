/*
Copyright 2026 The cacheqos Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// TestSamplesApply applies every sample the way `kubectl apply -k config/samples` would (in
// kustomization order, unknown fields rejected) and checks the tenants point at the sample
// cluster and carry targets the Go helpers can read.
func TestSamplesApply(t *testing.T) {
	ctx := context.Background()
	files := sampleFiles(t)
	if len(files) == 0 {
		t.Fatal("config/samples lists no resources")
	}
	created := map[string]int{}
	for _, file := range files {
		for _, obj := range decodeDocuments(t, filepath.Join(samplesDir, file)) {
			if err := k8sClient.Create(ctx, obj, strict); err != nil {
				t.Errorf("%s: creating %s %s/%s: %v", file, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				continue
			}
			created[obj.GetKind()]++
		}
	}
	if created["CacheCluster"] < 1 || created["TenantSLO"] < 3 {
		t.Fatalf("samples created %v; want a CacheCluster and at least three TenantSLOs", created)
	}

	var clusters v1.CacheClusterList
	if err := k8sClient.List(ctx, &clusters); err != nil {
		t.Fatal(err)
	}
	var tenants v1.TenantSLOList
	if err := k8sClient.List(ctx, &tenants); err != nil {
		t.Fatal(err)
	}
	sampleClusters := map[types.NamespacedName]bool{}
	for _, c := range clusters.Items {
		sampleClusters[client.ObjectKeyFromObject(&c)] = true
	}
	classes := map[v1.TenantClass]bool{}
	objectives := map[string]bool{}
	for i := range tenants.Items {
		slo := &tenants.Items[i]
		if !sampleClusters[slo.ClusterKey()] {
			t.Errorf("TenantSLO %s references %v, which is not a sample CacheCluster", slo.TenantID(), slo.ClusterKey())
		}
		classes[slo.Spec.Class] = true
		switch o := slo.Spec.Objective; {
		case o.HitRatio != nil:
			objectives["hitRatio"] = true
			if _, err := o.HitRatio.Target(); err != nil {
				t.Errorf("TenantSLO %s: %v", slo.TenantID(), err)
			}
		case o.Latency != nil:
			objectives["latency"] = true
		case o.MaxDegradation != nil:
			objectives["maxDegradation"] = true
			if _, err := o.MaxDegradation.Target(); err != nil {
				t.Errorf("TenantSLO %s: %v", slo.TenantID(), err)
			}
		}
	}
	if !classes[v1.ClassStrict] || !classes[v1.ClassBestEffort] {
		t.Errorf("sample tenant classes %v; want strict and bestEffort", classes)
	}
	if !objectives["hitRatio"] || !objectives["latency"] {
		t.Errorf("sample objectives %v; want at least hitRatio and latency", objectives)
	}
}

// sampleFiles returns config/samples/kustomization.yaml's resources and checks that it lists
// every YAML file of the folder, so no sample escapes this test.
func sampleFiles(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(samplesDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &kustomization); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	onDisk, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range onDisk {
		name := filepath.Base(path)
		if name != "kustomization.yaml" && !slices.Contains(kustomization.Resources, name) {
			t.Errorf("config/samples/%s is not listed in kustomization.yaml", name)
		}
	}
	return kustomization.Resources
}

// decodeDocuments reads every non-empty YAML document of a file.
func decodeDocuments(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return decodeStream(t, path, f)
}

// decodeStream reads every non-empty YAML document of r (named name in errors).
func decodeStream(t *testing.T, name string, r io.Reader) []*unstructured.Unstructured {
	t.Helper()
	decoder := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var doc map[string]any
		err := decoder.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(doc) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: doc})
		}
	}
}

// TestPlatformExampleApplies applies the worked example of docs/api.md's "For platform teams"
// section, so the documented governance settings stay valid.
func TestPlatformExampleApplies(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(raw), "\n## For platform teams\n")
	if !found {
		t.Fatal("docs/api.md has no For platform teams section")
	}
	_, block, found := strings.Cut(section, "```yaml\n")
	block, _, closed := strings.Cut(block, "```")
	if !found || !closed {
		t.Fatal("the For platform teams section has no yaml block")
	}
	// Fresh names, so that objects of the samples with the same names do not stand in.
	const namespace = "platform-example"
	createNamespace(ctx, t, namespace)
	kinds := map[string]int{}
	for _, obj := range decodeStream(t, "docs/api.md", strings.NewReader(block)) {
		if obj.GetNamespace() != "" {
			obj.SetNamespace(namespace)
		} else {
			obj.SetName(obj.GetName() + "-example")
		}
		if err := k8sClient.Create(ctx, obj, strict); err != nil {
			t.Errorf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		kinds[obj.GetKind()]++
	}
	if kinds["CacheCluster"] != 1 || kinds["Namespace"] != 1 || kinds["RoleBinding"] != 1 {
		t.Errorf("the example holds %v; want a CacheCluster, a Namespace and a RoleBinding", kinds)
	}
}
