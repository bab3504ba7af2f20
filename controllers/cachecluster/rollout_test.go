package cachecluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// rolloutNodes are the nodes of TestInPlaceRollout, in the order the operator updates them.
var rolloutNodes = []string{"rollout-a", "rollout-b", "rollout-c"}

// TestInPlaceRollout plays the kubelet and the DaemonSet controller, which envtest lacks: it
// creates each node's sidecar pod from the DaemonSet's template and reports it Ready. A new
// sidecar image is patched into the pods in place, one node at a time: the next pod only after
// the previous one reported Ready again; another template change deletes the pods one at a
// time, each after the previous one's replacement is Ready. RollingUpdate hands the pods to
// the DaemonSet's own RollingUpdate with maxUnavailable.
func TestInPlaceRollout(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "rollout")
	c, ds, uids := startInPlaceRollout(t, ns, "rollout", rolloutNodes, v1.UpdateStrategy{})

	// A new sidecar image: patched in place, node after node.
	updateCluster(t, c, func(c *v1.CacheCluster) { c.Spec.Images.Sidecar = "test/cache-sidecar:v2" })
	for i, n := range rolloutNodes {
		testenv.Eventually(t, timeout, podImages(ns, n, "test/cache-sidecar:v2"))
		for _, later := range rolloutNodes[i+1:] {
			if err := podImages(ns, later, "test/cache-sidecar:v1")(); err != nil {
				t.Fatalf("while %s is not Ready again: %v", n, err)
			}
		}
		// Nothing else moves while this pod is not Ready again.
		time.Sleep(time.Second)
		for _, later := range rolloutNodes[i+1:] {
			if err := podImages(ns, later, "test/cache-sidecar:v1")(); err != nil {
				t.Fatalf("a second after %s was patched: %v", n, err)
			}
		}
		p := sidecarPod(t, ns, n)
		if p.UID != uids[n] {
			t.Fatalf("pod on %s was replaced, want it patched in place", n)
		}
		setReady(t, p, time.Now().Add(time.Second))
	}

	// Another change to the template: each pod is deleted, the next once the replacement runs.
	updateCluster(t, c, func(c *v1.CacheCluster) {
		c.Spec.Sidecar.PodAnnotations = map[string]string{"team": "checkout"}
	})
	testenv.Eventually(t, timeout, func() error {
		if err := get(ds, ns, "rolled-sidecar"); err != nil {
			return err
		}
		if ds.Spec.Template.Annotations["team"] != "checkout" {
			return fmt.Errorf("template annotations %v", ds.Spec.Template.Annotations)
		}
		return nil
	})
	for i, n := range rolloutNodes {
		testenv.Eventually(t, timeout, func() error {
			if p := sidecarPod(t, ns, n); p.DeletionTimestamp == nil {
				return fmt.Errorf("the pod on %s is not being deleted", n)
			}
			return nil
		})
		time.Sleep(time.Second)
		for _, later := range rolloutNodes[i+1:] {
			if p := sidecarPod(t, ns, later); p.DeletionTimestamp != nil {
				t.Fatalf("the pod on %s is deleted while %s's is being replaced", later, n)
			}
		}
		old := sidecarPod(t, ns, n)
		if err := env.Client.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, func() error {
			if err := get(&corev1.Pod{}, ns, old.Name); err == nil {
				return fmt.Errorf("pod %s still exists", old.Name)
			}
			return nil
		})
		if err := get(ds, ns, "rolled-sidecar"); err != nil {
			t.Fatal(err)
		}
		sidecarPodFromTemplate(t, ds, n)
	}

	// RollingUpdate: the DaemonSet's own.
	updateCluster(t, c, func(c *v1.CacheCluster) {
		c.Spec.UpdateStrategy = v1.UpdateStrategy{Type: v1.UpdateRollingUpdate, MaxUnavailable: ptr.To[int32](2)}
	})
	testenv.Eventually(t, timeout, func() error {
		if err := get(ds, ns, "rolled-sidecar"); err != nil {
			return err
		}
		s := ds.Spec.UpdateStrategy
		if s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 2 {
			return fmt.Errorf("update strategy %+v, want RollingUpdate with maxUnavailable 2", s)
		}
		return nil
	})
}

// TestInPlaceRolloutMaxUnavailable: with maxUnavailable 2, a new sidecar image is patched into
// two pods at once, but not into a third while both are not Ready again; the third follows
// once one of them is. With the default of 1 the second pod would wait for the first.
func TestInPlaceRolloutMaxUnavailable(t *testing.T) {
	nodes := []string{"burst-a", "burst-b", "burst-c"}
	ns := env.Namespace(t, "burst")
	c, _, uids := startInPlaceRollout(t, ns, "burst", nodes, v1.UpdateStrategy{MaxUnavailable: ptr.To[int32](2)})

	updateCluster(t, c, func(c *v1.CacheCluster) { c.Spec.Images.Sidecar = "test/cache-sidecar:v2" })
	for _, n := range nodes[:2] {
		testenv.Eventually(t, timeout, podImages(ns, n, "test/cache-sidecar:v2"))
	}
	// Neither patched pod is Ready again: the third waits.
	time.Sleep(time.Second)
	if err := podImages(ns, nodes[2], "test/cache-sidecar:v1")(); err != nil {
		t.Fatalf("while two pods are not Ready again: %v", err)
	}
	setReady(t, sidecarPod(t, ns, nodes[0]), time.Now().Add(time.Second))
	testenv.Eventually(t, timeout, podImages(ns, nodes[2], "test/cache-sidecar:v2"))
	for _, n := range nodes {
		if sidecarPod(t, ns, n).UID != uids[n] {
			t.Errorf("pod on %s was replaced, want it patched in place", n)
		}
	}
}

func TestUpdateStrategyValidation(t *testing.T) {
	ns := env.Namespace(t, "strategy")
	for _, tc := range []struct {
		strategy v1.UpdateStrategy
		want     string
	}{
		{v1.UpdateStrategy{Type: "Recreate"}, "updateStrategy.type Recreate is neither InPlace nor RollingUpdate"},
		{v1.UpdateStrategy{MaxUnavailable: ptr.To[int32](0)}, "updateStrategy.maxUnavailable must be between 1 and 1000"},
	} {
		c := newCluster(ns, "bad", "strategy")
		c.Spec.UpdateStrategy = tc.strategy
		err := env.Client.Create(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one with %q", tc.strategy, err, tc.want)
		}
	}
}

// startInPlaceRollout creates nodes labelled pool=<pool> and the CacheCluster "rolled" on them
// with strategy (InPlace), waits for its OnDelete DaemonSet, and creates each node's sidecar
// pod from the template, Ready. It returns the pods' UIDs by node.
func startInPlaceRollout(t *testing.T, ns, pool string, nodes []string, strategy v1.UpdateStrategy) (*v1.CacheCluster, *appsv1.DaemonSet, map[string]types.UID) {
	t.Helper()
	for _, n := range nodes {
		node(t, n, map[string]string{"pool": pool})
	}
	// The pods name the chart's priority class, which the API server resolves.
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: sidecarDefaults.PriorityClassName}, Value: 1000}
	if err := env.Client.Create(context.Background(), class); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c := newCluster(ns, "rolled", pool)
	c.Spec.UpdateStrategy = strategy
	create(t, c)
	ds := &appsv1.DaemonSet{}
	testenv.Eventually(t, timeout, func() error {
		if err := get(ds, ns, "rolled-sidecar"); err != nil {
			return err
		}
		if got := ds.Spec.UpdateStrategy.Type; got != appsv1.OnDeleteDaemonSetStrategyType {
			return fmt.Errorf("update strategy %s, want OnDelete", got)
		}
		return nil
	})
	uids := map[string]types.UID{}
	for _, n := range nodes {
		uids[n] = sidecarPodFromTemplate(t, ds, n).UID
	}
	return c, ds, uids
}

// sidecarPodFromTemplate creates the pod the DaemonSet would run on node, controlled by it, and
// reports it Ready.
func sidecarPodFromTemplate(t *testing.T, ds *appsv1.DaemonSet, node string) *corev1.Pod {
	t.Helper()
	tpl := ds.Spec.Template.DeepCopy()
	p := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
	p.Namespace, p.Name = ds.Namespace, ds.Name+"-"+node
	p.Spec.NodeName = node
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}
	create(t, p)
	setReady(t, p, time.Now().Add(-time.Minute))
	return p
}

// setReady reports the pod Ready since readySince, as the kubelet would.
func setReady(t *testing.T, p *corev1.Pod, readySince time.Time) {
	t.Helper()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.9.0.1", PodIPs: []corev1.PodIP{{IP: "10.9.0.1"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)}}}
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func sidecarPod(t *testing.T, ns, node string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := get(p, ns, "rolled-sidecar-"+node); err != nil {
		t.Fatal(err)
	}
	return p
}

// podImages checks that node's sidecar pod installs the sidecar from image.
func podImages(ns, node, image string) func() error {
	return func() error {
		p := &corev1.Pod{}
		if err := get(p, ns, "rolled-sidecar-"+node); err != nil {
			return err
		}
		for _, ctr := range p.Spec.InitContainers {
			if ctr.Name == "install-sidecar" && ctr.Image == image {
				return nil
			}
		}
		return fmt.Errorf("pod on %s has init containers %+v, want install-sidecar from %s", node, p.Spec.InitContainers, image)
	}
}

// updateCluster changes the cluster, retrying on conflicts with the operator's writes.
func updateCluster(t *testing.T, c *v1.CacheCluster, change func(*v1.CacheCluster)) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, c.Namespace, c.Name); err != nil {
			return err
		}
		change(c)
		return env.Client.Update(context.Background(), c)
	})
}
