package cachecluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

const timeout = 20 * time.Second

// controlledBy checks that obj's controller is the cluster.
func controlledBy(obj client.Object, c *v1.CacheCluster) error {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "CacheCluster" || ref.Name != c.Name || ref.UID != c.UID {
		return fmt.Errorf("%T %s is controlled by %+v, want CacheCluster %s", obj, obj.GetName(), ref, c.Name)
	}
	return nil
}

// planNodes returns the nodes of the cluster's CacheNodePlans, sorted.
func planNodes(c *v1.CacheCluster) ([]string, error) {
	var list v1.CacheNodePlanList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(c.Namespace)); err != nil {
		return nil, err
	}
	var nodes []string
	for _, p := range list.Items {
		if p.Spec.ClusterName != c.Name {
			continue
		}
		if err := controlledBy(&p, c); err != nil {
			return nil, err
		}
		want := v1.CacheNodePlanSpec{ClusterName: c.Name, NodeName: p.Spec.NodeName, Engine: v1.EngineRedis, CredentialsSecret: c.Name + "-tenant-credentials"}
		want.SetPartitions(nil)
		if p.Name != c.Name+"-"+p.Spec.NodeName || !equality.Semantic.DeepEqual(p.Spec, want) {
			return nil, fmt.Errorf("plan %s has spec %+v, want %+v", p.Name, p.Spec, want)
		}
		nodes = append(nodes, p.Spec.NodeName)
	}
	slices.Sort(nodes)
	return nodes, nil
}

func wantPlans(c *v1.CacheCluster, nodes ...string) func() error {
	return func() error {
		got, err := planNodes(c)
		if err != nil {
			return err
		}
		if !slices.Equal(got, nodes) {
			return fmt.Errorf("plans for nodes %v, want %v", got, nodes)
		}
		return nil
	}
}

// TestSidecarObjects checks everything a cluster gets: the DaemonSet's pod spec, the two
// Services, the ServiceAccount with exactly the sidecar's permissions, the credentials
// Secret, one plan per selected node as nodes come and go, and owner references.
func TestSidecarObjects(t *testing.T) {
	ns := env.Namespace(t, "objects")
	node(t, "objects-a", map[string]string{"pool": "objects"})
	node(t, "objects-b", map[string]string{"pool": "objects"})
	node(t, "objects-other", map[string]string{"pool": "elsewhere"})
	c := newCluster(ns, "shared", "objects")
	c.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cache", Effect: corev1.TaintEffectNoSchedule}}
	create(t, c)

	testenv.Eventually(t, timeout, func() error { return get(c, ns, "shared") })
	testenv.Eventually(t, timeout, wantPlans(c, "objects-a", "objects-b"))

	ds := &appsv1.DaemonSet{}
	testenv.Eventually(t, timeout, func() error { return get(ds, ns, "shared-sidecar") })
	if err := controlledBy(ds, c); err != nil {
		t.Error(err)
	}
	checkDaemonSet(t, ds, c)

	clientSvc, peers := &corev1.Service{}, &corev1.Service{}
	testenv.Eventually(t, timeout, func() error { return errors.Join(get(clientSvc, ns, "shared"), get(peers, ns, "shared-sidecars")) })
	if p := clientSvc.Spec.Ports; len(p) != 1 || p[0].Port != 6379 || p[0].TargetPort != intstr.FromString("client") || clientSvc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("client Service ports %+v type %s", p, clientSvc.Spec.Type)
	}
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses || len(peers.Spec.Ports) != 2 ||
		peers.Spec.Ports[0].Port != 7380 || peers.Spec.Ports[1].Name != "metrics" || peers.Spec.Ports[1].Port != 9380 {
		t.Errorf("peer Service spec %+v", peers.Spec)
	}
	for _, svc := range []*corev1.Service{clientSvc, peers} {
		if !equality.Semantic.DeepEqual(svc.Spec.Selector, ds.Spec.Selector.MatchLabels) {
			t.Errorf("Service %s selects %v, the DaemonSet's pods are %v", svc.Name, svc.Spec.Selector, ds.Spec.Selector.MatchLabels)
		}
		if err := controlledBy(svc, c); err != nil {
			t.Error(err)
		}
	}

	checkLeastPrivilege(t, c)

	secret := &corev1.Secret{}
	testenv.Eventually(t, timeout, func() error { return get(secret, ns, "shared-tenant-credentials") })
	if len(secret.Data["peer-token"]) < 32 {
		t.Errorf("peer token %q is too short", secret.Data["peer-token"])
	}
	if err := controlledBy(secret, c); err != nil {
		t.Error(err)
	}
	token := string(secret.Data["peer-token"])
	// The token is regenerated when someone removes it, and left alone otherwise.
	if err := env.Client.Patch(context.Background(), secret, client.RawPatch("application/merge-patch+json", []byte(`{"data":{"peer-token":null}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := get(secret, ns, "shared-tenant-credentials"); err != nil {
			return err
		}
		if len(secret.Data["peer-token"]) == 0 || string(secret.Data["peer-token"]) == token {
			return fmt.Errorf("peer token %q not regenerated", secret.Data["peer-token"])
		}
		return nil
	})

	// Nodes come and go: a tainted node needs the cluster's toleration, a node that loses its
	// label or is deleted loses its plan.
	node(t, "objects-tainted", map[string]string{"pool": "objects"}, corev1.Taint{Key: "dedicated", Value: "cache", Effect: corev1.TaintEffectNoSchedule})
	node(t, "objects-foreign", map[string]string{"pool": "objects"}, corev1.Taint{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoExecute})
	testenv.Eventually(t, timeout, wantPlans(c, "objects-a", "objects-b", "objects-tainted"))
	if err := env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "objects-b"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, wantPlans(c, "objects-a", "objects-tainted"))
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, ns, "shared"); err != nil {
			return err
		}
		if c.Status.NodeCount != 2 || len(c.Status.Nodes) != 2 || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("status nodeCount %d nodes %+v observedGeneration %d", c.Status.NodeCount, c.Status.Nodes, c.Status.ObservedGeneration)
		}
		if got := c.Status.Nodes[0].Capacity.Memory; got.Cmp(resource.MustParse("3865470566")) != 0 {
			return fmt.Errorf("node capacity memory %s, want 90%% of 4Gi", got.String())
		}
		return nil
	})
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, c *v1.CacheCluster) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	wantTolerations := append(v1.CoreTolerations(c.Spec.Tolerations), defaultToleration)
	if !equality.Semantic.DeepEqual(pod.NodeSelector, v1.LabelStrings(c.Spec.NodeSelector)) || !equality.Semantic.DeepEqual(pod.Tolerations, wantTolerations) {
		t.Errorf("pods select %v tolerate %v, want the cluster's %v and %v", pod.NodeSelector, pod.Tolerations, c.Spec.NodeSelector, wantTolerations)
	}
	if pod.ServiceAccountName != "shared-sidecar" || pod.SecurityContext == nil || !*pod.SecurityContext.RunAsNonRoot ||
		*pod.SecurityContext.RunAsUser == 0 || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod identity %s security %+v", pod.ServiceAccountName, pod.SecurityContext)
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Image != images.Sidecar ||
		!slices.Equal(pod.InitContainers[0].Command, []string{"cp", "/cache-sidecar", "/opt/cacheqos/bin/cache-sidecar"}) {
		t.Fatalf("init containers %+v, want one copying the sidecar from the sidecar image", pod.InitContainers)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers %+v", pod.Containers)
	}
	sc := pod.Containers[0]
	if sc.Image != images.Redis || !slices.Equal(sc.Command, []string{"/opt/cacheqos/bin/cache-sidecar"}) {
		t.Errorf("the sidecar runs %v in image %s, want the copied binary in the redis engine image %s", sc.Command, sc.Image, images.Redis)
	}
	for _, ctr := range append([]corev1.Container{sc}, pod.InitContainers...) {
		s := ctr.SecurityContext
		if s == nil || !*s.ReadOnlyRootFilesystem || *s.AllowPrivilegeEscalation || !*s.RunAsNonRoot || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s security context %+v", ctr.Name, s)
		}
	}
	args := strings.Join(sc.Args, " ")
	for _, want := range []string{"--cluster-name=shared", "--engine=redis", "--client-listen=:6379", "--peer-listen=:7380", "--metrics-listen=:9380", "--state-root=/run/cacheqos", "--save-engines-on-exit", "--save-timeout=2m8s"} {
		if !strings.Contains(args, want) {
			t.Errorf("sidecar args %q lack %q", args, want)
		}
	}
	// 4Gi of cache memory saved at 32 MiB/s: 128s, after 20s of shutdown.
	if grace := pod.TerminationGracePeriodSeconds; grace == nil || *grace != 148 {
		t.Errorf("termination grace period %v s, want 148 (the save timeout 128 s and 20 s before it)", grace)
	}
	if len(sc.Env) == 0 || sc.Env[0].Name != "NODE_NAME" || sc.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("sidecar env %+v", sc.Env)
	}
	// The proxy's threads: its CPU request, rounded up to whole cores.
	procs := slices.IndexFunc(sc.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMAXPROCS" })
	if procs < 0 || sc.Env[procs].ValueFrom == nil || sc.Env[procs].ValueFrom.ResourceFieldRef == nil ||
		sc.Env[procs].ValueFrom.ResourceFieldRef.Resource != "requests.cpu" || sc.Env[procs].ValueFrom.ResourceFieldRef.ContainerName != "sidecar" ||
		sc.Env[procs].ValueFrom.ResourceFieldRef.Divisor.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("sidecar env %+v, want GOMAXPROCS from the CPU request in whole cores", sc.Env)
	}
	// Memory: the node's cache capacity (4Gi) plus the sidecar's own 256Mi, its 64Mi of replies
	// in flight and 192Ki for each of its 10000 connections (1875Mi), requested and limited
	// alike; CPU from the node's request rate (100000 ops/s at 50000 per core); no CPU limit.
	wantMemory := resource.MustParse("6291Mi")
	if got := sc.Resources.Requests[corev1.ResourceMemory]; got.Cmp(wantMemory) != 0 {
		t.Errorf("memory request %s, want %s", got.String(), wantMemory.String())
	}
	if got := sc.Resources.Limits[corev1.ResourceMemory]; got.Cmp(wantMemory) != 0 {
		t.Errorf("memory limit %s, want %s", got.String(), wantMemory.String())
	}
	if got := sc.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("cpu request %s, want 2", got.String())
	}
	if _, limited := sc.Resources.Limits[corev1.ResourceCPU]; limited {
		t.Error("the sidecar has a CPU limit")
	}
	ready := sc.ReadinessProbe
	if ready == nil || ready.HTTPGet == nil || ready.HTTPGet.Path != "/readyz" || ready.HTTPGet.Port != intstr.FromString("metrics") {
		t.Errorf("readiness probe %+v, want /readyz on the metrics port", ready)
	}
	// A stopping sidecar keeps serving, not ready, for its 5 s --shutdown-delay: the probe
	// must see that, and the endpoint go, well within it.
	if ready != nil && ready.PeriodSeconds*ready.FailureThreshold > 2 {
		t.Errorf("readiness probe every %d s, not ready after %d failures: a stopping sidecar leaves its Service after more than 2 s", ready.PeriodSeconds, ready.FailureThreshold)
	}
	if live := sc.LivenessProbe; live == nil || live.HTTPGet == nil || live.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v", live)
	}
}

// checkLeastPrivilege: the sidecar may read plans and write their status in its namespace,
// and read the one credentials Secret — nothing else.
func checkLeastPrivilege(t *testing.T, c *v1.CacheCluster) {
	t.Helper()
	sa, role, binding := &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}
	testenv.Eventually(t, timeout, func() error {
		return errors.Join(get(sa, c.Namespace, "shared-sidecar"), get(role, c.Namespace, "shared-sidecar"), get(binding, c.Namespace, "shared-sidecar"))
	})
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"cacheqos.io"}, Resources: []string{"cachenodeplans"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"cacheqos.io"}, Resources: []string{"cachenodeplans/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"shared-tenant-credentials"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("sidecar Role rules\n%+v\nwant exactly\n%+v", role.Rules, want)
	}
	wantBinding := rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "shared-sidecar"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "shared-sidecar", Namespace: c.Namespace}},
	}
	if !equality.Semantic.DeepEqual(binding.RoleRef, wantBinding.RoleRef) || !equality.Semantic.DeepEqual(binding.Subjects, wantBinding.Subjects) {
		t.Errorf("RoleBinding %+v %+v", binding.RoleRef, binding.Subjects)
	}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := controlledBy(obj, c); err != nil {
			t.Error(err)
		}
	}
}

// setDaemonSetStatus plays the DaemonSet controller, which envtest does not run.
func setDaemonSetStatus(t *testing.T, ns, name string, desired, ready int32) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		ds := &appsv1.DaemonSet{}
		if err := get(ds, ns, name); err != nil {
			return err
		}
		ds.Status = appsv1.DaemonSetStatus{
			ObservedGeneration: ds.Generation, DesiredNumberScheduled: desired, CurrentNumberScheduled: desired,
			UpdatedNumberScheduled: desired, NumberReady: ready, NumberAvailable: ready,
		}
		return env.Client.Status().Update(context.Background(), ds)
	})
}

// TestReadyFollowsTheSidecars: Ready is False until the DaemonSet controller reports every
// sidecar ready, and turns False again when one stops serving.
func TestReadyFollowsTheSidecars(t *testing.T) {
	ns := env.Namespace(t, "ready")
	node(t, "ready-a", map[string]string{"pool": "ready"})
	node(t, "ready-b", map[string]string{"pool": "ready"})
	c := newCluster(ns, "cache", "ready")
	create(t, c)
	readyIs := func(status metav1.ConditionStatus, reason, message string) func() error {
		return func() error {
			if err := get(c, ns, "cache"); err != nil {
				return err
			}
			cond, err := conditionIs(c.Status.Conditions, v1.ConditionReady, status, reason)
			if err == nil && !strings.Contains(cond.Message, message) {
				err = fmt.Errorf("Ready message %q lacks %q", cond.Message, message)
			}
			return err
		}
	}
	testenv.Eventually(t, timeout, readyIs(metav1.ConditionFalse, v1.ReasonNodesNotReady, "not yet observed"))
	setDaemonSetStatus(t, ns, "cache-sidecar", 2, 1)
	testenv.Eventually(t, timeout, readyIs(metav1.ConditionFalse, v1.ReasonNodesNotReady, "1 of 2 sidecars ready"))
	setDaemonSetStatus(t, ns, "cache-sidecar", 2, 2)
	testenv.Eventually(t, timeout, readyIs(metav1.ConditionTrue, v1.ReasonAllNodesReady, "2 of 2 sidecars ready"))
	testenv.Eventually(t, timeout, func() error {
		_, err := conditionIs(c.Status.Conditions, v1.ConditionPlanApplied, metav1.ConditionTrue, v1.ReasonPlanApplied)
		return err
	})
	setDaemonSetStatus(t, ns, "cache-sidecar", 2, 1)
	testenv.Eventually(t, timeout, readyIs(metav1.ConditionFalse, v1.ReasonNodesNotReady, "1 of 2 sidecars ready"))

	// A plan the sidecar has not applied shows in PlanApplied and Progressing.
	plan := &v1.CacheNodePlan{}
	plan.Namespace, plan.Name = ns, "cache-ready-a"
	if err := env.Client.Patch(context.Background(), plan, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"planGeneration":3}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, ns, "cache"); err != nil {
			return err
		}
		cond, err := conditionIs(c.Status.Conditions, v1.ConditionPlanApplied, metav1.ConditionFalse, v1.ReasonPlanPending)
		if err == nil && !strings.Contains(cond.Message, "ready-a") {
			err = fmt.Errorf("PlanApplied message %q does not name the node", cond.Message)
		}
		if err == nil {
			_, err = conditionIs(c.Status.Conditions, v1.ConditionProgressing, metav1.ConditionTrue, v1.ReasonPlanPending)
		}
		return err
	})
}

// TestNoMatchingNodes: a cluster whose selector matches nothing says so.
func TestNoMatchingNodes(t *testing.T) {
	ns := env.Namespace(t, "nomatch")
	c := newCluster(ns, "lonely", "nowhere")
	create(t, c)
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, ns, "lonely"); err != nil {
			return err
		}
		_, err := conditionIs(c.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonNoMatchingNodes)
		return err
	})
}

// settled waits until c is Ready and has a plan.
func settled(t *testing.T, c *v1.CacheCluster) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, c.Namespace, c.Name); err != nil {
			return err
		}
		_, err := conditionIs(c.Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonAllNodesReady)
		if err == nil && c.Status.LastPlan == nil {
			err = errors.New("no plan yet")
		}
		return err
	})
}

// TestReconcilesRewriteNothing: reconciles of a settled cluster (here caused by label changes
// of a node it does not select, which every cluster hears) send no write for its
// ServiceAccount, Role, RoleBinding, Services, DaemonSet, credentials Secret and status, and
// no discovery request for the prometheus-operator kinds, which are not installed yet (the
// answer is kept until their CRDs change). Runs before TestMonitoring installs them.
func TestReconcilesRewriteNothing(t *testing.T) {
	ns := env.Namespace(t, "quiet")
	node(t, "quiet-a", map[string]string{"pool": "quiet"})
	other := node(t, "quiet-other", map[string]string{"pool": "elsewhere"})
	c := newCluster(ns, "calm", "quiet")
	c.Spec.Allocation.Interval = &metav1.Duration{Duration: time.Hour}
	c.Spec.Monitoring.ServiceMonitor.Enabled = true
	create(t, c)
	setDaemonSetStatus(t, ns, "calm-sidecar", 1, 1)
	settled(t, c)
	time.Sleep(2 * time.Second)
	mark, reconciles := env.Requests.Mark(), testenv.Reconciles(t, "cachecluster")
	for i := range 5 {
		other.Labels["round"] = fmt.Sprint(i)
		if err := env.Client.Update(context.Background(), other); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if n := testenv.Reconciles(t, "cachecluster") - reconciles; n < 5 {
		t.Fatalf("%v cluster reconciles after 5 node label changes", n)
	}
	// The certificates renew on their own clock, which the shared tlsPolicy makes 4 s here:
	// one renewal each may fall into this window, a rewrite per reconcile (5) may not.
	renewals := map[string]int{}
	for _, name := range []string{objects.TLSCASecretName(c.Name), objects.PeerTLSSecretName(c.Name), objects.MetricsTLSSecretName(c.Name)} {
		renewals["/namespaces/"+ns+"/secrets/"+name] = 0
	}
	writes := env.Requests.Since(mark, func(r testenv.Request) bool {
		if !r.Write() || !strings.Contains(r.Path, "/namespaces/"+ns+"/") {
			return false
		}
		for suffix := range renewals {
			if strings.HasSuffix(r.Path, suffix) {
				renewals[suffix]++
				return false
			}
		}
		return true
	})
	if len(writes) != 0 {
		t.Errorf("reconciles of a settled cluster sent %d writes: %v", len(writes), writes)
	}
	for secret, n := range renewals {
		if n > 2 {
			t.Errorf("%s written %d times in %s: more than its renewals", secret, n, time.Second*5/2)
		}
	}
	discovery := env.Requests.Since(mark, func(r testenv.Request) bool {
		return strings.HasPrefix(r.Path, "/apis/"+monitoringv1.SchemeGroupVersion.Group)
	})
	if len(discovery) != 0 {
		t.Errorf("reconciles asked discovery about the monitoring kinds %d times: %v", len(discovery), discovery)
	}
}

// TestMonitoring runs without the prometheus-operator CRDs first (the cluster says they are
// missing and everything else works), then installs them: the ServiceMonitor and the
// PrometheusRule appear without any change to the cluster, and a disabled one goes away.
func TestMonitoring(t *testing.T) {
	ns := env.Namespace(t, "monitoring")
	node(t, "monitoring-a", map[string]string{"pool": "monitoring"})
	c := newCluster(ns, "watched", "monitoring")
	c.Spec.Monitoring = v1.MonitoringSettings{
		ServiceMonitor: v1.ServiceMonitorSettings{Enabled: true, Labels: map[string]v1.LabelValue{"release": "prom"}},
		PrometheusRule: v1.PrometheusRuleSettings{Enabled: true, Labels: map[string]v1.LabelValue{"release": "prom"}},
	}
	create(t, c)
	monitoringIs := func(status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			if err := get(c, ns, "watched"); err != nil {
				return err
			}
			_, err := conditionIs(c.Status.Conditions, conditions.MonitoringReady, status, reason)
			return err
		}
	}
	testenv.Eventually(t, timeout, monitoringIs(metav1.ConditionFalse, conditions.ReasonPrometheusOperatorMissing))
	cond, _ := conditionIs(c.Status.Conditions, conditions.MonitoringReady, metav1.ConditionFalse, conditions.ReasonPrometheusOperatorMissing)
	if !strings.Contains(cond.Message, "ServiceMonitor and PrometheusRule") || !strings.Contains(cond.Message, "install the prometheus-operator CRDs") {
		t.Errorf("MonitoringReady message %q", cond.Message)
	}
	if _, err := conditionIs(c.Status.Conditions, v1.ConditionProgressing, metav1.ConditionTrue, conditions.ReasonReconcileError); err == nil {
		t.Errorf("missing CRDs made the reconcile fail: %+v", c.Status.Conditions)
	}
	testenv.Eventually(t, timeout, wantPlans(c, "monitoring-a"))

	if err := env.InstallPrometheusOperatorCRDs(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, monitoringIs(metav1.ConditionTrue, conditions.ReasonMonitoringCreated))
	checkServiceMonitor(t, c)
	checkPrometheusRule(t, c)

	if err := env.Client.Patch(context.Background(), c, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"monitoring":{"serviceMonitor":{"enabled":false}}}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		err := get(&monitoringv1.ServiceMonitor{}, ns, "watched-cacheqos")
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the disabled ServiceMonitor is still there (get: %w)", err)
		}
		return nil
	})
}

// TestDeletionCleansUp: deleting a cluster removes its sidecars, plans and every other object
// it created, then the cluster itself.
func TestDeletionCleansUp(t *testing.T) {
	ns := env.Namespace(t, "deletion")
	node(t, "deletion-a", map[string]string{"pool": "deletion"})
	c := newCluster(ns, "doomed", "deletion")
	create(t, c)
	objs := []struct {
		name string
		obj  client.Object
	}{
		{"doomed-sidecar", &appsv1.DaemonSet{}},
		{"doomed", &corev1.Service{}},
		{"doomed-sidecars", &corev1.Service{}},
		{"doomed-sidecar", &corev1.ServiceAccount{}},
		{"doomed-sidecar", &rbacv1.Role{}},
		{"doomed-sidecar", &rbacv1.RoleBinding{}},
		{"doomed-tenant-credentials", &corev1.Secret{}},
		{"doomed-deletion-a", &v1.CacheNodePlan{}},
	}
	testenv.Eventually(t, timeout, func() error {
		var errs []error
		for _, o := range objs {
			errs = append(errs, get(o.obj, ns, o.name))
		}
		return errors.Join(errs...)
	})
	if err := get(c, ns, "doomed"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Finalizers, "cacheqos.io/cluster-cleanup") {
		t.Fatalf("finalizers %v", c.Finalizers)
	}
	if err := env.Client.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		gone := func(obj client.Object, name string) error {
			if err := get(obj, ns, name); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still exists (get: %w)", obj, name, err)
			}
			return nil
		}
		errs := []error{gone(&v1.CacheCluster{}, "doomed")}
		for _, o := range objs {
			errs = append(errs, gone(o.obj, o.name))
		}
		return errors.Join(errs...)
	})
}

func checkServiceMonitor(t *testing.T, c *v1.CacheCluster) {
	t.Helper()
	sm := &monitoringv1.ServiceMonitor{}
	testenv.Eventually(t, timeout, func() error { return get(sm, c.Namespace, c.Name+"-cacheqos") })
	if err := controlledBy(sm, c); err != nil {
		t.Error(err)
	}
	if sm.Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack the spec's release=prom", sm.Labels)
	}
	peers := &corev1.Service{}
	if err := get(peers, c.Namespace, c.Name+"-sidecars"); err != nil {
		t.Fatal(err)
	}
	if !subset(sm.Spec.Selector.MatchLabels, peers.Labels) {
		t.Errorf("ServiceMonitor selects %v, the peer Service is labelled %v", sm.Spec.Selector.MatchLabels, peers.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Interval != "30s" {
		t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
	}
	// Secure sidecar metrics (the default): https, verified with the metrics Secret's CA under
	// the name its certificate carries, with Prometheus' own token.
	if ep := sm.Spec.Endpoints[0]; ep.Scheme != "https" || ep.BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || //nolint:staticcheck // what the operator renders
		ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.CA.Secret.Name != c.Name+"-metrics-tls" || ep.TLSConfig.CA.Secret.Key != "ca.crt" ||
		ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != c.Name+"-sidecars."+c.Namespace+".svc" {
		t.Errorf("ServiceMonitor endpoint scheme %q, token file %q, TLS %+v", ep.Scheme, ep.BearerTokenFile, ep.TLSConfig) //nolint:staticcheck // as above
	}
	if _, _, err := leafCert(c, c.Name+"-metrics-tls", []string{*sm.Spec.Endpoints[0].TLSConfig.ServerName}); err != nil {
		t.Errorf("the ServiceMonitor's CA and server name do not verify the sidecars' certificate: %v", err)
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{c.Namespace}) {
		t.Errorf("ServiceMonitor namespaces %v", sm.Spec.NamespaceSelector.MatchNames)
	}
}

func subset(small, big map[string]string) bool {
	for k, v := range small {
		if big[k] != v {
			return false
		}
	}
	return true
}

func checkPrometheusRule(t *testing.T, c *v1.CacheCluster) {
	t.Helper()
	rule := &monitoringv1.PrometheusRule{}
	testenv.Eventually(t, timeout, func() error { return get(rule, c.Namespace, c.Name+"-cacheqos") })
	if err := controlledBy(rule, c); err != nil {
		t.Error(err)
	}
	if len(rule.Spec.Groups) != 1 {
		t.Fatalf("rule groups %+v", rule.Spec.Groups)
	}
	var alerts []string
	for _, r := range rule.Spec.Groups[0].Rules {
		alerts = append(alerts, r.Alert)
		if r.Expr.StrVal == "" || r.For == nil || r.Labels["severity"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s is incomplete: %+v", r.Alert, r)
		}
	}
	want := []string{"CacheQoSTenantSLOMissed", "CacheQoSTenantThrottled", "CacheQoSSolverDegraded", "CacheQoSSidecarDown"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
	if down := rule.Spec.Groups[0].Rules[3].Expr.StrVal; !strings.Contains(down, `job="`+c.Name+`-sidecars"`) || !strings.Contains(down, `namespace="`+c.Namespace+`"`) {
		t.Errorf("sidecar-down alert %q does not select the cluster's sidecars", down)
	}
}

// TestSteadyStateWritesNothing: once a cluster has settled, reconciles (which its own writes
// and the owned objects' events cause) change nothing, so the operator does not spin.
func TestSteadyStateWritesNothing(t *testing.T) {
	ns := env.Namespace(t, "steady")
	node(t, "steady-a", map[string]string{"pool": "steady"})
	c := newCluster(ns, "calm", "steady")
	c.Spec.Allocation.Interval = &metav1.Duration{Duration: time.Hour}
	create(t, c)
	setDaemonSetStatus(t, ns, "calm-sidecar", 1, 1)
	settled(t, c)
	versions := func() []string {
		var out []string
		for _, o := range []struct {
			name string
			obj  client.Object
		}{
			{"calm", &v1.CacheCluster{}}, {"calm-sidecar", &appsv1.DaemonSet{}}, {"calm", &corev1.Service{}}, {"calm-steady-a", &v1.CacheNodePlan{}},
		} {
			if err := get(o.obj, ns, o.name); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%T %s", o.obj, o.obj.GetResourceVersion()))
		}
		return out
	}
	time.Sleep(3 * time.Second)
	before := versions()
	time.Sleep(3 * time.Second)
	if after := versions(); !slices.Equal(before, after) {
		t.Fatalf("objects keep changing in steady state: resource versions %v then %v", before, after)
	}
}
