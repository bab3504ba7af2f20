package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Proxy is the sidecar's data plane: it serves tenants' clients on the engine protocol and
// peer sidecars on the peer protocol. Safe for concurrent use.
type Proxy struct {
	opts Options
	log  *slog.Logger

	tenants atomic.Pointer[map[string]*tenant]
	conf    atomic.Pointer[nodeConfig]
	loaded  atomic.Bool

	links       *linkSet
	ejections   ejections
	connIDs     atomic.Int64
	clientConns atomic.Int64 // open client connections, for Options.MaxClientConnections
	authLimit   *authLimiter
	stats       proxyStats
	version     atomic.Pointer[string]

	updateMu sync.Mutex // one Update at a time

	mu              sync.Mutex
	listeners       map[net.Listener]bool // value: peer listener
	deadListeners   []error               // listeners that stopped on an error while serving
	conns           map[*conn]struct{}
	closed          bool
	draining        atomic.Bool // Shutdown began: no new connections, open ones finish
	clientListeners atomic.Int32
	peerListeners   atomic.Int32

	ctx    context.Context // cancelled by Close: stops background work
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the proxy
	connWG sync.WaitGroup // running connections, for Shutdown
}

// nodeConfig is the node-wide part of the configuration.
type nodeConfig struct {
	nodeID      string
	peerToken   string
	tokenDigest [sha256.Size]byte
	// peerPlaintext: Config.PeerPlaintext.
	peerPlaintext bool
	// multiNode: some tenant has a route to another node, so peers need the peer listener.
	multiNode bool
	// sharedEngines are the local engines that serve several tenants: scripts are refused on
	// them, since a script may reach any key of its engine.
	sharedEngines map[string]bool
}

// dummyCredentialHash is checked against when a client names an unknown tenant, so that the
// answer takes as long as for a known one.
var dummyCredentialHash = func() string {
	h, err := credentials.Hash("cacheqos-no-such-tenant")
	if err != nil {
		panic(err)
	}
	return h
}()

func verifyPassword(hash string, password []byte) bool {
	return credentials.Verify(hash, string(password))
}

// New returns a proxy with an empty tenant table; Update loads one.
func New(opts Options) (*Proxy, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		opts:      opts,
		log:       opts.Logger,
		links:     newLinkSet(),
		authLimit: newAuthLimiter(&opts),
		listeners: make(map[net.Listener]bool),
		conns:     make(map[*conn]struct{}),
		ctx:       ctx,
		cancel:    cancel,
	}
	p.ejections.nodes, p.ejections.limit = make(map[string]*ejection), maxFailoverKeyBytes
	empty := map[string]*tenant{}
	p.tenants.Store(&empty)
	p.conf.Store(&nodeConfig{})
	if opts.EngineVersion != "" {
		p.version.Store(&opts.EngineVersion)
	}
	if err := p.registerer().Register(collector{p}); err != nil {
		cancel()
		return nil, fmt.Errorf("proxy: register metrics: %w", err)
	}
	p.wg.Add(1)
	go p.decayLoop()
	return p, nil
}

// Update replaces the configuration atomically: new tenants become reachable, removed
// tenants' connections are closed, changed tenants keep their connections and counters and
// their new routes and limits apply to the next request. An invalid configuration changes
// nothing.
func (p *Proxy) Update(cfg Config) error {
	if p.isClosed() {
		return ErrClosed
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("proxy: invalid configuration: %w", err)
	}
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	old := *p.tenants.Load()
	next := make(map[string]*tenant, len(cfg.Tenants))
	multiNode := false
	for i := range cfg.Tenants {
		tc := &cfg.Tenants[i]
		t, err := p.applyTenant(old[tc.ID], tc, cfg.NodeID)
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		next[tc.ID] = t
		for _, r := range tc.Routes {
			multiNode = multiNode || r.Node != cfg.NodeID
		}
	}
	p.conf.Store(&nodeConfig{
		nodeID:        cfg.NodeID,
		peerToken:     cfg.PeerToken,
		tokenDigest:   sha256.Sum256([]byte(cfg.PeerToken)),
		peerPlaintext: cfg.PeerPlaintext,
		multiNode:     multiNode,
		sharedEngines: sharedEngines(cfg.Tenants),
	})
	p.tenants.Store(&next)
	p.loaded.Store(true)
	for id, t := range old {
		if next[id] == nil {
			t.remove()
			p.links.retire(func(k linkKey) bool { return k.tenant == id }, true)
		}
	}
	// Links to engines and peers that no tenant uses any more close once they have answered
	// what was sent on them.
	p.links.retire(func(k linkKey) bool { return !linkInUse(next, cfg.NodeID, k) }, false)
	return nil
}

// sharedEngines returns the local engines that more than one tenant names.
func sharedEngines(tenants []Tenant) map[string]bool {
	seen := make(map[string]bool, len(tenants))
	shared := make(map[string]bool)
	for i := range tenants {
		engine := tenants[i].LocalEngine
		if engine != "" && seen[engine] {
			shared[engine] = true
		}
		seen[engine] = true
	}
	return shared
}

// linkInUse reports whether a link's tenant still sends requests to its address.
func linkInUse(tenants map[string]*tenant, nodeID string, k linkKey) bool {
	t := tenants[k.tenant]
	if t == nil {
		return false
	}
	cfg := t.cfg.Load()
	if !k.peer {
		return k.address == cfg.localEngine
	}
	for _, n := range cfg.routes.nodes {
		if n.id != nodeID && n.peerAddress == k.address {
			return true
		}
	}
	return false
}

func (p *Proxy) nodeID() string    { return p.conf.Load().nodeID }
func (p *Proxy) peerToken() string { return p.conf.Load().peerToken }

// lookupTenant finds a tenant by ID without allocating.
func (p *Proxy) lookupTenant(id []byte) *tenant { return (*p.tenants.Load())[string(id)] }

// Serve accepts client connections on l until the proxy closes or l fails for good. Accept
// errors that pass, such as running out of file descriptors, are retried with backoff; a
// listener that fails for good makes Healthy fail.
func (p *Proxy) Serve(l net.Listener) error { return p.serve(l, false) }

// ServePeer accepts peer sidecars' connections on l (see the peer protocol in the package
// documentation) as Serve does.
func (p *Proxy) ServePeer(l net.Listener) error { return p.serve(l, true) }

// ErrClosed is returned by Serve and ServePeer after Shutdown or Close.
var ErrClosed = errors.New("proxy: closed")

func (p *Proxy) serve(l net.Listener, peer bool) error {
	p.mu.Lock()
	if p.closed || p.draining.Load() {
		p.mu.Unlock()
		return ErrClosed
	}
	p.listeners[l] = peer
	p.mu.Unlock()
	counter := &p.clientListeners
	if peer {
		counter = &p.peerListeners
	}
	counter.Add(1)
	defer counter.Add(-1)
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if p.isClosed() || p.draining.Load() {
				return ErrClosed
			}
			if acceptRetryable(err) {
				// Out of file descriptors and the like: wait a little and go on serving; the
				// pending connections stay in the listen queue meanwhile.
				if backoff == 0 {
					p.log.Warn("accepting connections failed; retrying with backoff", "listener", l.Addr().String(), "err", err)
				}
				backoff = min(max(2*backoff, minAcceptBackoff), maxAcceptBackoff)
				select {
				case <-time.After(backoff):
				case <-p.ctx.Done():
				}
				continue
			}
			p.listenerDied(l, peer, err)
			return err
		}
		backoff = 0
		p.mu.Lock()
		if p.closed || p.draining.Load() { // Close may already be waiting for the connections it knows of
			p.mu.Unlock()
			nc.Close()
			return ErrClosed
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			if peer {
				p.servePeerConn(nc)
				return
			}
			if !p.admitClient(nc) {
				return
			}
			defer p.clientConns.Add(-1)
			p.runConn(p.newConn(nc, nil, nil))
		}()
	}
}

// Backoff between accept attempts that failed for a reason that passes.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// retryableAcceptErrors are the accept errors that pass: the process or the system is out of
// file descriptors or buffer memory for a moment, a client gave up before it was accepted, or
// a firewall refused one connection.
var retryableAcceptErrors = []syscall.Errno{
	syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
	syscall.ECONNABORTED, syscall.EPROTO, syscall.EPERM, syscall.EINTR,
}

func acceptRetryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range retryableAcceptErrors {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// listenerDied records a listener that stopped for good while the proxy was serving, so
// Healthy fails and the pod is restarted.
func (p *Proxy) listenerDied(l net.Listener, peer bool, err error) {
	kind := "client"
	if peer {
		kind = "peer"
	}
	p.log.Error("a listener stopped", "listener", l.Addr().String(), "kind", kind, "err", err)
	p.mu.Lock()
	p.deadListeners = append(p.deadListeners, fmt.Errorf("%s listener %s stopped: %w", kind, l.Addr(), err))
	p.mu.Unlock()
}

// Healthy reports nil while the process can go on serving: no listener has stopped on an error
// it cannot recover from. Listeners stopped by Shutdown or Close do not count.
func (p *Proxy) Healthy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.deadListeners...)
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// runConn serves a connection, tracked so Close and Shutdown can end it.
func (p *Proxy) runConn(c *conn) {
	p.mu.Lock()
	if p.closed || p.draining.Load() {
		p.mu.Unlock()
		c.nc.Close()
		c.cancel()
		if c.tenant != nil {
			c.tenant.unregister(c)
		}
		return
	}
	p.conns[c] = struct{}{}
	p.connWG.Add(1)
	p.mu.Unlock()
	defer p.connWG.Done()
	c.serve()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// servePeerConn runs the peer handshake (upgrading to mutual TLS first when the peer asks),
// then serves the connection for the tenant it names.
func (p *Proxy) servePeerConn(nc net.Conn) {
	nc.SetDeadline(time.Now().Add(p.opts.PeerHandshakeTimeout))
	br := bufio.NewReaderSize(nc, ioBufferSize)
	refuse := func(reason string) {
		p.log.Warn("refused a peer connection", "remote", nc.RemoteAddr().String(), "err", reason)
		// The connection closes either way; a peer that cannot read the reason sees the close.
		_, _ = nc.Write(protocol.AppendReplyLine([]byte("ERR "), reason))
		nc.Close()
	}
	line, err := protocol.AppendLine(br, nil, maxPeerLineLen)
	if err != nil {
		refuse("peer handshake: " + err.Error())
		return
	}
	conf := p.conf.Load()
	overTLS := false
	if isPeerTLSRequest(line) {
		if p.opts.PeerTLS == nil {
			refuse("this node takes peers without TLS only")
			return
		}
		if _, err := nc.Write([]byte(peerOK + "\r\n")); err != nil {
			nc.Close()
			return
		}
		tc := tls.Server(nc, p.opts.PeerTLS.ServerConfig())
		if err := tc.Handshake(); err != nil {
			p.log.Warn("refused a peer connection", "remote", nc.RemoteAddr().String(), "err", fmt.Errorf("TLS handshake: %w", err))
			nc.Close()
			return
		}
		nc, br, overTLS = tc, bufio.NewReaderSize(tc, ioBufferSize), true
		if line, err = protocol.AppendLine(br, nil, maxPeerLineLen); err != nil {
			refuse("peer handshake: " + err.Error())
			return
		}
	}
	id, restarting, err := parsePeerHello(line, conf.tokenDigest)
	switch {
	case err != nil:
	case conf.peerToken == "":
		err = errors.New("this node accepts no peers: it has no peer token")
	case p.opts.PeerTLS != nil && !overTLS && !conf.peerPlaintext:
		err = errors.New("this node takes peers over mutual TLS only")
	}
	if err == nil && restarting != "" && !slices.Contains(slices.Collect(maps.Values(peerNodes(*p.tenants.Load(), conf.nodeID))), restarting) {
		err = fmt.Errorf("node %q announced a restart, but no route of this node leads there", restarting)
	}
	if err != nil {
		refuse(err.Error())
		return
	}
	if restarting != "" {
		p.restartAnnounced(restarting)
		p.log.Info("a peer announced that its sidecar is restarting", "node", restarting, "remote", nc.RemoteAddr().String())
		_, _ = nc.Write([]byte(peerOK + "\r\n"))
		nc.Close()
		return
	}
	// A peer acts only for a tenant whose partition this node holds: it serves nothing else.
	t := p.lookupTenant([]byte(id))
	if t == nil {
		refuse(fmt.Sprintf("unknown tenant %q", id))
		return
	}
	if t.cfg.Load().localEngine == "" {
		refuse(fmt.Sprintf("tenant %q has no partition on this node", id))
		return
	}
	if _, err := nc.Write([]byte(peerOK + "\r\n")); err != nil {
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	c := p.newConn(nc, br, t)
	if !t.register(c) {
		nc.Close()
		c.cancel()
		return
	}
	p.runConn(c)
}

// Shutdown stops the proxy gracefully: it tells the peer nodes of its routes that it is
// restarting (announceRestartToPeers, at most restartAnnounceTimeout), stops accepting
// connections, lets every open connection finish the requests it has already received (their
// replies are written; a peer connection then gets the announcement too) and then closes it,
// and finally closes the proxy as Close does. Requests a client sends after Shutdown began are
// not read; the client sees its connection close after the replies it is owed. If ctx ends
// first, the connections still open are closed at once and Shutdown returns ctx's error.
// Engines are not touched.
func (p *Proxy) Shutdown(ctx context.Context) error {
	if p.isClosed() {
		return nil
	}
	// Before the listeners close: a peer that dials this node from then on is refused, and
	// waits for it only if it knows of the restart by then.
	p.announceRestartToPeers(ctx)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.draining.Store(true)
	for l := range p.listeners {
		l.Close()
	}
	conns := p.openConns()
	p.mu.Unlock()
	for _, c := range conns {
		c.stopReading()
	}
	finished := make(chan struct{})
	go func() {
		p.connWG.Wait()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.Close()
	return err
}

// restartAnnounceTimeout bounds how long Shutdown spends announcing its restart to its peers
// (they are dialed at once, in parallel): a peer that cannot be reached by then is not told,
// and the sidecar stops no later for it.
const restartAnnounceTimeout = time.Second

// announceRestartToPeers tells every peer node of the current plan's routes that this
// sidecar is restarting (appendRestartHello), over the authenticated peer handshake, each
// dialed in parallel, all within restartAnnounceTimeout and ctx. A peer that cannot be told
// is logged; it learns of the restart from the peer connections of its own that this
// sidecar closes, if it has any.
func (p *Proxy) announceRestartToPeers(ctx context.Context) {
	conf := p.conf.Load()
	if conf.peerToken == "" {
		return
	}
	peers := peerNodes(*p.tenants.Load(), conf.nodeID)
	ctx, cancel := context.WithTimeout(ctx, restartAnnounceTimeout)
	defer cancel()
	hello := appendRestartHello(nil, conf.peerToken, conf.nodeID)
	var wg sync.WaitGroup
	for address, node := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.announceRestartTo(ctx, address, hello); err != nil {
				p.log.Warn("could not announce the restart to a peer", "node", node, "address", address, "err", err)
			}
		}()
	}
	wg.Wait()
}

// announceRestartTo sends hello, the announcement of a restart, to the peer listening at
// address within ctx.
func (p *Proxy) announceRestartTo(ctx context.Context, address string, hello []byte) error {
	nc, stop, err := p.connect(ctx, linkKey{address: address, peer: true})
	if err != nil {
		return err
	}
	defer nc.Close()
	defer stop()
	return peerHandshake(nc, bufio.NewReaderSize(nc, 64), hello)
}

// peerNodes returns the nodes other than self that some tenant's routes lead to, by their
// peer addresses.
func peerNodes(tenants map[string]*tenant, self string) map[string]string {
	peers := map[string]string{}
	for _, t := range tenants {
		for _, n := range t.cfg.Load().routes.nodes {
			if n.id != self {
				peers[n.peerAddress] = n.id
			}
		}
	}
	return peers
}

// openConns lists the open connections; p.mu is held.
func (p *Proxy) openConns() []*conn {
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// Close stops the listeners, closes every connection and link and stops background work at
// once; replies still due are lost (Shutdown waits for them). Engines are not touched.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for l := range p.listeners {
		l.Close()
	}
	conns := p.openConns()
	p.mu.Unlock()
	// Closed without p.mu: a close waits for a raw read in progress, whose request may be
	// dialing a link, which takes p.mu.
	for _, c := range conns {
		c.nc.Close()
	}
	p.cancel()
	for _, t := range *p.tenants.Load() {
		if ps := t.part.Load(); ps != nil {
			ps.stop()
		}
	}
	p.links.closeAll()
	p.wg.Wait()
	p.registerer().Unregister(collector{p})
	return nil
}

// registerer is the registry the proxy's collector lives in, with the node label applied.
func (p *Proxy) registerer() prometheus.Registerer {
	if p.opts.NodeName == "" {
		return p.opts.Registry
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"node": p.opts.NodeName}, p.opts.Registry)
}

// decayLoop halves the weight of the past in every curve once per interval, so curves follow
// changes in the workload.
func (p *Proxy) decayLoop() {
	defer p.wg.Done()
	ticker := time.NewTicker(p.opts.MRCDecayInterval)
	defer ticker.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-ticker.C:
			for _, t := range *p.tenants.Load() {
				if ps := t.part.Load(); ps != nil {
					if err := ps.curves.Tracker().Decay(0.5); err != nil {
						p.log.Error("decaying a miss-ratio curve", "tenant", t.id, "err", err)
					}
				}
			}
		}
	}
}
