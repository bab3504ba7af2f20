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
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// quantityField is one resource.Quantity field of a spec, found by walking the Go type, so a
// field added later is covered without editing this file.
type quantityField struct {
	crd  string
	base func() client.Object
	path []string // JSON path from the object root; "[]" steps into the first list item
}

func (f quantityField) String() string { return f.crd + ":" + strings.Join(f.path, ".") }

// fieldPath is how the API server names the field in a cause: spec.partitions[0].memory.
func (f quantityField) fieldPath() string {
	return strings.ReplaceAll(strings.Join(f.path, "."), ".[]", "[0]")
}

func specQuantityFields(t *testing.T) []quantityField {
	t.Helper()
	out := specFieldsOfType(quantityType, func() client.Object { return validTenant() })
	if len(out) < 8 {
		t.Fatalf("found %d quantity fields in the specs, want at least 8: %v", len(out), out)
	}
	return out
}

// specFieldsOfType finds every field of Go type want in the three specs. tenantBase builds
// the valid TenantSLO a field's test starts from (some fields need another objective).
func specFieldsOfType(want reflect.Type, tenantBase func() client.Object) []quantityField {
	var out []quantityField
	for _, kind := range []struct {
		crd  string
		base func() client.Object
		spec any
	}{
		{"cacheqos.io_tenantslos.yaml", tenantBase, v1.TenantSLOSpec{}},
		{"cacheqos.io_cacheclusters.yaml", func() client.Object { return validCluster() }, v1.CacheClusterSpec{}},
		{"cacheqos.io_cachenodeplans.yaml", func() client.Object { return validPlan() }, v1.CacheNodePlanSpec{}},
	} {
		for _, path := range typePaths(reflect.TypeOf(kind.spec), want, []string{"spec"}) {
			out = append(out, quantityField{kind.crd, kind.base, path})
		}
	}
	return out
}

var quantityType = reflect.TypeOf(resource.Quantity{})

// statusQuantityFields finds every quantity field of the three statuses.
func statusQuantityFields(t *testing.T) []quantityField {
	t.Helper()
	var out []quantityField
	for _, kind := range []struct {
		crd    string
		base   func() client.Object
		status any
	}{
		{"cacheqos.io_tenantslos.yaml", func() client.Object { return validTenant() }, v1.TenantSLOStatus{}},
		{"cacheqos.io_cacheclusters.yaml", func() client.Object { return validCluster() }, v1.CacheClusterStatus{}},
		{"cacheqos.io_cachenodeplans.yaml", func() client.Object { return validPlan() }, v1.CacheNodePlanStatus{}},
	} {
		for _, path := range typePaths(reflect.TypeOf(kind.status), quantityType, []string{"status"}) {
			out = append(out, quantityField{kind.crd, kind.base, path})
		}
	}
	if len(out) < 13 {
		t.Fatalf("found %d status quantity fields, want at least 13: %v", len(out), out)
	}
	return out
}

// typePaths lists the JSON paths below prefix of the fields of type want.
func typePaths(typ, want reflect.Type, prefix []string) [][]string {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		if typ.Kind() == reflect.Slice {
			prefix = append(append([]string(nil), prefix...), "[]")
		}
		typ = typ.Elem()
	}
	if typ == want {
		return [][]string{prefix}
	}
	if typ.Kind() != reflect.Struct {
		return nil
	}
	var out [][]string
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, typePaths(typ.Field(i).Type, want, append(append([]string(nil), prefix...), name))...)
	}
	return out
}

// schemaAt follows path through a CRD schema.
func schemaAt(t *testing.T, f quantityField) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	schema := crdSchema(t, f.crd)
	for _, p := range f.path {
		if p == "[]" {
			schema = *schema.Items.Schema
			continue
		}
		next, ok := schema.Properties[p]
		if !ok {
			t.Fatalf("%s: no property %q", f, p)
		}
		schema = next
	}
	return schema
}

// TestQuantityFieldsShareOneRule: every quantity field of every spec is a bounded string
// under the shared rule set (QuantityForm, whole bytes, floor, ceiling) or, in plan lists, a rule matching
// PlanQuantityPattern; every status quantity outside statusQuantitiesWithoutRules has the same
// rules without the floor, under the status ceilings; each message naming the field and echoing the value; none keeps a
// schema pattern (the generated int-or-string one lets 1e1.5 in, and any prints a regex).
func TestQuantityFieldsShareOneRule(t *testing.T) {
	form := fmt.Sprintf("self.matches('%s')", v1.QuantityForm)
	for _, f := range append(specQuantityFields(t), statusQuantityFields(t)...) {
		s := schemaAt(t, f)
		if s.Type != "string" || s.MaxLength == nil || *s.MaxLength > 32 || s.XIntOrString {
			t.Errorf("%s: type %q maxLength %v int-or-string %v; want a string of at most 32 characters", f, s.Type, s.MaxLength, s.XIntOrString)
		}
		if s.Pattern != "" {
			t.Errorf("%s: pattern %q; the CEL rules give the messages", f, s.Pattern)
		}
		inPlan := f.path[0] == "spec" && f.path[len(f.path)-2] == "[]"
		if inPlan {
			if len(s.XValidations) != 1 || s.XValidations[0].Rule != fmt.Sprintf("self.matches('%s')", v1.PlanQuantityPattern) {
				t.Errorf("%s: rules %+v, want one matching PlanQuantityPattern", f, s.XValidations)
				continue
			}
		}
		// The message names the field by the end of its path (a type shared by several fields,
		// such as NodeResources, by its last step; the error's path says which) and echoes it.
		dotted := "." + strings.ReplaceAll(strings.Join(f.path, "."), ".[]", "")
		for _, rule := range s.XValidations {
			name := messageName.FindStringSubmatch(rule.MessageExpression)
			if name == nil || !strings.HasSuffix(dotted, "."+name[1]) {
				t.Errorf("%s: message %q does not name the field and echo the value", f, rule.MessageExpression)
			}
		}
		if inPlan {
			continue
		}
		// A status has no floor (0 is a valid observation) and its own ceilings.
		inStatus := f.path[0] == "status"
		want, ceilings := 4, []string{v1.MaxBytes, v1.MaxBytesPerSecond}
		if inStatus {
			want, ceilings = 3, []string{v1.MaxStatusBytes, v1.MaxStatusBytesPerSecond}
		}
		if len(s.XValidations) != want {
			t.Fatalf("%s: %d rules, want form, whole bytes, a floor (spec only) and ceiling", f, len(s.XValidations))
		}
		if r := s.XValidations[0].Rule; r != form+" && isQuantity(self)" {
			t.Errorf("%s: form rule %q", f, r)
		}
		ceiling := regexp.MustCompile(`^!` + regexp.QuoteMeta(form) + ` \|\| quantity\(self\)\.compareTo\(quantity\('([^']+)'\)\) <= 0$`).FindStringSubmatch(s.XValidations[want-1].Rule)
		if ceiling == nil {
			t.Fatalf("%s: ceiling rule %q", f, s.XValidations[want-1].Rule)
		}
		if floor := regexp.MustCompile(`^!` + regexp.QuoteMeta(form) + ` \|\| quantity\(self\)\.compareTo\(quantity\('([^']+)'\)\) >= 0$`); !inStatus && !floor.MatchString(s.XValidations[2].Rule) {
			t.Fatalf("%s: floor rule %q", f, s.XValidations[2].Rule)
		}
		// Whole bytes: the value equals the integer its float truncates to, an exact test up
		// to 2^53, so it is skipped above the ceiling (which reports those values instead).
		whole := "!" + form + " || quantity(self).compareTo(quantity('" + ceiling[1] + "')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0"
		if r := s.XValidations[1].Rule; r != whole {
			t.Errorf("%s: whole-bytes rule %q, want %q", f, r, whole)
		}
		if !slices.Contains(ceilings, ceiling[1]) {
			t.Errorf("%s: ceiling %s, want one of %v", f, ceiling[1], ceilings)
		}
	}
}

// messageName is the field name a quantity message starts with, before the value it echoes.
var messageName = regexp.MustCompile(`^'([A-Za-z.]+) ' \+ self`)

// refusedQuantities are values every quantity field must refuse, each with why.
var refusedQuantities = []struct{ value, why string }{
	{"1e1.5", "resource.ParseQuantity refuses it"},
	{"1.5.2Gi", "resource.ParseQuantity refuses it"},
	{"10GB", "resource.ParseQuantity refuses it"},
	{"100Mbps", "resource.ParseQuantity refuses it"},
	{"-1M", "negative"},
	{"0", "zero"},
	{"512m", "a fraction of a byte"},
	{"1250m", "a fraction of a byte"},
	{"4u", "a fraction of a byte"},
	{"1e-10000000", "a fraction of a byte that costs seconds to compare"},
	{"4194304.5", "a fraction of a byte without a suffix"},
	{"1.0000001Mi", "a fraction of a byte behind a suffix"},
	{"4194304.55e1", "a fraction of a byte that the exponent does not make whole"},
	{"10E", "overflows int64"},
	{"1e19", "overflows int64"},
	{"9223372036854775807", "at the int64 limit"},
	{"20Pi", "above the ceiling"},
	{"2Pi", "above the ceiling of scalar fields (plan quantities stop below 10Pi)"},
}

func TestQuantityFieldsRefuseBadValues(t *testing.T) {
	ctx := context.Background()
	const ns = "quantities"
	createNamespace(ctx, t, ns)

	// Each refused value is one resource.ParseQuantity refuses, or one whose int64 value is
	// wrong or out of the accepted range.
	maxBytes := resource.MustParse(v1.MaxBytes)
	for _, bad := range refusedQuantities {
		q, err := resource.ParseQuantity(bad.value)
		if err == nil {
			if v, ok := q.AsInt64(); ok && v > 0 && q.Cmp(maxBytes) <= 0 {
				t.Errorf("%s (%s) parses to %d, a value the API should accept", bad.value, bad.why, v)
			}
		}
	}

	n := 0
	for _, f := range specQuantityFields(t) {
		bandwidth := strings.Contains(strings.ToLower(f.path[len(f.path)-1]), "bandwidth") || f.path[1] == "bandwidth"
		inPlan := f.path[len(f.path)-2] == "[]"
		accepted := []string{"4Mi", "1Pi", "1536Mi"}
		if !inPlan {
			// Fractions and exponents that come to whole bytes.
			accepted = append(accepted, "1.5Gi", "4.5e6")
		}
		if bandwidth {
			accepted = []string{"1P", "125M"}
			if !inPlan {
				accepted = append(accepted, v1.MinBytesPerSecond, "12.5M", "1.5e7")
			}
		}
		for _, good := range accepted {
			obj := withQuantity(t, f, good)
			obj.SetNamespace(ns)
			obj.SetName(fmt.Sprintf("ok-%d", n))
			n++
			if err := k8sClient.Create(ctx, obj, strict); err != nil {
				t.Errorf("%s = %s rejected: %v", f, good, err)
			}
		}
		for _, bad := range refusedQuantities {
			if bad.value == "2Pi" && inPlan {
				continue
			}
			t.Run(f.String()+"="+bad.value, func(t *testing.T) {
				obj := withQuantity(t, f, bad.value)
				obj.SetNamespace(ns)
				obj.SetName(fmt.Sprintf("bad-%d", n))
				n++
				err := k8sClient.Create(ctx, obj, strict)
				assertRejected(t, err, f.fieldPath(), bad.value)
			})
		}
	}
}

// withQuantity returns f's valid base object with the field at f.path set to value.
func withQuantity(t *testing.T, f quantityField, value string) *unstructured.Unstructured {
	t.Helper()
	u := withField(f.base(), nil, "status")
	if err := setPath(u.Object, f.path, value); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	return u
}

func setPath(obj map[string]any, path []string, value string) error {
	if len(path) == 1 {
		obj[path[0]] = value
		return nil
	}
	if len(path) > 2 && path[1] == "[]" {
		items, _ := obj[path[0]].([]any)
		if len(items) == 0 {
			return fmt.Errorf("no items under %s", path[0])
		}
		return setPath(items[0].(map[string]any), path[2:], value)
	}
	next, ok := obj[path[0]].(map[string]any)
	if !ok {
		next = map[string]any{}
		obj[path[0]] = next
	}
	return setPath(next, path[1:], value)
}

// TestStatusQuantitiesRefuseBadValues: the status quantities with rules refuse what
// resource.ParseQuantity refuses and what would overflow, through the status subresource,
// and accept 0 and what the operator writes (integers from resource.NewQuantity, the spec's
// bandwidth copied, such as 12.5M or 1.5e7).
func TestStatusQuantitiesRefuseBadValues(t *testing.T) {
	ctx := context.Background()
	const ns = "status-quantities"
	createNamespace(ctx, t, ns)
	operatorWrites := []string{
		"0",
		resource.NewQuantity(5<<30+7, resource.BinarySI).String(),
		resource.NewQuantity(1536<<20, resource.BinarySI).String(),
		resource.NewQuantity(123456789, resource.DecimalSI).String(),
		"12.5M", "1.5e7", "1.5Gi",
	}
	n := 0
	write := func(t *testing.T, f quantityField, value string) error {
		t.Helper()
		u := withField(f.base(), nil, "status")
		u.SetNamespace(ns)
		u.SetName(fmt.Sprintf("s-%d", n))
		n++
		if err := k8sClient.Create(ctx, u, strict); err != nil {
			t.Fatalf("creating the object for %s: %v", f, err)
		}
		// The fields a status requires besides the quantity, and one item of each list.
		u.Object["status"] = map[string]any{
			"cacheqos.io_tenantslos.yaml": map[string]any{"allocation": map[string]any{
				"nodes": []any{map[string]any{"nodeName": "a"}}, "demand": []any{map[string]any{"nodeName": "a"}},
			}},
			"cacheqos.io_cacheclusters.yaml": map[string]any{
				"lastPlan": map[string]any{"time": "2026-01-01T00:00:00Z", "policy": "optimal"},
				"nodes":    []any{map[string]any{"name": "a"}},
			},
		}[f.crd]
		if err := setPath(u.Object, f.path, value); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		return k8sClient.Status().Update(ctx, u, strict)
	}
	for _, f := range statusQuantityFields(t) {
		for _, good := range append(operatorWrites, v1.MaxStatusBytesPerSecond) {
			if err := write(t, f, good); err != nil {
				t.Errorf("%s = %s refused: %v", f, good, err)
			}
		}
		for _, bad := range append(refusedQuantities, struct{ value, why string }{"9Pi", "above the status ceiling"}) {
			if bad.value == "0" || bad.value == "2Pi" {
				continue // valid in a status
			}
			t.Run(f.String()+"="+bad.value, func(t *testing.T) {
				assertRejected(t, write(t, f, bad.value), f.fieldPath(), bad.value)
			})
		}
	}
}
