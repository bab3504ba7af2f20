// Command cache-sidecar is cacheqos' node agent and proxy: it runs one cache engine process
// per tenant partition of the node's CacheNodePlan, serves tenants' clients on the engine's
// protocol (authenticating them and routing keys across nodes), and reports what it applied
// in the plan's status.
//
// In a cluster it runs in the CacheCluster's DaemonSet and follows the CacheNodePlan named by
// --plan-name (default "<cluster>-<node>"):
//
//	cache-sidecar --engine redis --node-name $NODE_NAME --namespace $POD_NAMESPACE --cluster-name shared
//
// Standalone, for local runs and benchmarks, it follows a plan file and a credentials file
// with the same code path:
//
//	cache-sidecar --engine redis --plan-file plan.yaml --credentials-file secret.yaml --status-file status.yaml
//
// Every flag can also be set through the environment variable named in its help. On SIGTERM
// or SIGINT it turns not ready, keeps serving for --shutdown-delay so load balancers notice,
// then stops accepting, lets open connections finish the requests they already sent (for up
// to --drain-timeout) and closes them; engines keep running for the next sidecar to adopt
// unless --stop-engines-on-exit stops them or --save-engines-on-exit saves the engines'
// data and stops them.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/cacheqos/cacheqos/cache-sidecar/agent"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"
	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the sidecar ran and failed
	exitUsage = 2 // the command line is wrong
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line, after defaults from the environment.
type options struct {
	showVersion bool

	nodeName    string
	namespace   string
	clusterName string
	planName    string
	kubeconfig  string

	planFile        string
	credentialsFile string
	statusFile      string

	engine          string
	stateRoot       string
	redisServer     string
	memcached       string
	engineUser      string
	memcachedThread int

	clientListen   string
	clientTLSCert  string
	clientTLSKey   string
	peerTLSCert    string
	peerTLSKey     string
	peerTLSCA      string
	peerIdentity   string
	peerListen     string
	metricsListen  string
	metricsTLSCert string
	metricsTLSKey  string
	metricsSecure  bool
	pprof          bool

	refreshInterval   time.Duration
	shutdownDelay     time.Duration
	peerRetryWindow   time.Duration
	peerFailover      bool
	drainTimeout      time.Duration
	stopEnginesOnExit bool
	saveEnginesOnExit bool
	saveTimeout       time.Duration

	logLevel  string
	logFormat string

	mrcSamplingRate   float64
	mrcMaxTrackedKeys int
	mrcCurvePoints    int

	preAuthMaxRequestBytes int
	loginTimeout           time.Duration
	idleTimeout            time.Duration
	maxClientConnections   int
	maxConnReplyBytes      int64
	maxReplyBytesInFlight  int64
	authBackoffFailures    int
	authBackoff            time.Duration
	authBackoffMax         time.Duration
}

// Default listen addresses: the engine's usual client port, so clients need no change.
const (
	defaultRedisClientListen     = ":6379"
	defaultMemcachedClientListen = ":11211"
	defaultPeerListen            = ":7380"
	defaultMetricsListen         = ":9380"
	// defaultStateRoot is short on purpose: engine sockets live below it (at most 76 bytes).
	defaultStateRoot = "/run/cacheqos"
)

// parseFlags reads the command line; every flag's default comes from its environment variable
// when that is set.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("cache-sidecar", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, env, def, help string) {
		fs.StringVar(p, name, envOr(getenv, env, def), help+" ($"+env+")")
	}
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	str(&o.nodeName, "node-name", "NODE_NAME", "", "the node this sidecar runs on (standalone: defaults to the plan's spec.nodeName)")
	str(&o.namespace, "namespace", "POD_NAMESPACE", "", "namespace of the CacheCluster, its plans and its credentials Secret")
	str(&o.clusterName, "cluster-name", "CLUSTER_NAME", "", "the CacheCluster; the plan is \"<cluster>-<node>\" unless --plan-name says otherwise")
	str(&o.planName, "plan-name", "PLAN_NAME", "", "the node's CacheNodePlan")
	str(&o.kubeconfig, "kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty: the in-cluster service account")
	str(&o.planFile, "plan-file", "PLAN_FILE", "", "standalone: follow this CacheNodePlan manifest instead of the API server")
	str(&o.credentialsFile, "credentials-file", "CREDENTIALS_FILE", "", "standalone: Secret manifest with the credential hashes and the peer token")
	str(&o.statusFile, "status-file", "STATUS_FILE", "", "standalone: write the plan with its status here after every pass")
	str(&o.engine, "engine", "ENGINE", "", "engine of the cluster: redis or memcached (required)")
	str(&o.stateRoot, "state-root", "STATE_ROOT", defaultStateRoot, "directory of the engines' sockets, pidfiles and logs (at most 76 bytes long)")
	str(&o.redisServer, "redis-server", "REDIS_SERVER", "", "redis-server executable (default: from PATH)")
	str(&o.memcached, "memcached", "MEMCACHED", "", "memcached executable (default: from PATH)")
	str(&o.engineUser, "engine-user", "ENGINE_USER", "nobody", "user memcached runs as when the sidecar runs as root")
	str(&o.clientListen, "client-listen", "CLIENT_LISTEN", "", "address for tenants' clients (default "+defaultRedisClientListen+" for redis, "+defaultMemcachedClientListen+" for memcached)")
	str(&o.clientTLSCert, "client-tls-cert-file", "CLIENT_TLS_CERT_FILE", "", "serve clients over TLS with this PEM certificate (chain), read again when it changes; needs --client-tls-key-file")
	str(&o.clientTLSKey, "client-tls-key-file", "CLIENT_TLS_KEY_FILE", "", "PEM private key of --client-tls-cert-file")
	str(&o.peerTLSCert, "peer-tls-cert-file", "PEER_TLS_CERT_FILE", "", "talk to peer sidecars over mutual TLS with this PEM certificate, read again when it changes; needs the other --peer-tls flags")
	str(&o.peerTLSKey, "peer-tls-key-file", "PEER_TLS_KEY_FILE", "", "PEM private key of --peer-tls-cert-file")
	str(&o.peerTLSCA, "peer-tls-ca-file", "PEER_TLS_CA_FILE", "", "PEM CA bundle peers' certificates must chain to, read again when it changes")
	str(&o.peerIdentity, "peer-tls-identity", "PEER_TLS_IDENTITY", "", "URI peers' certificates must carry (the operator's: cacheqos://<namespace>/<cluster>)")
	str(&o.peerListen, "peer-listen", "PEER_LISTEN", defaultPeerListen, "address for peer sidecars (the plan's routes point here)")
	str(&o.metricsListen, "metrics-listen", "METRICS_LISTEN", defaultMetricsListen, "address of /metrics, /healthz and /readyz")
	str(&o.metricsTLSCert, "metrics-tls-cert-file", "METRICS_TLS_CERT_FILE", "", "serve the metrics address over HTTPS with this PEM certificate, read again when it changes; needs --metrics-tls-key-file")
	str(&o.metricsTLSKey, "metrics-tls-key-file", "METRICS_TLS_KEY_FILE", "", "PEM private key of --metrics-tls-cert-file")
	str(&o.logLevel, "log-level", "LOG_LEVEL", "info", "debug, info, warn or error")
	str(&o.logFormat, "log-format", "LOG_FORMAT", "json", "json or text")
	fs.IntVar(&o.memcachedThread, "memcached-threads", 0, "worker threads per memcached partition (default: the engine manager's)")
	fs.Float64Var(&o.mrcSamplingRate, "mrc-sampling-rate", proxy.DefaultMRCSampleRate, "initial fraction of each partition's keys its miss-ratio curve samples, in (0, 1] (lowered when --mrc-max-tracked-keys is reached)")
	fs.IntVar(&o.mrcMaxTrackedKeys, "mrc-max-tracked-keys", proxy.DefaultMRCMaxTrackedKeys, "keys each partition's miss-ratio curve remembers at most (64 or more)")
	fs.IntVar(&o.mrcCurvePoints, "mrc-curve-points", proxy.DefaultMRCCurvePoints, "sizes each partition's miss-ratio curve is exported at (3 to 64)")
	fs.IntVar(&o.preAuthMaxRequestBytes, "pre-auth-max-request-bytes", proxy.DefaultPreAuthMaxRequestBytes, "largest request (redis argument or command, memcached data block) a client may send before it authenticates")
	fs.DurationVar(&o.loginTimeout, "login-timeout", proxy.DefaultLoginTimeout, "close a client connection that has not authenticated this long after connecting")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, "close an authenticated client connection that sends no request for this long (0: never)")
	fs.IntVar(&o.maxClientConnections, "max-client-connections", proxy.DefaultMaxClientConnections, "client connections open at once on this sidecar; more are answered an error and closed")
	fs.Int64Var(&o.maxConnReplyBytes, "max-connection-reply-bytes", proxy.DefaultMaxConnectionReplyBytes, "reply bytes the sidecar holds for one client connection (read from engines, not yet taken by the client) before it reads no more of its requests and replies; a connection holds at most this plus one reply")
	fs.Int64Var(&o.maxReplyBytesInFlight, "max-reply-bytes-in-flight", proxy.DefaultMaxReplyBytesInFlight, "reply bytes the sidecar holds for all its connections before it reads no more replies for connections that hold some (at least --max-connection-reply-bytes)")
	fs.IntVar(&o.authBackoffFailures, "auth-backoff-failures", proxy.DefaultAuthBackoffFailures, "failed logins in a row from one address after which its logins are refused for --auth-backoff, doubling up to --auth-backoff-max")
	fs.DurationVar(&o.authBackoff, "auth-backoff", proxy.DefaultAuthBackoff, "first wait of an address that failed --auth-backoff-failures logins in a row")
	fs.DurationVar(&o.authBackoffMax, "auth-backoff-max", proxy.DefaultAuthBackoffMax, "longest wait of an address that keeps failing logins")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "serve /metrics (and /debug/pprof) only to clients whose bearer token the API server authenticates (TokenReview) and authorizes to get that path (SubjectAccessReview); needs --metrics-tls-cert-file, so tokens travel encrypted; /healthz and /readyz stay open for the kubelet's probes")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve /debug/pprof on the metrics address")
	fs.DurationVar(&o.refreshInterval, "refresh-interval", agent.DefaultRefreshInterval, "how often status is refreshed without any change")
	fs.DurationVar(&o.peerRetryWindow, "peer-retry-window", proxy.DefaultPeerRetryWindow, "how long the requests for a peer sidecar that announced its restart (one restarting in place; its announcement stands for 30 s or until it is reached) wait while the peer is redialed, counted from the first dial refused after the announcement, before they are answered: a plain read as a miss, other requests with the error; a peer that cannot be reached without having announced a restart (killed, its node lost) is not waited for (positive)")
	fs.BoolVar(&o.peerFailover, "peer-failover", true, "route the keys of a peer sidecar that cannot be reached (without having announced a restart, or beyond --peer-retry-window after it did) to their tenants' other nodes until a probe reaches it again, then delete from both nodes the keys written meanwhile; false answers its keys as --peer-retry-window says until the plan changes")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 5*time.Second, "how long the sidecar keeps serving, not ready, after it was told to stop")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Second, "after the shutdown delay, how long open connections may take to get the replies to requests they already sent before they are closed")
	fs.BoolVar(&o.stopEnginesOnExit, "stop-engines-on-exit", false, "stop every engine on exit instead of leaving them for the next sidecar to adopt")
	fs.BoolVar(&o.saveEnginesOnExit, "save-engines-on-exit", false, "on exit, stop every engine after saving its data into the state root (redis: its snapshot; memcached: its live items), where the next sidecar's engines load it (for containers, whose engines die with the sidecar); bounded by --save-timeout")
	fs.DurationVar(&o.saveTimeout, "save-timeout", time.Minute, "how long --save-engines-on-exit may take; engines still saving then are stopped without their data")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.showVersion {
		return o, nil
	}
	return o, o.validate()
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// validate checks the options and fills the defaults that depend on others.
func (o *options) validate() error {
	var errs []error
	switch o.engine {
	case string(engine.Redis):
		o.clientListen = cmp.Or(o.clientListen, defaultRedisClientListen)
	case string(engine.Memcached):
		o.clientListen = cmp.Or(o.clientListen, defaultMemcachedClientListen)
	case "":
		errs = append(errs, errors.New("--engine is required (redis or memcached)"))
	default:
		errs = append(errs, fmt.Errorf("--engine %q is neither redis nor memcached", o.engine))
	}
	if o.planFile == "" {
		if o.nodeName == "" {
			errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
		}
		if o.namespace == "" {
			errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required"))
		}
		if o.planName == "" && o.clusterName == "" {
			errs = append(errs, errors.New("--plan-name or --cluster-name is required to find the node's plan"))
		}
		if o.planName == "" && o.clusterName != "" && o.nodeName != "" {
			o.planName = o.clusterName + "-" + o.nodeName
		}
		if o.credentialsFile != "" || o.statusFile != "" {
			errs = append(errs, errors.New("--credentials-file and --status-file need --plan-file"))
		}
	}
	if (o.clientTLSCert == "") != (o.clientTLSKey == "") {
		errs = append(errs, errors.New("--client-tls-cert-file and --client-tls-key-file go together"))
	}
	if (o.metricsTLSCert == "") != (o.metricsTLSKey == "") {
		errs = append(errs, errors.New("--metrics-tls-cert-file and --metrics-tls-key-file go together"))
	}
	if o.metricsSecure && o.metricsTLSCert == "" {
		errs = append(errs, errors.New("--metrics-secure needs --metrics-tls-cert-file and --metrics-tls-key-file: bearer tokens must not travel in cleartext"))
	}
	if peerTLS := []string{o.peerTLSCert, o.peerTLSKey, o.peerTLSCA, o.peerIdentity}; slices.Contains(peerTLS, "") && slices.ContainsFunc(peerTLS, func(s string) bool { return s != "" }) {
		errs = append(errs, errors.New("--peer-tls-cert-file, --peer-tls-key-file, --peer-tls-ca-file and --peer-tls-identity go together"))
	}
	if o.refreshInterval <= 0 {
		errs = append(errs, fmt.Errorf("--refresh-interval %v must be positive", o.refreshInterval))
	}
	if o.peerRetryWindow <= 0 {
		errs = append(errs, fmt.Errorf("--peer-retry-window %v must be positive", o.peerRetryWindow))
	}
	if o.shutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay %v is negative", o.shutdownDelay))
	}
	if o.drainTimeout < 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout %v is negative", o.drainTimeout))
	}
	if o.stopEnginesOnExit && o.saveEnginesOnExit {
		errs = append(errs, errors.New("--stop-engines-on-exit and --save-engines-on-exit exclude each other"))
	}
	if o.saveTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--save-timeout %v must be positive", o.saveTimeout))
	}
	if !(o.mrcSamplingRate > 0 && o.mrcSamplingRate <= 1) {
		errs = append(errs, fmt.Errorf("--mrc-sampling-rate %v is outside (0, 1]", o.mrcSamplingRate))
	}
	if o.mrcMaxTrackedKeys < 64 {
		errs = append(errs, fmt.Errorf("--mrc-max-tracked-keys %d is below 64", o.mrcMaxTrackedKeys))
	}
	if o.mrcCurvePoints < 3 || o.mrcCurvePoints > mrc.MaxCurveSizes {
		errs = append(errs, fmt.Errorf("--mrc-curve-points %d is outside 3..%d", o.mrcCurvePoints, mrc.MaxCurveSizes))
	}
	for name, v := range map[string]int{
		"--pre-auth-max-request-bytes": o.preAuthMaxRequestBytes, "--max-client-connections": o.maxClientConnections,
		"--auth-backoff-failures": o.authBackoffFailures,
	} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s %d must be positive", name, v))
		}
	}
	for name, v := range map[string]time.Duration{
		"--login-timeout": o.loginTimeout, "--auth-backoff": o.authBackoff, "--auth-backoff-max": o.authBackoffMax,
	} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s %v must be positive", name, v))
		}
	}
	if o.idleTimeout < 0 {
		errs = append(errs, fmt.Errorf("--idle-timeout %v is negative", o.idleTimeout))
	}
	if o.maxConnReplyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-connection-reply-bytes %d must be positive", o.maxConnReplyBytes))
	}
	if o.maxReplyBytesInFlight < o.maxConnReplyBytes {
		errs = append(errs, fmt.Errorf("--max-reply-bytes-in-flight %d is below --max-connection-reply-bytes %d", o.maxReplyBytesInFlight, o.maxConnReplyBytes))
	}
	if o.authBackoffMax < o.authBackoff {
		errs = append(errs, fmt.Errorf("--auth-backoff-max %v is below --auth-backoff %v", o.authBackoffMax, o.authBackoff))
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		errs = append(errs, err)
	}
	if o.logFormat != "json" && o.logFormat != "text" {
		errs = append(errs, fmt.Errorf("--log-format %q is neither json nor text", o.logFormat))
	}
	return errors.Join(errs...)
}

// engineBinary is the executable flag of the chosen engine.
func (o *options) engineBinary() string {
	if o.engine == string(engine.Memcached) {
		return o.memcached
	}
	return o.redisServer
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q is not debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(o *options, w io.Writer) *slog.Logger {
	level, _ := parseLevel(o.logLevel)
	hopts := &slog.HandlerOptions{Level: level}
	if o.logFormat == "text" {
		return slog.New(slog.NewTextHandler(w, hopts))
	}
	return slog.New(slog.NewJSONHandler(w, hopts))
}

// run is the whole command; main adds only signals and the exit code, so tests drive this.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, os.Getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "cache-sidecar: %v\n", err)
		return exitUsage
	}
	if o.showVersion {
		fmt.Fprintf(stdout, "cache-sidecar %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	log := newLogger(o, stderr)
	// client-go logs through klog; send it to the same structured log.
	klog.SetSlogLogger(log.With("component", "client-go"))
	if err := serve(ctx, o, log); err != nil {
		log.Error("cache-sidecar failed", "error", err)
		return exitError
	}
	return exitOK
}

// serve runs the sidecar until ctx ends, then shuts it down.
func serve(ctx context.Context, o *options, log *slog.Logger) error {
	var plan string
	if o.planFile != "" {
		p, err := agent.LoadPlan(o.planFile)
		if err != nil {
			return err
		}
		o.nodeName = cmp.Or(o.nodeName, p.Spec.NodeName)
		plan = p.Name
	}
	log = log.With("node", o.nodeName)
	log.Info("starting", "version", version, "engine", o.engine, "stateRoot", o.stateRoot, "client", o.clientListen, "clientTLS", o.clientTLSCert != "", "peerTLS", o.peerTLSCert != "",
		"metricsTLS", o.metricsTLSCert != "", "metricsSecure", o.metricsSecure,
		"peer", o.peerListen, "metrics", o.metricsListen, "planFile", o.planFile, "plan", cmp.Or(o.planName, plan))

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var peerTLS *pki.Peer
	if o.peerTLSCert != "" {
		var err error
		if peerTLS, err = pki.NewPeer(o.peerTLSCert, o.peerTLSKey, o.peerTLSCA, o.peerIdentity, func(err error) {
			log.Warn("the peer TLS certificate files changed but do not load; the previous certificate is still used", "error", err)
		}); err != nil {
			return fmt.Errorf("peer TLS: %w", err)
		}
	}
	px, err := proxy.New(proxy.Options{
		Protocol: proxy.Protocol(o.engine),
		PeerTLS:  peerTLS,
		Registry: registry,
		NodeName: o.nodeName,
		Logger:   log.With("component", "proxy"),

		MRCSampleRate:     o.mrcSamplingRate,
		MRCMaxTrackedKeys: o.mrcMaxTrackedKeys,
		MRCCurvePoints:    o.mrcCurvePoints,

		PreAuthMaxRequestBytes:  o.preAuthMaxRequestBytes,
		LoginTimeout:            o.loginTimeout,
		IdleTimeout:             o.idleTimeout,
		MaxClientConnections:    o.maxClientConnections,
		MaxConnectionReplyBytes: o.maxConnReplyBytes,
		MaxReplyBytesInFlight:   o.maxReplyBytesInFlight,
		AuthBackoffFailures:     o.authBackoffFailures,
		AuthBackoff:             o.authBackoff,
		AuthBackoffMax:          o.authBackoffMax,
		PeerRetryWindow:         o.peerRetryWindow,
		DisablePeerFailover:     !o.peerFailover,
	})
	if err != nil {
		return err
	}
	defer px.Close()

	ag, err := agent.New(ctx, agent.Config{
		NodeName: o.nodeName,
		Engines: engine.Config{
			Engine:           engine.Engine(o.engine),
			Root:             o.stateRoot,
			BinaryPath:       o.engineBinary(),
			EngineUser:       o.engineUser,
			MemcachedThreads: o.memcachedThread,
		},
		Proxy:           px,
		Registry:        registry,
		RefreshInterval: o.refreshInterval,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	defer ag.Close()

	var stopping atomic.Bool
	var restConfig *rest.Config
	if o.planFile == "" || o.metricsSecure {
		if restConfig, err = kubeConfig(o); err != nil {
			return err
		}
	}
	protect, err := metricsAccess(o, restConfig, log)
	if err != nil {
		return err
	}
	handler, err := httpHandler(px, o.pprof, &stopping, protect)
	if err != nil {
		return err
	}
	clientLn, err := listen("client", o.clientListen, o.clientTLSCert, o.clientTLSKey, log)
	if err != nil {
		return err
	}
	peerLn, err := net.Listen("tcp", o.peerListen)
	if err != nil {
		clientLn.Close()
		return fmt.Errorf("peer listener: %w", err)
	}
	metricsLn, err := listen("metrics", o.metricsListen, o.metricsTLSCert, o.metricsTLSKey, log)
	if err != nil {
		clientLn.Close()
		peerLn.Close()
		return err
	}
	httpServer := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go serveLogged(log, "client listener", func() error { return px.Serve(clientLn) })
	go serveLogged(log, "peer listener", func() error { return px.ServePeer(peerLn) })
	go serveLogged(log, "metrics listener", func() error { return httpServer.Serve(metricsLn) })
	log.Info("listening", "client", clientLn.Addr().String(), "peer", peerLn.Addr().String(), "metrics", metricsLn.Addr().String())

	var runErr error
	if o.planFile != "" {
		runErr = ag.RunStandalone(ctx, agent.StandaloneConfig{
			PlanFile:        o.planFile,
			CredentialsFile: o.credentialsFile,
			StatusFile:      o.statusFile,
		})
	} else {
		runErr = runInCluster(ctx, o, restConfig, ag)
	}
	if runErr != nil && ctx.Err() == nil {
		log.Error("the agent stopped", "error", runErr)
	}

	// Shutdown: not ready first, so endpoints stop sending new clients; then stop accepting and
	// let open connections finish the requests they sent before they close, while the engines
	// still run; engines stay for the next sidecar unless told otherwise.
	stopping.Store(true)
	log.Info("shutting down", "delay", o.shutdownDelay, "drainTimeout", o.drainTimeout, "stopEngines", o.stopEnginesOnExit)
	time.Sleep(o.shutdownDelay)
	// Shutdown closes the listeners it serves; a listener closed before it would count as
	// failed and fail /healthz.
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), o.drainTimeout)
	if err := px.Shutdown(drainCtx); err != nil {
		log.Warn("closed connections whose replies were still due after the drain timeout", "timeout", o.drainTimeout)
	}
	cancelDrain()
	clientLn.Close()
	peerLn.Close()
	switch {
	case o.stopEnginesOnExit:
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ag.StopEngines(stopCtx); err != nil {
			log.Error("stopping engines", "error", err)
		}
	case o.saveEnginesOnExit:
		saveCtx, cancel := context.WithTimeout(context.Background(), o.saveTimeout)
		defer cancel()
		if err := ag.SaveEngines(saveCtx); err != nil {
			log.Error("saving engines", "error", err)
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		log.Warn("stopping the metrics server", "error", err)
	}
	log.Info("stopped")
	return runErr
}

// listen opens the listener of what ("client", "metrics") at addr, serving TLS when a
// certificate is given. The handshake runs on the connection's first read, in its own
// goroutine: for clients that read is bounded by the login timeout like any other
// pre-authentication read.
func listen(what, addr, certFile, keyFile string, log *slog.Logger) (net.Listener, error) {
	var reloader *pki.Reloader
	if certFile != "" {
		var err error
		reloader, err = pki.NewReloader(certFile, keyFile, func(err error) {
			log.Warn("the "+what+" TLS certificate files changed but do not load; the previous certificate is still served", "error", err)
		})
		if err != nil {
			return nil, fmt.Errorf("%s TLS: %w", what, err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", what, err)
	}
	if reloader == nil {
		return ln, nil
	}
	return tls.NewListener(ln, reloader.ServerConfig()), nil
}

// kubeConfig is how the sidecar reaches the API server: --kubeconfig, or the in-cluster
// service account.
func kubeConfig(o *options) (*rest.Config, error) {
	fs := flag.NewFlagSet("kubeconfig", flag.ContinueOnError)
	ctrlconfig.RegisterFlags(fs)
	if o.kubeconfig != "" {
		if err := fs.Set(ctrlconfig.KubeconfigFlagName, o.kubeconfig); err != nil {
			return nil, err
		}
	}
	restConfig, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("reaching the API server: %w", err)
	}
	restConfig.UserAgent = "cache-sidecar/" + version
	return restConfig, nil
}

// metricsAccess returns what wraps the metrics handlers: with --metrics-secure, the API
// server's authentication (TokenReview) and authorization (SubjectAccessReview of the
// request's verb on its path) of the request's bearer token, the operator's own metrics
// filter; otherwise nothing.
func metricsAccess(o *options, restConfig *rest.Config, log *slog.Logger) (func(http.Handler) (http.Handler, error), error) {
	if !o.metricsSecure {
		return func(h http.Handler) (http.Handler, error) { return h, nil }, nil
	}
	httpClient, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(restConfig, httpClient)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: %w", err)
	}
	logger := logr.FromSlogHandler(log.With("component", "metrics-auth").Handler())
	return func(h http.Handler) (http.Handler, error) { return filter(logger, h) }, nil
}

func runInCluster(ctx context.Context, o *options, restConfig *rest.Config, ag *agent.Agent) error {
	return ag.RunKubernetes(ctx, agent.KubeConfig{RestConfig: restConfig, Namespace: o.namespace, PlanName: o.planName})
}

func serveLogged(log *slog.Logger, what string, serve func() error) {
	if err := serve(); err != nil && !errors.Is(err, proxy.ErrClosed) && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		log.Error(what+" stopped", "error", err)
	}
}

// httpHandler serves the proxy's /metrics, /healthz and /readyz, with /readyz failing once the
// sidecar is stopping, and /debug/pprof when asked for. protect wraps what only authorized
// clients may read (/metrics, /debug/pprof); the health endpoints stay open for the kubelet.
func httpHandler(px *proxy.Proxy, withPprof bool, stopping *atomic.Bool, protect func(http.Handler) (http.Handler, error)) (http.Handler, error) {
	mux := http.NewServeMux()
	proxyHandler := px.Handler()
	mux.Handle("/healthz", proxyHandler)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if stopping.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		proxyHandler.ServeHTTP(w, r)
	})
	private := http.NewServeMux()
	private.Handle("/metrics", proxyHandler)
	if withPprof {
		private.HandleFunc("/debug/pprof/", pprof.Index)
		private.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		private.HandleFunc("/debug/pprof/profile", pprof.Profile)
		private.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		private.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	protected, err := protect(private)
	if err != nil {
		return nil, err
	}
	mux.Handle("/", protected)
	return mux, nil
}
