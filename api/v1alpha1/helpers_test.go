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
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/api/v1alpha1/decimal"
)

func TestObjectiveTargets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  func() (float64, error)
		want    float64
		wantErr string
	}{
		{"hit ratio", (&v1.HitRatioObjective{Ratio: "0.95"}).Target, 0.95, ""},
		{"hit ratio of one", (&v1.HitRatioObjective{Ratio: "1"}).Target, 1, ""},
		{"hit ratio zero", (&v1.HitRatioObjective{Ratio: "0"}).Target, 0, "objective.hitRatio.target: 0 is outside (0, 1]"},
		{"hit ratio above one", (&v1.HitRatioObjective{Ratio: "1.01"}).Target, 0, "outside (0, 1]"},
		{"hit ratio not a number", (&v1.HitRatioObjective{Ratio: "95%"}).Target, 0, "objective.hitRatio.target: \"95%\" is not a decimal"},
		{"degradation", (&v1.MaxDegradationObjective{Factor: "1.05"}).Target, 1.05, ""},
		{"degradation of one", (&v1.MaxDegradationObjective{Factor: "1"}).Target, 1, ""},
		{"degradation below one", (&v1.MaxDegradationObjective{Factor: "0.9"}).Target, 0, "objective.maxDegradation.target: 0.9 is outside [1, 10]"},
		{"degradation too large", (&v1.MaxDegradationObjective{Factor: "11"}).Target, 0, "outside [1, 10]"},
		{"sampling rate", (&v1.MissRatioCurveSettings{SamplingRate: "0.001"}).Rate, 0.001, ""},
		{"sampling rate default", (&v1.MissRatioCurveSettings{}).Rate, 0.1, ""},
		{"sampling rate zero", (&v1.MissRatioCurveSettings{SamplingRate: "0.0"}).Rate, 0, "missRatioCurve.samplingRate: 0.0 is outside (0, 1]"},
	} {
		got, err := tc.target()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: got %v, %v; want error containing %q", tc.name, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestObjectiveSummary: the phrase the OBJECTIVE column shows names the objective and, for
// latency, the statistic.
func TestObjectiveSummary(t *testing.T) {
	for _, tc := range []struct {
		objective v1.Objective
		want      string
	}{
		{v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.95"}}, "hit>=0.95"},
		{v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 2 * time.Millisecond}, Statistic: v1.LatencyP99}}, "p99<=2ms"},
		{v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 1500 * time.Microsecond}}}, "mean<=1.5ms"},
		{v1.Objective{MaxDegradation: &v1.MaxDegradationObjective{Factor: "1.05"}}, "deg<=1.05x"},
		{v1.Objective{}, ""},
	} {
		if got := tc.objective.Summary(); got != tc.want {
			t.Errorf("%+v: Summary() = %q, want %q", tc.objective, got, tc.want)
		}
	}
}

func TestPartitionableMemory(t *testing.T) {
	for _, tc := range []struct {
		memory   string
		headroom *int32
		want     int64
	}{
		{"100Gi", nil, 100 << 30 / 10 * 9},
		{"100Gi", ptr.To[int32](0), 100 << 30},
		{"64Gi", ptr.To[int32](25), 48 << 30},
		{"1001", ptr.To[int32](10), 900},
		{"4Gi", ptr.To[int32](10), 3865470566}, // 4294967296 * 0.9, rounded down
		// Near the int64 limit the result must not overflow.
		{"4Ei", ptr.To[int32](50), 2 << 60},
	} {
		c := v1.NodeCapacity{Memory: resource.MustParse(tc.memory), HeadroomPercent: tc.headroom}
		if got := c.PartitionableMemory(); got != tc.want {
			t.Errorf("memory %s headroom %v: PartitionableMemory() = %d, want %d", tc.memory, tc.headroom, got, tc.want)
		}
	}
}

func TestAllocationDurationsOrDefault(t *testing.T) {
	var unset v1.AllocationSettings
	if got := unset.IntervalOrDefault(); got != v1.DefaultAllocationInterval {
		t.Errorf("IntervalOrDefault() = %v, want %v", got, v1.DefaultAllocationInterval)
	}
	if got := unset.SolverTimeLimitOrDefault(); got != v1.DefaultSolverTimeLimit {
		t.Errorf("SolverTimeLimitOrDefault() = %v, want %v", got, v1.DefaultSolverTimeLimit)
	}
	set := v1.AllocationSettings{
		Interval:        &metav1.Duration{Duration: time.Minute},
		SolverTimeLimit: &metav1.Duration{Duration: 3 * time.Second},
	}
	if set.IntervalOrDefault() != time.Minute || set.SolverTimeLimitOrDefault() != 3*time.Second {
		t.Errorf("set durations read back as %v and %v", set.IntervalOrDefault(), set.SolverTimeLimitOrDefault())
	}
}

func TestTenantIdentity(t *testing.T) {
	slo := v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: "checkout", Name: "sessions"}}
	slo.Spec.ClusterRef.Name = "shared-redis"
	if got := slo.TenantID(); got != "checkout/sessions" {
		t.Errorf("TenantID() = %q", got)
	}
	if got, want := slo.ClusterKey(), (types.NamespacedName{Namespace: "checkout", Name: "shared-redis"}); got != want {
		t.Errorf("ClusterKey() with empty namespace = %v, want %v", got, want)
	}
	slo.Spec.ClusterRef.Namespace = "cache-platform"
	if got, want := slo.ClusterKey(), (types.NamespacedName{Namespace: "cache-platform", Name: "shared-redis"}); got != want {
		t.Errorf("ClusterKey() = %v, want %v", got, want)
	}
}

func TestSetPartitionsSortsAndCounts(t *testing.T) {
	input := []v1.PartitionPlan{{Tenant: "search/q"}, {Tenant: "analytics/r"}, {Tenant: "checkout/s"}}
	var spec v1.CacheNodePlanSpec
	spec.SetPartitions(input)
	var got []string
	for _, p := range spec.Partitions {
		got = append(got, p.Tenant)
	}
	if want := []string{"analytics/r", "checkout/s", "search/q"}; !reflect.DeepEqual(got, want) {
		t.Errorf("partitions = %v, want %v", got, want)
	}
	if spec.PartitionCount == nil || *spec.PartitionCount != 3 {
		t.Errorf("partitionCount = %v, want 3", spec.PartitionCount)
	}
	if input[0].Tenant != "search/q" {
		t.Errorf("SetPartitions reordered the caller's slice: %v", input)
	}
}

func TestTenantRouteAddress(t *testing.T) {
	for _, tc := range []struct {
		host    string
		port    int32
		want    string
		invalid string // Validate's error; empty: valid
	}{
		{"10.0.0.1", 7380, "10.0.0.1:7380", ""},
		{"fd00::2", 7380, "[fd00::2]:7380", ""},
		{"node-a", 1, "node-a:1", ""},
		{"ip-10-0-0-1.eu-west-1.compute.internal", 65535, "ip-10-0-0-1.eu-west-1.compute.internal:65535", ""},
		{"bad host!", 7380, "bad host!:7380", `host "bad host!" is neither an IP address nor a DNS name`},
		{"Node_A", 7380, "Node_A:7380", `host "Node_A" is neither an IP address nor a DNS name`},
		{"[fd00::2]", 7380, "[[fd00::2]]:7380", "is neither an IP address nor a DNS name"},
		{"10.0.0.1", 0, "10.0.0.1:0", "port 0 is not in 1-65535"},
		{"10.0.0.1", 70000, "10.0.0.1:70000", "port 70000 is not in 1-65535"},
	} {
		r := v1.TenantRoute{Host: tc.host, Port: tc.port}
		if got := r.Address(); got != tc.want {
			t.Errorf("host %q port %d: Address() = %q, want %q", tc.host, tc.port, got, tc.want)
		}
		err := r.Validate()
		if tc.invalid == "" && err != nil || tc.invalid != "" && (err == nil || !strings.Contains(err.Error(), tc.invalid)) {
			t.Errorf("host %q port %d: Validate() = %v, want %q", tc.host, tc.port, err, tc.invalid)
		}
	}
}

// TestDecimalPatternMatchesCRDs keeps the Go parser and the generated schema in step: every
// spec field whose Go side parses with package decimal must check decimal.Pattern in the CRD.
func TestDecimalPatternMatchesCRDs(t *testing.T) {
	for _, tc := range []struct {
		crd  string
		path []string
	}{
		{"cacheqos.io_tenantslos.yaml", []string{"spec", "objective", "hitRatio", "target"}},
		{"cacheqos.io_tenantslos.yaml", []string{"spec", "objective", "maxDegradation", "target"}},
		{"cacheqos.io_cacheclusters.yaml", []string{"spec", "missRatioCurve", "samplingRate"}},
	} {
		schema := crdSchema(t, tc.crd)
		for _, p := range tc.path {
			next, ok := schema.Properties[p]
			if !ok {
				t.Fatalf("%s: no property %q on the way to %v", tc.crd, p, tc.path)
			}
			schema = next
		}
		want := fmt.Sprintf("self.matches('%s')", decimal.Pattern)
		if len(schema.XValidations) == 0 || schema.XValidations[0].Rule != want {
			t.Errorf("%s %v: rules %+v, want the first to be %s", tc.crd, tc.path, schema.XValidations, want)
		}
	}
}

// crdSchema reads the v1alpha1 schema of a generated CRD.
func crdSchema(t *testing.T, file string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == v1.GroupVersion.Version {
			return *v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("%s has no version %s", file, v1.GroupVersion.Version)
	return apiextensionsv1.JSONSchemaProps{}
}
