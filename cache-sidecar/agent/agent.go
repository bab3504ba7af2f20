package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"
)

// Config configures an Agent.
type Config struct {
	// NodeName is the node the agent runs on; it applies only plans whose spec.nodeName is it.
	NodeName string
	// Engines configures the engine manager: Engine (which must match the plans' engine),
	// Root, BinaryPath, timings. The agent sets Drain, OnStateChange and Logger.
	Engines engine.Config
	// Proxy receives the tenant table. The agent does not start or stop it.
	Proxy *proxy.Proxy
	// Registry, if set, receives the agent's metrics (plan generation and, per partition,
	// memory limit, used bytes and evictions), with the node as a constant label.
	Registry prometheus.Registerer
	// RefreshInterval is how often status is refreshed without any change (default 15s).
	RefreshInterval time.Duration
	// ApplyTimeout bounds one pass (default: the engines' resize timeout plus a minute, since
	// a shrink may take that long).
	ApplyTimeout time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// DefaultRefreshInterval is how often the agent refreshes status by default.
const DefaultRefreshInterval = 15 * time.Second

// Agent applies CacheNodePlans to the node's engines and proxy. Passes are serialized.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	engines *engine.Manager
	proxy   *proxy.Proxy
	metrics *agentMetrics

	// changes receives a value whenever an engine changes state (a crash, a restart), so the
	// driver runs a pass and status tells the truth; one pending value is enough, so sends
	// never block.
	changes chan struct{}
	seenMu  sync.Mutex
	seen    map[string]engine.Status // the last status reported per tenant

	mu sync.Mutex // one pass at a time
	// table is the tenant table the proxy runs with, as of the last successful Update.
	table proxy.Config
}

// New starts the engine manager on cfg.Engines.Root, adopting engines a previous agent left
// running there.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("agent: node name is not set")
	}
	if cfg.Proxy == nil {
		return nil, errors.New("agent: no proxy")
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "agent"),
		proxy:   cfg.Proxy,
		changes: make(chan struct{}, 1),
		seen:    make(map[string]engine.Status),
	}
	engCfg := cfg.Engines
	engCfg.Logger = cfg.Logger.With("component", "engine")
	engCfg.OnStateChange = a.engineChanged
	// Tenants leave the proxy before their engines drain (see apply), so the engines need no
	// Drain hook.
	engCfg.Drain = nil
	engines, err := engine.NewManager(ctx, engCfg)
	if err != nil {
		return nil, fmt.Errorf("agent: starting the engine manager: %w", err)
	}
	a.engines = engines
	if a.cfg.ApplyTimeout <= 0 {
		resize := engCfg.ResizeTimeout
		if resize <= 0 {
			resize = 2 * time.Minute // the engine manager's default
		}
		a.cfg.ApplyTimeout = resize + time.Minute
	}
	if cfg.Registry != nil {
		a.metrics = newAgentMetrics(cfg.NodeName)
		if err := cfg.Registry.Register(a.metrics); err != nil {
			engines.Close()
			return nil, fmt.Errorf("agent: registering metrics: %w", err)
		}
	}
	return a, nil
}

// engineChanged is the engine manager's OnStateChange hook. The manager reports every status
// it sets, changed or not; only real changes wake the driver, or every pass would cause the next.
func (a *Agent) engineChanged(s engine.Status) {
	a.seenMu.Lock()
	last, seen := a.seen[s.Tenant]
	a.seen[s.Tenant] = s
	a.seenMu.Unlock()
	if seen && last.State == s.State && last.PID == s.PID && last.Restarts == s.Restarts &&
		last.Message == s.Message && last.Applied == s.Applied {
		return
	}
	a.log.Info("partition state changed", "tenant", s.Tenant, "state", s.State, "message", s.Message, "pid", s.PID, "restarts", s.Restarts)
	kick(a.changes)
}

// forgetRemoved drops the last reported status of partitions the manager no longer has.
func (a *Agent) forgetRemoved(current []engine.Status) {
	keep := make(map[string]bool, len(current))
	for _, s := range current {
		keep[s.Tenant] = true
	}
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	maps.DeleteFunc(a.seen, func(tenant string, _ engine.Status) bool { return !keep[tenant] })
}

// Close stops supervising the engines and leaves them running, for the next agent on the same
// root to adopt.
func (a *Agent) Close() {
	if a.cfg.Registry != nil {
		a.cfg.Registry.Unregister(a.metrics)
	}
	a.engines.Close()
}

// SaveEngines stops supervising and stops every engine after saving its data into its
// partition directory, where the next agent's engines load it (engine.Manager's
// Shutdown); ctx bounds the saves. The proxy must be shut down first: writes that reach an
// engine after it saved are lost.
func (a *Agent) SaveEngines(ctx context.Context) error {
	if a.cfg.Registry != nil {
		a.cfg.Registry.Unregister(a.metrics)
	}
	return a.engines.Shutdown(ctx)
}

// StopEngines drains and stops every engine, for a sidecar that is told to leave nothing
// behind.
func (a *Agent) StopEngines(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// A closed proxy sends nothing to the engines any more; an open one must stop first.
	if err := a.updateProxy(proxy.Config{NodeID: a.cfg.NodeName}); err != nil && !errors.Is(err, proxy.ErrClosed) {
		return fmt.Errorf("emptying the proxy's tenant table: %w", err)
	}
	return a.engines.Reconcile(ctx, nil)
}

// Apply runs one pass for plan with creds and returns the plan's new status. It is
// level-triggered: calling it again with the same inputs changes nothing but the engine
// numbers in status.
func (a *Agent) Apply(ctx context.Context, plan *v1.CacheNodePlan, creds Credentials) v1.CacheNodePlanStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ApplyTimeout)
	defer cancel()
	start := time.Now()
	r := a.apply(ctx, plan, creds)
	st := buildStatus(plan.Status, plan, r, time.Now())
	if a.metrics != nil {
		a.metrics.observe(st.AppliedGeneration, r.stats)
	}
	a.logPass(plan, &r, st, time.Since(start))
	return st
}

func (a *Agent) logPass(plan *v1.CacheNodePlan, r *passResult, st v1.CacheNodePlanStatus, took time.Duration) {
	attrs := []any{"plan", plan.Name, "planGeneration", plan.Spec.PlanGeneration, "appliedGeneration", st.AppliedGeneration,
		"partitions", len(plan.Spec.Partitions), "took", took.Round(time.Millisecond)}
	if r.applied() {
		level := slog.LevelDebug
		if st.AppliedGeneration != plan.Status.AppliedGeneration {
			level = slog.LevelInfo
		}
		a.log.Log(context.Background(), level, "plan applied", attrs...)
		return
	}
	for _, c := range st.Conditions {
		if c.Type == v1.ConditionPlanApplied {
			attrs = append(attrs, "reason", c.Reason, "message", c.Message)
		}
	}
	a.log.Warn("plan not fully applied", attrs...)
}

func (a *Agent) apply(ctx context.Context, plan *v1.CacheNodePlan, creds Credentials) passResult {
	r := passResult{partitionErrs: map[string]error{}, stats: map[string]engine.Stats{}}
	if plan.Spec.NodeName != a.cfg.NodeName {
		r.planErr = &planError{ReasonWrongNode, fmt.Errorf("the plan is for node %q, this sidecar runs on %q", plan.Spec.NodeName, a.cfg.NodeName)}
		return r
	}
	kind, err := engineKind(plan.Spec.Engine)
	if err == nil && kind != a.cfg.Engines.Engine {
		err = fmt.Errorf("the plan's engine is %s but this sidecar runs %s engines", kind, a.cfg.Engines.Engine)
	}
	if err != nil {
		r.planErr = &planError{v1.ReasonApplyFailed, err}
		return r
	}

	specs, refused := enginePartitions(plan)
	maps.Copy(r.partitionErrs, refused)
	var hashes map[string]string
	hashes, r.credentialErrs, r.credentialsErr = tenantHashes(plan, creds)
	peerToken := string(creds.Data[PeerTokenKey])

	// Tenants leaving the node leave the proxy first (which closes their connections), so no
	// request reaches an engine that is about to drain and stop.
	if kept := keepTenants(a.table, plan); len(kept.Tenants) < len(a.table.Tenants) {
		if err := a.updateProxy(kept); err != nil {
			a.log.Error("removing departed tenants from the proxy", "error", err)
		}
	}
	if err := partitionErrors(a.engines.Reconcile(ctx, specs), r.partitionErrs); err != nil {
		r.planErr = &planError{v1.ReasonApplyFailed, fmt.Errorf("engines: %w", err)}
		return r
	}
	r.engines = a.engines.List()
	a.forgetRemoved(r.engines)
	// Every partition the manager keeps gets its socket in the table, serving or not: one that
	// is restarting after a crash fails its requests fast until it is back, without its keys
	// moving to other nodes.
	local := make(map[string]localEngine, len(r.engines))
	for _, es := range r.engines {
		if es.State != engine.Draining {
			password, err := engine.RedisLinkPassword(es.Address)
			if err != nil {
				r.partitionErrs[es.Tenant] = err
				continue
			}
			local[es.Tenant] = localEngine{socket: es.Address, password: password, bytes: cmp.Or(es.Applied.MemoryBytes, es.Desired.MemoryBytes)}
		}
	}
	for _, p := range plan.Spec.Partitions {
		if _, ok := local[p.Tenant]; !ok && r.partitionErrs[p.Tenant] == nil {
			r.partitionErrs[p.Tenant] = errors.New("no engine runs for the partition")
		}
	}
	table, tableErrs := proxyConfig(a.cfg.NodeName, plan, hashes, peerToken, local)
	table.PeerPlaintext = peerPlaintext(creds.Data)
	for tenant, err := range tableErrs {
		r.partitionErrs[tenant] = errors.Join(r.partitionErrs[tenant], err)
	}
	r.proxyErr = a.updateProxy(table)
	a.readStats(ctx, &r)
	return r
}

// readStats reads every serving partition's engine numbers. A partition whose numbers cannot
// be read keeps zero numbers in status; its state already says why when it is not serving.
func (a *Agent) readStats(ctx context.Context, r *passResult) {
	for _, es := range r.engines {
		if !es.State.Serving() {
			continue
		}
		s, err := a.engines.Stats(ctx, es.Tenant)
		if err != nil {
			a.log.Warn("reading partition stats", "tenant", es.Tenant, "error", err)
			continue
		}
		r.stats[es.Tenant] = s
	}
}

// updateProxy gives the proxy a new tenant table and remembers it.
func (a *Agent) updateProxy(table proxy.Config) error {
	if err := a.proxy.Update(table); err != nil {
		return err
	}
	a.table = table
	return nil
}
