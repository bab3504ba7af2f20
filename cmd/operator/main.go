// Command operator runs the cacheqos operator: the CacheCluster and TenantSLO reconcilers and
// the leader-elected allocation loop, in one controller-runtime manager.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
)

// version is stamped at build time with -ldflags "-X main.version=..."; it tags the default
// sidecar image.
var version = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		opts          controllers.Options
		metricsAddr   string
		probeAddr     string
		leaderElect   bool
		leaderElectNS string
		watchNS       string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint (0 disables it)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader among replicas; only the leader reconciles and allocates")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's own)")
	flag.StringVar(&opts.Allocation.DefaultPrometheusURL, "prometheus-url", "", "Prometheus HTTP API for clusters whose spec.monitoring.prometheusURL is empty")
	flag.StringVar(&watchNS, "watch-namespaces", "", "comma-separated namespaces of CacheClusters and tenants to watch (default: all)")
	flag.StringVar(&opts.Images.Sidecar, "sidecar-image", "cacheqos/cache-sidecar:"+version, "default cache-sidecar image")
	flag.StringVar(&opts.Images.Redis, "redis-image", "", "default image the sidecar runs in for redis clusters (default: the sidecar image)")
	flag.StringVar(&opts.Images.Memcached, "memcached-image", "", "default image the sidecar runs in for memcached clusters (default: the sidecar image)")
	flag.IntVar(&opts.Allocation.SolverWorkers, "solver-workers", allocation.DefaultSolverWorkers, "CP-SAT workers per solve (1 makes plans reproducible)")
	flag.DurationVar(&opts.Allocation.Debounce, "allocation-debounce", allocation.DefaultDebounce, "delay between a change and the allocation it triggers")
	flag.IntVar(&opts.Allocation.ApplyDeadlineIntervals, "apply-deadline-intervals", allocation.DefaultApplyDeadlineIntervals, "allocation intervals a sidecar may take to apply a plan before the cluster is Degraded")
	var logLevel slog.Level
	flag.TextVar(&logLevel, "log-level", slog.LevelInfo, "lowest level logged: DEBUG, INFO, WARN or ERROR")
	flag.Parse()
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})))
	ctrl.Log.Info("starting the cacheqos operator", "version", version)

	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(namespaces(watchNS)...),
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "cacheqos-operator.cacheqos.io",
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr.To(30 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := controllers.Setup(ctx, mgr, opts); err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// namespaces splits a comma-separated list, dropping empty entries.
func namespaces(list string) []string {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}
