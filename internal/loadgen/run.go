package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/internal/workload"
)

// Env is where a run reports.
type Env struct {
	// Report receives the human-readable report lines (nil: none).
	Report io.Writer
	// Logger receives connection problems and tenant start/stop events (nil: none).
	Logger *slog.Logger
	// Registerer gets the cacheqos_loadgen_* metrics (nil: none); they stay registered, with
	// their final values, after the run, so each run needs a registry of its own.
	Registerer prometheus.Registerer
}

// errorLogEvery bounds how often the same error of a tenant is logged again.
const errorLogEvery = 10 * time.Second

// tenantRun is a tenant during a run.
type tenantRun struct {
	*tenant
	timeout time.Duration
	stats   tenantStats
	log     *slog.Logger

	genMu sync.Mutex
	gen   workload.Generator

	logMu       sync.Mutex
	lastLogged  string
	lastLogTime time.Time
}

// next draws the tenant's next access.
func (tr *tenantRun) next() workload.Access {
	tr.genMu.Lock()
	defer tr.genMu.Unlock()
	return tr.gen.Next()
}

// record counts a request's reply.
func (tr *tenantRun) record(req request, r reply, latency time.Duration) {
	s := &tr.stats
	tr.countRequest(req.kind)
	s.observe(req.kind, latency)
	switch r.outcome {
	case outHit:
		s.hits.Add(1)
	case outMiss:
		s.misses.Add(1)
	case outThrottled:
		s.throttled.Add(1)
		return
	case outAuthError:
		tr.fail(errAuth, errors.New(r.text))
		return
	case outReplyError:
		tr.fail(errReply, errors.New(r.text))
		return
	}
	if req.kind != opFill {
		s.ops.Add(1)
	}
}

// lose counts a request that got no reply.
func (tr *tenantRun) lose(req request, err error) {
	tr.countRequest(req.kind)
	tr.fail(errIO, err)
}

func (tr *tenantRun) countRequest(kind opKind) {
	if kind == opGet {
		tr.stats.gets.Add(1)
	} else {
		tr.stats.sets.Add(1)
	}
}

// fail counts an error and logs it.
func (tr *tenantRun) fail(kind errorKind, err error) {
	tr.stats.fail(kind, err)
	tr.logError(kind, err)
}

// logError logs an error unless the same one was logged less than errorLogEvery ago, so a
// tenant that fails every request does not flood the log.
func (tr *tenantRun) logError(kind errorKind, err error) {
	msg := err.Error()
	now := time.Now()
	tr.logMu.Lock()
	repeat := msg == tr.lastLogged && now.Sub(tr.lastLogTime) < errorLogEvery
	if !repeat {
		tr.lastLogged, tr.lastLogTime = msg, now
	}
	tr.logMu.Unlock()
	if !repeat {
		tr.log.Warn("tenant error", "kind", kind.String(), "error", msg)
	}
}

// Result is the whole run's totals per tenant.
type Result struct {
	Elapsed time.Duration
	Tenants []TenantResult
}

// TenantResult is one tenant's totals. Latencies are over every reply (GETs and SETs, to the
// histogram's 1.6% precision); they are zero when there was none.
type TenantResult struct {
	ID                                               string
	Ops, Gets, Hits, Misses, Sets, Throttled         uint64
	AuthErrors, ConnectErrors, ReplyErrors, IOErrors uint64
	// HitRatio is Hits / (Hits + Misses), 0 without reads.
	HitRatio           float64
	P50, P95, P99, Max time.Duration
	// LastError is the last error of the run, "" if none.
	LastError string
}

// Run runs the configuration until its duration has passed or ctx ends, reporting every
// interval, and returns the totals. Requests in flight at the end are waited for (up to the
// timeout); the CSV file is complete when Run returns. Errors are configuration errors and
// failures to write the CSV; a server that cannot be reached is counted and reported, not an
// error.
func Run(ctx context.Context, cfg Config, env Env) (Result, error) {
	s, tenants, err := cfg.resolve()
	if err != nil {
		return Result{}, err
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	report := env.Report
	if report == nil {
		report = io.Discard
	}
	latency := newLatencyVec()
	runs := make([]*tenantRun, len(tenants))
	for i, t := range tenants {
		gen, err := workload.New(t.spec, t.seed)
		if err != nil {
			return Result{}, fmt.Errorf("%s: workload: %w", tenantLabel(i, t.id), err)
		}
		tr := &tenantRun{tenant: t, timeout: s.timeout, gen: gen, log: logger.With("tenant", t.id)}
		tr.stats.getSeconds = latency.WithLabelValues(t.id, "get")
		tr.stats.setSeconds = latency.WithLabelValues(t.id, "set")
		runs[i] = tr
	}
	rep, err := newReporter(s, runs, report)
	if err != nil {
		return Result{}, err
	}
	if env.Registerer != nil {
		coll := &collector{tenants: runs}
		if err := registerAll(env.Registerer, coll, latency); err != nil {
			return Result{}, errors.Join(err, rep.close())
		}
	}

	start := time.Now()
	var end time.Time
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.duration > 0 {
		end = start.Add(s.duration)
		runCtx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	logger.Info("load generator starting", "tenants", len(runs), "duration", s.duration, "interval", s.interval)
	var wg sync.WaitGroup
	for _, tr := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.run(runCtx, start)
		}()
	}
	rep.loop(runCtx, start, end)
	wg.Wait() // the workers drain the requests in flight
	if err := rep.final(); err != nil {
		return Result{}, err
	}
	logger.Info("load generator stopped", "elapsed", time.Since(start).Round(time.Millisecond))
	return rep.result(), nil
}

func registerAll(r prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := r.Register(c); err != nil {
			for _, done := range cs[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("registering the metrics: %w", err)
		}
	}
	return nil
}

// run loads the tenant from its start to its stop offset (or the end of the run).
func (tr *tenantRun) run(ctx context.Context, runStart time.Time) {
	sleep(ctx, time.Until(runStart.Add(tr.start)))
	if ctx.Err() != nil {
		return
	}
	if tr.stop > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, runStart.Add(tr.stop))
		defer cancel()
	}
	tr.log.Info("tenant starting", "engine", tr.engine, "address", tr.addr, "workload", tr.spec.String(),
		"rate", tr.rate, "connections", tr.connections, "inflight", tr.inflight)
	now := time.Now()
	var wg sync.WaitGroup
	for i := range tr.connections {
		w := newWorker(tr, i, now)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx)
		}()
	}
	wg.Wait()
	tr.log.Info("tenant stopped")
}
