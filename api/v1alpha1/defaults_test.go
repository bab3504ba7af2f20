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
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// applyMinimal creates an object from YAML the way a user would write it (optional sections
// absent, not sent as empty objects) and reads it back through the typed client.
func applyMinimal(ctx context.Context, t *testing.T, manifest string, into client.Object) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, u, strict); err != nil {
		t.Fatalf("creating minimal %s: %v", u.GetKind(), err)
	}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(u), into); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultsApplied checks what the API server stores for minimal objects: every default the
// docs promise, equal to the Go constants callers use.
func TestDefaultsApplied(t *testing.T) {
	ctx := context.Background()
	const ns = "defaults"
	createNamespace(ctx, t, ns)

	var cluster v1.CacheCluster
	applyMinimal(ctx, t, `
apiVersion: cacheqos.io/v1alpha1
kind: CacheCluster
metadata: {name: minimal, namespace: defaults}
spec:
  engine: memcached
  allNodes: true
  capacity: {memory: 4Gi, bandwidth: 125M, opsPerSecond: 50000}
`, &cluster)
	spec := cluster.Spec
	for _, check := range []struct {
		field     string
		got, want any
	}{
		{"allocation.interval", spec.Allocation.IntervalOrDefault(), v1.DefaultAllocationInterval},
		{"allocation.interval set", spec.Allocation.Interval != nil, true},
		{"allocation.policy", spec.Allocation.Policy, v1.PolicyOptimal},
		{"allocation.solverTimeLimit", spec.Allocation.SolverTimeLimitOrDefault(), v1.DefaultSolverTimeLimit},
		{"allocation.solverTimeLimit set", spec.Allocation.SolverTimeLimit != nil, true},
		{"allocation.maxChurnPercent", spec.Allocation.MaxChurnPercent, int32(v1.DefaultMaxChurnPercent)},
		{"capacity.headroomPercent set", spec.Capacity.HeadroomPercent != nil, true},
		{"capacity.headroomPercent", derefInt32(spec.Capacity.HeadroomPercent), int32(v1.DefaultHeadroomPercent)},
		{"capacity.PartitionableMemory", spec.Capacity.PartitionableMemory(), int64(3865470566)}, // 4Gi * 0.9,
		{"images.pullPolicy", spec.Images.PullPolicy, corev1.PullIfNotPresent},
		{"missRatioCurve.samplingRate", spec.MissRatioCurve.SamplingRate, v1.DefaultMRCSamplingRate},
		{"missRatioCurve.maxTrackedKeys", spec.MissRatioCurve.MaxTrackedKeys, int32(v1.DefaultMRCMaxTrackedKeys)},
		{"missRatioCurve.curvePoints", spec.MissRatioCurve.CurvePoints, int32(v1.DefaultMRCCurvePoints)},
		{"monitoring.serviceMonitor.enabled", spec.Monitoring.ServiceMonitor.Enabled, false},
	} {
		if check.got != check.want {
			t.Errorf("CacheCluster %s = %v, want %v", check.field, check.got, check.want)
		}
	}

	// A ServiceMonitor section gets its scrape interval.
	var monitored v1.CacheCluster
	applyMinimal(ctx, t, `
apiVersion: cacheqos.io/v1alpha1
kind: CacheCluster
metadata: {name: monitored, namespace: defaults}
spec:
  engine: redis
  nodeSelector: {pool: cache}
  capacity: {memory: 4Gi, bandwidth: 125M, opsPerSecond: 50000}
  monitoring: {serviceMonitor: {enabled: true}}
`, &monitored)
	if iv := monitored.Spec.Monitoring.ServiceMonitor.Interval; iv == nil || iv.Duration != v1.DefaultServiceMonitorInterval {
		t.Errorf("serviceMonitor.interval = %v, want %v", iv, v1.DefaultServiceMonitorInterval)
	}

	var slo v1.TenantSLO
	applyMinimal(ctx, t, `
apiVersion: cacheqos.io/v1alpha1
kind: TenantSLO
metadata: {name: minimal, namespace: defaults}
spec:
  clusterRef: {name: minimal}
  objective: {latency: {target: 3ms}}
`, &slo)
	for _, check := range []struct {
		field     string
		got, want any
	}{
		{"class", slo.Spec.Class, v1.ClassStrict},
		{"priority", slo.Spec.Priority, int32(v1.DefaultTenantPriority)},
		{"evictionPolicy", slo.Spec.EvictionPolicy, v1.EvictionLRU},
		{"placement.minNodes", slo.Spec.Placement.MinNodes, int32(v1.DefaultMinNodes)},
		{"placement.maxNodes", slo.Spec.Placement.MaxNodes, int32(0)},
		{"objective.latency.statistic", slo.Spec.Objective.Latency.Statistic, v1.LatencyMean},
		{"clusterRef resolves to own namespace", slo.ClusterKey(), client.ObjectKeyFromObject(&cluster)},
	} {
		if check.got != check.want {
			t.Errorf("TenantSLO %s = %v, want %v", check.field, check.got, check.want)
		}
	}
}

func derefInt32(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}
