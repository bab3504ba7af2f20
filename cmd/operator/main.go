// Command operator runs the cacheqos operator: the CacheCluster and TenantSLO reconcilers and
// the leader-elected allocation loop, in one controller-runtime manager.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/internal/promquery"
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

// settings are the operator's command-line flags.
type settings struct {
	opts          controllers.Options
	metricsAddr   string
	metricsSecure bool
	probeAddr     string
	leaderElect   bool
	leaderElectNS string
	watchNS       string
	logLevel      slog.Level
	// solverMemory is --solver-memory-limit (nil: not given, derived from the container's).
	solverMemory *resource.Quantity
}

// parseFlags reads the command line; the Prometheus HTTP client configuration file it names
// is loaded here, so a wrong one stops the operator at start.
func parseFlags(args []string) (settings, error) {
	var (
		s               settings
		promHTTPConfig  string
		sidecarDefaults string
		solverMemory    string
	)
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.StringVar(&s.metricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint (0 disables it)")
	fs.BoolVar(&s.metricsSecure, "metrics-secure", true, "serve the metrics over HTTPS (a self-signed certificate) to clients whose bearer token the API server authenticates (TokenReview) and authorizes to get /metrics (SubjectAccessReview); false: plain HTTP, no authentication")
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.BoolVar(&s.leaderElect, "leader-elect", true, "elect a leader among replicas; only the leader reconciles and allocates")
	fs.StringVar(&s.leaderElectNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's own)")
	fs.StringVar(&s.opts.Allocation.DefaultPrometheusURL, "prometheus-url", "", "Prometheus HTTP API for clusters whose spec.monitoring.prometheusURL is empty")
	fs.StringVar(&promHTTPConfig, "prometheus-http-config", "", "file in prometheus/common's HTTP client configuration format (authorization, basic_auth, tls_config, http_headers, ...) used for the queries to --prometheus-url only (never for a CacheCluster's own prometheusURL); relative paths in it are relative to its directory (default: no credentials)")
	fs.StringVar(&s.watchNS, "watch-namespaces", "", "comma-separated namespaces of CacheClusters and tenants to watch (default: all)")
	fs.StringVar(&s.opts.Images.Sidecar, "sidecar-image", "cacheqos/cache-sidecar:"+version, "default cache-sidecar image")
	fs.StringVar(&s.opts.Images.Redis, "redis-image", "", "default image the sidecar runs in for redis clusters (default: the sidecar image)")
	fs.StringVar(&s.opts.Images.Memcached, "memcached-image", "", "default image the sidecar runs in for memcached clusters (default: the sidecar image)")
	fs.StringVar(&sidecarDefaults, "sidecar-defaults", "", "JSON object in the form of a CacheCluster's spec.sidecar (imagePullSecrets, priorityClassName, affinity, podLabels, podAnnotations, resources, podSecurityContext, securityContext) for the fields a cluster leaves unset, and tolerations added to every cluster's")
	fs.IntVar(&s.opts.Allocation.SolverWorkers, "solver-workers", allocation.DefaultSolverWorkers, "CP-SAT workers per solve (1 makes plans reproducible)")
	fs.StringVar(&solverMemory, "solver-memory-limit", "", "the operator's resident memory (C++ included) at which a solve stops and keeps its best plan so far, a quantity such as 900Mi; 0: no limit (default: 90% of the container's memory limit, none without one)")
	fs.DurationVar(&s.opts.Allocation.Debounce, "allocation-debounce", allocation.DefaultDebounce, "delay between a change and the allocation it triggers")
	fs.IntVar(&s.opts.Allocation.ApplyDeadlineIntervals, "apply-deadline-intervals", allocation.DefaultApplyDeadlineIntervals, "allocation intervals a sidecar may take to apply a plan before the cluster is Degraded")
	fs.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "lowest level logged: DEBUG, INFO, WARN or ERROR")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if sidecarDefaults != "" {
		if err := decodeStrict(sidecarDefaults, &s.opts.SidecarDefaults); err != nil {
			return s, fmt.Errorf("--sidecar-defaults: %w", err)
		}
		if err := s.opts.SidecarDefaults.Validate(); err != nil {
			return s, fmt.Errorf("--sidecar-defaults: %w", err)
		}
	}
	if solverMemory != "" {
		q, err := resource.ParseQuantity(solverMemory)
		if err != nil {
			return s, fmt.Errorf("--solver-memory-limit: %w", err)
		}
		if q.Sign() < 0 {
			return s, fmt.Errorf("--solver-memory-limit: %s is negative", solverMemory)
		}
		s.solverMemory = &q
	}
	if promHTTPConfig != "" {
		c, err := promquery.LoadHTTPClient(promHTTPConfig)
		if err != nil {
			return s, fmt.Errorf("--prometheus-http-config: %w", err)
		}
		s.opts.Allocation.HTTPClient = c
	}
	return s, nil
}

func run() error {
	s, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.logLevel})))
	ctrl.Log.Info("starting the cacheqos operator", "version", version)
	if limit, err := applyMemoryLimit(os.Getenv("GOMEMLIMIT"), cgroupMemoryMax); err != nil {
		ctrl.Log.Error(err, "no soft memory limit from the container's: the heap may grow to twice its live size")
	} else if limit > 0 {
		ctrl.Log.Info("soft memory limit set from the container's", "bytes", limit, "share", goMemoryShare)
	}
	if s.opts.Allocation.SolverMemoryLimit, err = solverMemoryLimit(s.solverMemory, cgroupMemoryMax); err != nil {
		return fmt.Errorf("--solver-memory-limit: no default from the container's memory limit: %w", err)
	}
	ctrl.Log.Info("solver memory limit", "bytes", s.opts.Allocation.SolverMemoryLimit)

	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(namespaces(s.watchNS)...),
		Metrics:                       metricsOptions(s),
		HealthProbeBindAddress:        s.probeAddr,
		LeaderElection:                s.leaderElect,
		LeaderElectionID:              "cacheqos-operator.cacheqos.io",
		LeaderElectionNamespace:       s.leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr.To(30 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := controllers.Setup(ctx, mgr, s.opts); err != nil {
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

// decodeStrict decodes one JSON object into v, refusing unknown fields (a misspelt chart
// value must not vanish) and trailing data.
func decodeStrict(data string, v any) error {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
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

// metricsOptions serves the metrics as --metrics-secure says.
func metricsOptions(s settings) metricsserver.Options {
	o := metricsserver.Options{BindAddress: s.metricsAddr}
	if s.metricsSecure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
