package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// values are chart value overrides: a dotted path (as helm's --set-json takes it) and the
// value as JSON.
type values map[string]string

// args turns the overrides into helm flags, in a fixed order.
func (v values) args() []string {
	paths := make([]string, 0, len(v))
	for p := range v {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var args []string
	for _, p := range paths {
		args = append(args, "--set-json", p+"="+v[p])
	}
	return args
}

// release names a rendering of the chart.
type release struct {
	name, namespace string
	values          values
}

// helm runs the helm binary and returns its standard output, or an error carrying its
// standard error.
func helm(args ...string) ([]byte, error) {
	cmd := exec.Command(fixture.helm, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// templateArgs are the arguments of `helm template` for r.
func (r release) templateArgs() []string {
	args := []string{"template", r.name, fixture.chartDir, "--namespace", r.namespace, "--kube-version", fixture.kubeVersion}
	return append(args, r.values.args()...)
}

// render runs `helm template` and decodes every manifest it prints.
func (r release) render() ([]*unstructured.Unstructured, error) {
	out, err := helm(r.templateArgs()...)
	if err != nil {
		return nil, err
	}
	return decodeManifests(out)
}

// mustRender renders r and fails the test on an error.
func (r release) mustRender(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := r.render()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// notes renders the chart's NOTES.txt for r, as `helm install` prints it (a server-side dry
// run against the test API server: helm template does not render notes). The CRDs exist
// there already, owned by no release or another one: --take-ownership lets the dry run pass.
func (r release) notes(t *testing.T) string {
	t.Helper()
	args := append([]string{"install", r.name, fixture.chartDir, "--namespace", r.namespace, "--dry-run=server", "--take-ownership", "--kubeconfig", fixture.kubeconfig}, r.values.args()...)
	out, err := helm(args...)
	if err != nil {
		t.Fatal(err)
	}
	_, notes, found := strings.Cut(string(out), "\nNOTES:\n")
	if !found {
		t.Fatalf("helm install printed no NOTES:\n%s", out)
	}
	return notes
}

// decodeManifests splits a multi-document YAML stream into objects, skipping empty documents.
func decodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var content map[string]any
		if err := yaml.Unmarshal(doc, &content); err != nil {
			return nil, fmt.Errorf("decoding a rendered manifest: %w\n%s", err, doc)
		}
		if len(content) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: content})
	}
}

// find returns the rendered objects of a kind.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// findOne returns the one rendered object of a kind, failing the test when there is not
// exactly one.
func findOne(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("rendered %d objects of kind %s, want 1: %s", len(found), kind, describe(found))
	}
	return found[0]
}

// describe lists objects as kind namespace/name.
func describe(objs []*unstructured.Unstructured) string {
	var names []string
	for _, o := range objs {
		names = append(names, fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName()))
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// nested reads a field of an object, failing the test when it is missing.
func nested[T any](t *testing.T, obj map[string]any, path ...string) T {
	t.Helper()
	value, found, err := unstructured.NestedFieldNoCopy(obj, path...)
	if err != nil || !found {
		t.Fatalf("field %s not found (%v)", strings.Join(path, "."), err)
	}
	typed, ok := value.(T)
	if !ok {
		t.Fatalf("field %s is a %T, not a %T", strings.Join(path, "."), value, typed)
	}
	return typed
}

// operatorContainer returns the operator Deployment's container.
func operatorContainer(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	deployment := findOne(t, objs, "Deployment")
	containers := nested[[]any](t, deployment.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("the operator Deployment has %d containers, want 1", len(containers))
	}
	return containers[0].(map[string]any)
}

// operatorArgs returns the operator's flags as name -> value ("true" for a bare flag).
func operatorArgs(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	args := map[string]string{}
	for _, a := range nested[[]any](t, operatorContainer(t, objs), "args") {
		s := a.(string)
		if !strings.HasPrefix(s, "--") {
			t.Fatalf("operator argument %q is not a --flag", s)
		}
		name, value, found := strings.Cut(strings.TrimPrefix(s, "--"), "=")
		if !found {
			value = "true"
		}
		if _, dup := args[name]; dup {
			t.Fatalf("operator flag --%s is given twice", name)
		}
		args[name] = value
	}
	return args
}
