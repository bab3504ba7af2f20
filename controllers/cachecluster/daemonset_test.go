package cachecluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// TestSidecarResources: overrides replace the derived resources one resource at a time; one
// that would starve the engines or that a pod cannot have leaves that resource derived.
func TestSidecarResources(t *testing.T) {
	capacity := &v1.NodeCapacity{Memory: resource.MustParse("8Gi"), OpsPerSecond: 100000}
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	list := func(cpu, memory string) corev1.ResourceList {
		out := corev1.ResourceList{}
		if cpu != "" {
			out[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			out[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		return out
	}
	tests := []struct {
		name         string
		overrides    *v1.SidecarResources
		wantRequests corev1.ResourceList
		wantLimits   corev1.ResourceList
		wantProblems []string
		clientTLS    bool
	}{
		{"derived", nil, list("2", "10387Mi"), list("", "10387Mi"), nil, false},
		// 10000 connections at 64 KiB more each: 625Mi.
		{"derived with client TLS", nil, list("2", "11012Mi"), list("", "11012Mi"), nil, true},
		{"memory limit below the engines' need with client TLS",
			&v1.SidecarResources{Limits: &v1.SidecarLimits{Memory: q("10387Mi")}},
			list("2", "11012Mi"), list("", "11012Mi"), []string{"spec.sidecar.resources.limits.memory 10387Mi is below the 11012Mi the sidecar needs (capacity.memory 8Gi plus the proxy's own bound 2820Mi"}, true},
		{"more memory and a CPU limit",
			&v1.SidecarResources{Requests: &v1.SidecarRequests{Memory: q("12Gi")}, Limits: &v1.SidecarLimits{CPU: "3", Memory: q("12Gi")}},
			list("2", "12Gi"), list("3", "12Gi"), nil, false},
		{"half a core",
			&v1.SidecarResources{Requests: &v1.SidecarRequests{CPU: "500m"}},
			list("500m", "10387Mi"), list("", "10387Mi"), nil, false},
		{"memory limit below the engines' need",
			&v1.SidecarResources{Requests: &v1.SidecarRequests{CPU: "1"}, Limits: &v1.SidecarLimits{Memory: q("4Gi")}},
			list("1", "10387Mi"), list("", "10387Mi"), []string{"spec.sidecar.resources.limits.memory 4Gi is below the 10387Mi the sidecar needs (capacity.memory 8Gi plus the proxy's own bound 2195Mi"}, false},
		{"memory request above the derived limit",
			&v1.SidecarResources{Requests: &v1.SidecarRequests{Memory: q("11Gi")}},
			list("2", "10387Mi"), list("", "10387Mi"), []string{"the memory request 11Gi is above its limit 10387Mi"}, false},
		{"CPU limit below the derived request",
			&v1.SidecarResources{Limits: &v1.SidecarLimits{CPU: "1"}},
			list("2", "10387Mi"), list("", "10387Mi"), []string{"the cpu request 2 is above its limit 1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := sidecarResources(capacity, tt.clientTLS, tt.overrides)
			if !equality.Semantic.DeepEqual(got.Requests, tt.wantRequests) || !equality.Semantic.DeepEqual(got.Limits, tt.wantLimits) {
				t.Errorf("requests %v limits %v, want %v %v", got.Requests, got.Limits, tt.wantRequests, tt.wantLimits)
			}
			if len(problems) != len(tt.wantProblems) {
				t.Fatalf("problems %q, want %q", problems, tt.wantProblems)
			}
			for i := range problems {
				if !strings.Contains(problems[i], tt.wantProblems[i]) {
					t.Errorf("problem %q lacks %q", problems[i], tt.wantProblems[i])
				}
			}
		})
	}
}

// TestPodSettingsMerge: the cluster's spec.sidecar over the operator's defaults.
func TestPodSettingsMerge(t *testing.T) {
	defaults := v1.SidecarPodSettings{
		ImagePullSecrets:  []v1.SecretReference{{Name: "chart"}},
		PriorityClassName: "default",
		PodLabels:         map[string]v1.LabelValue{"a": "1", "b": "1"},
		Resources:         &v1.SidecarResources{Requests: &v1.SidecarRequests{CPU: "1", Memory: ptr.To(resource.MustParse("9Gi"))}},
	}
	r := &Reconciler{SidecarDefaults: SidecarDefaults{SidecarPodSettings: defaults}}
	c := &v1.CacheCluster{Spec: v1.CacheClusterSpec{Sidecar: v1.SidecarPodSettings{
		ImagePullSecrets: []v1.SecretReference{{Name: "own"}, {Name: "chart"}},
		PodLabels:        map[string]v1.LabelValue{"b": "2"},
		Resources:        &v1.SidecarResources{Requests: &v1.SidecarRequests{CPU: "2"}, Limits: &v1.SidecarLimits{CPU: "3"}},
	}}}
	got := r.podSettings(c)
	want := v1.SidecarPodSettings{
		ImagePullSecrets:  []v1.SecretReference{{Name: "chart"}, {Name: "own"}},
		PriorityClassName: "default",
		PodLabels:         map[string]v1.LabelValue{"a": "1", "b": "2"},
		Resources: &v1.SidecarResources{
			Requests: &v1.SidecarRequests{CPU: "2", Memory: ptr.To(resource.MustParse("9Gi"))},
			Limits:   &v1.SidecarLimits{CPU: "3"},
		},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("merged %+v\nwant %+v", got, want)
	}
	if !equality.Semantic.DeepEqual(r.SidecarDefaults.SidecarPodSettings, defaults) || len(r.SidecarDefaults.PodLabels) != 2 || r.SidecarDefaults.PodLabels["b"] != "1" {
		t.Errorf("merging changed the defaults: %+v", r.SidecarDefaults)
	}
}

// TestDefaultTolerations: the operator's tolerations follow the cluster's own (converted to
// the core type), without the ones the cluster already has; bad ones stop the operator at start.
func TestDefaultTolerations(t *testing.T) {
	dedicated := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cache", Effect: corev1.TaintEffectNoSchedule}
	spot := corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpExists}
	r := &Reconciler{SidecarDefaults: SidecarDefaults{Tolerations: []corev1.Toleration{dedicated, spot}}}
	c := &v1.CacheCluster{Spec: v1.CacheClusterSpec{Tolerations: []v1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}}}}
	if got, want := r.tolerations(c), []corev1.Toleration{spot, dedicated}; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("tolerations %+v, want %+v", got, want)
	}
	if err := r.SidecarDefaults.Validate(); err != nil {
		t.Errorf("valid defaults refused: %v", err)
	}
	for _, tt := range []struct {
		toleration corev1.Toleration
		want       string
	}{
		{corev1.Toleration{Key: "a", Operator: "Equals"}, `tolerations[0]: operator "Equals", want Exists or Equal`},
		{corev1.Toleration{Key: "a", Operator: corev1.TolerationOpExists, Value: "x"}, "tolerations[0]: a toleration with operator Exists takes no value"},
		{corev1.Toleration{Operator: corev1.TolerationOpEqual, Value: "x"}, "tolerations[0]: a toleration without a key must use operator Exists"},
		{corev1.Toleration{Key: "a", Effect: "NoScheduling"}, `tolerations[0]: effect "NoScheduling"`},
		{corev1.Toleration{Key: "bad key", Operator: corev1.TolerationOpExists}, `tolerations[0]: key "bad key"`},
		{corev1.Toleration{Key: "a", Operator: corev1.TolerationOpEqual, Value: "bad value"}, `tolerations[0]: value "bad value"`},
	} {
		d := SidecarDefaults{Tolerations: []corev1.Toleration{tt.toleration}}
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one containing %q", tt.toleration, err, tt.want)
		}
	}
}
