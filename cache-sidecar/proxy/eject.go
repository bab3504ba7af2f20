package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Ejecting unreachable peers. A peer node that cannot be reached without having announced a
// restart (its sidecar killed, its node lost or cut off) is ejected by this sidecar: until a
// probe reaches it again, each key it owns is routed to the node that owns the key among the
// tenant's other nodes (rendezvous order without the ejected ones). That is where the
// operator's plan without the node routes the key, once the node is NotReady and the plan
// changes; until then the key's reads miss there at first and its writes are kept there,
// instead of answering reads as misses and writes with an error for as long as the node
// controller takes (40 s by default) plus an allocation.
//
// A node cut off, not lost, comes back with the values it held, and for the keys written
// elsewhere meanwhile those are stale. So this sidecar remembers each key a write (any
// command that changes the item: redis commands flagged write, deletions included;
// memcached's writes, deletions, gat, gats and an mg that creates or touches the item) sent
// elsewhere while the owner was ejected, once per node that took one, and when a probe
// reaches the owner again it deletes those keys from the owner and from the nodes that took
// the writes before the owner gets requests again: a read then misses rather than find an
// old value, and a later ejection finds no leftover copy. A node readmitted while another is
// still ejected first loses the keys written elsewhere for that other one, of which it may
// hold an older copy (purgeStaleCopies). It remembers at most
// maxFailoverKeyBytes of keys; past that, writes for an ejected node's keys are answered with
// the error, as they were before ejection existed, so that every write sent elsewhere can be
// undone. Each sidecar ejects and readmits on its own, so for the moment between two
// sidecars' probes their clients may see different nodes for the same key.

// ejectProbeInterval is how often an ejected node is dialed to learn whether it is back.
const ejectProbeInterval = time.Second

// maxFailoverKeyBytes bounds the keys written elsewhere that this sidecar remembers over all
// ejected nodes (each counted with failoverKeyOverhead).
const maxFailoverKeyBytes = 16 << 20

// failoverKeyOverhead is what a remembered key costs beyond its bytes: the map entry and the
// strings' headers.
const failoverKeyOverhead = 96

// purgeBatch is how many keys one deletion command names (redis) or one write carries
// (memcached).
const purgeBatch = 100

// errFailoverFull answers a write for an ejected node's key once this sidecar remembers
// maxFailoverKeyBytes of keys written elsewhere.
var errFailoverFull = errors.New("unreachable, and this sidecar already keeps as many keys written elsewhere as it can undo")

// failoverWrite is a key written elsewhere while its owner was ejected, and the node that
// took the write (a key written while different nodes took it is kept once per node).
type failoverWrite struct {
	tenant    string
	memcached bool
	key       string
	took      string
}

// cost is what remembering w counts against maxFailoverKeyBytes.
func (w failoverWrite) cost() int { return len(w.key) + len(w.tenant) + failoverKeyOverhead }

// ejection is one ejected node.
type ejection struct {
	address string // the peer address its probe dials
	// writes are the keys written elsewhere since it was ejected.
	writes map[failoverWrite]struct{}
}

// ejections are the nodes this sidecar routes around.
type ejections struct {
	mu    sync.Mutex
	nodes map[string]*ejection
	bytes int // of the keys remembered, over all nodes
	limit int // on bytes: maxFailoverKeyBytes
	// view holds the ejected nodes' IDs, replaced whole on each change; nil when there are
	// none, so routing pays one atomic load while every peer is reachable.
	view atomic.Pointer[map[string]bool]
}

// publish replaces the view after a change of nodes; mu is held.
func (e *ejections) publish() {
	if len(e.nodes) == 0 {
		e.view.Store(nil)
		return
	}
	view := make(map[string]bool, len(e.nodes))
	for node := range e.nodes {
		view[node] = true
	}
	e.view.Store(&view)
}

// ejected reports whether node is ejected now.
func (e *ejections) ejected(node string) bool {
	view := e.view.Load()
	return view != nil && (*view)[node]
}

// eject routes around node, whose address could not be reached, and starts its probe.
func (p *Proxy) eject(node, address string) {
	e := &p.ejections
	e.mu.Lock()
	defer e.mu.Unlock()
	if p.opts.DisablePeerFailover || e.nodes[node] != nil || p.ctx.Err() != nil {
		return
	}
	ej := &ejection{address: address, writes: make(map[failoverWrite]struct{})}
	e.nodes[node] = ej
	e.publish()
	p.log.Warn("peer sidecar unreachable: routing the keys it owns to the tenants' other nodes until it is reached again", "node", node, "address", address)
	p.wg.Add(1)
	go p.probeEjected(node, ej)
}

// current reports whether ej is still node's ejection.
func (e *ejections) current(node string, ej *ejection) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nodes[node] == ej
}

// restartAnnounced notes that node's sidecar announced its restart: its requests wait for it
// (see Options.PeerRetryWindow). A node ejected just before, by a dial refused before the
// announcement came, is readmitted at once unless writes were routed around it meanwhile,
// which its probe must delete first.
func (p *Proxy) restartAnnounced(node string) {
	p.links.announceRestart(node)
	e := &p.ejections
	e.mu.Lock()
	defer e.mu.Unlock()
	if ej := e.nodes[node]; ej != nil && len(ej.writes) == 0 {
		delete(e.nodes, node)
		e.publish()
	}
}

// keepFailoverWrite remembers w, a write of a key that ejected node failed owns; false once
// maxFailoverKeyBytes are remembered (or failed is no longer ejected: its probe reached it
// meanwhile, and the request is routed again).
func (p *Proxy) keepFailoverWrite(failed string, w failoverWrite) bool {
	e := &p.ejections
	e.mu.Lock()
	defer e.mu.Unlock()
	ej := e.nodes[failed]
	if ej == nil {
		return false
	}
	if _, ok := ej.writes[w]; !ok {
		if e.bytes+w.cost() > e.limit {
			return false
		}
		e.bytes += w.cost()
		ej.writes[w] = struct{}{}
	}
	return true
}

// takeWrites hands over node's remembered writes, to be deleted; when there are none, it ends
// the ejection instead (done) and returns the address it probed.
func (e *ejections) takeWrites(node string) (writes map[failoverWrite]struct{}, address string, done bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ej := e.nodes[node]
	if ej == nil {
		return nil, "", true
	}
	if len(ej.writes) == 0 {
		delete(e.nodes, node)
		e.publish()
		return nil, ej.address, true
	}
	writes, ej.writes = ej.writes, make(map[failoverWrite]struct{})
	for w := range writes {
		e.bytes -= w.cost()
	}
	return writes, ej.address, false
}

// putBack returns writes that could not be deleted to node's ejection.
func (e *ejections) putBack(node string, writes map[failoverWrite]struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ej := e.nodes[node]
	if ej == nil {
		return
	}
	for w := range writes {
		if _, ok := ej.writes[w]; !ok {
			e.bytes += w.cost()
			ej.writes[w] = struct{}{}
		}
	}
}

// drop ends node's ejection without deleting anything: no tenant routes to it any more, so
// neither its values nor its keys' copies elsewhere are its to answer for.
func (e *ejections) drop(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ej := e.nodes[node]; ej != nil {
		for w := range ej.writes {
			e.bytes -= w.cost()
		}
		delete(e.nodes, node)
		e.publish()
	}
}

// snapshot returns each ejected node's count of remembered writes, for the metrics.
func (e *ejections) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.nodes))
	for node, ej := range e.nodes {
		out[node] = len(ej.writes)
	}
	return out
}

// probeEjected dials node, ejected as ej, every ejectProbeInterval until it answers, then
// readmits it (see readmit); it stops early when the ejection ended otherwise (see
// restartAnnounced), no tenant routes to node any more, or the proxy closes.
func (p *Proxy) probeEjected(node string, ej *ejection) {
	defer p.wg.Done()
	tick := time.NewTicker(ejectProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		if !p.ejections.current(node, ej) {
			return
		}
		key, ok := p.probeKey(node)
		if !ok {
			p.ejections.drop(node)
			p.log.Info("ejected peer no longer routed to: forgotten", "node", node)
			return
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.opts.DialTimeout)
		l, err := p.dialLink(ctx, key, node)
		cancel()
		if err != nil {
			continue
		}
		l.nc.Close()
		if p.readmit(node) {
			return
		}
	}
}

// probeKey returns a peer link key for node, of the first tenant (by ID) that routes keys
// there.
func (p *Proxy) probeKey(node string) (linkKey, bool) {
	tenants := *p.tenants.Load()
	for _, id := range slices.Sorted(maps.Keys(tenants)) {
		if addr, ok := peerAddress(tenants[id], node); ok {
			return linkKey{address: addr, tenant: id, peer: true}, true
		}
	}
	return linkKey{}, false
}

// peerAddress returns the address of node's sidecar in t's routes, if they route keys there
// (a node of weight 0 holds no partition of the tenant, and its sidecar refuses the tenant's
// handshake).
func peerAddress(t *tenant, node string) (string, bool) {
	rt := t.cfg.Load().routes
	for i, n := range rt.nodes {
		if n.id == node && !n.local && n.peerAddress != "" && rt.table.Node(i).Weight > 0 {
			return n.peerAddress, true
		}
	}
	return "", false
}

// readmit deletes the keys written elsewhere while node was ejected, from node and from the
// nodes that took the writes, until none is left; then it ends the ejection and forgets the
// failed dials of node, so that its keys are routed to it again. It reports false when a
// deletion failed: node stays ejected, with the writes not yet deleted, and its next probe
// tries again.
func (p *Proxy) readmit(node string) bool {
	if err := p.purgeStaleCopies(node); err != nil {
		p.log.Warn("ejected peer reached, but the older copies it may hold of keys written elsewhere could not all be deleted: it stays ejected", "node", node, "err", err)
		return false
	}
	for {
		writes, address, done := p.ejections.takeWrites(node)
		if done {
			p.links.forgetDialFailures(address)
			p.log.Info("ejected peer reached again: routing its keys to it", "node", node)
			return true
		}
		if err := p.purge(node, writes); err != nil {
			p.ejections.putBack(node, writes)
			p.log.Warn("ejected peer reached, but the keys written elsewhere meanwhile could not all be deleted: it stays ejected", "node", node, "err", err)
			return false
		}
	}
}

// purgeTarget is a node and tenant whose keys a purge deletes.
type purgeTarget struct {
	node      string
	tenant    string
	memcached bool
}

// purge deletes each write's key from node (which owns it) and from the node that took it.
// A target the tenant no longer routes to, or a tenant that left, is skipped: its copies are
// no longer served.
func (p *Proxy) purge(node string, writes map[failoverWrite]struct{}) error {
	keys := make(map[purgeTarget][]string)
	for w := range writes {
		for _, target := range []string{node, w.took} {
			t := purgeTarget{node: target, tenant: w.tenant, memcached: w.memcached}
			keys[t] = append(keys[t], w.key)
		}
	}
	return p.deleteTargets(keys)
}

// purgeStaleCopies deletes from node, before it is readmitted, the keys of the other ejected
// nodes that were written elsewhere: node may hold an older copy of one, taken as the key's
// fallback before node was ejected itself, which reads would find once it is readmitted.
// Nothing is written to node while it is ejected, so one pass holds.
func (p *Proxy) purgeStaleCopies(node string) error {
	keys := make(map[purgeTarget][]string)
	for w := range p.ejections.othersWrites(node) {
		t := purgeTarget{node: node, tenant: w.tenant, memcached: w.memcached}
		keys[t] = append(keys[t], w.key)
	}
	return p.deleteTargets(keys)
}

// othersWrites returns the writes remembered for the ejected nodes other than node, taken by
// other nodes than node.
func (e *ejections) othersWrites(node string) map[failoverWrite]struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[failoverWrite]struct{})
	for other, ej := range e.nodes {
		if other == node {
			continue
		}
		for w := range ej.writes {
			if w.took != node {
				out[w] = struct{}{}
			}
		}
	}
	return out
}

// deleteTargets deletes each target's keys (see purge for what is skipped).
func (p *Proxy) deleteTargets(keys map[purgeTarget][]string) error {
	tenants := *p.tenants.Load()
	self := p.nodeID()
	for target, ks := range keys {
		t := tenants[target.tenant]
		if t == nil {
			continue
		}
		key := linkKey{tenant: target.tenant, proto: resp.RESP2}
		if target.memcached {
			key.proto = 0
		}
		if target.node == self {
			cfg := t.cfg.Load()
			if cfg.localEngine == "" {
				continue
			}
			key.address, key.enginePassword = cfg.localEngine, cfg.enginePassword
		} else {
			addr, ok := peerAddress(t, target.node)
			if !ok {
				continue
			}
			key.address, key.peer = addr, true
		}
		if err := p.deleteKeys(key, target.node, ks, target.memcached); err != nil {
			return fmt.Errorf("deleting %d keys of tenant %s on node %s: %w", len(ks), target.tenant, target.node, err)
		}
	}
	return nil
}

// deleteKeys deletes keys over a link of its own to key's engine or peer: DEL in batches of
// purgeBatch for redis, one delete per key for memcached, each answered before the next
// batch. A key that is not there counts as deleted.
func (p *Proxy) deleteKeys(key linkKey, node string, keys []string, memcached bool) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.DialTimeout)
	l, err := p.dialLink(ctx, key, node)
	cancel()
	if err != nil {
		return err
	}
	defer l.nc.Close()
	var buf, line []byte
	for batch := range slices.Chunk(keys, purgeBatch) {
		buf = buf[:0]
		replies := 1
		if memcached {
			for _, k := range batch {
				buf = append(append(append(buf, "delete "...), k...), "\r\n"...)
			}
			replies = len(batch)
		} else {
			args := [][]byte{[]byte("DEL")}
			for _, k := range batch {
				args = append(args, []byte(k))
			}
			buf = resp.AppendCommand(buf, args)
		}
		l.nc.SetDeadline(time.Now().Add(p.opts.BackendTimeout))
		if _, err := l.nc.Write(buf); err != nil {
			return err
		}
		for range replies {
			if line, err = protocol.AppendLine(l.br, line[:0], maxPeerLineLen); err != nil {
				return err
			}
			if !deleted(line, memcached) {
				return fmt.Errorf("answered %q", protocol.TrimEOL(line))
			}
		}
	}
	return nil
}

// deleted reports whether an engine's answer to a deletion says the key is gone: DEL's count
// (redis), DELETED or NOT_FOUND (memcached).
func deleted(line []byte, memcached bool) bool {
	if memcached {
		return bytes.HasPrefix(line, []byte("DELETED\r\n")) || bytes.HasPrefix(line, []byte("NOT_FOUND\r\n"))
	}
	return len(line) > 0 && line[0] == ':'
}

// routedAround reports whether err is a failed dial of a node this sidecar has ejected
// since: the request, which nothing was sent for, is routed again around it.
func (p *Proxy) routedAround(err error) bool {
	node, ok := unreachablePeer(err)
	return ok && !errors.Is(err, errConnectionClosed) && !errors.Is(err, errFailoverFull) && p.ejections.ejected(node)
}

// owner returns the node that serves a key with routing hash h under rt: its owner,
// or, when this sidecar ejected the owner, the key's owner among the tenant's nodes that are
// not ejected (failed is then the ejected owner; -1 otherwise). With every node ejected, the
// owner serves, and the request gets its failure.
func (c *conn) owner(rt *routes, h uint64) (node, failed int, ok bool) {
	node, ok = rt.owner(h)
	view := c.p.ejections.view.Load()
	if !ok || view == nil || !(*view)[rt.nodes[node].id] {
		return node, -1, ok
	}
	other, found := rt.table.PickHashExcept(h, func(i int) bool { return (*view)[rt.nodes[i].id] })
	if !found {
		return node, -1, true
	}
	c.tenant.stats.peer(rt.nodes[node].id).rerouted.Add(1)
	return other, node, true
}

// keepFailoverWrite remembers key, written to node took because this sidecar ejected its
// owner, node failed; it returns the error to answer the write with when it cannot.
func (c *conn) keepFailoverWrite(rt *routes, key []byte, failed, took int) error {
	w := failoverWrite{tenant: c.tenant.id, memcached: c.proto == 0, key: string(key), took: rt.nodes[took].id}
	if !c.p.keepFailoverWrite(rt.nodes[failed].id, w) {
		return &peerUnreachableError{node: rt.nodes[failed].id, err: errFailoverFull}
	}
	return nil
}

// forgetDialFailures clears the failed dials of the peer at address, reached again, so that
// the next request dials it instead of failing at once.
func (s *linkSet) forgetDialFailures(address string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, slot := range s.slots {
		if key.peer && key.address == address {
			slot.mu.Lock()
			slot.failedAt, slot.failure, slot.unreachableSince = time.Time{}, nil, time.Time{}
			slot.mu.Unlock()
		}
	}
}
