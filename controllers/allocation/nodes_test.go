package allocation_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// holders lists, sorted, the nodes whose plan holds a partition of tenant.
func holders(plans plansSnapshot, tenant string) []string {
	var out []string
	for node, spec := range plans {
		if slices.ContainsFunc(spec.Partitions, func(p v1.PartitionPlan) bool { return p.Tenant == tenant }) {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// routedTo lists, sorted, the nodes some plan routes to (partitions' and remote tenants'
// routes), other than the plan's own node.
func routedTo(plans plansSnapshot) []string {
	var out []string
	for node, spec := range plans {
		var routes []v1.TenantRoute
		for _, p := range spec.Partitions {
			routes = append(routes, p.Routes...)
		}
		for _, r := range spec.RemoteTenants {
			routes = append(routes, r.Routes...)
		}
		for _, r := range routes {
			if r.NodeName != node {
				out = append(out, r.NodeName)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestNodesOutOfService: a tenant spread over three nodes; cordoning one (what `kubectl
// cordon` and `kubectl drain` do) moves its partition to the other two, no plan routes to the
// cordoned node any more, its own plan lists the tenant as remote (its sidecar keeps
// forwarding the clients it gets), and the cluster is Degraded with NodesOutOfService naming
// it. A node whose Ready condition turns Unknown (the node controller's verdict on a kubelet
// that stopped reporting) is left out the same way. Uncordoning and Ready again put both
// nodes back in service (Degraded no longer names them).
func TestNodesOutOfService(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "oos-cache"), env.Namespace(t, "oos-team")
	nodes := []string{"oos-a", "oos-b", "oos-c"}
	for i, name := range nodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "oos"}}})
		sidecarPod(t, cacheNS, "shared", name, fmt.Sprintf("10.5.0.%d", i+1))
	}
	create(t, sharedCluster(cacheNS, "oos", "", 100000, v1.PolicyOptimal))
	const tenant = "oos-team/web"
	create(t, strictTenant(teamNS, "web", cacheNS, "96Mi", v1.Placement{MinNodes: 2}))
	// settled waits until the tenant's partitions sit on exactly want, nothing routes to
	// away, and away's plan (when given) lists the tenant as remote.
	settled := func(want []string, away string) {
		t.Helper()
		testenv.Eventually(t, timeout, func() error {
			plans, err := plansOf(cacheNS, nodes...)
			if err != nil {
				return err
			}
			if got := holders(plans, tenant); want != nil && !slices.Equal(got, want) || want == nil && slices.Contains(got, away) || len(got) < 2 {
				return fmt.Errorf("partitions of %s on %v, want on %v (not on %q, at least 2)", tenant, got, want, away)
			}
			if away == "" {
				return nil
			}
			if slices.Contains(routedTo(plans), away) {
				return fmt.Errorf("plans still route to %s: %v", away, routedTo(plans))
			}
			if !slices.ContainsFunc(plans[away].RemoteTenants, func(r v1.RemoteTenant) bool { return r.Tenant == tenant }) {
				return fmt.Errorf("the plan of %s does not list %s as remote: %+v", away, tenant, plans[away].RemoteTenants)
			}
			return nil
		})
	}
	degraded := func(want string) {
		t.Helper()
		testenv.Eventually(t, timeout, func() error {
			c := &v1.CacheCluster{}
			if err := get(c, cacheNS, "shared"); err != nil {
				return err
			}
			d := condition(c.Status.Conditions, v1.ConditionDegraded)
			if mentions := d.Reason == conditions.ReasonNodesOutOfService || strings.Contains(d.Message, "out of service"); want == "" && mentions {
				return fmt.Errorf("Degraded %s: %s, want no node out of service", d.Reason, d.Message)
			}
			if want != "" && (d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, want)) {
				return fmt.Errorf("Degraded %s %s: %s, want it to say %q", d.Status, d.Reason, d.Message, want)
			}
			return nil
		})
	}
	patchNode := func(name string, mutate func(*corev1.Node), status bool) {
		t.Helper()
		n := &corev1.Node{}
		err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, n)
		if err != nil {
			t.Fatal(err)
		}
		mutate(n)
		if status {
			err = env.Client.Status().Update(ctx(), n)
		} else {
			err = env.Client.Update(ctx(), n)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	settled(nil, "")
	plans, err := plansOf(cacheNS, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	cordoned := holders(plans, tenant)[0]
	var rest []string
	for _, n := range nodes {
		if n != cordoned {
			rest = append(rest, n)
		}
	}

	patchNode(cordoned, func(n *corev1.Node) { n.Spec.Unschedulable = true }, false)
	settled(rest, cordoned)
	degraded(cordoned + ": cordoned")
	patchNode(cordoned, func(n *corev1.Node) { n.Spec.Unschedulable = false }, false)
	degraded("")

	// Node loss: the kubelet stopped reporting. A node holding the tenant now loses its Ready
	// condition; the allocation moves off it.
	if plans, err = plansOf(cacheNS, nodes...); err != nil {
		t.Fatal(err)
	}
	lost := holders(plans, tenant)[0]
	patchNode(lost, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	}, true)
	settled(nil, lost)
	degraded(lost + ": Ready is Unknown (NodeStatusUnknown)")
	patchNode(lost, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	}, true)
	degraded("")
}

// TestRemoteTenantWithoutAddress: while the only node holding a tenant's partition has a
// sidecar without an address, the other nodes' plans still list the tenant as remote (so a
// client landing there logs in and gets a retryable error, not WRONGPASS), routed to that
// node by its name; once the address is known the routes carry it.
func TestRemoteTenantWithoutAddress(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "noaddr-cache"), env.Namespace(t, "noaddr-team")
	nodes := []string{"noaddr-a", "noaddr-b"}
	for _, name := range nodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "noaddr"}}})
	}
	// No sidecar has an address yet (its pod is not created): the case under test.
	create(t, sharedCluster(cacheNS, "noaddr", "", 100000, v1.PolicyOptimal))
	const tenant = "noaddr-team/web"
	create(t, strictTenant(teamNS, "web", cacheNS, "64Mi", v1.Placement{MaxNodes: 1}))
	var holder, other string
	testenv.Eventually(t, timeout, func() error {
		plans, err := plansOf(cacheNS, nodes...)
		if err != nil {
			return err
		}
		h := holders(plans, tenant)
		if len(h) != 1 {
			return fmt.Errorf("partitions of %s on %v, want on one node", tenant, h)
		}
		holder = h[0]
		other = nodes[0]
		if other == holder {
			other = nodes[1]
		}
		return nil
	})
	// remoteRoute is the route other's plan lists for the tenant (or an error).
	remoteRoute := func() (v1.TenantRoute, error) {
		plans, err := plansOf(cacheNS, nodes...)
		if err != nil {
			return v1.TenantRoute{}, err
		}
		i := slices.IndexFunc(plans[other].RemoteTenants, func(r v1.RemoteTenant) bool { return r.Tenant == tenant })
		if i < 0 {
			return v1.TenantRoute{}, fmt.Errorf("the plan of %s does not list %s: %+v", other, tenant, plans[other].RemoteTenants)
		}
		routes := plans[other].RemoteTenants[i].Routes
		if len(routes) != 1 || routes[0].NodeName != holder || routes[0].Weight <= 0 {
			return v1.TenantRoute{}, fmt.Errorf("routes of %s on %s: %+v, want one to %s with a weight", tenant, other, routes, holder)
		}
		return routes[0], nil
	}
	testenv.Eventually(t, timeout, func() error {
		r, err := remoteRoute()
		if err == nil && (r.Host != holder || r.Port != 7380) {
			err = fmt.Errorf("route to %s is %s, want the node's name and the peer port while its sidecar has no address", holder, r.Address())
		}
		return err
	})
	sidecarPod(t, cacheNS, "shared", holder, "10.6.0.9")
	testenv.Eventually(t, timeout, func() error {
		r, err := remoteRoute()
		if err == nil && r.Address() != "10.6.0.9:7380" {
			err = fmt.Errorf("route to %s is %s, want the sidecar's address 10.6.0.9:7380", holder, r.Address())
		}
		return err
	})
}
