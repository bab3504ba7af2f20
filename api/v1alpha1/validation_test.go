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
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

const validationNamespace = "validation"

// Valid objects the rejection cases start from; each case breaks exactly one thing.

func validCluster() *v1.CacheCluster {
	return &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: validationNamespace},
		Spec: v1.CacheClusterSpec{
			Engine:       v1.EngineRedis,
			NodeSelector: map[string]v1.LabelValue{"pool": "cache"},
			Capacity: v1.NodeCapacity{
				Memory:       resource.MustParse("8Gi"),
				Bandwidth:    resource.MustParse("1250M"),
				OpsPerSecond: 100000,
			},
		},
	}
}

func validTenant() *v1.TenantSLO {
	return &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: validationNamespace},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Name: "shared-redis", Namespace: "cache-platform"},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.9"}},
		},
	}
}

func validPlan() *v1.CacheNodePlan {
	plan := &v1.CacheNodePlan{
		ObjectMeta: metav1.ObjectMeta{Namespace: validationNamespace},
		Spec: v1.CacheNodePlanSpec{
			ClusterName:       "shared-redis",
			NodeName:          "node-a",
			Engine:            v1.EngineRedis,
			PlanGeneration:    1,
			CredentialsSecret: "shared-redis-credentials",
		},
	}
	plan.Spec.SetPartitions([]v1.PartitionPlan{{
		Tenant:         "checkout/sessions",
		Memory:         resource.MustParse("1Gi"),
		EvictionPolicy: v1.EvictionLRU,
		BandwidthLimit: ptr.To(resource.MustParse("50M")),
		OpsLimit:       ptr.To[int64](10000),
		Routes: []v1.TenantRoute{
			{NodeName: "node-a", Host: "10.0.0.1", Port: 7380, Weight: 1024},
			{NodeName: "node-b", Host: "fd00::2", Port: 7380, Weight: 512},
		},
	}})
	return plan
}

// latencyTenant is validTenant with a latency objective instead of a hit ratio.
func latencyTenant() *v1.TenantSLO {
	s := validTenant()
	s.Spec.Objective = v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: time.Millisecond}}}
	return s
}

func cluster(mutate func(*v1.CacheCluster)) client.Object { c := validCluster(); mutate(c); return c }
func tenant(mutate func(*v1.TenantSLO)) client.Object     { s := validTenant(); mutate(s); return s }
func plan(mutate func(*v1.CacheNodePlan)) client.Object   { p := validPlan(); mutate(p); return p }

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// withField returns obj as unstructured with one field set to a value its Go type cannot hold
// (a malformed duration, say), or removed when value is nil.
func withField(obj client.Object, value any, path ...string) *unstructured.Unstructured {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(err)
	}
	u := &unstructured.Unstructured{Object: content}
	gvk, err := k8sClient.GroupVersionKindFor(obj)
	if err != nil {
		panic(err)
	}
	u.SetGroupVersionKind(gvk)
	if value == nil {
		unstructured.RemoveNestedField(u.Object, path...)
	} else if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
		panic(err)
	}
	return u
}

// planWithRawPartition is a valid plan, as unstructured, whose first partition edit changes
// in a way its Go type cannot (a raw quantity, a field removed or of the wrong type).
func planWithRawPartition(edit func(partition map[string]any)) client.Object {
	u := withField(validPlan(), nil, "status")
	partitions, _, err := unstructured.NestedSlice(u.Object, "spec", "partitions")
	if err != nil || len(partitions) == 0 {
		panic(fmt.Sprintf("valid plan has no partitions: %v", err))
	}
	edit(partitions[0].(map[string]any))
	if err := unstructured.SetNestedSlice(u.Object, partitions, "spec", "partitions"); err != nil {
		panic(err)
	}
	return u
}

// planWithPartitionField is a valid plan whose first partition has field set to a raw value
// that Go's resource.Quantity would have normalized away.
func planWithPartitionField(field string, value any) client.Object {
	return planWithRawPartition(func(partition map[string]any) { partition[field] = value })
}

// planWithRouteField is a valid plan whose first partition's first route has field set to a
// raw value, or removed when value is nil.
func planWithRouteField(field string, value any) client.Object {
	return planWithRawPartition(func(partition map[string]any) {
		route := partition["routes"].([]any)[0].(map[string]any)
		if value == nil {
			delete(route, field)
		} else {
			route[field] = value
		}
	})
}

// planWithBareIntegerMemory is a valid plan whose partition memory is written as a JSON
// integer, which a hand-written YAML plan could do and Go's resource.Quantity never does.
func planWithBareIntegerMemory() client.Object {
	return planWithPartitionField("memory", int64(1<<30))
}

// TestInvalidObjectsRejected creates objects the schema must refuse and checks that the real
// API server refuses each one with a cause that names the offending field and says why.
func TestInvalidObjectsRejected(t *testing.T) {
	ctx := context.Background()
	createNamespace(ctx, t, validationNamespace)

	// The starting points themselves are valid, and so is a cluster with TLS and extra names.
	withTLS := validCluster()
	withTLS.Name = "valid-tls"
	withTLS.Spec.TLS = v1.ClientTLS{Enabled: true, ExtraDNSNames: []string{"cache.example.com", "*.cache.example.com"}}
	// Tolerations at the limits of a taint key and a label value, and one for every taint.
	withTolerations := validCluster()
	withTolerations.Name = "valid-tolerations"
	withTolerations.Spec.Tolerations = []v1.Toleration{
		{Key: v1.TaintKey("example.com/" + strings.Repeat("k", 63)), Operator: corev1.TolerationOpEqual, Value: v1.LabelValue(strings.Repeat("v", 63)), Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
		{Key: "node-role.kubernetes.io/cache", Operator: corev1.TolerationOpExists},
		{Operator: corev1.TolerationOpExists},
	}
	for _, obj := range []client.Object{validCluster(), validTenant(), validPlan(), withTLS, withTolerations} {
		if obj.GetName() == "" {
			obj.SetName("valid")
		}
		if err := k8sClient.Create(ctx, obj, strict); err != nil {
			t.Fatalf("valid %T rejected: %v", obj, err)
		}
	}

	for _, tc := range []struct {
		name      string
		obj       client.Object
		wantField string
		wantMsg   string
	}{
		// CacheCluster
		{"unknown engine", cluster(func(c *v1.CacheCluster) { c.Spec.Engine = "valkey" }),
			"spec.engine", `Unsupported value: "valkey"`},
		{"zero node memory", cluster(func(c *v1.CacheCluster) { c.Spec.Capacity.Memory = resource.MustParse("0") }),
			"spec.capacity.memory", "capacity.memory 0 is below the minimum 4Mi"},
		{"negative bandwidth", cluster(func(c *v1.CacheCluster) { c.Spec.Capacity.Bandwidth = resource.MustParse("-1M") }),
			"spec.capacity.bandwidth", "capacity.bandwidth -1M is not a quantity of bytes per second"},
		{"node memory missing", withField(validCluster(), nil, "spec", "capacity", "memory"),
			"spec.capacity.memory", "Required value"},
		{"zero ops capacity", cluster(func(c *v1.CacheCluster) { c.Spec.Capacity.OpsPerSecond = 0 }),
			"spec.capacity.opsPerSecond", "greater than or equal to 1"},
		{"headroom above 90%", cluster(func(c *v1.CacheCluster) { c.Spec.Capacity.HeadroomPercent = ptr.To[int32](95) }),
			"spec.capacity.headroomPercent", "less than or equal to 90"},
		{"interval below the 5s floor", cluster(func(c *v1.CacheCluster) {
			c.Spec.Allocation.Interval = duration(2 * time.Second)
			c.Spec.Allocation.SolverTimeLimit = duration(time.Second)
		}), "spec.allocation.interval", "allocation.interval 2s is below the minimum 5s"},
		{"interval not a duration", withField(validCluster(), "soon", "spec", "allocation", "interval"),
			"spec.allocation.interval", "allocation.interval soon is not a duration: write numbers of at most 5 digits"},
		{"solver limit as long as the interval", cluster(func(c *v1.CacheCluster) {
			c.Spec.Allocation.Interval = duration(30 * time.Second)
			c.Spec.Allocation.SolverTimeLimit = duration(30 * time.Second)
		}), "spec.allocation.solverTimeLimit", "solverTimeLimit must be shorter than allocation.interval"},
		{"solver limit longer than the default interval", cluster(func(c *v1.CacheCluster) {
			c.Spec.Allocation.SolverTimeLimit = duration(time.Minute)
		}), "spec.allocation.solverTimeLimit", "must be shorter than allocation.interval"},
		{"zero solver limit", cluster(func(c *v1.CacheCluster) { c.Spec.Allocation.SolverTimeLimit = duration(0) }),
			"spec.allocation.solverTimeLimit", "allocation.solverTimeLimit 0s is not a positive duration"},
		{"unknown policy", cluster(func(c *v1.CacheCluster) { c.Spec.Allocation.Policy = "fastest" }),
			"spec.allocation.policy", `Unsupported value: "fastest"`},
		{"churn above 100%", cluster(func(c *v1.CacheCluster) { c.Spec.Allocation.MaxChurnPercent = 101 }),
			"spec.allocation.maxChurnPercent", "less than or equal to 100"},
		{"zero sampling rate", cluster(func(c *v1.CacheCluster) { c.Spec.MissRatioCurve.SamplingRate = "0" }),
			"spec.missRatioCurve.samplingRate", "must be a decimal in (0, 1]"},
		{"sampling rate as a percentage", cluster(func(c *v1.CacheCluster) { c.Spec.MissRatioCurve.SamplingRate = "1%" }),
			"spec.missRatioCurve.samplingRate", "missRatioCurve.samplingRate 1% is not a decimal: write digits with an optional fraction"},
		{"prometheus URL without scheme", cluster(func(c *v1.CacheCluster) { c.Spec.Monitoring.PrometheusURL = "prometheus:9090" }),
			"spec.monitoring.prometheusURL", "monitoring.prometheusURL prometheus:9090 is not an http:// or https:// URL"},
		{"prometheus HTTP config without a URL", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.PrometheusHTTPConfig = &v1.PrometheusHTTPConfigSecret{SecretName: "prometheus"}
		}), "spec.monitoring.prometheusHTTPConfig", "monitoring.prometheusHTTPConfig needs monitoring.prometheusURL"},
		{"prometheus HTTP config Secret not a name", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.PrometheusURL = "https://prometheus:9090"
			c.Spec.Monitoring.PrometheusHTTPConfig = &v1.PrometheusHTTPConfigSecret{SecretName: "Prom_Creds"}
		}), "spec.monitoring.prometheusHTTPConfig.secretName", "monitoring.prometheusHTTPConfig.secretName Prom_Creds is not a Secret name"},
		{"prometheus HTTP config key with a slash", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.PrometheusURL = "https://prometheus:9090"
			c.Spec.Monitoring.PrometheusHTTPConfig = &v1.PrometheusHTTPConfigSecret{SecretName: "prometheus", Key: "etc/config.yaml"}
		}), "spec.monitoring.prometheusHTTPConfig.key", "monitoring.prometheusHTTPConfig.key etc/config.yaml is not a Secret key"},
		{"scrape interval below 1s", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.ServiceMonitor.Interval = duration(500 * time.Millisecond)
		}), "spec.monitoring.serviceMonitor.interval", "serviceMonitor.interval 500ms is below the minimum 1s"},
		{"scrape interval above 1h", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.ServiceMonitor.Interval = duration(2 * time.Hour)
		}), "spec.monitoring.serviceMonitor.interval", "serviceMonitor.interval 2h0m0s is above the maximum 1h"},
		{"interval above 24h", withField(validCluster(), "25h", "spec", "allocation", "interval"),
			"spec.allocation.interval", "allocation.interval 25h is above the maximum 24h"},
		{"interval of five parts", withField(validCluster(), "1h1h1h1h1h", "spec", "allocation", "interval"),
			"spec.allocation.interval", "allocation.interval 1h1h1h1h1h is not a duration"},
		{"solver limit above 1h", cluster(func(c *v1.CacheCluster) {
			c.Spec.Allocation.Interval = duration(24 * time.Hour)
			c.Spec.Allocation.SolverTimeLimit = duration(2 * time.Hour)
		}), "spec.allocation.solverTimeLimit", "allocation.solverTimeLimit 2h0m0s is above the maximum 1h"},
		{"service monitor label key with a space", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.ServiceMonitor.Labels = map[string]v1.LabelValue{"release name": "prometheus"}
		}), "spec.monitoring.serviceMonitor.labels", "monitoring.serviceMonitor.labels key release name is not a label key"},
		{"service monitor label value of 70 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.ServiceMonitor.Labels = map[string]v1.LabelValue{"release": v1.LabelValue(strings.Repeat("p", 70))}
		}), "spec.monitoring.serviceMonitor.labels[release]", "label value " + strings.Repeat("p", 70) + " is too long: a label value has at most 63 characters"},
		{"service monitor label value with a slash", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.ServiceMonitor.Labels = map[string]v1.LabelValue{"release": "kube/prometheus"}
		}), "spec.monitoring.serviceMonitor.labels[release]", "label value kube/prometheus is invalid: at most 63 of A-Z a-z 0-9 - _ ."},
		{"prometheus rule label value ending in a dot", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.PrometheusRule.Labels = map[string]v1.LabelValue{"release": "prometheus."}
		}), "spec.monitoring.prometheusRule.labels[release]", "label value prometheus. is invalid"},
		{"prometheus rule label key with two slashes", cluster(func(c *v1.CacheCluster) {
			c.Spec.Monitoring.PrometheusRule.Labels = map[string]v1.LabelValue{"a/b/c": "x"}
		}), "spec.monitoring.prometheusRule.labels", "monitoring.prometheusRule.labels key a/b/c is not a label key"},

		{"no nodeSelector and no allNodes", cluster(func(c *v1.CacheCluster) { c.Spec.NodeSelector = nil }),
			"spec.nodeSelector", "name the nodes with nodeSelector, or set allNodes: true"},
		{"nodeSelector and allNodes", cluster(func(c *v1.CacheCluster) { c.Spec.AllNodes = true }),
			"spec.nodeSelector", "(not both)"},
		{"selector key with a space", cluster(func(c *v1.CacheCluster) { c.Spec.NodeSelector = map[string]v1.LabelValue{"bad key!": "x"} }),
			"spec.nodeSelector", "nodeSelector key bad key! is not a label key: an optional DNS subdomain prefix and /"},
		{"selector key with two slashes", cluster(func(c *v1.CacheCluster) { c.Spec.NodeSelector = map[string]v1.LabelValue{"a/b/c": "x"} }),
			"spec.nodeSelector", "nodeSelector key a/b/c is not a label key"},
		{"selector value of 70 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.NodeSelector = map[string]v1.LabelValue{"pool": v1.LabelValue(strings.Repeat("v", 70))}
		}), "spec.nodeSelector[pool]", "label value " + strings.Repeat("v", 70) + " is too long: a label value has at most 63 characters"},
		{"selector value of 64 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.NodeSelector = map[string]v1.LabelValue{"pool": v1.LabelValue(strings.Repeat("v", 64))}
		}), "spec.nodeSelector[pool]", "label value " + strings.Repeat("v", 64) + " is too long"},
		// Beyond the schema's maximum length, which bounds the rules' CEL cost, the API server
		// says only "Too long".
		{"selector value of 1025 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.NodeSelector = map[string]v1.LabelValue{"pool": v1.LabelValue(strings.Repeat("v", 1025))}
		}), "spec.nodeSelector.pool", "may not be longer than 1024"},
		{"selector value with a space", cluster(func(c *v1.CacheCluster) { c.Spec.NodeSelector = map[string]v1.LabelValue{"pool": "fast cache"} }),
			"spec.nodeSelector[pool]", "label value fast cache is invalid: at most 63 of A-Z a-z 0-9 - _ ., starting and ending alphanumeric"},
		{"selector value starting with a dash", cluster(func(c *v1.CacheCluster) { c.Spec.NodeSelector = map[string]v1.LabelValue{"pool": "-cache"} }),
			"spec.nodeSelector[pool]", "label value -cache is invalid"},
		{"tls names without tls", cluster(func(c *v1.CacheCluster) { c.Spec.TLS.ExtraDNSNames = []string{"cache.example.com"} }),
			"spec.tls.extraDNSNames", "tls.extraDNSNames needs tls.enabled: true"},
		{"tls name with an upper-case letter", cluster(func(c *v1.CacheCluster) {
			c.Spec.TLS = v1.ClientTLS{Enabled: true, ExtraDNSNames: []string{"Cache.example.com"}}
		}), "spec.tls.extraDNSNames", "every tls.extraDNSNames entry must be a lower-case DNS name"},
		{"tls name that is a URL", cluster(func(c *v1.CacheCluster) {
			c.Spec.TLS = v1.ClientTLS{Enabled: true, ExtraDNSNames: []string{"rediss://cache.example.com"}}
		}), "spec.tls.extraDNSNames", "every tls.extraDNSNames entry must be a lower-case DNS name"},
		{"sidecar pod label the selector uses", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.PodLabels = map[string]v1.LabelValue{"app.kubernetes.io/instance": "other"}
		}), "spec.sidecar.podLabels", "labels are the operator's own (its selectors use them)"},
		{"sidecar pod label with the operator's prefix", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.PodLabels = map[string]v1.LabelValue{"cacheqos.io/tenant": "x"}
		}), "spec.sidecar.podLabels", "labels are the operator's own"},
		{"sidecar pod label key with a space", cluster(func(c *v1.CacheCluster) { c.Spec.Sidecar.PodLabels = map[string]v1.LabelValue{"team name": "x"} }),
			"spec.sidecar.podLabels", "sidecar.podLabels key team name is not a label key"},
		{"sidecar pod label value of 70 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.PodLabels = map[string]v1.LabelValue{"team": v1.LabelValue(strings.Repeat("v", 70))}
		}), "spec.sidecar.podLabels[team]", "label value " + strings.Repeat("v", 70) + " is too long: a label value has at most 63 characters"},
		{"sidecar pod label value with a space", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.PodLabels = map[string]v1.LabelValue{"team": "check out"}
		}), "spec.sidecar.podLabels[team]", "label value check out is invalid"},
		{"sidecar pod label value ending in a dash", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.PodLabels = map[string]v1.LabelValue{"team": "checkout-"}
		}), "spec.sidecar.podLabels[team]", "label value checkout- is invalid"},
		{"sidecar pod annotation with the operator's prefix", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.PodAnnotations = map[string]string{"cacheqos.io/spec-hash": "x"}
		}), "spec.sidecar.podAnnotations", "cacheqos.io/ annotations are the operator's own"},
		{"sidecar pull secret name", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.ImagePullSecrets = []v1.SecretReference{{Name: "Registry_Creds"}}
		}),
			"spec.sidecar.imagePullSecrets[0].name", "Secret name Registry_Creds is invalid: lower-case letters, digits, - and ."},
		{"sidecar pull secret twice", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.ImagePullSecrets = []v1.SecretReference{{Name: "registry"}, {Name: "registry"}}
		}), "spec.sidecar.imagePullSecrets[1]", "Duplicate value"},
		{"sidecar priority class name", cluster(func(c *v1.CacheCluster) { c.Spec.Sidecar.PriorityClassName = "High Priority" }),
			"spec.sidecar.priorityClassName", "sidecar.priorityClassName High Priority is not a PriorityClass name"},
		{"sidecar cpu as an exponent", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.Resources = &v1.SidecarResources{Requests: &v1.SidecarRequests{CPU: "1e3"}}
		}), "spec.sidecar.resources.requests.cpu", "requests.cpu 1e3 is not a CPU quantity: write cores with at most 3 decimals"},
		{"sidecar cpu zero", cluster(func(c *v1.CacheCluster) {
			c.Spec.Sidecar.Resources = &v1.SidecarResources{Limits: &v1.SidecarLimits{CPU: "0"}}
		}), "spec.sidecar.resources.limits.cpu", "limits.cpu 0 is not a CPU quantity"},
		{"toleration operator Equals", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: "Equals", Value: "cache"}}
		}), "spec.tolerations", "toleration operator must be Exists or Equal"},
		{"toleration effect NoScheduling", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cache", Effect: "NoScheduling"}}
		}), "spec.tolerations", "toleration effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		{"toleration Exists with a value", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Value: "cache"}}
		}), "spec.tolerations", "a toleration with operator Exists takes no value"},
		{"toleration without a key", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "cache"}}
		}), "spec.tolerations", "a toleration without a key must use operator Exists"},
		{"toleration seconds without NoExecute", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr.To[int64](60)}}
		}), "spec.tolerations", "tolerationSeconds needs effect NoExecute"},
		{"toleration key with a space", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "bad key!", Operator: corev1.TolerationOpExists}}
		}), "spec.tolerations[0].key", "toleration key bad key! is not a taint key: an optional DNS subdomain prefix and /"},
		{"toleration key with two slashes", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "a/b/c", Operator: corev1.TolerationOpExists}}
		}), "spec.tolerations[0].key", "toleration key a/b/c is not a taint key"},
		{"toleration key name of 64 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintKey("example.com/" + strings.Repeat("k", 64)), Operator: corev1.TolerationOpExists}}
		}), "spec.tolerations[0].key", "toleration key example.com/" + strings.Repeat("k", 64) + " is not a taint key"},
		{"toleration value of 70 characters", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: v1.LabelValue(strings.Repeat("v", 70))}}
		}), "spec.tolerations[0].value", "label value " + strings.Repeat("v", 70) + " is too long: a label value has at most 63 characters"},
		{"toleration value with a space", cluster(func(c *v1.CacheCluster) {
			c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "fast cache"}}
		}), "spec.tolerations[0].value", "label value fast cache is invalid"},
		{"sidecar image not a reference", cluster(func(c *v1.CacheCluster) { c.Spec.Images.Sidecar = "not an image ref!!" }),
			"spec.images.sidecar", "images.sidecar not an image ref!! is not an image reference: write [registry[:port]/]path[:tag][@sha256:digest]"},
		{"engine image in upper case", cluster(func(c *v1.CacheCluster) { c.Spec.Images.Engine = "Redis:7" }),
			"spec.images.engine", "images.engine Redis:7 is not an image reference"},
		{"memcached node below 8Mi", cluster(func(c *v1.CacheCluster) {
			c.Spec.Engine = v1.EngineMemcached
			c.Spec.Capacity.Memory = resource.MustParse("6Mi")
		}), "spec.capacity.memory", "a memcached node needs at least 8Mi"},
		{"node memory overflowing int64", withField(validCluster(), "10E", "spec", "capacity", "memory"),
			"spec.capacity.memory", "capacity.memory 10E is above the maximum 1Pi"},
		{"node memory of 512 bytes", withField(validCluster(), "512", "spec", "capacity", "memory"),
			"spec.capacity.memory", "capacity.memory 512 is below the minimum 4Mi"},
		{"node memory in milli-bytes", withField(validCluster(), "100m", "spec", "capacity", "memory"),
			"spec.capacity.memory", "capacity.memory 100m is not a quantity of bytes"},
		{"node memory written 10GB", withField(validCluster(), "10GB", "spec", "capacity", "memory"),
			"spec.capacity.memory", "drop the B: 10G or 10Gi, not 10GB"},
		{"node bandwidth of 1.25 bytes per second", withField(validCluster(), "1250m", "spec", "capacity", "bandwidth"),
			"spec.capacity.bandwidth", "capacity.bandwidth 1250m is not a quantity of bytes per second"},
		{"node bandwidth written 100Mbps", withField(validCluster(), "100Mbps", "spec", "capacity", "bandwidth"),
			"spec.capacity.bandwidth", "write bytes per second: 12.5M for 100 Mbit/s, not 100Mbps"},
		{"node bandwidth below 1k", withField(validCluster(), "999", "spec", "capacity", "bandwidth"),
			"spec.capacity.bandwidth", "capacity.bandwidth 999 is below the minimum 1k"},
		{"node memory with half a byte", withField(validCluster(), "4194304.5", "spec", "capacity", "memory"),
			"spec.capacity.memory", "capacity.memory 4194304.5 is not a whole number of bytes: a byte has no fraction"},
		{"node bandwidth with a fraction of a byte", withField(validCluster(), "1.0000001M", "spec", "capacity", "bandwidth"),
			"spec.capacity.bandwidth", "capacity.bandwidth 1.0000001M is not a whole number of bytes per second"},
		{"memory min of a fraction behind an exponent", withField(validTenant(), "4194304.55e1", "spec", "memory", "min"),
			"spec.memory.min", "memory.min 4194304.55e1 is not a whole number of bytes"},
		{"node memory as an unquoted number", withField(validCluster(), 1e19, "spec", "capacity", "memory"),
			"spec.capacity.memory", "must be of type string"},

		// TenantSLO
		{"memory max that does not parse", withField(validTenant(), "1e1.5", "spec", "memory", "max"),
			"spec.memory.max", "memory.max 1e1.5 is not a quantity of bytes"},
		{"memory max of one byte", withField(validTenant(), "512m", "spec", "memory", "max"),
			"spec.memory.max", "memory.max 512m is not a quantity of bytes"},
		{"memory min with a huge negative exponent", withField(validTenant(), "1e-10000000", "spec", "memory", "min"),
			"spec.memory.min", "memory.min 1e-10000000 is not a quantity of bytes"},
		{"memory max overflowing int64", withField(validTenant(), "1e19", "spec", "memory", "max"),
			"spec.memory.max", "memory.max 1e19 is above the maximum 1Pi"},
		{"guaranteed bandwidth of 2 bytes per second", withField(validTenant(), "2", "spec", "bandwidth", "guaranteed"),
			"spec.bandwidth.guaranteed", "bandwidth.guaranteed 2 is below the minimum 1k"},
		{"no objective", tenant(func(s *v1.TenantSLO) { s.Spec.Objective = v1.Objective{} }),
			"spec.objective", "exactly one of objective.hitRatio, objective.latency or objective.maxDegradation"},
		{"two objectives", tenant(func(s *v1.TenantSLO) {
			s.Spec.Objective.Latency = &v1.LatencyObjective{Target: metav1.Duration{Duration: time.Millisecond}}
		}), "spec.objective", "exactly one of"},
		{"hit ratio above one", tenant(func(s *v1.TenantSLO) { s.Spec.Objective.HitRatio.Ratio = "1.2" }),
			"spec.objective.hitRatio.target", "must be a decimal in (0, 1]"},
		{"hit ratio zero", tenant(func(s *v1.TenantSLO) { s.Spec.Objective.HitRatio.Ratio = "0.0" }),
			"spec.objective.hitRatio.target", "must be a decimal in (0, 1]"},
		{"hit ratio as a percentage", tenant(func(s *v1.TenantSLO) { s.Spec.Objective.HitRatio.Ratio = "95%" }),
			"spec.objective.hitRatio.target", "objective.hitRatio.target 95% is not a decimal"},
		{"degradation as a percentage", tenant(func(s *v1.TenantSLO) {
			s.Spec.Objective = v1.Objective{MaxDegradation: &v1.MaxDegradationObjective{Factor: "105%"}}
		}), "spec.objective.maxDegradation.target", "objective.maxDegradation.target 105% is not a decimal"},
		{"zero latency target", tenant(func(s *v1.TenantSLO) {
			s.Spec.Objective = v1.Objective{Latency: &v1.LatencyObjective{}}
		}), "spec.objective.latency.target", "latency.target 0s is not a positive duration"},
		{"latency target above 1m", tenant(func(s *v1.TenantSLO) {
			s.Spec.Objective = v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 2 * time.Minute}}}
		}), "spec.objective.latency.target", "latency.target 2m0s is above the maximum 1m"},
		{"latency target of five 5-digit parts", withField(latencyTenant(), "99999h99999h99999h99999h99999h", "spec", "objective", "latency", "target"),
			"spec.objective.latency.target", "latency.target 99999h99999h99999h99999h99999h is not a duration"},
		{"latency target beyond a Go duration", withField(latencyTenant(), "9999999h", "spec", "objective", "latency", "target"),
			"spec.objective.latency.target", "latency.target 9999999h is not a duration: write numbers of at most 5 digits with units"},
		{"unknown latency statistic", tenant(func(s *v1.TenantSLO) {
			s.Spec.Objective = v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: time.Millisecond}, Statistic: "p50"}}
		}), "spec.objective.latency.statistic", `Unsupported value: "p50"`},
		{"degradation below fair share", tenant(func(s *v1.TenantSLO) {
			s.Spec.Objective = v1.Objective{MaxDegradation: &v1.MaxDegradationObjective{Factor: "0.95"}}
		}), "spec.objective.maxDegradation.target", "must be a decimal in [1, 10]"},
		{"memory min above max", tenant(func(s *v1.TenantSLO) {
			s.Spec.Memory = v1.MemoryRange{Min: ptr.To(resource.MustParse("4Gi")), Max: ptr.To(resource.MustParse("1Gi"))}
		}), "spec.memory.min", "memory.min must be less than or equal to memory.max"},
		{"zero memory max", tenant(func(s *v1.TenantSLO) { s.Spec.Memory.Max = ptr.To(resource.MustParse("0")) }),
			"spec.memory.max", "memory.max 0 is below the minimum 4Mi"},
		{"guaranteed bandwidth above limit", tenant(func(s *v1.TenantSLO) {
			s.Spec.Bandwidth = v1.BandwidthRange{Guaranteed: ptr.To(resource.MustParse("200M")), Limit: ptr.To(resource.MustParse("100M"))}
		}), "spec.bandwidth.guaranteed", "bandwidth.guaranteed must be less than or equal to bandwidth.limit"},
		{"negative bandwidth limit", tenant(func(s *v1.TenantSLO) { s.Spec.Bandwidth.Limit = ptr.To(resource.MustParse("-5M")) }),
			"spec.bandwidth.limit", "bandwidth.limit -5M is not a quantity of bytes per second"},
		{"zero ops limit", tenant(func(s *v1.TenantSLO) { s.Spec.OpsLimit = ptr.To[int64](0) }),
			"spec.opsLimit", "greater than or equal to 1"},
		{"unknown class", tenant(func(s *v1.TenantSLO) { s.Spec.Class = "gold" }),
			"spec.class", `Unsupported value: "gold"`},
		{"best effort with guaranteed bandwidth", tenant(func(s *v1.TenantSLO) {
			s.Spec.Class = v1.ClassBestEffort
			s.Spec.Bandwidth.Guaranteed = ptr.To(resource.MustParse("10M"))
		}), "spec.bandwidth.guaranteed", "only allowed for class strict"},
		{"best effort with guaranteed memory", tenant(func(s *v1.TenantSLO) {
			s.Spec.Class = v1.ClassBestEffort
			s.Spec.Memory.Min = ptr.To(resource.MustParse("128Mi"))
		}), "spec.memory.min", "only allowed for class strict"},
		{"priority out of range", tenant(func(s *v1.TenantSLO) { s.Spec.Priority = 5000 }),
			"spec.priority", "less than or equal to 1000"},
		{"spread min above max", tenant(func(s *v1.TenantSLO) { s.Spec.Placement = v1.Placement{MinNodes: 4, MaxNodes: 2} }),
			"spec.placement.minNodes", "placement.minNodes must be less than or equal to placement.maxNodes"},
		{"spread beyond route capacity", tenant(func(s *v1.TenantSLO) { s.Spec.Placement.MaxNodes = 300 }),
			"spec.placement.maxNodes", "less than or equal to 256"},
		{"unknown eviction policy", tenant(func(s *v1.TenantSLO) { s.Spec.EvictionPolicy = "fifo" }),
			"spec.evictionPolicy", `Unsupported value: "fifo"`},
		{"cluster name not a DNS name", tenant(func(s *v1.TenantSLO) { s.Spec.ClusterRef.Name = "Shared_Redis" }),
			"spec.clusterRef.name", "clusterRef.name Shared_Redis is not a CacheCluster name"},
		{"cluster namespace with a dot", tenant(func(s *v1.TenantSLO) { s.Spec.ClusterRef.Namespace = "cache.platform" }),
			"spec.clusterRef.namespace", "clusterRef.namespace cache.platform is not a namespace name"},

		// CacheNodePlan
		{"partition count out of step", plan(func(p *v1.CacheNodePlan) { p.Spec.PartitionCount = ptr.To[int32](2) }),
			"spec.partitionCount", "partitionCount must equal the number of entries in partitions"},
		{"tenant ID without namespace", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Tenant = "sessions" }),
			"spec.partitions[0].tenant", "tenant sessions is not a tenant ID: the TenantSLO namespace/name"},
		{"same tenant twice", plan(func(p *v1.CacheNodePlan) {
			p.Spec.SetPartitions(append(p.Spec.Partitions, p.Spec.Partitions[0]))
		}), "spec.partitions[1]", "Duplicate value"},
		{"zero partition memory", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Memory = resource.MustParse("0") }),
			"spec.partitions[0].memory", "memory 0 is not a plan quantity: a positive integer below 10Pi"},
		{"partition memory as a bare integer", planWithBareIntegerMemory(),
			"spec.partitions[0].memory", "must be of type string"},
		{"negative route weight", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Routes[0].Weight = -1 }),
			"spec.partitions[0].routes[0].weight", "greater than or equal to 0"},
		{"route without port", planWithRouteField("port", nil),
			"spec.partitions[0].routes[0].port", "Required value"},
		{"route port above 65535", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Routes[0].Port = 99999 }),
			"spec.partitions[0].routes[0].port", "Invalid value: 99999: spec.partitions[0].routes[0].port in body should be less than or equal to 65535"},
		{"route port 0", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Routes[0].Port = 0 }),
			"spec.partitions[0].routes[0].port", "Invalid value: 0: spec.partitions[0].routes[0].port in body should be greater than or equal to 1"},
		{"route port written host:port", planWithRouteField("port", "10.0.0.1:7380"),
			"spec.partitions[0].routes[0].port", `Invalid value: "string": spec.partitions[0].routes[0].port in body must be of type integer: "string"`},
		{"route without host", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Routes[1].Host = "" }),
			"spec.partitions[0].routes[1].host", "should be at least 1 chars long"},
		{"routes starting with another node", plan(func(p *v1.CacheNodePlan) {
			r := p.Spec.Partitions[0].Routes
			r[0], r[1] = r[1], r[0]
		}), "spec.partitions", "the routes of every partition must start with node-a, the node of the plan"},
		{"routes without the plan's node", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Routes = p.Spec.Partitions[0].Routes[1:] }),
			"spec.partitions", "the routes of every partition must start with node-a"},
		{"partition without routes", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Routes = nil }),
			"spec.partitions", "the routes of every partition must start with node-a"},
		{"remote route port above 65535", plan(func(p *v1.CacheNodePlan) {
			p.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "shop/cart", Routes: []v1.TenantRoute{{NodeName: "node-b", Host: "10.0.0.2", Port: 70000, Weight: 1}}}})
		}), "spec.remoteTenants[0].routes[0].port", "Invalid value: 70000: spec.remoteTenants[0].routes[0].port in body should be less than or equal to 65535"},
		{"negative bandwidth limit on a node", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].BandwidthLimit = ptr.To(resource.MustParse("-1M")) }),
			"spec.partitions[0].bandwidthLimit", "bandwidthLimit -1M is not a plan quantity"},
		{"zero ops limit on a node", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].OpsLimit = ptr.To[int64](0) }),
			"spec.partitions[0].opsLimit", "greater than or equal to 1"},
		{"partition memory of one byte", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Memory = resource.MustParse("1") }),
			"spec.partitions", "every partition of a redis plan needs at least 4Mi"},
		{"partition memory one byte under 4Mi", plan(func(p *v1.CacheNodePlan) {
			p.Spec.Partitions[0].Memory = *resource.NewQuantity(4<<20-1, resource.BinarySI)
		}),
			"spec.partitions", "every partition of a redis plan needs at least 4Mi"},
		{"memcached partition of 4Mi", plan(func(p *v1.CacheNodePlan) {
			p.Spec.Engine = v1.EngineMemcached
			p.Spec.Partitions[0].Memory = resource.MustParse("4Mi")
		}), "spec.partitions", "every partition of a memcached plan needs at least 8Mi"},
		{"lfu on memcached", plan(func(p *v1.CacheNodePlan) {
			p.Spec.Engine = v1.EngineMemcached
			p.Spec.Partitions[0].EvictionPolicy = v1.EvictionLFU
		}), "spec.partitions", "evictionPolicy lfu needs engine redis"},
		{"every route weight zero", plan(func(p *v1.CacheNodePlan) {
			p.Spec.Partitions[0].Routes[0].Weight = 0
			p.Spec.Partitions[0].Routes[1].Weight = 0
		}), "spec.partitions[0].routes", "at least one route needs a positive weight"},
		{"remote tenant without routes", plan(func(p *v1.CacheNodePlan) {
			p.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "shop/cart", Routes: []v1.TenantRoute{}}})
		}), "spec.remoteTenants[0].routes", "should have at least 1 items"},
		{"remote tenant whose every route weight is zero", plan(func(p *v1.CacheNodePlan) {
			p.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "shop/cart", Routes: []v1.TenantRoute{{NodeName: "node-b", Host: "10.0.0.2", Port: 7380}}}})
		}), "spec.remoteTenants[0].routes", "at least one route needs a positive weight"},
		{"remote tenant ID without namespace", plan(func(p *v1.CacheNodePlan) {
			p.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "cart", Routes: []v1.TenantRoute{{NodeName: "node-b", Host: "10.0.0.2", Port: 7380, Weight: 1}}}})
		}), "spec.remoteTenants[0].tenant", "tenant cart is not a tenant ID: the TenantSLO namespace/name"},
		{"partition memory in milli-bytes", planWithPartitionField("memory", "5000000000m"),
			"spec.partitions[0].memory", "memory 5000000000m is not a plan quantity"},
		{"partition memory with an exponent", planWithPartitionField("memory", "1e1.5"),
			"spec.partitions[0].memory", "memory 1e1.5 is not a plan quantity"},
		{"partition bandwidth limit that does not parse", planWithPartitionField("bandwidthLimit", "1e1.5"),
			"spec.partitions[0].bandwidthLimit", "bandwidthLimit 1e1.5 is not a plan quantity"},
		{"partition memory overflowing int64", plan(func(p *v1.CacheNodePlan) { p.Spec.Partitions[0].Memory = resource.MustParse("10Ei") }),
			"spec.partitions[0].memory", "memory 9223372036854775807 is not a plan quantity"},
		{"negative plan generation", plan(func(p *v1.CacheNodePlan) { p.Spec.PlanGeneration = -1 }),
			"spec.planGeneration", "greater than or equal to 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.obj.SetName(objectName(tc.name))
			tc.obj.SetNamespace(validationNamespace)
			err := k8sClient.Create(ctx, tc.obj, strict)
			assertRejected(t, err, tc.wantField, tc.wantMsg)
		})
	}
}

// TestTransitionRulesRejectUpdates checks the rules that compare an update with the stored
// object: immutable fields and the monotonic plan generation. Legitimate updates still pass.
func TestTransitionRulesRejectUpdates(t *testing.T) {
	ctx := context.Background()
	const ns = "transitions"
	createNamespace(ctx, t, ns)

	c := validCluster()
	c.Namespace, c.Name = ns, "immutable-engine"
	s := validTenant()
	s.Namespace, s.Name = ns, "immutable-cluster-ref"
	p := validPlan()
	p.Namespace, p.Name = ns, "monotonic-generation"
	for _, obj := range []client.Object{c, s, p} {
		if err := k8sClient.Create(ctx, obj, strict); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}

	for _, tc := range []struct {
		name      string
		obj       client.Object
		mutate    func()
		wantField string
		wantMsg   string // empty: the update must succeed
	}{
		{"engine cannot change", c, func() { c.Spec.Engine = v1.EngineMemcached },
			"spec.engine", "engine is immutable"},
		{"other cluster fields can change", c, func() { c.Spec.Allocation.Policy = v1.PolicyLACS }, "", ""},
		{"clusterRef cannot change", s, func() { s.Spec.ClusterRef.Name = "other-redis" },
			"spec.clusterRef", "clusterRef is immutable"},
		{"tenant objective can change", s, func() { s.Spec.Objective.HitRatio.Ratio = "0.97" }, "", ""},
		{"plan generation cannot decrease", p, func() { p.Spec.PlanGeneration = 0 },
			"spec.planGeneration", "planGeneration must not decrease"},
		{"plan node cannot change", p, func() {
			p.Spec.NodeName = "node-b"
			r := p.Spec.Partitions[0].Routes
			r[0], r[1] = r[1], r[0] // the new node's route first, so only immutability fails
		},
			"spec.nodeName", "nodeName is immutable"},
		{"plan engine cannot change", p, func() { p.Spec.Engine = v1.EngineMemcached },
			"spec.engine", "engine is immutable"},
		{"plan generation increases with new partitions", p, func() {
			p.Spec.PlanGeneration = 2
			p.Spec.SetPartitions(append(p.Spec.Partitions, v1.PartitionPlan{
				Tenant: "search/query-results", Memory: resource.MustParse("2Gi"), EvictionPolicy: v1.EvictionLFU,
				Routes: []v1.TenantRoute{{NodeName: "node-a", Host: "10.0.0.1", Port: 7380, Weight: 1}},
			}))
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Start from the stored object so only this case's change is sent.
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(tc.obj), tc.obj); err != nil {
				t.Fatal(err)
			}
			tc.mutate()
			err := k8sClient.Update(ctx, tc.obj, strict)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("update rejected: %v", err)
				}
				return
			}
			assertRejected(t, err, tc.wantField, tc.wantMsg)
		})
	}
}

// objectName turns a case name into a valid object name, so that only the field under test
// makes the object invalid.
func objectName(caseName string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		case r == ' ':
			return '-'
		}
		return -1
	}, caseName)
}

// assertRejected checks err is the API server's Invalid error whose causes all concern
// wantField (each case breaks exactly one thing), one of them saying wantMsg, and that the
// error text itself names the field.
func assertRejected(t *testing.T, err error, wantField, wantMsg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a rejection on %s (%q)", wantField, wantMsg)
	}
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("got %v; want an Invalid error with details", err)
	}
	found := false
	for _, cause := range status.Status().Details.Causes {
		// No field keeps a schema pattern: every one says what is wrong in words.
		if strings.Contains(cause.Message, "should match") {
			t.Errorf("%s: the message prints a regular expression: %s", cause.Field, cause.Message)
		}
		switch {
		case cause.Field == wantField && strings.Contains(cause.Message, wantMsg):
			found = true
		case cause.Field == wantField:
		case strings.Contains(cause.Message, "some validation rules were not checked"):
			// The API server skips CEL rules once a type-level check failed, and says so.
		default:
			t.Errorf("unexpected cause on another field: %s: %s", cause.Field, cause.Message)
		}
	}
	if !found {
		t.Fatalf("no cause on %s containing %q in: %v", wantField, wantMsg, err)
	}
	if !strings.Contains(err.Error(), wantField) {
		t.Errorf("error text %q does not name %s", err, wantField)
	}
	t.Logf("rejected: %v", err)
}

// TestClusterRefNamespaceWrittenOut: a TenantSLO whose clusterRef names no namespace may later
// name the one it resolves to (status.clusterNamespace, which the operator writes), the same
// cluster written out; any other namespace, or any before the operator resolved it, is refused.
func TestClusterRefNamespaceWrittenOut(t *testing.T) {
	ctx := context.Background()
	const ns = "clusterref"
	createNamespace(ctx, t, ns)
	s := validTenant()
	s.Namespace, s.Name = ns, "implicit-namespace"
	s.Spec.ClusterRef.Namespace = ""
	if err := k8sClient.Create(ctx, s, strict); err != nil {
		t.Fatal(err)
	}
	update := func(namespace string) error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
		s.Spec.ClusterRef.Namespace = namespace
		return k8sClient.Update(ctx, s, strict)
	}

	assertRejected(t, update(ns), "spec.clusterRef", "once the operator has set that")

	s.Status.ClusterNamespace = ns
	if err := k8sClient.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	assertRejected(t, update("cache-platform"), "spec.clusterRef", "clusterRef is immutable")
	if err := update(ns); err != nil {
		t.Fatalf("writing out the tenant's own namespace, the one clusterRef resolves to: %v", err)
	}
	if s.Spec.ClusterRef.Namespace != ns {
		t.Errorf("stored clusterRef %+v, want namespace %s", s.Spec.ClusterRef, ns)
	}
	// Written out, it is as immutable as any clusterRef.
	assertRejected(t, update(""), "spec.clusterRef", "clusterRef is immutable")
}

// TestTaintKeyRuleIsLabelKeyRule: a toleration's key is checked with the very expression every
// label and annotation map checks its keys with, so the two cannot drift apart.
func TestTaintKeyRuleIsLabelKeyRule(t *testing.T) {
	cluster := crdSchema(t, "cacheqos.io_cacheclusters.yaml").Properties["spec"]
	keyRule := cluster.Properties["tolerations"].Items.Schema.Properties["key"].XValidations
	if len(keyRule) != 1 {
		t.Fatalf("toleration key rules %+v, want one", keyRule)
	}
	mapRule := cluster.Properties["nodeSelector"].XValidations[0].Rule
	check, ok := strings.CutPrefix(mapRule, "self.all(k, ")
	if !ok || !strings.HasSuffix(check, ")") {
		t.Fatalf("nodeSelector rule %q is not self.all(k, <check>)", mapRule)
	}
	check = strings.ReplaceAll(strings.TrimSuffix(check, ")"), "k.", "self.")
	check = strings.ReplaceAll(check, "size(k)", "size(self)")
	if want := "size(self) == 0 || (" + check + ")"; keyRule[0].Rule != want {
		t.Errorf("toleration key rule %q, want %q", keyRule[0].Rule, want)
	}
	for _, m := range []apiextensionsv1.JSONSchemaProps{
		cluster.Properties["sidecar"].Properties["podLabels"],
		cluster.Properties["sidecar"].Properties["podAnnotations"],
		cluster.Properties["monitoring"].Properties["serviceMonitor"].Properties["labels"],
		cluster.Properties["monitoring"].Properties["prometheusRule"].Properties["labels"],
	} {
		if len(m.XValidations) == 0 || m.XValidations[0].Rule != mapRule {
			t.Errorf("%s: key rule %+v, want %q", m.Description, m.XValidations, mapRule)
		}
	}
}
