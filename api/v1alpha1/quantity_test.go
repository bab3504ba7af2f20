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
// PlanQuantityPattern, each message naming the field and echoing the value; none keeps a
// schema pattern (the generated int-or-string one lets 1e1.5 in, and any prints a regex).
func TestQuantityFieldsShareOneRule(t *testing.T) {
	form := fmt.Sprintf("self.matches('%s')", v1.QuantityForm)
	for _, f := range specQuantityFields(t) {
		s := schemaAt(t, f)
		if s.Type != "string" || s.MaxLength == nil || *s.MaxLength > 32 || s.XIntOrString {
			t.Errorf("%s: type %q maxLength %v int-or-string %v; want a string of at most 32 characters", f, s.Type, s.MaxLength, s.XIntOrString)
		}
		if s.Pattern != "" {
			t.Errorf("%s: pattern %q; the CEL rules give the messages", f, s.Pattern)
		}
		short := strings.Join(f.path[len(f.path)-2:], ".")
		if f.path[len(f.path)-2] == "[]" {
			short = f.path[len(f.path)-1]
			if len(s.XValidations) != 1 || s.XValidations[0].Rule != fmt.Sprintf("self.matches('%s')", v1.PlanQuantityPattern) {
				t.Errorf("%s: rules %+v, want one matching PlanQuantityPattern", f, s.XValidations)
				continue
			}
		}
		for _, rule := range s.XValidations {
			if !strings.HasPrefix(rule.MessageExpression, "'"+short+" ' + self") {
				t.Errorf("%s: message %q does not name %s and echo the value", f, rule.MessageExpression, short)
			}
		}
		if f.path[len(f.path)-2] == "[]" {
			continue
		}
		if len(s.XValidations) != 4 {
			t.Fatalf("%s: %d rules, want form, whole bytes, floor and ceiling", f, len(s.XValidations))
		}
		if r := s.XValidations[0].Rule; r != form+" && isQuantity(self)" {
			t.Errorf("%s: form rule %q", f, r)
		}
		floor := regexp.MustCompile(`^!` + regexp.QuoteMeta(form) + ` \|\| quantity\(self\)\.compareTo\(quantity\('([^']+)'\)\) >= 0$`).FindStringSubmatch(s.XValidations[2].Rule)
		ceiling := regexp.MustCompile(`^!` + regexp.QuoteMeta(form) + ` \|\| quantity\(self\)\.compareTo\(quantity\('([^']+)'\)\) <= 0$`).FindStringSubmatch(s.XValidations[3].Rule)
		if floor == nil || ceiling == nil {
			t.Fatalf("%s: floor rule %q, ceiling rule %q", f, s.XValidations[2].Rule, s.XValidations[3].Rule)
		}
		// Whole bytes: the value equals the integer its float truncates to, an exact test up
		// to 2^53, so it is skipped above the ceiling (which reports those values instead).
		whole := "!" + form + " || quantity(self).compareTo(quantity('" + ceiling[1] + "')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0"
		if r := s.XValidations[1].Rule; r != whole {
			t.Errorf("%s: whole-bytes rule %q, want %q", f, r, whole)
		}
		if ceiling[1] != v1.MaxBytes && ceiling[1] != v1.MaxBytesPerSecond {
			t.Errorf("%s: ceiling %s, want %s or %s", f, ceiling[1], v1.MaxBytes, v1.MaxBytesPerSecond)
		}
	}
}

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
