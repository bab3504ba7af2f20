package cachecluster_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/cachecluster"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// defaultToleration is the chart's sidecar.tolerations: every cluster's sidecars tolerate it.
var defaultToleration = corev1.Toleration{Key: "cacheqos-test/cache-node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// sidecarDefaults stand for the Helm chart's sidecar values the operator of this package runs
// with (images.pullSecrets, sidecar.priorityClassName, sidecar.podAnnotations, sidecar.tolerations).
var sidecarDefaults = cachecluster.SidecarDefaults{
	SidecarPodSettings: v1.SidecarPodSettings{
		ImagePullSecrets:  []v1.SecretReference{{Name: "chart-registry"}},
		PriorityClassName: "cache-default",
		PodAnnotations:    map[string]string{"team": "platform", "scrape": "yes"},
	},
	Tolerations: []corev1.Toleration{defaultToleration},
}

// TestSidecarPodOverrides: spec.sidecar reaches the DaemonSet's pod template over the
// operator's defaults, a required node affinity narrows the planned nodes as it narrows the
// pods, the default tolerations admit tainted nodes, and a memory override below what the
// engines need is refused with a condition.
func TestSidecarPodOverrides(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "overrides")
	node(t, "overrides-big", map[string]string{"pool": "overrides", "size": "big"})
	node(t, "overrides-small", map[string]string{"pool": "overrides", "size": "small"})
	node(t, "overrides-tainted", map[string]string{"pool": "overrides", "size": "big"}, corev1.Taint{Key: defaultToleration.Key, Effect: corev1.TaintEffectNoSchedule})
	c := newCluster(ns, "shaped", "overrides")
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "size", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"small"}}}}},
	}}}
	podSecurity := &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	containerSecurity := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c123,c456"}}
	c.Spec.Sidecar = v1.SidecarPodSettings{
		ImagePullSecrets:   []v1.SecretReference{{Name: "team-registry"}, {Name: "chart-registry"}},
		PriorityClassName:  "cache-critical",
		Affinity:           affinity,
		PodLabels:          map[string]v1.LabelValue{"team": "checkout"},
		PodAnnotations:     map[string]string{"team": "checkout"},
		PodSecurityContext: podSecurity,
		SecurityContext:    containerSecurity,
		Resources: &v1.SidecarResources{
			Requests: &v1.SidecarRequests{CPU: "3", Memory: ptr.To(resource.MustParse("7Gi"))},
			Limits:   &v1.SidecarLimits{CPU: "4", Memory: ptr.To(resource.MustParse("7Gi"))},
		},
	}
	create(t, c)
	testenv.Eventually(t, timeout, wantPlans(c, "overrides-big", "overrides-tainted"))

	ds := &appsv1.DaemonSet{}
	testenv.Eventually(t, timeout, func() error { return get(ds, ns, "shaped-sidecar") })
	tpl := ds.Spec.Template
	pod := tpl.Spec
	if want := []corev1.LocalObjectReference{{Name: "chart-registry"}, {Name: "team-registry"}}; !equality.Semantic.DeepEqual(pod.ImagePullSecrets, want) {
		t.Errorf("imagePullSecrets %v, want the chart's and then the cluster's %v", pod.ImagePullSecrets, want)
	}
	if want := []corev1.Toleration{defaultToleration}; !equality.Semantic.DeepEqual(pod.Tolerations, want) {
		t.Errorf("tolerations %+v, want the chart's %+v", pod.Tolerations, want)
	}
	if pod.PriorityClassName != "cache-critical" {
		t.Errorf("priorityClassName %q, want the cluster's", pod.PriorityClassName)
	}
	if !equality.Semantic.DeepEqual(pod.Affinity, affinity) {
		t.Errorf("affinity %+v", pod.Affinity)
	}
	wantLabels := map[string]string{"team": "checkout"}
	for k, v := range ds.Spec.Selector.MatchLabels {
		wantLabels[k] = v
	}
	if !equality.Semantic.DeepEqual(tpl.Labels, wantLabels) {
		t.Errorf("pod labels %v, want the selector's and the cluster's %v", tpl.Labels, wantLabels)
	}
	if want := map[string]string{"team": "checkout", "scrape": "yes"}; !equality.Semantic.DeepEqual(withoutTemplateHash(tpl.Annotations), want) {
		t.Errorf("pod annotations %v, want the cluster's over the chart's %v", tpl.Annotations, want)
	}
	if !equality.Semantic.DeepEqual(pod.SecurityContext, podSecurity) {
		t.Errorf("pod security context %+v, want the cluster's", pod.SecurityContext)
	}
	for _, ctr := range append(pod.InitContainers, pod.Containers...) {
		if !equality.Semantic.DeepEqual(ctr.SecurityContext, containerSecurity) {
			t.Errorf("container %s security context %+v, want the cluster's", ctr.Name, ctr.SecurityContext)
		}
	}
	wantResources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("7Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("7Gi")},
	}
	if got := pod.Containers[0].Resources; !equality.Semantic.DeepEqual(got, wantResources) {
		t.Errorf("resources %+v, want %+v", got, wantResources)
	}
	testenv.Eventually(t, timeout, clusterCondition(c, conditions.SidecarOverridesApplied, metav1.ConditionTrue, conditions.ReasonOverridesApplied, "", nil))

	// A memory limit below the 6291Mi the sidecar needs (4Gi capacity + 256Mi + the proxy's
	// client bound, 1939Mi) is refused:
	// the derived memory stays, the CPU override is kept, and the condition names the field.
	patch := `{"spec":{"sidecar":{"resources":{"limits":{"memory":"1Gi"}}}}}`
	if err := env.Client.Patch(ctx, c, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, clusterCondition(c, conditions.SidecarOverridesApplied, metav1.ConditionFalse, conditions.ReasonUnsafeResources,
		"spec.sidecar.resources.limits.memory 1Gi is below the 6291Mi the sidecar needs", nil))
	testenv.Eventually(t, timeout, func() error {
		if err := get(ds, ns, "shaped-sidecar"); err != nil {
			return err
		}
		want := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("6291Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("6291Mi")},
		}
		if got := ds.Spec.Template.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(got, want) {
			return fmt.Errorf("resources %+v, want %+v", got, want)
		}
		return nil
	})

	// Without spec.sidecar the operator's defaults and its own security contexts are back,
	// and every selected node gets a plan again.
	if err := env.Client.Patch(ctx, c, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"sidecar":null}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, wantPlans(c, "overrides-big", "overrides-small", "overrides-tainted"))
	testenv.Eventually(t, timeout, clusterCondition(c, conditions.SidecarOverridesApplied, metav1.ConditionTrue, conditions.ReasonOverridesApplied, "", nil))
	testenv.Eventually(t, timeout, func() error {
		if err := get(ds, ns, "shaped-sidecar"); err != nil {
			return err
		}
		pod := ds.Spec.Template.Spec
		if pod.PriorityClassName != "cache-default" || pod.Affinity != nil || len(pod.ImagePullSecrets) != 1 ||
			pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != 65532 || pod.Containers[0].SecurityContext.SELinuxOptions != nil {
			return fmt.Errorf("pod spec still carries the overrides: priority %q affinity %+v pull secrets %v security %+v",
				pod.PriorityClassName, pod.Affinity, pod.ImagePullSecrets, pod.SecurityContext)
		}
		if want := map[string]string{"team": "platform", "scrape": "yes"}; !equality.Semantic.DeepEqual(withoutTemplateHash(ds.Spec.Template.Annotations), want) {
			return fmt.Errorf("pod annotations %v, want the chart's %v", ds.Spec.Template.Annotations, want)
		}
		return nil
	})
}

// withoutTemplateHash is a copy of a pod template's annotations without the one the operator
// adds for its rollouts.
func withoutTemplateHash(annotations map[string]string) map[string]string {
	out := maps.Clone(annotations)
	delete(out, cachecluster.AnnotationTemplateHash)
	return out
}
