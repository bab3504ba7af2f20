package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/cachecluster"
	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// fleet is one benchmark size.
type fleet struct{ tenants, namespaces, nodes int }

// Goals of issue 21 for one allocation.
const (
	goalPlansAfterSolve = 10 * time.Second
	goalRSS             = 512 << 20
)

// Fleet settings: every tenant is measured on one home node; the cluster's nodes each give
// caching 4Gi, so the tenants' 64Mi minimums fit with room to spare at every size.
const (
	scrapeInterval     = 5 * time.Second
	allocationInterval = 30 * time.Second
	memoryMin          = "64Mi"
	changedMemoryMin   = "96Mi"
	// quiet is how long the operator must make no write for a phase to be over.
	quiet        = 5 * time.Second
	steadyWindow = 2 * allocationInterval
	phaseTimeout = 12 * time.Minute
	cacheNS      = "cache"
	clusterName  = "fleet"
)

// operatorQPS and operatorBurst are the client rate limits cmd/operator runs with
// (controller-runtime's defaults for a config without its own).
const (
	operatorQPS   = 20
	operatorBurst = 30
)

// BenchmarkOperator runs one allocation of a fleet from cold and then one after 10% of its
// TenantSLOs change at once, and prints each phase's time, API requests, memory, CPU and
// queue depths. Run it with -benchtime 1x (make bench-operator): each size is one scenario.
func BenchmarkOperator(b *testing.B) {
	for _, f := range []fleet{{500, 50, 50}, {2000, 200, 200}} {
		b.Run(fmt.Sprintf("tenants=%d/nodes=%d", f.tenants, f.nodes), func(b *testing.B) {
			runFleet(b, f)
		})
	}
}

func runFleet(b *testing.B, f fleet) {
	ctx := context.Background()
	sidecars, targets := make([]*promtest.Sidecar, f.nodes), make([]string, f.nodes)
	for i := range sidecars {
		sidecars[i] = promtest.NewSidecar(b, nodeName(i))
		sidecars[i].SetPlanGeneration(0)
		targets[i] = sidecars[i].Address()
	}
	for i := range f.tenants {
		s := sidecars[i%f.nodes]
		s.SetTraffic(tenantID(f, i), promtest.Traffic{
			RequestsPerSecond: float64(20 + 10*(i%7)), HitRatio: 0.5 + 0.05*float64(i%8),
			BytesInPerSecond: 2000, BytesOutPerSecond: 8000, HitLatency: 200 * time.Microsecond, MissLatency: 2 * time.Millisecond,
		})
		s.SetCurve(tenantID(f, i), []promquery.CurvePoint{{SizeBytes: 32 << 20, HitRatio: 0.4}, {SizeBytes: 128 << 20, HitRatio: 0.75}, {SizeBytes: 512 << 20, HitRatio: 0.9}})
	}
	prom := promtest.Start(b, targets, scrapeInterval)
	prom.WaitFor(b, `count_over_time(`+promquery.MetricRequests+`[30s]) >= 3`, f.tenants, 3*time.Minute)

	env, cfg, c := startControlPlane(b)
	createFleet(b, c, f)

	runtime.GC()
	idleCPU, idleRSS := cpuRate(5*time.Second), currentRSS(b)
	api, queries := NewAPIRecorder(), NewPrometheusRecorder()
	stop := func() {}
	defer func() {
		stop()
		if err := env.Stop(); err != nil {
			b.Log("stopping envtest:", err)
		}
	}()
	b.Logf("fleet: %d TenantSLOs in %d namespaces, %d nodes, Prometheus scraping %d exporters every %v; before the operator started, the test process (exporters, envtest client) used %.2f cores and %d MiB RSS",
		f.tenants, f.namespaces, f.nodes, f.nodes, scrapeInterval, idleCPU, idleRSS>>20)

	cold := measurePhase(b, fmt.Sprintf("%d-cold", f.tenants), "cold start: admission, credentials, first plans", api, queries, c, func() {
		stop = startOperator(b, cfg, prom.URL, api, queries)
	}, func() error {
		return everyTenantPlaced(ctx, c, f, nil)
	})
	report(b, cold)

	var changed []types.NamespacedName
	for i := 0; i < f.tenants; i += 10 {
		changed = append(changed, types.NamespacedName{Namespace: namespaceName(f, i), Name: tenantName(i)})
	}
	change := measurePhase(b, fmt.Sprintf("%d-change", f.tenants), fmt.Sprintf("%d TenantSLOs (10%%) raise their memory minimum at once", len(changed)), api, queries, c, func() {
		changeTenants(b, c, changed)
	}, func() error {
		return everyTenantPlaced(ctx, c, f, changed)
	})
	report(b, change)

	steadyStart := time.Now()
	stopPlans := watchPlanSummaries(b, c)
	steady := measurePhase(b, fmt.Sprintf("%d-steady", f.tenants), fmt.Sprintf("steady state: %v (two allocation intervals) with nothing changed", steadyWindow), api, queries, c, func() {}, func() error {
		if time.Since(steadyStart) < steadyWindow {
			return errors.New("the steady window is not over")
		}
		return nil
	})
	report(b, steady)
	movedShare := reportMovement(b, c, f, stopPlans())
	reportSizes(b, c)
	b.ReportMetric(cold.wall.Seconds(), "cold-s")
	b.ReportMetric(change.wall.Seconds(), "change-s")
	b.ReportMetric(float64(change.peakRSS)/(1<<20), "change-peak-RSS-MiB")
	steadyWrites := 0
	for _, q := range steady.requests {
		if q.Write() {
			steadyWrites++
		}
	}
	b.ReportMetric(float64(steadyWrites)/2, "steady-writes/interval")
	b.ReportMetric(100*movedShare, "steady-max-moved-%")
}

// watchPlanSummaries records every status.lastPlan of the fleet's cluster after the one in
// force now, read every second until the returned func is called; that func returns them in
// order.
func watchPlanSummaries(b *testing.B, c client.Client) func() []v1.PlanSummary {
	ctx, cancel := context.WithCancel(context.Background())
	cluster := &v1.CacheCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: cacheNS, Name: clusterName}, cluster); err != nil {
		b.Fatal(err)
	}
	// The first entry is the plan in force when the watch starts, dropped on return.
	seen := []v1.PlanSummary{ptr.Deref(cluster.Status.LastPlan, v1.PlanSummary{})}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for ctx.Err() == nil {
			cluster := &v1.CacheCluster{}
			err := c.Get(ctx, types.NamespacedName{Namespace: cacheNS, Name: clusterName}, cluster)
			if lp := cluster.Status.LastPlan; err == nil && lp != nil && !seen[len(seen)-1].Time.Equal(&lp.Time) {
				seen = append(seen, *lp)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return func() []v1.PlanSummary {
		cancel()
		<-finished
		return seen[1:]
	}
}

// reportMovement prints each allocation's moved memory as a share of the fleet's (issue 17
// allows 2% at steady state) and how many tenants the last allocation judged below their
// objective; it returns the largest share.
func reportMovement(b *testing.B, c client.Client, f fleet, plans []v1.PlanSummary) float64 {
	ctx := context.Background()
	cluster := &v1.CacheCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: cacheNS, Name: clusterName}, cluster); err != nil {
		b.Fatal(err)
	}
	fleetBytes := float64(cluster.Spec.Capacity.PartitionableMemory()) * float64(f.nodes)
	largest := 0.0
	for _, p := range plans {
		share := float64(p.MovedMemory.Value()) / fleetBytes
		largest = max(largest, share)
		b.Logf("  allocation at %s: moved %s (%.1f%% of the fleet's memory): %.160s", p.Time.Format(time.TimeOnly), p.MovedMemory.String(), 100*share, p.Message)
	}
	unmet := 0
	if err := listPaged(ctx, c, &v1.TenantSLOList{}, tenantPageSize, func(list *v1.TenantSLOList) {
		for i := range list.Items {
			if meta.IsStatusConditionFalse(list.Items[i].Status.Conditions, v1.ConditionSLOMet) {
				unmet++
			}
		}
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("  at the end: %d of %d tenants below their objective as measured (the exporter's hit ratios do not follow the memory they get)", unmet, f.tenants)
	return largest
}

func nodeName(i int) string               { return fmt.Sprintf("node-%03d", i) }
func namespaceName(f fleet, i int) string { return fmt.Sprintf("team-%03d", i%f.namespaces) }
func tenantName(i int) string             { return fmt.Sprintf("t-%04d", i) }
func tenantID(f fleet, i int) string      { return namespaceName(f, i) + "/" + tenantName(i) }

// startControlPlane starts envtest with the cacheqos CRDs and returns a client for the
// benchmark's own requests (not recorded, not rate limited like the operator).
func startControlPlane(b *testing.B) (*envtest.Environment, *rest.Config, client.Client) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		b.Fatalf("starting envtest (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	scheme, err := controllers.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	own := rest.CopyConfig(cfg)
	own.QPS, own.Burst = 500, 1000
	c, err := client.New(own, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	return env, cfg, c
}

// startOperator runs the operator as cmd/operator builds it, its API requests going through
// api and its Prometheus queries through queries; the returned func stops it. Prometheus is
// the operator's --prometheus-url (the cluster names none): the client carrying the recorder
// is used for that URL only.
func startOperator(b *testing.B, cfg *rest.Config, promURL string, api, queries *Recorder) func() {
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	opCfg := rest.CopyConfig(cfg)
	opCfg.QPS, opCfg.Burst = operatorQPS, operatorBurst
	opCfg.Wrap(api.Wrap)
	scheme, err := controllers.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	mgr, err := ctrl.NewManager(opCfg, ctrl.Options{
		Scheme: scheme, Cache: controllers.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Both sizes run in one process, each with its own manager and the same controller names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts := controllers.Options{
		Images: cachecluster.Images{Sidecar: "bench/cache-sidecar:v1", Redis: "bench/redis:v1", Memcached: "bench/memcached:v1"},
		Allocation: allocation.Options{
			DefaultPrometheusURL: promURL,
			HTTPClient:           &http.Client{Timeout: 30 * time.Second, Transport: queries.Wrap(http.DefaultTransport)},
			SolverMemoryLimit:    solverMemoryLimit(b),
		},
	}
	if _, err := controllers.Setup(ctx, mgr, opts); err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Log("operator:", err)
		}
	}
}

// solverMemoryLimit is the operator's --solver-memory-limit: BENCH_SOLVER_MEMORY_LIMIT_MIB
// MiB, or none when unset (the benchmark's process has no cgroup limit for the operator's
// default to follow).
func solverMemoryLimit(b *testing.B) int64 {
	v := os.Getenv("BENCH_SOLVER_MEMORY_LIMIT_MIB")
	if v == "" {
		return 0
	}
	mib, err := strconv.ParseInt(v, 10, 64)
	if err != nil || mib <= 0 {
		b.Fatalf("BENCH_SOLVER_MEMORY_LIMIT_MIB=%q: want a positive number of MiB", v)
	}
	b.Logf("solver memory limit: %d MiB", mib)
	return mib << 20
}

// createFleet creates the nodes, their sidecar pods (envtest runs no DaemonSet controller),
// the CacheCluster and the TenantSLOs, in parallel.
func createFleet(b *testing.B, c client.Client, f fleet) {
	ctx := context.Background()
	var objs []client.Object
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cacheNS}})
	for i := range f.namespaces {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(f, i)}})
	}
	for i := range f.nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{"pool": "fleet"}}})
	}
	objs = append(objs, &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: cacheNS, Name: clusterName},
		Spec: v1.CacheClusterSpec{
			Engine:       v1.EngineRedis,
			NodeSelector: map[string]v1.LabelValue{"pool": "fleet"},
			Capacity:     v1.NodeCapacity{Memory: resource.MustParse("4Gi"), Bandwidth: resource.MustParse("1G"), OpsPerSecond: 200000},
			Allocation:   v1.AllocationSettings{Interval: &metav1.Duration{Duration: allocationInterval}},
			Monitoring:   v1.MonitoringSettings{ServiceMonitor: v1.ServiceMonitorSettings{Interval: &metav1.Duration{Duration: scrapeInterval}}},
		},
	})
	create(b, c, objs...)
	objs = objs[:0]
	for i := range f.tenants {
		objs = append(objs, &v1.TenantSLO{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespaceName(f, i), Name: tenantName(i)},
			Spec: v1.TenantSLOSpec{
				ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: clusterName},
				Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: []string{"0.7", "0.8"}[i%2]}},
				Memory:     v1.MemoryRange{Min: ptr.To(resource.MustParse(memoryMin))},
			},
		})
	}
	for i := range f.nodes {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: cacheNS, Name: clusterName + "-sidecar-" + nodeName(i), Labels: map[string]string{
				"app.kubernetes.io/name": "cacheqos-sidecar", "app.kubernetes.io/instance": clusterName, "app.kubernetes.io/managed-by": "cacheqos-operator",
			}},
			Spec: corev1.PodSpec{NodeName: nodeName(i), AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "sidecar", Image: "bench/sidecar:v1"}}},
		})
	}
	create(b, c, objs...)
	parallel(b, f.nodes, func(i int) error {
		p := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: cacheNS, Name: clusterName + "-sidecar-" + nodeName(i)}, p); err != nil {
			return err
		}
		ip := fmt.Sprintf("10.%d.%d.1", i/250, i%250)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		return c.Status().Update(ctx, p)
	})
}

func create(b *testing.B, c client.Client, objs ...client.Object) {
	parallel(b, len(objs), func(i int) error { return c.Create(context.Background(), objs[i]) })
}

// parallel runs do(0..n-1) on 16 workers and fails the benchmark on the first error.
func parallel(b *testing.B, n int, do func(int) error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// changeTenants raises the memory minimum and the hit ratio target of the tenants.
func changeTenants(b *testing.B, c client.Client, tenants []types.NamespacedName) {
	parallel(b, len(tenants), func(i int) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			t := &v1.TenantSLO{}
			if err := c.Get(context.Background(), tenants[i], t); err != nil {
				return err
			}
			t.Spec.Memory.Min = ptr.To(resource.MustParse(changedMemoryMin))
			t.Spec.Objective.HitRatio.Ratio = "0.85"
			return c.Update(context.Background(), t)
		})
	})
}

// everyTenantPlaced is nil once every plan has been written, every tenant has an allocation
// from a written plan and, of the changed tenants, the operator saw the change, an allocation
// saw it too, and each has at least its new minimum.
func everyTenantPlaced(ctx context.Context, c client.Client, f fleet, changed []types.NamespacedName) error {
	written := 0
	if err := eachPlan(ctx, c, func(p *v1.CacheNodePlan) {
		if p.Spec.PlanGeneration >= 1 {
			written++
		}
	}); err != nil {
		return err
	}
	if written < f.nodes {
		return fmt.Errorf("%d of %d plans written", written, f.nodes)
	}
	pending := map[types.NamespacedName]string{}
	for _, key := range changed {
		pending[key] = "it has not been given its new minimum yet"
	}
	want := resource.MustParse(changedMemoryMin)
	placed := 0
	err := listPaged(ctx, c, &v1.TenantSLOList{}, tenantPageSize, func(list *v1.TenantSLOList) {
		for i := range list.Items {
			t := &list.Items[i]
			if a := t.Status.Allocation; a != nil && a.PlanGeneration >= 1 {
				placed++
			}
			key := client.ObjectKeyFromObject(t)
			if _, ok := pending[key]; !ok {
				continue
			}
			switch cond := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionSLOMet); {
			case t.Status.ObservedGeneration != t.Generation || t.Status.Allocation == nil || t.Status.Allocation.Memory.Cmp(want) < 0:
				pending[key] = "it has not been given its new minimum yet"
			// The allocation loop's own conditions say which generation it allocated.
			case cond == nil || cond.ObservedGeneration != t.Generation:
				pending[key] = "no allocation has seen its change yet"
			default:
				delete(pending, key)
			}
		}
	})
	if err != nil {
		return err
	}
	if placed < f.tenants {
		return fmt.Errorf("%d of %d tenants placed", placed, f.tenants)
	}
	if len(pending) > 0 {
		first := slices.MinFunc(slices.Collect(maps.Keys(pending)), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		return fmt.Errorf("%d changed tenants not done; %v: %s", len(pending), first, pending[first])
	}
	return nil
}

// Page sizes bound what the benchmark's own checks hold at once: whole lists of 2,000
// TenantSLOs and 200 plans were about 200 MiB of this process's heap, counted in the peaks,
// and at 2,000 tenants a page of 100 plans (each listing about 2,000 remote tenants, with
// their managed fields) was still 27 MiB of the live heap at the cold start's peak.
const (
	tenantPageSize = 100
	planPageSize   = 10
)

// listPaged lists list's kind in pages of pageSize, calling each on every page (list is
// reused from one page to the next).
func listPaged[L client.ObjectList](ctx context.Context, c client.Client, list L, pageSize int64, each func(L), opts ...client.ListOption) error {
	cont := ""
	for {
		if err := c.List(ctx, list, append(opts, client.Limit(pageSize), client.Continue(cont))...); err != nil {
			return err
		}
		each(list)
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// eachPlan calls each on every CacheNodePlan of the fleet's namespace.
func eachPlan(ctx context.Context, c client.Client, each func(*v1.CacheNodePlan)) error {
	return listPaged(ctx, c, &v1.CacheNodePlanList{}, planPageSize, func(list *v1.CacheNodePlanList) {
		for i := range list.Items {
			each(&list.Items[i])
		}
	}, client.InNamespace(cacheNS))
}

// phaseResult is what one phase measured.
type phaseResult struct {
	name string
	// unfinished says why the phase was cut short; empty when it finished.
	unfinished string
	// wall runs from the phase's start to the operator's last write.
	wall              time.Duration
	requests, queries []Request
	peakRSS, peakHeap uint64
	// peakNative is the peak anonymous resident memory outside Go's mappings, peakFiles the
	// peak of resident file pages.
	peakNative, peakFiles uint64
	cpu                   time.Duration
	peakQueue             map[string]float64
	plansChanged          int
	generationBumps       int
	plansBefore           int
	cluster               v1.CacheClusterStatus
}

// measurePhase runs act, then waits until done holds and the operator has made no write for
// quiet, sampling memory and queue depths meanwhile.
func measurePhase(b *testing.B, key, name string, api, queries *Recorder, c client.Client, act func(), done func() error) phaseResult {
	ctx := context.Background()
	before := planGenerations(b, c)
	runtime.GC()
	resetPeakRSS(b)
	r := phaseResult{name: name, peakQueue: map[string]float64{}, plansBefore: len(before)}
	profile := ""
	if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" {
		profile = filepath.Join(dir, key+"-heap.pb.gz")
	}
	sampler := newSampler(b, profile)
	start, cpuStart := time.Now(), cpuTime()
	act()
	deadline := start.Add(phaseTimeout)
	err := fmt.Errorf("the operator never made no write for %v", quiet)
	for {
		time.Sleep(time.Second)
		// Listing thousands of objects costs this process CPU: only once the operator is quiet.
		if last := api.LastWrite(); !last.IsZero() && time.Since(last) >= quiet {
			if err = done(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			r.unfinished = fmt.Sprintf("NOT DONE after %v (%v); the numbers cover the phase so far", phaseTimeout, err)
			break
		}
	}
	r.cpu = cpuTime() - cpuStart
	sampler.stop()
	r.peakHeap, r.peakNative, r.peakFiles, r.peakQueue = sampler.heap, sampler.native, sampler.files, sampler.queue
	r.peakRSS = peakRSS(b)
	r.wall = api.LastWrite().Sub(start)
	// Cut short, or no write at all in the phase (a steady state): the phase's own length.
	if r.unfinished != "" || r.wall < 0 {
		r.wall = time.Since(start)
	}
	// An allocation whose queries began before the phase may write in it.
	r.requests, r.queries = api.Since(start), queries.Since(start.Add(-allocationInterval))
	for node, gen := range planGenerations(b, c) {
		if gen != before[node] {
			r.plansChanged++
			r.generationBumps += int(gen - before[node])
		}
	}
	cluster := &v1.CacheCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: cacheNS, Name: clusterName}, cluster); err != nil {
		b.Fatal(err)
	}
	r.cluster = cluster.Status
	return r
}

func planGenerations(b *testing.B, c client.Client) map[string]int64 {
	out := map[string]int64{}
	if err := eachPlan(context.Background(), c, func(p *v1.CacheNodePlan) { out[p.Spec.NodeName] = p.Spec.PlanGeneration }); err != nil {
		b.Fatal(err)
	}
	return out
}

// sampler records, every 500ms, the peak Go heap, the peak of the anonymous resident memory
// outside Go's own mappings (OR-Tools' C++ heap, and any other native allocation), the peak
// of the resident file pages (code) and the peak depth of every workqueue. With BENCH_PROFILE_DIR set, it writes the heap profile each time the
// heap grows 10% past the last one written, so the file left is the profile at the peak.
type sampler struct {
	stopc   chan struct{}
	done    chan struct{}
	profile string
	heap    uint64
	native  uint64
	files   uint64
	queue   map[string]float64
}

func newSampler(b *testing.B, profile string) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{}), queue: map[string]float64{}, profile: profile}
	go func() {
		defer close(s.done)
		mem := []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
		}
		var profiled uint64
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(mem)
			heap := mem[0].Value.Uint64()
			s.heap = max(s.heap, heap)
			// Go's mapped memory not yet returned to the kernel bounds its resident share; the
			// rest of the anonymous memory is C and C++ allocations. File pages (the code of
			// this binary and of OR-Tools) are counted apart.
			if goMapped, anon := mem[1].Value.Uint64()-mem[2].Value.Uint64(), procStatus(b, "RssAnon:"); anon > goMapped {
				s.native = max(s.native, anon-goMapped)
			}
			s.files = max(s.files, procStatus(b, "RssFile:"))
			if s.profile != "" && heap > profiled+profiled/10 {
				profiled = heap
				writeHeapProfile(b, s.profile)
			}
			families, _ := crmetrics.Registry.Gather()
			for _, fam := range families {
				if fam.GetName() != "workqueue_depth" {
					continue
				}
				for _, m := range fam.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "name" {
							s.queue[l.GetValue()] = max(s.queue[l.GetValue()], m.GetGauge().GetValue())
						}
					}
				}
			}
			select {
			case <-s.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() {
	close(s.stopc)
	<-s.done
}

// writeHeapProfile writes the heap profile (live objects as of the last GC) to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Log("heap profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Log("heap profile:", err)
	}
}

// resetPeakRSS resets the kernel's peak resident set size of this process (VmHWM).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("cannot reset the peak RSS, it covers the whole run: %v", err)
	}
}

// peakRSS reads VmHWM, the peak resident set size since the last reset.
func peakRSS(b *testing.B) uint64 { return procStatus(b, "VmHWM:") }

// currentRSS reads VmRSS, the resident set size now.
func currentRSS(b *testing.B) uint64 { return procStatus(b, "VmRSS:") }

// procStatus reads a size in kB from /proc/self/status.
func procStatus(b *testing.B, field string) uint64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// cpuTime is the user and system CPU time of this process.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// cpuRate is the process's CPU use over d, in cores.
func cpuRate(d time.Duration) float64 {
	start := cpuTime()
	time.Sleep(d)
	return float64(cpuTime()-start) / float64(d)
}

// allocationRun is one allocation as its requests show it: a burst of Prometheus queries,
// then the plan writes before the next burst.
type allocationRun struct {
	measured                time.Time
	firstWrite, lastWritten time.Time
	planWrites              int
}

// allocations splits the phase at its bursts of Prometheus queries (queries less than a second
// apart belong to one allocation).
func allocations(r phaseResult) []allocationRun {
	var runs []allocationRun
	var burstStart []time.Time
	for i, q := range r.queries {
		if i == 0 || q.Start.Sub(r.queries[i-1].End) > time.Second {
			runs = append(runs, allocationRun{})
			burstStart = append(burstStart, q.Start)
		}
		runs[len(runs)-1].measured = q.End
	}
	for _, q := range r.requests {
		if !q.Write() || q.Resource != "cachenodeplans" {
			continue
		}
		k := -1
		for i := range runs {
			if !q.Start.Before(runs[i].measured) && (i+1 == len(runs) || q.Start.Before(burstStart[i+1])) {
				k = i
			}
		}
		if k < 0 {
			continue
		}
		run := &runs[k]
		if run.planWrites == 0 {
			run.firstWrite = q.Start
		}
		run.planWrites++
		run.lastWritten = q.End
	}
	return runs
}

func report(b *testing.B, r phaseResult) {
	var out strings.Builder
	fmt.Fprintf(&out, "\n== %s\n", r.name)
	if r.unfinished != "" {
		fmt.Fprintf(&out, "%s\n", r.unfinished)
	}
	fmt.Fprintf(&out, "wall time to the operator's last write: %.1fs; process CPU %.1fs (%.2f cores); peak RSS %d MiB (goal < 512), peak Go heap objects %d MiB, peak anonymous memory outside Go's mappings (C/C++) %d MiB, peak resident file pages (code) %d MiB\n",
		r.wall.Seconds(), r.cpu.Seconds(), r.cpu.Seconds()/r.wall.Seconds(), r.peakRSS>>20, r.peakHeap>>20, r.peakNative>>20, r.peakFiles>>20)
	queues := make([]string, 0, len(r.peakQueue))
	for name, depth := range r.peakQueue {
		queues = append(queues, fmt.Sprintf("%s %.0f", name, depth))
	}
	slices.Sort(queues)
	fmt.Fprintf(&out, "peak workqueue depth (sampled every 500ms): %s\n", strings.Join(queues, ", "))
	counts, planWrites := map[string]int{}, 0
	var planBytes, largestPlanWrite int64
	perObject := map[string]int{}
	for _, q := range r.requests {
		key := q.Verb + " " + q.Resource
		if q.Manager != "" {
			key += " (" + q.Manager + ")"
		}
		counts[key]++
		if q.Write() && q.Resource == "cachenodeplans" {
			planWrites++
			planBytes += q.Bytes
			largestPlanWrite = max(largestPlanWrite, q.Bytes)
		}
		if q.Write() && q.Object != "" {
			perObject[q.Resource+" "+q.Object]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(&out, "API requests by the operator: %d, Prometheus queries: %d\n", len(r.requests), len(r.queries))
	for _, k := range keys {
		fmt.Fprintf(&out, "  %-40s %6d\n", k, counts[k])
	}
	maxByResource, objectsByResource, mostWritten := map[string]int{}, map[string]int{}, map[string]string{}
	for k, n := range perObject {
		res, object, _ := strings.Cut(k, " ")
		if n > maxByResource[res] || (n == maxByResource[res] && object < mostWritten[res]) {
			maxByResource[res], mostWritten[res] = n, object
		}
		objectsByResource[res]++
	}
	fmt.Fprintf(&out, "writes per object: resource, objects written, most writes to one object:\n")
	for _, res := range slices.Sorted(maps.Keys(maxByResource)) {
		fmt.Fprintf(&out, "  %-40s %6d  %5d (%s)\n", res, objectsByResource[res], maxByResource[res], mostWritten[res])
	}
	fmt.Fprintf(&out, "plans whose planGeneration changed: %d of %d, by %d generations in all; CacheNodePlan writes %d (goal: at most one per changed plan), sending %.1f MiB of request bodies (largest %d bytes)\n",
		r.plansChanged, r.plansBefore, r.generationBumps, planWrites, float64(planBytes)/(1<<20), largestPlanWrite)
	for i, run := range allocations(r) {
		if len(r.requests) == 0 {
			break
		}
		if run.planWrites == 0 {
			fmt.Fprintf(&out, "  allocation %d: measured at +%.1fs, no plan written\n", i+1, run.measured.Sub(r.requests[0].Start).Seconds())
			continue
		}
		fmt.Fprintf(&out, "  allocation %d: measured at +%.1fs; decide (solve) %.1fs to the first plan write; %d plan writes done %.2fs after it (goal <= %v)\n",
			i+1, run.measured.Sub(r.requests[0].Start).Seconds(), run.firstWrite.Sub(run.measured).Seconds(), run.planWrites,
			run.lastWritten.Sub(run.firstWrite).Seconds(), goalPlansAfterSolve)
	}
	if p := r.cluster.LastPlan; p != nil {
		fmt.Fprintf(&out, "last plan: policy %s, solver %s, duration (start to decided) %v, moved %s; %s\n", p.Policy, p.SolverStatus, p.Duration.Duration, p.MovedMemory.String(), p.Message)
	}
	b.Log(out.String())
}

// reportSizes prints the size of the objects that grow with the fleet: the cluster's one
// credentials Secret (a hash per tenant; the API server refuses objects over about 1.5 MB and
// Secrets over 1 MiB of data) and the largest CacheNodePlan.
func reportSizes(b *testing.B, c client.Client) {
	ctx := context.Background()
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: cacheNS, Name: clusterName + "-tenant-credentials"}, secret); err != nil {
		b.Fatal(err)
	}
	data := 0
	for k, v := range secret.Data {
		data += len(k) + len(v)
	}
	stored, err := json.Marshal(secret)
	if err != nil {
		b.Fatal(err)
	}
	largest := 0
	if err := eachPlan(ctx, c, func(p *v1.CacheNodePlan) {
		raw, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		largest = max(largest, len(raw))
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("credentials Secret: %d keys, %d bytes of data (%.0f per key), %d bytes as JSON; largest CacheNodePlan %d bytes as JSON",
		len(secret.Data), data, float64(data)/float64(max(1, len(secret.Data))), len(stored), largest)
}
