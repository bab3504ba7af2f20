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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// specDurationFields finds every metav1.Duration of the specs; a TenantSLO starts from a
// latency objective, so that its target exists.
func specDurationFields(t *testing.T) []quantityField {
	t.Helper()
	out := specFieldsOfType(reflect.TypeOf(metav1.Duration{}), func() client.Object { return latencyTenant() })
	if len(out) < 4 {
		t.Fatalf("found %d duration fields in the specs, want at least 4: %v", len(out), out)
	}
	return out
}

// TestDurationFieldsShareOneRule: every duration of every spec is a bounded string under
// DurationForm, then a floor and a ceiling that evaluate duration() only on that form, each
// with a message naming the field and echoing the value; no pattern dumps a regex.
func TestDurationFieldsShareOneRule(t *testing.T) {
	form := fmt.Sprintf("self.matches('%s')", v1.DurationForm)
	ceiling := regexp.MustCompile(`^!` + regexp.QuoteMeta(form) + ` \|\| duration\(self\) <= duration\('([0-9]+[smh])'\)$`)
	for _, f := range specDurationFields(t) {
		s := schemaAt(t, f)
		if s.Type != "string" || s.MaxLength == nil || *s.MaxLength > 32 || s.Pattern != "" {
			t.Errorf("%s: type %q maxLength %v pattern %q; want a string of at most 32 characters without a pattern", f, s.Type, s.MaxLength, s.Pattern)
		}
		if len(s.XValidations) != 3 {
			t.Fatalf("%s: %d rules, want form, floor and ceiling", f, len(s.XValidations))
		}
		if r := s.XValidations[0].Rule; r != form {
			t.Errorf("%s: form rule %q", f, r)
		}
		if r := s.XValidations[1].Rule; !strings.HasPrefix(r, "!"+form+" || duration(self) >") {
			t.Errorf("%s: floor rule %q", f, r)
		}
		m := ceiling.FindStringSubmatch(s.XValidations[2].Rule)
		if m == nil {
			t.Fatalf("%s: ceiling rule %q", f, s.XValidations[2].Rule)
		}
		if d, err := time.ParseDuration(m[1]); err != nil || d > 24*time.Hour {
			t.Errorf("%s: ceiling %s, want at most 24h", f, m[1])
		}
		short := strings.Join(f.path[len(f.path)-2:], ".")
		for _, rule := range s.XValidations {
			if !strings.HasPrefix(rule.MessageExpression, "'"+short+" ' + self") {
				t.Errorf("%s: message %q does not name %s and echo the value", f, rule.MessageExpression, short)
			}
		}
	}
}

// refusedDurations are values every duration field must refuse, each with why.
var refusedDurations = []struct{ value, why string }{
	{"9999999h", "overflows nothing yet, but no part may have more than 5 digits"},
	{"99999h99999h99999h99999h99999h", "five parts; repeated parts would overflow a Go duration"},
	{"soon", "not a duration"},
	{"-5s", "negative"},
	{"1d", "no such unit"},
	{"30", "no unit"},
	{"48h", "above every field's ceiling"},
}

// TestDurationFieldsRefuseBadValues creates objects on the real API server: each duration field
// accepts values within its bounds and refuses every refusedDurations value with a message
// that names the field and echoes the value (never a CEL type conversion error).
func TestDurationFieldsRefuseBadValues(t *testing.T) {
	ctx := context.Background()
	const ns = "durations"
	createNamespace(ctx, t, ns)

	n := 0
	for _, f := range specDurationFields(t) {
		for _, good := range []string{"11s", "12s500ms"} {
			obj := withQuantity(t, f, good)
			obj.SetNamespace(ns)
			obj.SetName(fmt.Sprintf("ok-%d", n))
			n++
			if err := k8sClient.Create(ctx, obj, strict); err != nil {
				t.Errorf("%s = %s rejected: %v", f, good, err)
			}
		}
		short := strings.Join(f.path[len(f.path)-2:], ".")
		for _, bad := range refusedDurations {
			t.Run(f.String()+"="+bad.value, func(t *testing.T) {
				obj := withQuantity(t, f, bad.value)
				obj.SetNamespace(ns)
				obj.SetName(fmt.Sprintf("bad-%d", n))
				n++
				err := k8sClient.Create(ctx, obj, strict)
				assertRejected(t, err, f.fieldPath(), short+" "+bad.value+" is ")
			})
		}
	}
}
