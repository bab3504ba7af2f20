package cachecluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// Annotations of the sidecar pod template and pods that the InPlace update strategy uses.
const (
	// annotationTemplateHash identifies the pod template with its images left out: a pod
	// whose hash differs has another change than an image and is replaced.
	annotationTemplateHash = "cacheqos.io/template-hash"
	// annotationImagesPatchedAt is when the operator patched a pod's images; the pod counts
	// as updating until its Ready condition turned true at or after that time.
	annotationImagesPatchedAt = "cacheqos.io/images-patched-at"
)

// setUpdateStrategy gives the DaemonSet the cluster's update strategy and stamps its pod
// template with annotationTemplateHash. InPlace makes the DaemonSet OnDelete: rollOutSidecars
// updates its pods.
func setUpdateStrategy(c *v1.CacheCluster, ds *appsv1.DaemonSet) error {
	strategy := c.Spec.UpdateStrategy
	switch strategy.TypeOrDefault() {
	case v1.UpdateRollingUpdate:
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
			Type:          appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(strategy.MaxUnavailableOrDefault()))},
		}
	default:
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}
	hash, err := templateHash(ds.Spec.Template)
	if err != nil {
		return err
	}
	// A copy: the template's annotations may be the operator's defaults.
	annotations := maps.Clone(ds.Spec.Template.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annotationTemplateHash] = hash
	ds.Spec.Template.Annotations = annotations
	return nil
}

// templateHash hashes the pod template without its containers' images.
func templateHash(t corev1.PodTemplateSpec) (string, error) {
	t = *t.DeepCopy()
	delete(t.Annotations, annotationTemplateHash)
	for _, list := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for i := range list {
			list[i].Image = ""
		}
	}
	raw, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("hashing the sidecar pod template: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8]), nil
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=patch;delete

// rollOutSidecars updates the sidecar pods to the DaemonSet's template under the InPlace
// strategy, one node at a time (maxUnavailable at once), in node name order: a pod whose
// only difference is images gets them patched in place, any other pod that differs is
// deleted for the DaemonSet to recreate. A pod is updated only while fewer than
// maxUnavailable pods are unavailable (not Ready, being deleted, patched and not Ready since,
// or missing on a selected node).
func (r *Reconciler) rollOutSidecars(ctx context.Context, s *scope) error {
	if s.daemonSet == nil || s.cluster.Spec.UpdateStrategy.TypeOrDefault() != v1.UpdateInPlace {
		return nil
	}
	template := s.daemonSet.Spec.Template
	var current appsv1.DaemonSet
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s.daemonSet), &current); err != nil {
		// Not in the cache yet: its creation triggers the next reconcile.
		return client.IgnoreNotFound(err)
	}
	// Only the DaemonSet's own pods: a pod with the sidecar's labels that it does not control
	// is someone else's to update.
	pods := slices.DeleteFunc(slices.Clone(s.pods), func(p corev1.Pod) bool {
		owner := metav1.GetControllerOf(&p)
		return owner == nil || owner.UID != current.UID
	})
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Spec.NodeName, b.Spec.NodeName) })
	budget := int(s.cluster.Spec.UpdateStrategy.MaxUnavailableOrDefault())
	withPod := map[string]bool{}
	for i := range pods {
		withPod[pods[i].Spec.NodeName] = true
		if !podAvailable(&pods[i]) {
			budget--
		}
	}
	for _, n := range s.nodes {
		if !withPod[n.Name] {
			budget-- // its pod was deleted and is not recreated yet
		}
	}
	var errs []error
	for i := range pods {
		pod := &pods[i]
		if budget <= 0 {
			break
		}
		if !podAvailable(pod) {
			continue
		}
		var err error
		switch {
		case pod.Annotations[annotationTemplateHash] != template.Annotations[annotationTemplateHash]:
			err = client.IgnoreNotFound(r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}))
		case !sameImages(pod.Spec, template.Spec):
			err = r.patchImages(ctx, pod, template.Spec)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("updating sidecar pod %s on node %s: %w", pod.Name, pod.Spec.NodeName, err))
			continue
		}
		budget--
	}
	return errors.Join(errs...)
}

// patchImages sets the images of the pod's containers and init containers to the template's
// and records when.
func (r *Reconciler) patchImages(ctx context.Context, pod *corev1.Pod, spec corev1.PodSpec) error {
	patched := pod.DeepCopy()
	setImages(patched.Spec.InitContainers, spec.InitContainers)
	setImages(patched.Spec.Containers, spec.Containers)
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[annotationImagesPatchedAt] = time.Now().UTC().Format(time.RFC3339)
	err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// setImages copies the images of want's containers to the same-named containers of got.
func setImages(got, want []corev1.Container) {
	for i := range got {
		if j := slices.IndexFunc(want, func(c corev1.Container) bool { return c.Name == got[i].Name }); j >= 0 {
			got[i].Image = want[j].Image
		}
	}
}

// sameImages reports whether the pod's containers and init containers run the template's
// images.
func sameImages(pod, template corev1.PodSpec) bool {
	images := func(list []corev1.Container) map[string]string {
		out := make(map[string]string, len(list))
		for _, c := range list {
			out[c.Name] = c.Image
		}
		return out
	}
	equal := func(a, b []corev1.Container) bool {
		x, y := images(a), images(b)
		if len(x) != len(y) {
			return false
		}
		for name, image := range x {
			if y[name] != image {
				return false
			}
		}
		return true
	}
	return equal(pod.InitContainers, template.InitContainers) && equal(pod.Containers, template.Containers)
}

// podAvailable reports whether a sidecar pod serves: Ready, not being deleted, and, after an
// image patch, Ready again since or running containers all started since.
func podAvailable(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	if i < 0 || pod.Status.Conditions[i].Status != corev1.ConditionTrue {
		return false
	}
	raw, ok := pod.Annotations[annotationImagesPatchedAt]
	if !ok {
		return true
	}
	patchedAt, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		return false
	}
	if !pod.Status.Conditions[i].LastTransitionTime.Time.Before(patchedAt) {
		return true
	}
	// Ready all along, as the kubelet may report a quick restart: the containers started since.
	for _, st := range pod.Status.ContainerStatuses {
		if st.State.Running == nil || st.State.Running.StartedAt.Time.Before(patchedAt) {
			return false
		}
	}
	return len(pod.Status.ContainerStatuses) > 0
}
