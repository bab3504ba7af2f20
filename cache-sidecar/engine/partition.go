package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// partition supervises one tenant's engine: a goroutine (run) starts it, restarts it after
// crashes and stops it when the partition is removed; Reconcile resizes it in between.
type partition struct {
	m      *Manager
	tenant string
	drv    driver
	paths  partitionPaths

	// ctx ends supervision: cancelled on removal (the engine is then drained and stopped) or
	// by Manager.Close (the engine is left running).
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	opMu sync.Mutex // one start or reconfigure at a time

	mu        sync.Mutex
	desired   PartitionSpec
	applied   PartitionSpec
	state     State
	message   string
	lastErr   error // why the partition is Failed
	restarts  int
	proc      *process
	removing  bool
	removeErr error
	changed   chan struct{} // closed and replaced on every change, for waiters
}

func newPartition(m *Manager, desired PartitionSpec, drv driver, proc *process, applied PartitionSpec) *partition {
	p := &partition{
		m:       m,
		tenant:  desired.Tenant,
		drv:     drv,
		paths:   pathsFor(m.cfg.Root, desired.Tenant),
		done:    make(chan struct{}),
		desired: desired,
		applied: applied,
		state:   Starting,
		proc:    proc,
		changed: make(chan struct{}),
	}
	if proc != nil {
		p.state = Running
	}
	p.ctx, p.cancel = context.WithCancel(m.ctx)
	return p
}

// update changes the partition under its lock and publishes the new status.
func (p *partition) update(change func()) {
	p.mu.Lock()
	change()
	close(p.changed)
	p.changed = make(chan struct{})
	st := p.statusLocked()
	p.mu.Unlock()
	p.m.notify.push(st)
}

func (p *partition) status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusLocked()
}

func (p *partition) statusLocked() Status {
	st := Status{
		Tenant:   p.tenant,
		Engine:   p.drv.kind(),
		Desired:  p.desired,
		Applied:  p.applied,
		State:    p.state,
		Message:  p.message,
		Restarts: p.restarts,
		Network:  "unix",
		Address:  p.paths.socket,
	}
	if p.proc != nil {
		st.PID = p.proc.pid
	}
	return st
}

// current returns the engine process (nil when there is none) with the status.
func (p *partition) current() (*process, Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc, p.statusLocked()
}

func (p *partition) isRemoving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removing
}

func (p *partition) requestRemove() {
	p.mu.Lock()
	p.removing = true
	p.mu.Unlock()
	p.cancel()
}

func (p *partition) removeError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removeErr
}

// run supervises the engine until the partition is removed or the manager closed.
func (p *partition) run(proc *process) {
	defer close(p.done)
	cfg := &p.m.cfg
	failures := 0
	for p.ctx.Err() == nil {
		if proc == nil {
			var err error
			if proc, err = p.start(failures > 0); err != nil {
				if p.ctx.Err() != nil {
					break
				}
				failures++
				p.backoff(failures, fmt.Errorf("start failed: %w", err))
				continue
			}
		}
		select {
		case <-proc.exited:
			if time.Since(proc.started) >= cfg.BackoffMax {
				failures = 0 // it ran long enough: a new failure, not a crash loop
			}
			failures++
			reason := proc.reason
			proc = nil
			p.backoff(failures, fmt.Errorf("engine exited unexpectedly: %s", reason))
		case <-p.ctx.Done():
		}
	}
	p.finish(proc)
}

// backoff marks the partition Failed with cause and waits before the next start, doubling
// the delay per consecutive failure up to BackoffMax.
func (p *partition) backoff(failures int, cause error) {
	delay := backoffDelay(failures, p.m.cfg.BackoffInitial, p.m.cfg.BackoffMax)
	p.update(func() {
		p.state = Failed
		p.message = fmt.Sprintf("%v; restarting in %s", cause, delay)
		p.lastErr = cause
		p.proc = nil
	})
	p.m.log.Warn("engine failed", "tenant", p.tenant, "err", cause, "retryIn", delay)
	_ = sleepCtx(p.ctx, delay) // cancelled: run's loop sees it
}

// backoffDelay is initial doubled per consecutive failure after the first, capped at limit.
func backoffDelay(failures int, initial, limit time.Duration) time.Duration {
	delay := initial
	for i := 1; i < failures && delay < limit; i++ {
		delay *= 2
	}
	return min(delay, limit)
}

// start launches the engine with the desired spec and waits until it answers; restart says
// whether this start follows a failure.
func (p *partition) start(restart bool) (*process, error) {
	p.opMu.Lock()
	defer p.opMu.Unlock()
	var spec PartitionSpec
	p.update(func() {
		if restart {
			p.restarts++
		}
		spec = p.desired
		p.state = Starting
		p.message = "starting " + string(p.drv.kind())
	})
	binary, err := p.drv.binary()
	if err != nil {
		return nil, err
	}
	if err := p.prepareDir(spec); err != nil {
		return nil, err
	}
	proc, err := launch(binary, p.drv.args(spec, p.paths), p.paths.dir, p.paths.logfile)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	err = p.awaitReady(proc)
	if l, ok := p.drv.(loader); ok && err == nil {
		p.loadSaved(l)
	}
	// Saved data is loaded once: a snapshot that failed to load is not tried again, and one
	// that loaded is not loaded again after a crash, which would bring back overwritten and
	// deleted keys.
	for _, saved := range []string{p.paths.saved, p.paths.savedItems} {
		if rmErr := os.Remove(saved); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("removing the loaded snapshot: %w", rmErr)
		}
	}
	if err != nil {
		proc.signal(syscall.SIGKILL)
		select {
		case <-proc.exited:
		case <-time.After(p.m.cfg.killWait()):
		}
		return nil, err
	}
	p.update(func() {
		p.state = Running
		p.message = ""
		p.lastErr = nil
		p.applied = spec
		p.proc = proc
	})
	p.m.log.Info("engine running", "tenant", p.tenant, "engine", p.drv.kind(), "pid", proc.pid, "memoryBytes", spec.MemoryBytes)
	return proc, nil
}

// loadSaved stores the items a Shutdown saved into the engine that just started, before the
// partition serves. A file that is not complete and intact is refused (logged) and the
// partition starts empty; nothing is stored from it.
func (p *partition) loadSaved(l loader) {
	if _, err := os.Stat(p.paths.savedItems); errors.Is(err, os.ErrNotExist) {
		return
	}
	p.update(func() { p.message = "loading saved items" })
	began := time.Now()
	res, err := l.load(p.ctx, p.paths.socket, p.paths.savedItems)
	took := time.Since(began)
	if err != nil {
		p.m.log.Error("the saved items are refused; the partition starts empty", "tenant", p.tenant, "file", p.paths.savedItems, "err", err)
		return
	}
	p.m.log.Info("saved items loaded", "tenant", p.tenant, "items", res.stored, "expired", res.expired, "refused", res.refused,
		"bytes", res.bytes, "took", took)
}

// prepareDir creates the state directory, removes a dead engine's socket and pidfile, and
// records the spec before the engine starts, so a manager that dies right after launching it
// can still adopt it.
func (p *partition) prepareDir(spec PartitionSpec) error {
	if err := os.MkdirAll(p.paths.dir, 0o700); err != nil {
		return err
	}
	for _, stale := range []string{p.paths.socket, p.paths.pidfile} {
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := writeRecord(p.paths.record, p.drv.kind(), spec); err != nil {
		return err
	}
	return p.drv.prepareDir(p.paths.dir)
}

// awaitReady records the PID, then waits until the engine answers and applies the settings
// that are not command-line arguments. StartTimeout bounds the wait, except while redis
// answers that it is loading a saved snapshot, which takes time in proportion to its size.
func (p *partition) awaitReady(proc *process) error {
	if err := writePidfile(p.paths.pidfile, proc.pid); err != nil {
		return err
	}
	deadline := time.Now().Add(p.m.cfg.StartTimeout)
	for {
		ctx, cancel := context.WithDeadline(p.ctx, deadline)
		err := p.drv.ping(ctx, p.paths.socket)
		if err == nil {
			err = p.drv.configure(ctx, p.paths.socket)
			cancel()
			return err
		}
		cancel()
		if loading(err) {
			deadline = time.Now().Add(p.m.cfg.StartTimeout)
		}
		select {
		case <-proc.exited:
			return fmt.Errorf("engine exited while starting: %s", proc.reason)
		case <-p.ctx.Done():
			return context.Cause(p.ctx)
		case <-time.After(time.Until(deadline)):
			return fmt.Errorf("engine not answering on %s after %s: %w", p.paths.socket, p.m.cfg.StartTimeout, err)
		case <-time.After(pollEvery):
		}
	}
}

// loading reports whether err is redis' reply while it loads its snapshot.
func loading(err error) bool {
	var reply *redisError
	return errors.As(err, &reply) && strings.HasPrefix(reply.msg, "LOADING")
}

// waitStarted waits for a new partition's first start to succeed or fail.
func (p *partition) waitStarted(ctx context.Context) error {
	for {
		p.mu.Lock()
		state, lastErr, changed := p.state, p.lastErr, p.changed
		p.mu.Unlock()
		switch state {
		case Running, Resizing:
			return nil
		case Failed:
			return lastErr
		}
		select {
		case <-changed:
		case <-p.done:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("engine still %s: %w", state, context.Cause(ctx))
		}
	}
}

// sameEffect reports whether two specs make the engine behave the same.
func (p *partition) sameEffect(a, b PartitionSpec) bool {
	return a.EvictionPolicy == b.EvictionPolicy && p.drv.effectiveMemory(a.MemoryBytes) == p.drv.effectiveMemory(b.MemoryBytes)
}

// reconfigure makes spec the desired one and applies it to the running engine, live.
func (p *partition) reconfigure(ctx context.Context, spec PartitionSpec) error {
	p.update(func() { p.desired = spec })
	p.opMu.Lock()
	defer p.opMu.Unlock()
	p.mu.Lock()
	proc, applied, state, message := p.proc, p.applied, p.state, p.message
	p.mu.Unlock()
	if proc == nil || !state.Serving() {
		// The next (re)start uses the new spec.
		return fmt.Errorf("%w: %s: %s", ErrPartitionNotActive, state, message)
	}
	if p.sameEffect(applied, spec) {
		return nil
	}
	p.update(func() {
		p.state = Resizing
		p.message = fmt.Sprintf("changing memory %d -> %d bytes, policy %s -> %s", applied.MemoryBytes, spec.MemoryBytes, applied.EvictionPolicy, spec.EvictionPolicy)
	})
	ctx, cancel := context.WithTimeout(ctx, p.m.cfg.ResizeTimeout)
	err := p.drv.apply(ctx, p.paths.socket, spec)
	cancel()
	if err == nil {
		err = writeRecord(p.paths.record, p.drv.kind(), spec)
	}
	p.update(func() {
		if p.proc != proc || p.state != Resizing {
			return // the engine failed meanwhile; the supervisor owns the state now
		}
		p.state = Running
		if err != nil {
			// applied stays as it was, so the next Reconcile tries again.
			p.message = fmt.Sprintf("resize to %d bytes failed: %v", spec.MemoryBytes, err)
			return
		}
		p.message = ""
		p.applied = spec
	})
	if err != nil {
		return fmt.Errorf("resizing live: %w", err)
	}
	p.m.log.Info("engine resized", "tenant", p.tenant, "memoryBytes", spec.MemoryBytes, "policy", spec.EvictionPolicy)
	return nil
}

// finish runs when supervision ends: on removal it drains the partition, stops the engine and
// deletes the state directory; on Manager.Close it leaves the engine running.
func (p *partition) finish(proc *process) {
	if !p.isRemoving() {
		return
	}
	err := p.drainAndStop(proc)
	if err != nil {
		p.m.log.Error("removing partition", "tenant", p.tenant, "err", err)
	}
	p.update(func() {
		p.removeErr = err
		p.proc = nil
		if err != nil {
			p.state = Failed
			p.message = fmt.Sprintf("removal failed: %v", err)
		}
	})
	p.m.forget(p)
}

// saveAndStop stops the engine the closed manager left running; a saver's engine saves its
// data first. It gives up saving when ctx ends, then kills the engine.
func (p *partition) saveAndStop(ctx context.Context) error {
	proc, _ := p.current()
	if proc == nil {
		return nil
	}
	cfg := &p.m.cfg
	var saveErr error
	if s, ok := p.drv.(saver); ok {
		began := time.Now()
		if saveErr = s.save(ctx, p.paths); saveErr == nil {
			p.m.log.Info("engine saved", "tenant", p.tenant, "engine", p.drv.kind(), "took", time.Since(began))
			if s.exitsAfterSave() && proc.waitGone(ctx) {
				return nil
			}
		}
	}
	proc.signal(syscall.SIGTERM)
	stopCtx, cancel := context.WithTimeout(ctx, cfg.StopTimeout)
	defer cancel()
	if !proc.waitGone(stopCtx) {
		proc.signal(syscall.SIGKILL)
		killCtx, cancel := context.WithTimeout(context.Background(), cfg.killWait())
		defer cancel()
		if !proc.waitGone(killCtx) {
			return errors.Join(saveErr, fmt.Errorf("engine process %d still running after SIGKILL", proc.pid))
		}
	}
	if saveErr != nil {
		return fmt.Errorf("%s: saving: %w", p.tenant, saveErr)
	}
	return nil
}

func (p *partition) drainAndStop(proc *process) error {
	cfg := &p.m.cfg
	p.update(func() {
		p.state = Draining
		p.message = "draining"
	})
	if cfg.Drain != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
		err := cfg.Drain(ctx, p.tenant)
		cancel()
		if err != nil {
			p.m.log.Warn("drain hook failed; stopping the engine anyway", "tenant", p.tenant, "err", err)
		}
	}
	if proc != nil {
		if err := proc.stop(cfg.StopTimeout, cfg.killWait()); err != nil {
			return err
		}
	}
	return os.RemoveAll(p.paths.dir)
}
