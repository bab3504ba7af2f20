package cachecluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodAvailable(t *testing.T) {
	patched := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	before, after := metav1.NewTime(patched.Add(-time.Minute)), metav1.NewTime(patched.Add(time.Second))
	pod := func(ready corev1.ConditionStatus, since metav1.Time, annotated bool, started ...metav1.Time) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: since}}}}
		if annotated {
			p.Annotations = map[string]string{annotationImagesPatchedAt: patched.Format(time.RFC3339)}
		}
		for _, s := range started {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: s}}})
		}
		return p
	}
	deleting := pod(corev1.ConditionTrue, before, false)
	deleting.DeletionTimestamp = &after
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"ready, never patched", pod(corev1.ConditionTrue, before, false), true},
		{"not ready", pod(corev1.ConditionFalse, before, false), false},
		{"being deleted", deleting, false},
		{"no ready condition", &corev1.Pod{}, false},
		{"patched, ready since before the patch", pod(corev1.ConditionTrue, before, true), false},
		{"patched, ready again since", pod(corev1.ConditionTrue, after, true), true},
		{"patched, ready all along, containers restarted since", pod(corev1.ConditionTrue, before, true, after, after), true},
		{"patched, ready all along, one container not restarted", pod(corev1.ConditionTrue, before, true, after, before), false},
	} {
		if got := podAvailable(tc.pod); got != tc.want {
			t.Errorf("%s: available %v, want %v", tc.name, got, tc.want)
		}
	}
}
