package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/rendezvous"
	"github.com/cacheqos/cacheqos/internal/tokenbucket"
)

// routeNode is one node of a tenant's routing table.
type routeNode struct {
	id          string
	peerAddress string
	local       bool
}

// routes places a tenant's keys. Immutable; a new one replaces it on Update, so a request
// routes with the weights current when it arrives.
type routes struct {
	table *rendezvous.Table
	// nodes are in the table's order, sorted by node ID: that order numbers the nodes in SCAN
	// cursors.
	nodes []routeNode
	// only is the index of the one node with a positive weight, so routing needs no hash;
	// -1 when several nodes (or none) have keys.
	only int
	// any is the node that serves keyless commands (INFO, COMMAND, TIME): this node when it
	// holds a partition, else the heaviest; -1 when the tenant has no node.
	any int
}

func newRoutes(cfg []Route, nodeID string) (*routes, error) {
	sorted := slices.Clone(cfg)
	slices.SortFunc(sorted, func(a, b Route) int { return strings.Compare(a.Node, b.Node) })
	rt := &routes{only: -1, any: -1}
	nodes := make([]rendezvous.Node, len(sorted))
	positive := 0
	for i, r := range sorted {
		nodes[i] = rendezvous.Node{ID: r.Node, Weight: r.Weight}
		rt.nodes = append(rt.nodes, routeNode{id: r.Node, peerAddress: r.PeerAddress, local: r.Node == nodeID})
		if r.Weight > 0 {
			positive++
			rt.only = i
		}
		if rt.any < 0 || r.Node == nodeID || !rt.nodes[rt.any].local && r.Weight > sorted[rt.any].Weight {
			rt.any = i
		}
	}
	if positive != 1 {
		rt.only = -1
	}
	table, err := rendezvous.New(nodes)
	if err != nil {
		return nil, err
	}
	rt.table = table
	return rt, nil
}

// owner returns the index of the node that owns a key with routing hash h.
func (rt *routes) owner(h uint64) (int, bool) {
	if rt.only >= 0 {
		return rt.only, true
	}
	return rt.table.PickHash(h)
}

// keyHashes returns a key's routing hash and its own hash. A key with a hash tag (a non-empty
// part between the first '{' and the next '}', as in Redis Cluster) routes by the tag alone,
// so related keys can be kept on one node for multi-key commands; the miss-ratio curve and the
// ghost list always use the whole key.
func keyHashes(key []byte) (routing, full uint64) {
	full = keyhash.Sum64(key)
	if open := bytes.IndexByte(key, '{'); open >= 0 {
		if end := bytes.IndexByte(key[open+1:], '}'); end > 0 {
			return keyhash.Sum64(key[open+1 : open+1+end]), full
		}
	}
	return full, full
}

// tenantConfig is one tenant's configuration as of the last Update. Immutable.
type tenantConfig struct {
	credentialHash string
	localEngine    string
	enginePassword string
	routes         *routes
	limited        bool
}

// tenant is a tenant's state for as long as it stays in the table: configuration updates swap
// cfg and retune the limiter in place, so counters, curves and connections survive them.
type tenant struct {
	id  string
	cfg atomic.Pointer[tenantConfig]

	limiter *tokenbucket.Limiter

	stats tenantStats
	// part is the curve tracker and ghost list of the local partition; nil without one.
	part atomic.Pointer[partitionState]
	// valueBytes/values estimate the mean value size, for accesses whose size is unknown
	// (misses, evictions that redis reports without a size).
	valueBytes, values atomic.Uint64
	// scripts bounds the distinct scripts sent to the local engine (script.go).
	scripts scriptSet

	mu      sync.Mutex
	conns   map[*conn]struct{}
	removed bool
}

// partitionState measures the local partition.
type partitionState struct {
	engine string
	bytes  int64
	// curves records the tenant's requests to the partition in its miss-ratio curve. It
	// describes the tenant's accesses, not the engine's contents, so it outlives resizes and
	// engine changes and ends only with the partition.
	curves *mrc.Recorder
	ghost  *mrc.Ghost
	stop   context.CancelFunc // stops the eviction watcher and the calibration
}

// defaultValueSize stands in for the mean value size before any value was seen.
const defaultValueSize = 1024

func (t *tenant) meanValueSize() int64 {
	n := t.values.Load()
	if n == 0 {
		return defaultValueSize
	}
	return int64(t.valueBytes.Load() / n)
}

func (t *tenant) noteValueSize(size int) {
	t.valueBytes.Add(uint64(size))
	t.values.Add(1)
}

// register adds a connection authenticated as the tenant; false when the tenant was removed.
func (t *tenant) register(c *conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.removed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tenant) unregister(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, c)
}

// remove marks the tenant removed and closes its connections, which ends them.
func (t *tenant) remove() {
	t.mu.Lock()
	t.removed = true
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c.nc)
	}
	t.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
	if ps := t.part.Swap(nil); ps != nil {
		ps.stop()
	}
}

// errThrottledBytes and errThrottledOps tell which limit refused a request.
var (
	errThrottledBytes = errors.New("tenant over its bandwidth limit")
	errThrottledOps   = errors.New("tenant over its operations limit")
)

// admit waits until the local partition may serve a request of n bytes. It returns
// errThrottledBytes or errThrottledOps when the wait would exceed the bound, or the context's
// error.
func (t *tenant) admit(ctx context.Context, n int) error {
	err := t.limiter.Wait(ctx, int64(n))
	if err == nil {
		return nil
	}
	var te *tokenbucket.ThrottledError
	if errors.As(err, &te) {
		if te.Limit == "ops" {
			return errThrottledOps
		}
		return errThrottledBytes
	}
	return err
}

// charge takes a reply's bytes from the bucket. A reply's size is known only after its
// request went through, so the bucket may go into debt, which the tenant's next requests pay.
func (t *tenant) charge(n int) {
	if t.cfg.Load().limited {
		t.limiter.Charge(int64(n))
	}
}

// limits returns the token bucket limits for a tenant's rates.
func (p *Proxy) limits(tc *Tenant) (bytes, ops tokenbucket.Limit) {
	window := p.opts.BurstWindow.Seconds()
	bytes = tokenbucket.Limit{Rate: tc.BytesPerSecond, Burst: max(int64(tc.BytesPerSecond*window), p.opts.MaxValueBytes)}
	ops = tokenbucket.Limit{Rate: tc.OpsPerSecond, Burst: max(int64(tc.OpsPerSecond*window), 1)}
	return bytes, ops
}

// applyTenant creates or updates a tenant's state from its configuration.
func (p *Proxy) applyTenant(t *tenant, tc *Tenant, nodeID string) (*tenant, error) {
	rt, err := newRoutes(tc.Routes, nodeID)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tc.ID, err)
	}
	bytesLimit, opsLimit := p.limits(tc)
	if t == nil {
		limiter, err := tokenbucket.NewLimiter(bytesLimit, opsLimit, tokenbucket.Options{MaxWait: p.opts.ThrottleMaxWait})
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", tc.ID, err)
		}
		t = &tenant{id: tc.ID, limiter: limiter, conns: make(map[*conn]struct{})}
		t.stats.init()
	} else if err := t.limiter.SetLimits(bytesLimit, opsLimit); err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tc.ID, err)
	}
	t.cfg.Store(&tenantConfig{
		credentialHash: tc.CredentialHash,
		localEngine:    tc.LocalEngine,
		enginePassword: tc.LocalEnginePassword,
		routes:         rt,
		limited:        tc.BytesPerSecond > 0 || tc.OpsPerSecond > 0,
	})
	return t, p.applyPartition(t, tc)
}

// applyPartition keeps the tenant's curve tracker and ghost list in step with its local
// partition: created with it, dropped with it. The curve survives resizes and engine changes;
// the ghost list, whose window is a share of the partition, restarts.
func (p *Proxy) applyPartition(t *tenant, tc *Tenant) error {
	old := t.part.Load()
	if old != nil && old.engine == tc.LocalEngine && old.bytes == tc.LocalPartitionBytes {
		return nil
	}
	var ps *partitionState
	if tc.LocalEngine != "" {
		var curves *mrc.Recorder
		if old != nil {
			curves = old.curves
		} else {
			var err error
			if curves, err = p.newCurves(); err != nil {
				return fmt.Errorf("tenant %q: %w", tc.ID, err)
			}
		}
		ghost, err := mrc.NewGhost(mrc.GhostConfig{MaxEntries: p.opts.GhostEntries, WindowBytes: tc.LocalPartitionBytes / 4})
		if err != nil {
			return fmt.Errorf("tenant %q: %w", tc.ID, err)
		}
		ps = &partitionState{engine: tc.LocalEngine, bytes: tc.LocalPartitionBytes, curves: curves, ghost: ghost}
		ps.stop = p.watchPartition(t, ps)
	}
	if old = t.part.Swap(ps); old != nil {
		old.stop()
	}
	return nil
}

// newCurves returns an empty curve recorder with the engine's uncalibrated model.
func (p *Proxy) newCurves() (*mrc.Recorder, error) {
	model := mrc.NewRedisModel()
	if p.opts.Protocol == Memcached {
		var err error
		if model, err = mrc.NewMemcachedModel(mrc.DefaultMemcachedSettings); err != nil {
			return nil, err
		}
	}
	return mrc.NewRecorder(mrc.Config{
		Sizes:      []int64{1}, // read at each partition's own grid (SnapshotAt)
		SampleRate: p.opts.MRCSampleRate,
		MaxBytes:   mrc.BudgetForKeys(p.opts.MRCMaxTrackedKeys),
	}, model)
}
