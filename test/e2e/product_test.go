package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// The product as the suite installs it: one Helm release in its own namespace, and the
// monitoring stack of hack/monitoring next to it.
const (
	productNamespace = "cacheqos-system"
	releaseName      = "cacheqos"

	monitoringNamespace = "cacheqos-monitoring"
	prometheusService   = "prometheus"
	prometheusPort      = 9090

	// allocationInterval is every test cluster's allocation interval: short, so that the
	// suite sees several plans within the CI budget.
	allocationInterval = 10 * time.Second
	// scrapeInterval is how often Prometheus scrapes the test clusters' sidecars.
	scrapeInterval = 5 * time.Second

	tenantNamespaceLabel = "cacheqos.io/tenant"
)

// tool runs one of the binaries `hack/bootstrap.sh` installed (bin/helm, bin/kube/kubectl)
// against the suite's cluster and returns its standard output; on failure the error carries
// both outputs (warnings on stderr are not part of the result).
func tool(ctx context.Context, name string, args ...string) (string, error) {
	path := filepath.Join(cluster.repo, "bin", name)
	if name == "kubectl" {
		path = filepath.Join(cluster.repo, "bin", "kube", "kubectl")
	}
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", cluster.kubeconfig}, args...)...)
	cmd.Dir = cluster.repo
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// installProduct installs the monitoring stack, then the chart as `make demo` does: locally
// built images, its ServiceMonitor and PrometheusRule, the in-cluster Prometheus as the
// allocator's source.
func installProduct() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	install := script("hack/monitoring/install.sh", "--kubeconfig", cluster.kubeconfig)
	install.Stdout, install.Stderr = os.Stderr, os.Stderr
	if err := install.Run(); err != nil {
		return fmt.Errorf("hack/monitoring/install.sh: %w", err)
	}
	prometheus, err := prometheusURL(ctx)
	if err != nil {
		return err
	}
	cluster.prometheusURL = prometheus
	args := []string{"upgrade", "--install", releaseName, "charts/cacheqos", "--namespace", productNamespace,
		"--create-namespace", "--wait", "--timeout", "3m", "--values", "hack/demo/values.yaml",
		"--set", "operator.prometheusURL=" + prometheus}
	if id := cluster.imageIDs["operator"]; id != "" {
		// The tag stays "local" from build to build: the image's ID in the pod template makes
		// an upgrade on a reused cluster roll the operator onto the image just built.
		args = append(args, "--set-string", "operator.podAnnotations.cacheqos\\.io/image-id="+id)
	}
	out, err := tool(ctx, "helm", args...)
	if err != nil {
		return err
	}
	logf("helm: %s", firstLine(out))
	return nil
}

// prometheusURL is the in-cluster Prometheus' Service by its cluster IP: the local cluster has
// no DNS, and a cluster IP works from pods and from this host alike.
func prometheusURL(ctx context.Context) (string, error) {
	svc, err := cluster.client.CoreV1().Services(monitoringNamespace).Get(ctx, prometheusService, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the Prometheus Service: %w", err)
	}
	return "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(prometheusPort)), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// printProductLogs shows what a human would look at first when the product misbehaves: every
// cacheqos object, and the last log lines of the operator, the sidecars and the monitoring.
func printProductLogs() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := tool(ctx, "kubectl", "get", "cacheqos,pods", "-A", "-o", "wide"); err == nil {
		logf("cacheqos objects and pods:\n%s", out)
	}
	pods, err := cluster.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		logf("listing pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		labels := p.Labels
		if labels["app.kubernetes.io/component"] != "operator" && labels["app.kubernetes.io/name"] != "cacheqos-sidecar" &&
			p.Namespace != monitoringNamespace && labels["app"] != "loadgen" {
			continue
		}
		out, err := tool(ctx, "kubectl", "logs", "-n", p.Namespace, p.Name, "--all-containers", "--tail=30")
		if err != nil {
			out = err.Error()
		}
		logf("logs of %s/%s:\n%s", p.Namespace, p.Name, out)
	}
}

// ---------------------------------------------------------------------------------------------
// cacheqos objects

// testCluster returns a redis CacheCluster for one test in namespace ns: small, fast to
// allocate, scraped by the in-cluster Prometheus, local images. mutate adjusts it.
func testCluster(ns, name string, mutate func(*v1.CacheCluster)) *v1.CacheCluster {
	c := &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.CacheClusterSpec{
			Engine:   v1.EngineRedis,
			AllNodes: true,
			Images:   v1.CacheClusterImages{PullPolicy: corev1.PullNever},
			Capacity: v1.NodeCapacity{
				Memory:          resource.MustParse("128Mi"),
				Bandwidth:       resource.MustParse("50M"),
				OpsPerSecond:    20000,
				HeadroomPercent: ptr.To[int32](10),
			},
			Allocation: v1.AllocationSettings{
				Interval:        &metav1.Duration{Duration: allocationInterval},
				Policy:          v1.PolicyOptimal,
				SolverTimeLimit: &metav1.Duration{Duration: 2 * time.Second},
			},
			Monitoring: v1.MonitoringSettings{
				ServiceMonitor: v1.ServiceMonitorSettings{Enabled: true, Interval: &metav1.Duration{Duration: scrapeInterval}},
				PrometheusRule: v1.PrometheusRuleSettings{Enabled: true},
			},
		},
	}
	if mutate != nil {
		mutate(c)
	}
	return c
}

// create creates obj and, at the end of the test, deletes it and waits until it is gone, so
// the finalizers' work (freeing partitions, removing sidecars) is part of every test.
func create(t *testing.T, obj ctrlclient.Object) {
	t.Helper()
	if err := cluster.kube.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	t.Cleanup(func() { deleteAndWait(t, obj) })
}

// deleteAndWait deletes obj and waits until the API server says that very object is gone. A
// 404 alone is not enough: the API server also answers 404 while it does not serve a resource
// for a moment, and an object "gone" that way was still there at the end of a CI run (with its
// plans, so its finalizer had never run). A Delete answered that way is sent again.
func deleteAndWait(t *testing.T, obj ctrlclient.Object) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := ctrlclient.ObjectKeyFromObject(obj)
	current := obj.DeepCopyObject().(ctrlclient.Object)
	for {
		err := cluster.kube.Get(ctx, key, current)
		switch {
		case objectNotFound(err, key.Name):
			return
		case err == nil && obj.GetUID() != "" && current.GetUID() != obj.GetUID():
			t.Errorf("%T %s was created again (uid %s, created %s) after the test's own (uid %s)", obj, key, current.GetUID(), current.GetCreationTimestamp(), obj.GetUID())
			return
		case err == nil && current.GetDeletionTimestamp() == nil:
			if err := cluster.kube.Delete(ctx, current); err != nil && !objectNotFound(err, key.Name) {
				t.Logf("deleting %T %s: %v (trying again)", obj, key, err)
			}
		case err != nil:
			t.Logf("reading %T %s while deleting it: %v (trying again)", obj, key, err)
		}
		if ctx.Err() != nil {
			t.Errorf("%T %s is still there after 2m (finalizers %v)", obj, key, current.GetFinalizers())
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// objectNotFound reports whether err is the API server saying the object named name does not
// exist, not that it does not serve the resource: that 404 has no name in its details, or is
// not a Status at all (client-go then names the request's object and adds an
// UnexpectedServerResponse cause).
func objectNotFound(err error, name string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	if details == nil || details.Name != name {
		return false
	}
	for _, cause := range details.Causes {
		if cause.Type == metav1.CauseTypeUnexpectedServerResponse {
			return false
		}
	}
	return true
}

// tenantNamespace creates a namespace labelled as a tenant's (the chart's NetworkPolicy lets
// only those reach the caches).
func tenantNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := newNamespace(t, prefix)
	patch := []byte(`{"metadata":{"labels":{"` + tenantNamespaceLabel + `":"true"}}}`)
	if _, err := cluster.client.CoreV1().Namespaces().Patch(t.Context(), ns, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// tenant returns a strict TenantSLO of cluster c with a hit-ratio target and a memory range.
func tenant(ns, name string, c *v1.CacheCluster, hitRatio string, minMemory, maxMemory string) *v1.TenantSLO {
	s := &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Name: c.Name, Namespace: c.Namespace},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: hitRatio}},
		},
	}
	if minMemory != "" {
		s.Spec.Memory.Min = ptr.To(resource.MustParse(minMemory))
	}
	if maxMemory != "" {
		s.Spec.Memory.Max = ptr.To(resource.MustParse(maxMemory))
	}
	return s
}

// conditioned is an object with status conditions.
type conditioned interface {
	object() ctrlclient.Object
	conditions() []metav1.Condition
}

type clusterObject struct{ *v1.CacheCluster }

func (c clusterObject) object() ctrlclient.Object      { return c.CacheCluster }
func (c clusterObject) conditions() []metav1.Condition { return c.Status.Conditions }

type tenantObject struct{ *v1.TenantSLO }

func (s tenantObject) object() ctrlclient.Object      { return s.TenantSLO }
func (s tenantObject) conditions() []metav1.Condition { return s.Status.Conditions }

// waitCondition waits until obj (re-read every poll) has condition kind with status and, when
// reason is not empty, that reason; it returns the condition.
func waitCondition(t *testing.T, c conditioned, kind string, status metav1.ConditionStatus, reason string, timeout time.Duration) metav1.Condition {
	t.Helper()
	obj := c.object()
	var last *metav1.Condition
	what := fmt.Sprintf("%s/%s %s=%s", obj.GetNamespace(), obj.GetName(), kind, status)
	if reason != "" {
		what += " (" + reason + ")"
	}
	defer func() {
		if t.Failed() && last != nil {
			t.Logf("last %s condition: %s %s: %s", kind, last.Status, last.Reason, last.Message)
		}
	}()
	waitFor(t, timeout, what, func() (bool, error) {
		if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(c.conditions(), kind)
		return last != nil && last.Status == status && (reason == "" || last.Reason == reason) &&
			last.ObservedGeneration == obj.GetGeneration(), nil
	})
	return *last
}

// kubectlWait runs `kubectl wait --for=condition=...`, the way a user's script waits.
func kubectlWait(t *testing.T, resource, ns, condition string, timeout time.Duration) {
	t.Helper()
	out, err := tool(t.Context(), "kubectl", "wait", "-n", ns, resource, "--for=condition="+condition, "--timeout="+timeout.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// plan returns the CacheNodePlan of cluster c on the local cluster's (only) node.
func plans(t *testing.T, c *v1.CacheCluster) []v1.CacheNodePlan {
	t.Helper()
	var list v1.CacheNodePlanList
	if err := cluster.kube.List(t.Context(), &list, ctrlclient.InNamespace(c.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []v1.CacheNodePlan
	for _, p := range list.Items {
		if p.Spec.ClusterName == c.Name {
			out = append(out, p)
		}
	}
	return out
}

// partitionsOf maps each node's plan generation and the tenants it holds partitions for.
func partitionsOf(ps []v1.CacheNodePlan) map[string][]string {
	out := map[string][]string{}
	for _, p := range ps {
		for _, part := range p.Spec.Partitions {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], part.Tenant)
		}
	}
	return out
}

// credentials reads the tenant's credentials Secret the operator wrote.
func credentials(t *testing.T, s *v1.TenantSLO) (user, password string) {
	t.Helper()
	secret, err := cluster.client.CoreV1().Secrets(s.Namespace).Get(t.Context(), s.Name+"-cache-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(secret.Data["username"]), string(secret.Data["password"])
}

// clientAddress is the cluster's client Service by cluster IP (no DNS on the local cluster).
func clientAddress(t *testing.T, c *v1.CacheCluster) string {
	t.Helper()
	svc, err := cluster.client.CoreV1().Services(c.Namespace).Get(t.Context(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := 6379
	if c.Spec.Engine == v1.EngineMemcached {
		port = 11211
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(port))
}

// readyCluster creates c and waits until every sidecar is ready.
// readyClusterForTenants creates a ready testCluster named name in a new namespace, and a
// namespace for its tenants (prefix-tenant).
func readyClusterForTenants(t *testing.T, prefix, name string) (*v1.CacheCluster, string) {
	t.Helper()
	c := testCluster(newNamespace(t, prefix), name, nil)
	readyCluster(t, c)
	return c, tenantNamespace(t, prefix+"-tenant")
}

func readyCluster(t *testing.T, c *v1.CacheCluster) {
	t.Helper()
	create(t, c)
	waitCondition(t, clusterObject{c}, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonAllNodesReady, 3*time.Minute)
}

// admittedTenant creates s and waits until its partitions run.
func admittedTenant(t *testing.T, s *v1.TenantSLO) {
	t.Helper()
	create(t, s)
	waitCondition(t, tenantObject{s}, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted, time.Minute)
	waitCondition(t, tenantObject{s}, v1.ConditionReady, metav1.ConditionTrue, "", 2*time.Minute)
}
