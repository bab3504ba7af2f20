package objects

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// SidecarHosts maps each node to the pod IP of the sidecar pod running there (its peer port
// is PeerPort). Pods being deleted or without an IP are skipped; when a rollout briefly runs
// two pods on a node, a ready one wins over one that is not, then the newer one.
func SidecarHosts(pods []corev1.Pod) map[string]string {
	chosen := map[string]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.PodIP == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if cur := chosen[p.Spec.NodeName]; cur == nil || betterPod(p, cur) {
			chosen[p.Spec.NodeName] = p
		}
	}
	out := make(map[string]string, len(chosen))
	for node, p := range chosen {
		out[node] = p.Status.PodIP
	}
	return out
}

func betterPod(a, b *corev1.Pod) bool {
	if ra, rb := PodReady(a), PodReady(b); ra != rb {
		return ra
	}
	return b.CreationTimestamp.Before(&a.CreationTimestamp)
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// StaleRoutes reports whether some partition's routes disagree with where the sidecars are:
// a route to an address that is not the node's sidecar any more, or a node holding a
// partition of the tenant whose sidecar host (SidecarHosts) is known but missing from the
// routes.
func StaleRoutes(plans []v1.CacheNodePlan, hosts map[string]string) bool {
	holders := map[string][]string{} // tenant -> nodes with a partition
	for i := range plans {
		for _, p := range plans[i].Spec.Partitions {
			holders[p.Tenant] = append(holders[p.Tenant], plans[i].Spec.NodeName)
		}
	}
	for i := range plans {
		for _, p := range plans[i].Spec.Partitions {
			routed := make(map[string]string, len(p.Routes))
			for _, r := range p.Routes {
				routed[r.NodeName] = r.Address()
			}
			for _, node := range holders[p.Tenant] {
				if host, known := hosts[node]; known && routed[node] != peerAddress(host) {
					return true
				}
			}
			for node, got := range routed {
				if host, known := hosts[node]; known && got != peerAddress(host) {
					return true
				}
			}
		}
	}
	return false
}

// peerAddress is the address of the sidecar peer port on host.
func peerAddress(host string) string { return net.JoinHostPort(host, strconv.Itoa(PeerPort)) }
