package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// loadgenMetricsPort is where the load generator pods serve /metrics.
const loadgenMetricsPort = 9400

// load is one tenant's share of a cacheqos-loadgen pod.
type load struct {
	tenant   *v1.TenantSLO
	workload string  // internal/workload spec
	rate     float64 // accesses per second
	start    time.Duration
}

// startLoad runs cacheqos-loadgen in namespace ns for the tenants of loads (all of cluster c,
// all in ns: a pod mounts only its own namespace's Secrets). Each tenant's credentials Secret
// is mounted as the operator wrote it, endpoint included; the pod resolves the endpoint's
// Service name through a host alias, because the local cluster has no DNS. It returns the
// pod's IP once the pod is ready.
func startLoad(t *testing.T, ns string, c *v1.CacheCluster, loads ...load) string {
	t.Helper()
	type tenantConfig struct {
		Name           string  `json:"name"`
		Engine         string  `json:"engine"`
		CredentialsDir string  `json:"credentialsDir"`
		Workload       string  `json:"workload"`
		Rate           float64 `json:"rate"`
		Connections    int     `json:"connections"`
		Start          string  `json:"start,omitempty"`
	}
	config := struct {
		Interval      string         `json:"interval"`
		MetricsListen string         `json:"metricsListen"`
		Tenants       []tenantConfig `json:"tenants"`
	}{Interval: "5s", MetricsListen: ":" + strconv.Itoa(loadgenMetricsPort)}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "loadgen", Namespace: ns, Labels: map[string]string{"app": "loadgen"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            "loadgen",
				Image:           cluster.images["loadgen"],
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"--config=/etc/loadgen/config.json"},
				Ports:           []corev1.ContainerPort{{Name: "metrics", ContainerPort: loadgenMetricsPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(loadgenMetricsPort)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)},
				Resources:       smallResources("256Mi"),
				VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/loadgen"}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "loadgen"}},
			}}},
		},
	}
	svc, err := cluster.client.CoreV1().Services(c.Namespace).Get(t.Context(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.HostAliases = []corev1.HostAlias{{IP: svc.Spec.ClusterIP, Hostnames: []string{c.Name + "." + c.Namespace + ".svc"}}}
	for _, l := range loads {
		if l.tenant.Namespace != ns {
			t.Fatalf("tenant %s/%s is not in the load's namespace %s", l.tenant.Namespace, l.tenant.Name, ns)
		}
		volume := "credentials-" + l.tenant.Name
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: l.tenant.Name + "-cache-credentials"},
		}})
		dir := "/credentials/" + l.tenant.Name
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: dir, ReadOnly: true})
		tc := tenantConfig{Name: ns + "/" + l.tenant.Name, Engine: string(c.Spec.Engine), CredentialsDir: dir,
			Workload: l.workload, Rate: l.rate, Connections: 4}
		if l.start > 0 {
			tc.Start = l.start.String()
		}
		config.Tenants = append(config.Tenants, tc)
	}
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "loadgen", Namespace: ns}, Data: map[string]string{"config.json": string(data)}}
	if _, err := cluster.client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// t.Context() is already cancelled when cleanups run.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := tool(ctx, "kubectl", "logs", "-n", ns, "loadgen", "--tail=30")
			t.Logf("loadgen's last report lines (%v):\n%s", err, out)
		}
	})
	waitFor(t, readyTimeout, "loadgen pod Ready", func() (bool, error) {
		p, err := cluster.client.CoreV1().Pods(ns).Get(t.Context(), "loadgen", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return podReady(p), nil
	})
	return pod.Status.PodIP
}

// loadgenCounter sums a counter of the load generator's /metrics for one tenant.
func loadgenCounter(t *testing.T, podIP, metric, tenant string) float64 {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(podIP, strconv.Itoa(loadgenMetricsPort)) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	label := fmt.Sprintf(`tenant=%q`, tenant)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") || !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// testFeasibleSLOsAreMet runs `make demo`'s fleet: three tenants under load — a strict
// hit-ratio objective, a strict p99 latency objective and a best-effort one — converge: every
// SLO is met within a bounded number of allocation intervals, and `kubectl wait` sees it.
func testFeasibleSLOsAreMet(t *testing.T) {
	t.Parallel()
	applyManifest(t, "hack/demo/tenants.yaml")
	c := &v1.CacheCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "cacheqos-demo", Name: "demo"}}
	waitCondition(t, clusterObject{c}, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonAllNodesReady, 3*time.Minute)
	tenants := []*v1.TenantSLO{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "demo-shop", Name: "catalog"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "demo-search", Name: "queries"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "demo-analytics", Name: "reports"}},
	}
	for _, s := range tenants {
		waitCondition(t, tenantObject{s}, v1.ConditionReady, metav1.ConditionTrue, "", 2*time.Minute)
	}
	applyManifest(t, "hack/demo/load.yaml", "CLIENT_SERVICE_IP", clientServiceIP(t, c))
	// Warming the cache from empty takes the most; then each plan needs a measurement window.
	deadline := 18 * allocationInterval
	for _, s := range tenants {
		cond := waitCondition(t, tenantObject{s}, v1.ConditionSLOMet, metav1.ConditionTrue, v1.ReasonTargetMet, deadline)
		t.Logf("%s/%s: %s", s.Namespace, s.Name, cond.Message)
	}
	kubectlWait(t, "tenantslo/catalog", "demo-shop", v1.ConditionSLOMet, time.Minute)
	kubectlWait(t, "tenantslo/queries", "demo-search", v1.ConditionReady, time.Minute)
	// The proxy runs one Go thread per core it requests: the demo's 20,000 ops/s make 400m.
	if procs, err := queryVector(t.Context(), `go_sched_gomaxprocs_threads{namespace="cacheqos-demo"}`); err != nil || len(procs) == 0 || slices.ContainsFunc(procs, func(v string) bool { return v != "1" }) {
		t.Errorf("sidecars' GOMAXPROCS %v (query error %v), want 1 on every node", procs, err)
	}
	out, err := tool(t.Context(), "kubectl", "get", "tenantslo", "-A")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get tenantslo -A:\n%s", out)
}

// applyManifest applies a manifest of the repository with kubectl, replacing each pair of
// placeholder and value; at the end of the test it is deleted again, waiting for finalizers.
func applyManifest(t *testing.T, path string, replacements ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cluster.repo, path))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer(replacements...).Replace(string(data))
	file := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tool(t.Context(), "kubectl", "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := tool(ctx, "kubectl", "delete", "-f", file, "--wait", "--timeout=3m", "--ignore-not-found"); err != nil {
			t.Errorf("deleting %s: %v", path, err)
		}
	})
}

// clientServiceIP is the cluster IP of the cache cluster's client Service.
func clientServiceIP(t *testing.T, c *v1.CacheCluster) string {
	t.Helper()
	host, _, err := net.SplitHostPort(clientAddress(t, c))
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// testNoisyNeighbour: under LACS, an elephant that floods the node (a scan at many times the
// mouse's rate) is isolated — it loses its cache and/or is throttled to its 1/K share — while
// the mouse's hit-ratio SLO holds and the elephant keeps being served at its share.
func testNoisyNeighbour(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "noisy")
	// One node: the elephant's fair share is 1/K of that node's bandwidth.
	c := testCluster(ns, "noisy", func(c *v1.CacheCluster) {
		onNode(cluster.nodes[0])(c)
		c.Spec.Allocation.Policy = v1.PolicyLACS
		c.Spec.Capacity.Bandwidth = resource.MustParse(strconv.Itoa(noisyBandwidth))
		c.Spec.Capacity.OpsPerSecond = 4000
	})
	readyCluster(t, c)
	mouseNS, elephantNS := tenantNamespace(t, "mouse"), tenantNamespace(t, "elephant")
	mouse := tenant(mouseNS, "mouse", c, "0.7", "8Mi", "48Mi")
	elephant := tenant(elephantNS, "elephant", c, "0.5", "", "64Mi")
	strictMeetsBesideBestEffort(t, c, load{tenant: mouse, workload: "zipf:keys=5000,skew=1.0,value=256", rate: 300}, elephant, 12*allocationInterval)

	// The flood: 4 KiB values as fast as the pod can send them, several times the node's
	// bandwidth, over a key space no partition can hold.
	elephantIP := startLoad(t, elephantNS, c, load{tenant: elephant, workload: "scan:keys=1000000,value=4096", rate: 0})
	elephantID := elephantNS + "/elephant"
	// LACS: the flood makes the node's queue (M/M/1 on its bandwidth) cost the mouse more than
	// it would pay alone on 1/K of the node, so the elephant loses its cache and, that not
	// being enough, is throttled to 1/K of the node's bandwidth; the sidecar then holds it there.
	lastLog := time.Now()
	waitFor(t, 15*allocationInterval, "the elephant throttled to its share", func() (bool, error) {
		if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(elephant), elephant); err != nil {
			return false, err
		}
		if time.Since(lastLog) > 3*allocationInterval {
			lastLog = time.Now()
			logAllocation(t, c, elephant)
		}
		return meta.IsStatusConditionTrue(elephant.Status.Conditions, v1.ConditionThrottled), nil
	})
	logAllocation(t, c, elephant)
	// Over the next intervals the mouse keeps its SLO while the elephant still floods.
	served := loadgenCounter(t, elephantIP, "cacheqos_loadgen_operations_total", elephantID)
	start := time.Now()
	met, checks := 0, 0
	for range 6 {
		time.Sleep(allocationInterval)
		logAllocation(t, c, elephant)
		if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(mouse), mouse); err != nil {
			t.Fatal(err)
		}
		checks++
		if meta.IsStatusConditionTrue(mouse.Status.Conditions, v1.ConditionSLOMet) {
			met++
		}
	}
	rate := (loadgenCounter(t, elephantIP, "cacheqos_loadgen_operations_total", elephantID) - served) / time.Since(start).Seconds()
	if met < checks-1 {
		t.Errorf("the mouse met its SLO in %d of %d checks during the flood", met, checks)
	}
	// Its fair share: 1/K of the node's bandwidth (K = 2 tenants), at about 4 KiB per access
	// (the miss's SET carries the value).
	fair := float64(noisyBandwidth) / 2 / 4096
	t.Logf("elephant served %.0f accesses/s while throttled; its 1/K bandwidth share is about %.0f/s", rate, fair)
	if rate < 0.5*fair || rate > 1.5*fair {
		t.Errorf("the elephant got %.0f accesses/s, want about its fair share of %.0f/s (0.5x to 1.5x)", rate, fair)
	}
}

// strictMeetsBesideBestEffort admits the strict tenant of strictLoad and bestEffort (made
// best-effort here) to cluster c, runs the strict tenant's load alone, and waits until it meets
// its objective, within warmUp.
func strictMeetsBesideBestEffort(t *testing.T, c *v1.CacheCluster, strictLoad load, bestEffort *v1.TenantSLO, warmUp time.Duration) {
	t.Helper()
	bestEffort.Spec.Class = v1.ClassBestEffort
	admittedTenant(t, strictLoad.tenant)
	admittedTenant(t, bestEffort)
	startLoad(t, strictLoad.tenant.Namespace, c, strictLoad)
	waitCondition(t, tenantObject{strictLoad.tenant}, v1.ConditionSLOMet, metav1.ConditionTrue, v1.ReasonTargetMet, warmUp)
}

// noisyBandwidth is the noisy-neighbour node's bandwidth in bytes/s: small, so one load
// generator pod floods it.
const noisyBandwidth = 4_000_000

// logAllocation shows what the allocator decided for a tenant and why, for a human reading a
// test's progress.
func logAllocation(t *testing.T, c *v1.CacheCluster, s *v1.TenantSLO) {
	t.Helper()
	if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if err := cluster.kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	status := s.Status
	allocation, observed, plan := "none", "none", "none"
	if a := status.Allocation; a != nil {
		allocation = "memory " + a.Memory.String()
		if a.BandwidthLimit != nil {
			allocation += ", bandwidth limit " + a.BandwidthLimit.String()
		}
		if a.OpsLimit != nil {
			allocation += fmt.Sprintf(", ops limit %d/s", *a.OpsLimit)
		}
	}
	if o := status.Observed; o != nil {
		observed = fmt.Sprintf("%d ops/s, %s bytes/s, hit ratio %s", o.OpsPerSecond, o.BytesPerSecond.String(), o.HitRatio)
	}
	if p := c.Status.LastPlan; p != nil {
		plan = fmt.Sprintf("%s %s: %s", p.Policy, p.SolverStatus, p.Message)
	}
	t.Logf("%s/%s: allocation %s; observed %s; conditions %v; last plan %s", s.Namespace, s.Name, allocation, observed, status.Conditions, plan)
}
