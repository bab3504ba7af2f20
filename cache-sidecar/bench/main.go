// Command bench measures the cache sidecar's proxy against the engine it fronts and against
// twemproxy (nutcracker), in one run on one machine, and prints throughput and latency ratios.
//
// For each engine it starts the cache-sidecar binary standalone on a generated plan (one
// tenant, limits set far above the load but enabled, metrics and miss-ratio sampling on), a
// second engine process with the same settings on a loopback TCP port (the direct baseline),
// nutcracker in front of the sidecar's own engine socket, and the null hop (nullhop.go), a
// server that answers without an engine. Then, for an unpipelined and a pipelined load, it
// measures SET and GET against all four: redis with redis-benchmark (authenticating to the
// sidecar with --user/-a), memcached with the load generator in loadgen.go (memcslap cannot
// authenticate). It also reports the CPU the engine and the proxy of each target, the load
// generator and the whole machine spent per request (from /proc), which other work on a shared
// machine disturbs much less than throughput and latency, and from them the best share of the
// direct engine's throughput any proxy could keep on this machine (boundShare).
//
//	bench -sidecar bin/cache-sidecar [-engines redis,memcached] [-profile dir]
//	bench null-hop redis|memcached 127.0.0.1:PORT   (what the benchmark starts as the null hop)
//
// hack/bench-sidecar.sh builds the binaries and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cacheqos/cacheqos/cache-sidecar/agent"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

// The workload, the same for every target: random keys from a fixed key space, fixed-size
// values.
const (
	keyspace  = 100000
	valueSize = 64
	// partitionMiB is the memory of the benchmarked partition and of the direct engine; the
	// key space fits, so GETs hit.
	partitionMiB = 256
	tenant       = "bench/cache"
	nodeName     = "bench-node"
)

// load is one way of sending requests.
type load struct {
	name     string
	clients  int
	pipeline int
	requests int // per test (SET, GET)
}

type config struct {
	sidecar       string
	sidecarProcs  int // GOMAXPROCS of the sidecar; 0: Go's default
	redisBench    string
	redisServer   string
	memcached     string
	nutcracker    string
	engines       []string
	loads         []load
	profileDir    string
	profileWindow time.Duration
	rounds        int
	limits        bool
	keep          bool
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == "null-hop" {
		if err := serveNullHop(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var reports []engineReport
	for _, engine := range cfg.engines {
		rep, err := benchEngine(ctx, cfg, engine)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", engine, err)
			os.Exit(1)
		}
		reports = append(reports, rep)
	}
	printReports(os.Stdout, cfg, reports)
	fmt.Printf("\ntotal time %s\n", time.Since(start).Round(time.Second))
}

func parseFlags() (*config, error) {
	cfg := &config{}
	engines := flag.String("engines", "redis,memcached", "engines to benchmark, comma-separated")
	clients := flag.Int("clients", 50, "client connections")
	pipeline := flag.Int("pipeline", 16, "requests in flight per connection in the pipelined load")
	requests := flag.Int("requests", 50000, "requests per test (SET, GET) in the unpipelined load")
	pipelined := flag.Int("pipelined-requests", 200000, "requests per test in the pipelined load")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of every measurement; the report shows their median")
	flag.StringVar(&cfg.sidecar, "sidecar", "", "the cache-sidecar binary (required)")
	flag.IntVar(&cfg.sidecarProcs, "sidecar-procs", 0, "GOMAXPROCS of the sidecar (0: Go's default, one per core); the operator sets it to the sidecar's CPU request")
	flag.StringVar(&cfg.profileDir, "profile", "", "write CPU profiles of the sidecar under each load into this directory")
	flag.DurationVar(&cfg.profileWindow, "profile-window", 4*time.Second, "length of each CPU profile")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work directories (logs, plan, status) and print the tenant's password")
	flag.BoolVar(&cfg.limits, "limits", true, "give the tenant bandwidth and ops limits (far above the load) so every request takes tokens")
	flag.Parse()
	if cfg.sidecar == "" {
		return nil, errors.New("-sidecar is required")
	}
	if *clients <= 0 || *pipeline <= 0 || cfg.rounds <= 0 || *requests < *clients || *pipelined < *clients {
		return nil, errors.New("-clients, -pipeline and -rounds must be positive and the request counts at least -clients")
	}
	if cfg.sidecarProcs < 0 {
		return nil, errors.New("-sidecar-procs must be 0 (Go's default) or positive")
	}
	cfg.loads = []load{
		{name: "unpipelined", clients: *clients, pipeline: 1, requests: *requests},
		{name: "pipelined", clients: *clients, pipeline: *pipeline, requests: *pipelined},
	}
	var errs []error
	look := func(dst *string, name string) {
		path, err := exec.LookPath(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is not in PATH", name))
		}
		*dst = path
	}
	for _, e := range strings.Split(*engines, ",") {
		switch e {
		case "redis":
			look(&cfg.redisServer, "redis-server")
			look(&cfg.redisBench, "redis-benchmark")
		case "memcached":
			look(&cfg.memcached, "memcached")
		default:
			errs = append(errs, fmt.Errorf("unknown engine %q", e))
		}
		cfg.engines = append(cfg.engines, e)
	}
	look(&cfg.nutcracker, "nutcracker")
	if cfg.profileDir != "" {
		errs = append(errs, os.MkdirAll(cfg.profileDir, 0o755))
	}
	return cfg, errors.Join(errs...)
}

// engineReport is every result for one engine: results[load][target] lists SET and GET;
// cpu[load][target] is the CPU its processes spent per request over both tests.
type engineReport struct {
	engine  string
	results map[string]map[string][]result
	cpu     map[string]map[string]cpuUse
}

// Target names, in the order they are measured and printed.
const (
	targetDirect    = "direct"
	targetSidecar   = "cacheqos"
	targetTwemproxy = "twemproxy"
	// targetNullHop answers without an engine (nullhop.go): the floor of a proxy's cost.
	targetNullHop = "null-hop"
)

var targets = []string{targetDirect, targetSidecar, targetTwemproxy, targetNullHop}

// stack is the processes of one engine's benchmark.
type stack struct {
	dir                     string
	password                string
	sidecar, direct, twem   *process
	nullHop                 *process
	enginePID               int // the sidecar's engine, which twemproxy fronts too
	clientAddr, metricsAddr string
	directAddr, twemAddr    string
	nullHopAddr             string
}

func (s *stack) stop() {
	// The sidecar stops its engine on the way out (--stop-engines-on-exit); twemproxy goes
	// first since it uses that engine.
	s.nullHop.stop(5 * time.Second)
	s.twem.stop(5 * time.Second)
	s.sidecar.stop(30 * time.Second)
	s.direct.stop(5 * time.Second)
}

func benchEngine(ctx context.Context, cfg *config, engine string) (engineReport, error) {
	// A short work directory: the sidecar's engine sockets live below it.
	dir, err := os.MkdirTemp("", "cqb")
	if err != nil {
		return engineReport{}, err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // memcached runs as nobody when we are root
		return engineReport{}, err
	}
	if !cfg.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "bench: %s work directory %s\n", engine, dir)
	}
	s, err := startStack(cfg, engine, dir)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		return engineReport{}, err
	}
	if cfg.keep { // for running the kept plan by hand afterwards
		fmt.Fprintf(os.Stderr, "bench: %s tenant %s password %s\n", engine, tenant, s.password)
	}
	// Rounds interleave the targets, each round starting with the next one, so drift in the
	// machine's load (other work on a shared machine) spreads over all of them; the report
	// takes the median of the rounds.
	rounds := map[string]map[string][][]result{}
	cpuRounds := map[string]map[string][]cpuUse{}
	for round := range cfg.rounds {
		for _, l := range cfg.loads {
			if rounds[l.name] == nil {
				rounds[l.name] = map[string][][]result{}
				cpuRounds[l.name] = map[string][]cpuUse{}
			}
			for i := range targets {
				target := targets[(i+round)%len(targets)]
				fmt.Fprintf(os.Stderr, "bench: round %d/%d: %s %s -> %s\n", round+1, cfg.rounds, engine, l.name, target)
				var waitProfile func() error
				if target == targetSidecar && cfg.profileDir != "" && round == 0 {
					waitProfile = cpuProfile(s.metricsAddr, cfg.profileWindow, filepath.Join(cfg.profileDir, engine+"-"+l.name+".pprof"))
				}
				meter, err := s.cpuMeter(target)
				if err != nil {
					return engineReport{}, err
				}
				res, err := runTarget(ctx, cfg, engine, s, target, l)
				if waitProfile != nil {
					err = errors.Join(err, waitProfile())
				}
				if err != nil {
					return engineReport{}, err
				}
				use, err := meter.per(len(res) * l.requests)
				if err != nil {
					return engineReport{}, err
				}
				rounds[l.name][target] = append(rounds[l.name][target], res)
				cpuRounds[l.name][target] = append(cpuRounds[l.name][target], use)
			}
		}
	}
	rep := engineReport{engine: engine, results: map[string]map[string][]result{}, cpu: map[string]map[string]cpuUse{}}
	for load, byTarget := range rounds {
		rep.results[load] = map[string][]result{}
		rep.cpu[load] = map[string]cpuUse{}
		for target, perRound := range byTarget {
			rep.results[load][target] = medianResults(perRound)
			rep.cpu[load][target] = medianCPU(cpuRounds[load][target])
		}
	}
	return rep, nil
}

// cpuMeter starts measuring the CPU of a target's engine and proxy.
func (s *stack) cpuMeter(target string) (*cpuMeter, error) {
	switch target {
	case targetDirect:
		return startCPUMeter(s.direct.cmd.Process.Pid, 0)
	case targetSidecar:
		return startCPUMeter(s.enginePID, s.sidecar.cmd.Process.Pid)
	case targetTwemproxy:
		return startCPUMeter(s.enginePID, s.twem.cmd.Process.Pid)
	default:
		return startCPUMeter(0, s.nullHop.cmd.Process.Pid)
	}
}

// medianResults is, per test, the median of each number over the rounds.
func medianResults(rounds [][]result) []result {
	out := make([]result, len(rounds[0]))
	for i := range out {
		var rps, p50, p99 []float64
		for _, r := range rounds {
			rps, p50, p99 = append(rps, r[i].RPS), append(p50, r[i].P50), append(p99, r[i].P99)
		}
		out[i] = result{Test: rounds[0][i].Test, RPS: median(rps), P50: median(p50), P99: median(p99)}
	}
	return out
}

func median(v []float64) float64 {
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

func runTarget(ctx context.Context, cfg *config, engine string, s *stack, target string, l load) ([]result, error) {
	addr := map[string]string{targetDirect: s.directAddr, targetSidecar: s.clientAddr, targetTwemproxy: s.twemAddr, targetNullHop: s.nullHopAddr}[target]
	user, password := "", ""
	if target == targetSidecar {
		user, password = tenant, s.password
	}
	if engine == "redis" {
		host, port, _ := strings.Cut(addr, ":")
		return runRedisBenchmark(ctx, cfg.redisBench, redisTarget{name: target, args: []string{"-h", host, "-p", port}, user: user, password: password}, l)
	}
	return runMemcacheLoad(ctx, memcacheTarget{name: target, addr: addr, user: user, password: password}, l)
}

// startStack starts the sidecar on a generated plan, the direct engine and twemproxy, and
// waits until each serves.
func startStack(cfg *config, engine, dir string) (*stack, error) {
	s := &stack{dir: dir}
	ports := make([]int, 7) // client, peer, metrics, direct engine, twemproxy, twemproxy stats, null hop
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	loopback := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	s.clientAddr, s.metricsAddr, s.directAddr, s.twemAddr = loopback(ports[0]), loopback(ports[2]), loopback(ports[3]), loopback(ports[4])
	peerAddr := loopback(ports[1])
	s.nullHopAddr = loopback(ports[6])

	password, err := credentials.Generate()
	if err != nil {
		return nil, err
	}
	s.password = password
	if err := writeInputs(dir, engine, password, ports[1], cfg.limits); err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "e")
	var sidecarEnv []string
	if cfg.sidecarProcs > 0 {
		sidecarEnv = []string{fmt.Sprintf("GOMAXPROCS=%d", cfg.sidecarProcs)}
	}
	s.sidecar, err = startProcess(dir, "cache-sidecar", sidecarEnv, cfg.sidecar,
		"--engine", engine, "--plan-file", filepath.Join(dir, "plan.yaml"), "--credentials-file", filepath.Join(dir, "secret.yaml"),
		"--status-file", filepath.Join(dir, "status.yaml"), "--state-root", root,
		"--client-listen", s.clientAddr, "--peer-listen", peerAddr, "--metrics-listen", s.metricsAddr,
		"--pprof", "--shutdown-delay", "0s", "--stop-engines-on-exit", "--log-format", "text")
	if err != nil {
		return s, err
	}
	if err := waitFor(s.sidecar, 30*time.Second, "cache-sidecar", func() error {
		plan, err := agent.LoadPlan(filepath.Join(dir, "status.yaml"))
		if err != nil {
			return err
		}
		if plan.Status.AppliedGeneration != 1 {
			return fmt.Errorf("status: %+v", plan.Status)
		}
		return httpOK("http://" + s.metricsAddr + "/readyz")()
	}); err != nil {
		return s, err
	}
	sockets, _ := filepath.Glob(filepath.Join(root, "*", "sock"))
	if len(sockets) != 1 {
		return s, fmt.Errorf("found engine sockets %v under %s, want one", sockets, root)
	}
	pid, err := os.ReadFile(filepath.Join(filepath.Dir(sockets[0]), "pid"))
	if err == nil {
		s.enginePID, err = strconv.Atoi(strings.TrimSpace(string(pid)))
	}
	if err != nil {
		return s, fmt.Errorf("the sidecar's engine pidfile: %w", err)
	}

	host, port := "127.0.0.1", fmt.Sprint(ports[3])
	if engine == "redis" {
		s.direct, err = startProcess(dir, "direct-engine", nil, cfg.redisServer, "--bind", host, "--port", port,
			"--save", "", "--appendonly", "no", "--maxmemory", fmt.Sprintf("%dmb", partitionMiB), "--maxmemory-policy", "allkeys-lru")
	} else {
		args := []string{"-l", host, "-p", port, "-U", "0", "-m", fmt.Sprint(partitionMiB), "-t", "2"}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "nobody")
		}
		s.direct, err = startProcess(dir, "direct-engine", nil, cfg.memcached, args...)
	}
	if err != nil {
		return s, err
	}
	if err := waitFor(s.direct, 10*time.Second, "direct engine", dialable("tcp", s.directAddr)); err != nil {
		return s, err
	}

	twemConfig := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(twemConfig, []byte(fmt.Sprintf(`bench:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  redis: %t
  preconnect: true
  server_connections: 1
  servers:
   - %s:1
`, s.twemAddr, engine == "redis", sockets[0])), 0o600); err != nil {
		return s, err
	}
	s.twem, err = startProcess(dir, "nutcracker", nil, cfg.nutcracker, "-c", twemConfig, "-s", fmt.Sprint(ports[5]))
	if err != nil {
		return s, err
	}
	if err := waitFor(s.twem, 10*time.Second, "nutcracker", dialable("tcp", s.twemAddr)); err != nil {
		return s, err
	}

	self, err := os.Executable()
	if err != nil {
		return s, err
	}
	s.nullHop, err = startProcess(dir, "null-hop", nil, self, "null-hop", engine, s.nullHopAddr)
	if err != nil {
		return s, err
	}
	return s, waitFor(s.nullHop, 10*time.Second, "null hop", dialable("tcp", s.nullHopAddr))
}

// writeInputs writes the plan and the credentials Secret the sidecar follows.
func writeInputs(dir, engine, password string, peerPort int, limits bool) error {
	hash, err := credentials.Hash(password)
	if err != nil {
		return err
	}
	key, err := credentials.SecretKey(tenant)
	if err != nil {
		return err
	}
	plan := fmt.Sprintf(`apiVersion: cacheqos.io/v1alpha1
kind: CacheNodePlan
metadata: {name: bench-%[1]s}
spec:
  clusterName: bench
  nodeName: %[1]s
  engine: %[2]s
  planGeneration: 1
  credentialsSecret: bench-credentials
  partitions:
  - tenant: %[3]s
    memory: %[4]dMi
    evictionPolicy: lru
    routes: [{nodeName: %[1]s, host: 127.0.0.1, port: %[5]d, weight: 1}]
`, nodeName, engine, tenant, partitionMiB, peerPort)
	if limits {
		// Far above what one machine can push, but enabled: every request takes tokens.
		plan += "    bandwidthLimit: 64Gi\n    opsLimit: 1000000000\n"
	}
	secret := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: bench-credentials}
stringData:
  %s: "%s"
  %s: "%s"
`, key, hash, agent.PeerTokenKey, "bench-peer-token")
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "plan.yaml"), []byte(plan), 0o600),
		os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secret), 0o600))
}
