package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Config configures a Manager. Zero durations and counts take the defaults noted.
type Config struct {
	// Engine is what new partitions run: Redis or Memcached.
	Engine Engine
	// Root is the state directory; each partition gets a directory below it. It must be short
	// enough for unix socket paths: at most 76 bytes.
	Root string
	// BinaryPath is the engine executable; empty means redis-server or memcached from PATH,
	// looked up at every start.
	BinaryPath string
	// EngineUser is who memcached runs as when the manager runs as root (memcached refuses to
	// run as root). Default "nobody". Root and its parents must be searchable by that user.
	EngineUser string
	// MemcachedThreads (-t, default 2) and MemcachedMaxConnections (-c, default 1024): a node
	// runs many small partitions behind one proxy, so each needs few threads.
	MemcachedThreads        int
	MemcachedMaxConnections int

	// StartTimeout bounds how long a new engine may take to answer on its socket (default 10s).
	StartTimeout time.Duration
	// StopTimeout is how long a stopping engine gets after SIGTERM before SIGKILL (default 10s).
	StopTimeout time.Duration
	// DrainTimeout bounds the Drain hook (default 30s).
	DrainTimeout time.Duration
	// ResizeTimeout bounds one live resize, including evicting down to a smaller size
	// (default 2m).
	ResizeTimeout time.Duration
	// OpTimeout bounds a single exchange with an engine such as Stats (default 10s).
	OpTimeout time.Duration
	// BackoffInitial and BackoffMax shape restarts after crashes: the delay doubles per
	// consecutive failure up to BackoffMax (defaults 500ms and 1m). An engine that ran for at
	// least BackoffMax before failing starts over at BackoffInitial.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// PollInterval is how often adopted engines, which are not our children, are checked for
	// exit (default 1s).
	PollInterval time.Duration

	// Drain, if set, is called when a partition is about to be stopped, after its state became
	// Draining (so Endpoint no longer offers it); the engine is stopped once it returns or
	// DrainTimeout passes. The proxy uses it to finish in-flight requests.
	Drain func(ctx context.Context, tenant string) error
	// OnStateChange, if set, receives every status change, in order, from one goroutine. It
	// may call the Manager, except Close.
	OnStateChange func(Status)
	// Logger defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setDefault(&c.StartTimeout, 10*time.Second)
	setDefault(&c.StopTimeout, 10*time.Second)
	setDefault(&c.DrainTimeout, 30*time.Second)
	setDefault(&c.ResizeTimeout, 2*time.Minute)
	setDefault(&c.OpTimeout, 10*time.Second)
	setDefault(&c.BackoffInitial, 500*time.Millisecond)
	setDefault(&c.BackoffMax, time.Minute)
	setDefault(&c.PollInterval, time.Second)
	if c.EngineUser == "" {
		c.EngineUser = "nobody"
	}
	if c.MemcachedThreads <= 0 {
		c.MemcachedThreads = 2
	}
	if c.MemcachedMaxConnections <= 0 {
		c.MemcachedMaxConnections = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// killWait is how long a SIGKILLed engine may take to be seen gone.
func (c *Config) killWait() time.Duration { return max(5*time.Second, 3*c.PollInterval) }

// Status is a partition's state as the manager sees it.
type Status struct {
	Tenant string
	Engine Engine
	// Desired is the last spec asked for; Applied is what the engine runs with (zero before
	// its first start).
	Desired PartitionSpec
	Applied PartitionSpec
	State   State
	Message string
	// Restarts counts starts after the first: restarts after crashes and retried failed starts.
	Restarts int
	PID      int
	// Network and Address are where the engine listens ("unix" and its socket path).
	Network string
	Address string
}

// Manager runs the engines of one node's partitions. It is safe for concurrent use.
type Manager struct {
	cfg     Config
	drivers map[Engine]driver
	log     *slog.Logger
	notify  *notifier

	reconcileMu sync.Mutex // one Reconcile at a time

	mu     sync.Mutex
	parts  map[string]*partition
	closed bool

	// ctx is cancelled by Close; supervisors then stop watching without stopping engines.
	ctx    context.Context
	cancel context.CancelFunc
}

// NewManager prepares cfg.Root and adopts the engines a previous manager left running there:
// an engine is adopted when its pidfile names a live process whose command line is our engine
// serving the partition's socket and it answers on that socket. Dead engines' stale sockets
// and pidfiles are removed; their directories go at the next Reconcile unless it wants them.
func NewManager(ctx context.Context, cfg Config) (*Manager, error) {
	cfg.setDefaults()
	if cfg.Engine != Redis && cfg.Engine != Memcached {
		return nil, fmt.Errorf("unknown engine %q (want %q or %q)", cfg.Engine, Redis, Memcached)
	}
	if cfg.Root == "" {
		return nil, errors.New("engine state root is not set")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	if len(root) > maxRootLength {
		return nil, fmt.Errorf("engine state root %s is %d bytes long; at most %d fit in unix socket paths", root, len(root), maxRootLength)
	}
	cfg.Root = root
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, err
	}
	engineUser := ""
	if os.Geteuid() == 0 {
		engineUser = cfg.EngineUser
	}
	redis := redisDriver{}
	memcached := memcachedDriver{user: engineUser, threads: cfg.MemcachedThreads, maxConnections: cfg.MemcachedMaxConnections}
	if cfg.Engine == Redis {
		redis.binaryPath = cfg.BinaryPath
	} else {
		memcached.binaryPath = cfg.BinaryPath
	}
	m := &Manager{
		cfg:     cfg,
		drivers: map[Engine]driver{Redis: redis, Memcached: memcached},
		log:     cfg.Logger,
		parts:   make(map[string]*partition),
	}
	if cfg.OnStateChange != nil {
		m.notify = startNotifier(cfg.OnStateChange)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.adoptAll(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// partitionRecord is partition.json: who a directory belongs to and the spec its engine was
// started or last resized with.
type partitionRecord struct {
	Tenant         string         `json:"tenant"`
	Engine         Engine         `json:"engine"`
	MemoryBytes    int64          `json:"memoryBytes"`
	EvictionPolicy EvictionPolicy `json:"evictionPolicy"`
}

func (r partitionRecord) spec() PartitionSpec {
	return PartitionSpec{Tenant: r.Tenant, MemoryBytes: r.MemoryBytes, EvictionPolicy: r.EvictionPolicy}
}

func writeRecord(path string, engine Engine, spec PartitionSpec) error {
	data, err := json.Marshal(partitionRecord{Tenant: spec.Tenant, Engine: engine, MemoryBytes: spec.MemoryBytes, EvictionPolicy: spec.EvictionPolicy})
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}

// recordedPartitions lists the partition directories under the root, skipping (and logging)
// anything that is not one of ours.
func (m *Manager) recordedPartitions() ([]partitionRecord, error) {
	entries, err := os.ReadDir(m.cfg.Root)
	if err != nil {
		return nil, err
	}
	var records []partitionRecord
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(m.cfg.Root, e.Name(), "partition.json")
		raw, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var rec partitionRecord
		if err == nil {
			err = json.Unmarshal(raw, &rec)
		}
		switch {
		case err != nil:
			m.log.Warn("skipping unreadable partition record", "path", path, "err", err)
		case validateTenant(rec.Tenant) != nil || partitionDirName(rec.Tenant) != e.Name():
			m.log.Warn("skipping partition record that does not match its directory", "path", path, "tenant", rec.Tenant)
		case m.drivers[rec.Engine] == nil:
			m.log.Warn("skipping partition record of an unknown engine", "path", path, "engine", rec.Engine)
		default:
			records = append(records, rec)
		}
	}
	return records, nil
}

func (m *Manager) adoptAll(ctx context.Context) error {
	records, err := m.recordedPartitions()
	if err != nil {
		return err
	}
	for _, rec := range records {
		drv := m.drivers[rec.Engine]
		paths := pathsFor(m.cfg.Root, rec.Tenant)
		proc, live, err := m.adoptEngine(ctx, drv, paths)
		if err != nil {
			m.log.Warn("not adopting engine", "tenant", rec.Tenant, "err", err)
			continue
		}
		if proc == nil {
			continue
		}
		live.Tenant = rec.Tenant
		if _, err := m.addPartition(rec.spec(), drv, proc, live); err != nil {
			return err
		}
		m.log.Info("adopted engine", "tenant", rec.Tenant, "engine", drv.kind(), "pid", proc.pid)
	}
	return nil
}

// adoptEngine returns the running engine recorded in paths and the spec it runs with, or a
// nil process after cleaning up after a dead or unresponsive one.
func (m *Manager) adoptEngine(ctx context.Context, drv driver, paths partitionPaths) (*process, PartitionSpec, error) {
	pid, err := readPidfile(paths.pidfile)
	if err == nil {
		matches := func() bool { return cmdlineMatches(pid, drv.processName(), paths.socket) }
		if matches() {
			opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
			live, err := drv.liveSpec(opCtx, paths.socket)
			if err == nil {
				err = drv.configure(opCtx, paths.socket)
			}
			if r, ok := drv.(restricter); ok && err == nil {
				err = r.restrict(opCtx, paths.socket)
			}
			cancel()
			proc := adopt(pid, matches, m.cfg.PollInterval, m.ctx.Done())
			if err == nil {
				return proc, live, nil
			}
			m.log.Warn("stopping unresponsive engine", "pid", pid, "socket", paths.socket, "err", err)
			if err := proc.stop(m.cfg.StopTimeout, m.cfg.killWait()); err != nil {
				return nil, PartitionSpec{}, err
			}
		}
	}
	for _, stale := range []string{paths.socket, paths.pidfile} {
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, PartitionSpec{}, err
		}
	}
	return nil, PartitionSpec{}, nil
}

// addPartition registers a partition and starts supervising it: proc is an adopted engine
// running with applied, or nil to start one.
func (m *Manager) addPartition(desired PartitionSpec, drv driver, proc *process, applied PartitionSpec) (*partition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	p := newPartition(m, desired, drv, proc, applied)
	m.parts[desired.Tenant] = p
	go p.run(proc)
	return p, nil
}

func (m *Manager) lookup(tenant string) *partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[tenant]
}

// forget drops a removed partition, unless a newer one took its tenant already.
func (m *Manager) forget(p *partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts[p.tenant] == p {
		delete(m.parts, p.tenant)
	}
}

// Reconcile makes the running partitions equal specs, all partitions in parallel: it starts
// missing ones and waits until they answer, resizes and re-policies existing ones live, and
// drains, stops and deletes the rest. A spec that is invalid (or a tenant listed twice) is
// reported and its partition, if any, left as it was. The result joins one *PartitionError per
// failed partition; the others are brought to their spec regardless. Calling it again with
// the same specs changes nothing. ctx bounds the waiting: work already begun, like stopping an
// engine, finishes in the background.
func (m *Manager) Reconcile(ctx context.Context, specs []PartitionSpec) error {
	m.reconcileMu.Lock()
	defer m.reconcileMu.Unlock()
	m.mu.Lock()
	closed := m.closed
	current := make(map[string]*partition, len(m.parts))
	for t, p := range m.parts {
		current[t] = p
	}
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}

	drv := m.drivers[m.cfg.Engine]
	var errs []error
	desired := make(map[string]PartitionSpec, len(specs))
	leaveAlone := make(map[string]bool)
	listed := make(map[string]int, len(specs))
	for _, s := range specs {
		listed[s.Tenant]++
	}
	for _, s := range specs {
		if leaveAlone[s.Tenant] {
			continue
		}
		if n := listed[s.Tenant]; n > 1 {
			errs = append(errs, partitionError(s.Tenant, fmt.Errorf("%w (%d times)", ErrDuplicateTenant, n)))
			leaveAlone[s.Tenant] = true
			continue
		}
		if err := validateSpec(s, drv); err != nil {
			errs = append(errs, partitionError(s.Tenant, err))
			leaveAlone[s.Tenant] = true
			continue
		}
		desired[s.Tenant] = s
	}

	var mu sync.Mutex
	var wg sync.WaitGroup
	report := func(tenant string, err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, partitionError(tenant, err))
			mu.Unlock()
		}
	}
	for tenant, spec := range desired {
		wg.Add(1)
		go func() {
			defer wg.Done()
			report(tenant, m.ensure(ctx, spec, drv))
		}()
	}
	for tenant, p := range current {
		if _, want := desired[tenant]; want || leaveAlone[tenant] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			report(tenant, m.remove(ctx, p))
		}()
	}
	wg.Wait()
	errs = append(errs, m.removeOrphans(leaveAlone)...)
	slices.SortStableFunc(errs, func(a, b error) int { return cmp.Compare(errTenant(a), errTenant(b)) })
	return errors.Join(errs...)
}

func errTenant(err error) string {
	var pe *PartitionError
	if errors.As(err, &pe) {
		return pe.Tenant
	}
	return ""
}

// ensure brings one desired partition to spec.
func (m *Manager) ensure(ctx context.Context, spec PartitionSpec, drv driver) error {
	p := m.lookup(spec.Tenant)
	if p != nil && (p.isRemoving() || p.drv.kind() != drv.kind()) {
		// Being removed (a previous Reconcile gave up waiting) or running another engine:
		// finish removing it, then start afresh.
		if err := m.remove(ctx, p); err != nil {
			return err
		}
		p = nil
	}
	if p == nil {
		p, err := m.addPartition(spec, drv, nil, PartitionSpec{})
		if err != nil {
			return err
		}
		return p.waitStarted(ctx)
	}
	return p.reconfigure(ctx, spec)
}

// remove drains and stops a partition and waits until its directory is gone.
func (m *Manager) remove(ctx context.Context, p *partition) error {
	p.requestRemove()
	select {
	case <-p.done:
		return p.removeError()
	case <-ctx.Done():
		return fmt.Errorf("still draining: %w", context.Cause(ctx))
	}
}

// removeOrphans deletes partition directories no partition owns any more (left by engines that
// were dead when this manager started, or whose removal failed), stopping any engine still
// recorded there.
func (m *Manager) removeOrphans(leaveAlone map[string]bool) []error {
	records, err := m.recordedPartitions()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, rec := range records {
		if leaveAlone[rec.Tenant] || m.lookup(rec.Tenant) != nil {
			continue
		}
		drv := m.drivers[rec.Engine]
		paths := pathsFor(m.cfg.Root, rec.Tenant)
		if pid, err := readPidfile(paths.pidfile); err == nil {
			matches := func() bool { return cmdlineMatches(pid, drv.processName(), paths.socket) }
			if matches() {
				proc := adopt(pid, matches, m.cfg.PollInterval, m.ctx.Done())
				if err := proc.stop(m.cfg.StopTimeout, m.cfg.killWait()); err != nil {
					errs = append(errs, partitionError(rec.Tenant, err))
					continue
				}
			}
		}
		if err := os.RemoveAll(paths.dir); err != nil {
			errs = append(errs, partitionError(rec.Tenant, err))
		}
	}
	return errs
}

// Endpoint returns where the proxy reaches a tenant's engine; ok is false unless the partition
// is Running or Resizing.
func (m *Manager) Endpoint(tenant string) (network, address string, ok bool) {
	p := m.lookup(tenant)
	if p == nil {
		return "", "", false
	}
	st := p.status()
	if !st.State.Serving() {
		return "", "", false
	}
	return st.Network, st.Address, true
}

// Status returns one partition's status.
func (m *Manager) Status(tenant string) (Status, bool) {
	p := m.lookup(tenant)
	if p == nil {
		return Status{}, false
	}
	return p.status(), true
}

// List returns every partition's status, ordered by tenant.
func (m *Manager) List() []Status {
	m.mu.Lock()
	parts := make([]*partition, 0, len(m.parts))
	for _, p := range m.parts {
		parts = append(parts, p)
	}
	m.mu.Unlock()
	out := make([]Status, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.status())
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Tenant, b.Tenant) })
	return out
}

// Stats reads a partition's engine numbers.
func (m *Manager) Stats(ctx context.Context, tenant string) (Stats, error) {
	p := m.lookup(tenant)
	if p == nil {
		return Stats{}, partitionError(tenant, ErrUnknownPartition)
	}
	proc, st := p.current()
	if proc == nil {
		return Stats{}, partitionError(tenant, fmt.Errorf("%w: %s: %s", ErrPartitionNotActive, st.State, st.Message))
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	defer cancel()
	stats, err := p.drv.stats(ctx, p.paths.socket)
	if err != nil {
		return Stats{}, partitionError(tenant, err)
	}
	stats.Tenant, stats.Engine, stats.PID = tenant, p.drv.kind(), proc.pid
	if stats.RSSBytes, err = rssBytes(proc.pid); err != nil {
		return Stats{}, partitionError(tenant, err)
	}
	return stats, nil
}

// ReadStats reads the numbers of the engine of kind listening on socket, for callers outside a
// Manager (the proxy reads them at scrape time and to calibrate its curves).
func ReadStats(ctx context.Context, kind Engine, socket string) (Stats, error) {
	var drv driver
	switch kind {
	case Redis:
		drv = redisDriver{}
	case Memcached:
		drv = memcachedDriver{}
	default:
		return Stats{}, fmt.Errorf("unknown engine %q", kind)
	}
	s, err := drv.stats(ctx, socket)
	s.Engine = kind
	return s, err
}

// Close stops supervising and returns once every supervisor has exited, leaving the engines
// running for the next manager on the same root to adopt. Removals already under way finish
// first. To stop every engine instead, Reconcile with no specs before closing.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	parts := make([]*partition, 0, len(m.parts))
	for _, p := range m.parts {
		parts = append(parts, p)
	}
	m.mu.Unlock()
	m.cancel()
	for _, p := range parts {
		<-p.done
	}
	if m.notify != nil {
		m.notify.close()
	}
}

// Shutdown closes the manager, then stops every engine, in parallel, after saving its data
// into its partition directory (redis: SHUTDOWN SAVE; memcached: its live items, written by
// the manager), which the engine a manager on the same root starts there next loads, so the
// partition comes back with its keys. ctx bounds the saves: an engine still saving when it
// ends is stopped without its data. Errors name the partitions affected.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	parts := make([]*partition, 0, len(m.parts))
	for _, p := range m.parts {
		parts = append(parts, p)
	}
	m.mu.Unlock()
	m.Close()
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.saveAndStop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// notifier delivers status changes to a callback in order, from one goroutine, so callers
// never run it while holding a partition's lock.
type notifier struct {
	fn    func(Status)
	mu    sync.Mutex
	queue []Status
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func startNotifier(fn func(Status)) *notifier {
	n := &notifier{fn: fn, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go n.loop()
	return n
}

func (n *notifier) push(s Status) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, s)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) loop() {
	defer close(n.done)
	for {
		select {
		case <-n.wake:
			n.deliver()
		case <-n.stop:
			n.deliver()
			return
		}
	}
}

func (n *notifier) deliver() {
	n.mu.Lock()
	queue := n.queue
	n.queue = nil
	n.mu.Unlock()
	for _, s := range queue {
		n.fn(s)
	}
}

func (n *notifier) close() {
	close(n.stop)
	<-n.done
}
