// Command cacheqos-loadgen drives many cache tenants at once against redis or memcached,
// directly or through the cacheqos sidecar proxy, and reports each tenant's hit ratio and
// latency percentiles over time: as lines on stdout, as CSV rows and as Prometheus metrics.
// Run it with --help for the flags and the configuration format; internal/loadgen documents
// the request semantics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cacheqos/cacheqos/internal/loadgen"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the run failed (the CSV could not be written, the metrics address is taken)
	exitUsage = 2 // the command line or the configuration is wrong
)

var usageText = `Usage: cacheqos-loadgen [flags]

Drives cache tenants against redis or memcached (directly or through the cacheqos sidecar
proxy) and reports per tenant, every interval: accesses per second, hit ratio, p50/p95/p99
latency, errors and throttled requests, on stdout, as CSV rows (--csv) and as Prometheus
metrics (--metrics-listen, with /healthz). It runs for --duration, or until SIGTERM/SIGINT;
either way it waits for the requests in flight and completes the CSV before exiting.

Each access is cache-aside: GET the key, and on a miss SET it to a value of the workload's
size (a share writeFraction of the accesses SET instead of GET). A tenant's target rate is
spread over its connections, each with at most inflight requests outstanding.

Tenants come from --config (YAML or JSON) and from --tenant flags (both may be used; flags
given explicitly override the file's settings). Example config:

  interval: 5s            # report every 5 s (default)
  duration: 10m           # 0 or absent: until SIGTERM
  timeout: 5s             # connect, authenticate and each request (default)
  seed: 1                 # tenants' seeds derive from it and their names
  csv: /results/loadgen.csv
  metricsListen: ":9390"
  tenants:
  - name: team-a/orders   # tenant ID <namespace>/<name> (the proxy's user name)
    engine: redis         # redis or memcached
    address: cache.cacheqos.svc:6379   # host:port or unix:/path; default: credentialsDir/endpoint
    credentialsDir: /etc/cacheqos/team-a-orders   # Secret orders-cache-credentials mounted:
                                                   # files username, password, endpoint
    workload: "zipf:keys=100000,skew=0.99,value=100-4096"
    rate: 2000            # accesses/s over all connections; 0: as fast as possible
    connections: 8        # default 4
    inflight: 4           # pipelined requests per connection (default 4); through a rate-
                          # limited proxy each may wait 1 s: keep it below timeout in seconds
    writeFraction: 0.05   # default 0
  - name: team-b/batch
    engine: redis
    address: cache.cacheqos.svc:6379
    passwordFile: /etc/cacheqos/team-b-batch/password   # or password: "..."; user: defaults to name
    workload: "scan:keys=1000000,value=4096"
    rate: 20000
    start: 2m             # noisy neighbour: starts 2 minutes in...
    stop: 6m              # ...and stops at 6 minutes

Workload specs (internal/workload): zipf:keys=N,skew=S,value=V  uniform:keys=N,value=V
loop:keys=N,value=V  scan:keys=N,value=V  phase:N@SPEC;N@SPEC[;prefix=P]
trace:[prefix=P,]file=PATH; value= is N, MIN-MAX or MIN-MAX/log bytes; prefix= prefixes keys.
A tenant's connections share one generator, so loops, scans and phases keep their order
across connections, and phase lengths count the tenant's accesses.

A tenant without password, passwordFile or credentialsDir does not authenticate (an engine
without authentication); redis authenticates with AUTH <user> <password>, memcached with a
first "set" whose value is "<user> <password>" (memcached -Y, as the sidecar proxy expects).
For a plain redis-server with requirepass, give user: default.

--tenant takes the same keys as comma-separated key=value pairs, workload= last (it takes the
rest of the string):

  cacheqos-loadgen --duration 1m --interval 1s \
    --tenant name=test/zipf,engine=redis,address=127.0.0.1:6379,rate=5000,workload=zipf:keys=100000,skew=0.99

In Kubernetes, mount each tenant's Secret <name>-cache-credentials (keys username, password,
endpoint; the operator writes it in the tenant's namespace) as a directory and point
credentialsDir at it; the password is read again at every reconnection.

Reports: the CSV has one row per tenant per interval (empty cells: no reads, no replies):
  ` + strings.Join(loadgen.CSVHeader, ",") + `
Metrics, labelled tenant: cacheqos_loadgen_operations_total, _requests_total{op=get|set},
_hits_total, _misses_total, _throttled_total, _errors_total{kind=auth|connect|reply|io},
_request_duration_seconds{op} (histogram), _connections, _target_rate.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	showVersion bool
	check       bool
	configFile  string
	tenants     []string
	logLevel    string
	// set holds the flags given explicitly, which override the config file.
	set map[string]bool

	interval, duration, timeout time.Duration
	seed                        uint64
	csv, metricsListen          string
}

type tenantFlags []string

func (t *tenantFlags) String() string     { return strings.Join(*t, " ") }
func (t *tenantFlags) Set(s string) error { *t = append(*t, s); return nil }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	fs := flag.NewFlagSet("cacheqos-loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.BoolVar(&o.check, "check", false, "validate the configuration (credential files included), print the tenants and exit")
	fs.StringVar(&o.configFile, "config", "", "YAML or JSON configuration file")
	fs.Var((*tenantFlags)(&o.tenants), "tenant", "a tenant as `key=value,...` pairs, workload= last (repeatable)")
	fs.DurationVar(&o.interval, "interval", loadgen.DefaultInterval, "report interval")
	fs.DurationVar(&o.duration, "duration", 0, "how long to run (0: until SIGTERM)")
	fs.DurationVar(&o.timeout, "timeout", loadgen.DefaultTimeout, "bound on connecting, authenticating and each request")
	fs.Uint64Var(&o.seed, "seed", 0, "seed the tenants' seeds derive from")
	fs.StringVar(&o.csv, "csv", "", "write per-tenant rows every interval to this CSV file")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve /metrics and /healthz on this address (e.g. :9390)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (the log goes to stderr)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, err
	}
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q is not debug, info, warn or error", s)
	}
	return l, nil
}

// config reads the config file, adds the --tenant flags and applies the explicit flags.
func (o *options) config() (loadgen.Config, error) {
	var cfg loadgen.Config
	if o.configFile != "" {
		var err error
		if cfg, err = loadgen.LoadConfigFile(o.configFile); err != nil {
			return loadgen.Config{}, err
		}
	}
	var errs []error
	for _, s := range o.tenants {
		t, err := loadgen.ParseTenantFlag(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tenant: %w", err))
			continue
		}
		cfg.Tenants = append(cfg.Tenants, t)
	}
	if err := errors.Join(errs...); err != nil {
		return loadgen.Config{}, err
	}
	for name, apply := range map[string]func(){
		"interval":       func() { cfg.Interval = loadgen.Duration(o.interval) },
		"duration":       func() { cfg.Duration = loadgen.Duration(o.duration) },
		"timeout":        func() { cfg.Timeout = loadgen.Duration(o.timeout) },
		"seed":           func() { cfg.Seed = o.seed },
		"csv":            func() { cfg.CSV = o.csv },
		"metrics-listen": func() { cfg.MetricsListen = o.metricsListen },
	} {
		if o.set[name] {
			apply()
		}
	}
	return cfg, cfg.Validate()
}

// run is the whole command; main adds only signals and the exit code, so tests drive this.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "cacheqos-loadgen: %v\n", err)
		return exitUsage
	}
	if o.showVersion {
		fmt.Fprintf(stdout, "cacheqos-loadgen %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintf(stderr, "cacheqos-loadgen: %v\n", err)
		return exitUsage
	}
	if o.check {
		printTenants(stdout, cfg)
		return exitOK
	}
	level, _ := parseLevel(o.logLevel)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			log.Error("metrics listener", "error", err)
			return exitError
		}
		srv := &http.Server{Handler: httpHandler(registry), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener stopped", "error", err)
			}
		}()
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutdownCtx); err != nil {
				log.Warn("stopping the metrics server", "error", err)
			}
		}()
		log.Info("listening", "metrics", ln.Addr().String())
	}

	if _, err := loadgen.Run(ctx, cfg, loadgen.Env{Report: stdout, Logger: log, Registerer: registry}); err != nil {
		log.Error("cacheqos-loadgen failed", "error", err)
		return exitError
	}
	return exitOK
}

func httpHandler(registry *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// printTenants lists the validated configuration for --check.
func printTenants(w io.Writer, cfg loadgen.Config) {
	fmt.Fprintf(w, "configuration valid: %d tenant(s)\n", len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		rate := "max"
		if t.Rate > 0 {
			rate = fmt.Sprintf("%g/s", t.Rate)
		}
		address := t.Address
		if address == "" {
			address = "(endpoint of " + t.CredentialsDir + ")"
		}
		fmt.Fprintf(w, "  %s: %s at %s, rate %s, workload %s\n", t.Name, t.Engine, address, rate, t.Workload)
	}
}
