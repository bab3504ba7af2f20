package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// entryKind says how the writer produces an entry's reply.
type entryKind uint8

const (
	// entryForward: read one reply from link and pass it to the client.
	entryForward entryKind = iota
	// entryLocal: write reply, made by the proxy.
	entryLocal
	// entrySplit: read one reply from each part's link and merge them.
	entrySplit
	// entryScan: read a SCAN reply from link and rewrite its cursor.
	entryScan
	// entryDiscard: read one reply from link and drop it (the proxy's own HELLO on a link).
	entryDiscard
	// entryRelease: every earlier reply was read; give links back to the pool.
	entryRelease
)

// access says what a reply from the local partition tells the hit counters and curves.
type access uint8

const (
	accessNone access = iota
	// accessRead: a read of one key (keyHash).
	accessRead
	// accessReadMulti: a read of several keys (keyHashes, in request order).
	accessReadMulti
	// accessWrite: a write of one key, which puts it back in the cache (ghost list).
	accessWrite
)

// entry is one request in a connection's pipeline, queued by the reader in request order for
// the writer, which produces its reply. It is kept small, as it is copied through the queue for
// every request; what only some entries need is in more.
type entry struct {
	kind   entryKind
	access access
	close  bool // close the connection once the reply is written
	expect memcache.Expect
	tenant *tenant
	link   *link
	// start is when the request was read (now()), for the latency histogram; 0 when not
	// measured (peer connections: the ingress node measures).
	start   int64
	keyHash uint64
	split   *split
	more    *entryMore
}

// entryMore holds the fields of the less common entries.
type entryMore struct {
	reply     []byte   // entryLocal
	keyHashes []uint64 // accessReadMulti: the keys' hashes in request order
	links     []*link  // entryRelease
	// scanNode and scanNodes place a SCAN reply in the tenant's node order.
	scanNode, scanNodes int
}

// epoch anchors now().
var epoch = time.Now()

// now returns monotonic nanoseconds since the process started, never 0.
func now() int64 { return int64(time.Since(epoch)) + 1 }

// split is a multi-key request sent as one sub-request per node.
type split struct {
	merge resp.Merge       // redis: how the replies combine
	cmd   memcache.Command // memcached: the retrieval command
	// owner is, per key in request order, the index of the part that has it.
	owner []int
	// keyHashes are the keys' hashes in request order, for counting reads of the local
	// partition (nil for commands that are not reads).
	keyHashes []uint64
	parts     []*link
}

// protocolHandler is a connection's protocol: the reader side parses requests and queues
// entries, the writer side produces replies.
type protocolHandler interface {
	// readLoop reads and queues requests until the connection ends.
	readLoop() error
	// deliver writes e's reply to the client writer.
	deliver(e *entry)
	// buffered is how many bytes of the client's next requests the reader already holds.
	buffered() int
}

// conn is one client (or peer sidecar) connection. Two goroutines serve it: the reader
// (readLoop) parses requests, writes them to backend links without waiting for replies and
// queues an entry per request; the writer (writeLoop) takes entries in order, reads each
// reply from its link and writes it to the client. Both buffer, and flush only when they
// have nothing more to do, so pipelined requests and replies move in batches. A request
// that arrives alone, with nothing in flight, the reader serves itself (see push): an
// unpipelined client then costs no goroutine hand-off per request.
type conn struct {
	p      *Proxy
	nc     net.Conn
	id     int64
	peer   bool
	ctx    context.Context
	cancel context.CancelFunc

	br      *bufio.Reader
	bw      *bufio.Writer
	queue   chan entry
	handler protocolHandler
	// inflight counts the entries queued and not yet finished by the writer. While it is 0
	// the writer is idle and everything it did happened before the reader's load of 0, so
	// the reader may finish an entry itself with the writer's state.
	inflight atomic.Int32

	// Reader-owned.
	tenant       *tenant
	links        map[string]*link // by node ID
	retired      []*link          // replaced links, released when the connection ends
	dialFailed   map[string]time.Time
	authFailures int
	closing      bool
	// inline is the entry the reader finishes itself (a field, so it never escapes).
	inline entry

	// Writer-owned.
	current       entry
	clientGone    bool
	writeDeadline time.Time
}

// dialRetryDelay is how long a connection answers requests for an unreachable node with an
// error at once instead of dialing again.
const dialRetryDelay = time.Second

func (p *Proxy) newConn(nc net.Conn, br *bufio.Reader, peerTenant *tenant) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	if br == nil {
		br = bufio.NewReaderSize(nc, ioBufferSize)
	}
	c := &conn{
		p:      p,
		nc:     nc,
		id:     p.connIDs.Add(1),
		peer:   peerTenant != nil,
		ctx:    ctx,
		cancel: cancel,
		br:     br,
		bw:     bufio.NewWriterSize(nc, ioBufferSize),
		queue:  make(chan entry, p.opts.MaxPipeline),
		links:  make(map[string]*link),
		tenant: peerTenant,
	}
	if p.opts.Protocol == Redis {
		c.handler = newRedisHandler(c)
	} else {
		c.handler = newMemcacheHandler(c)
	}
	return c
}

// serve runs the connection to its end.
func (c *conn) serve() {
	defer c.nc.Close()
	if !c.peer {
		c.p.stats.unauthenticated.Add(1)
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.handler.readLoop()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.p.log.Debug("connection ended", "conn", c.id, "err", err)
	}
	c.flushLinks()
	close(c.queue)
	<-writerDone
	c.cancel()
	// The writer has read every reply: links go back to the pool unless they failed.
	for _, l := range c.links {
		c.p.pool.put(l)
	}
	for _, l := range c.retired {
		c.p.pool.put(l)
	}
	switch t := c.tenant; {
	case t != nil:
		t.unregister(c)
		if !c.peer {
			t.stats.connections.Add(-1)
		}
	case !c.peer:
		c.p.stats.unauthenticated.Add(-1)
	}
}

// setTenant changes the tenant the connection acts for (after AUTH, or nil after RESET),
// releasing the previous tenant's links once the writer has read their last replies. It
// fails when the tenant was removed meanwhile.
func (c *conn) setTenant(t *tenant) bool {
	old := c.tenant
	if old == t {
		return true
	}
	if t != nil && !t.register(c) {
		return false
	}
	if old != nil {
		old.unregister(c)
		links := c.retired
		for _, l := range c.links {
			l.flush()
			links = append(links, l)
		}
		c.retired = nil
		clear(c.links)
		if len(links) > 0 {
			c.push(entry{kind: entryRelease, more: &entryMore{links: links}})
		}
	}
	if !c.peer {
		if old == nil {
			c.p.stats.unauthenticated.Add(-1)
		} else {
			old.stats.connections.Add(-1)
		}
		if t == nil {
			c.p.stats.unauthenticated.Add(1)
		} else {
			t.stats.connections.Add(1)
		}
	}
	c.tenant = t
	return true
}

// push queues an entry; if the pipeline is full it first flushes the links, whose replies the
// writer needs to make room. When nothing is in flight and no further request is buffered,
// the client is waiting for this one reply: the reader then produces it itself instead of
// waking the writer.
func (c *conn) push(e entry) {
	if c.inflight.Load() == 0 && c.handler.buffered() == 0 {
		c.flushLinks()
		c.inline = e
		c.finish(&c.inline)
		c.inline = entry{} // drop the references
		return
	}
	c.inflight.Add(1)
	select {
	case c.queue <- e:
	default:
		c.flushLinks()
		c.queue <- e
	}
}

// pushLocal queues a reply made by the proxy.
func (c *conn) pushLocal(reply []byte, start int64) {
	c.push(entry{kind: entryLocal, more: &entryMore{reply: reply}, tenant: c.tenant, start: start})
}

// pushClose queues a last reply, after which the connection closes.
func (c *conn) pushClose(reply []byte) {
	c.push(entry{kind: entryLocal, more: &entryMore{reply: reply}, close: true})
	c.closing = true
}

func (c *conn) flushLinks() {
	for _, l := range c.links {
		l.flush()
	}
}

// errNoPartition answers requests for a local partition that does not exist (yet).
var errNoPartition = errors.New("the tenant has no partition on this node")

// linkTo returns the connection's link to node i of rt, dialing one (or reusing a pooled one)
// when it has none or the one it had broke.
func (c *conn) linkTo(rt *routes, i int) (*link, error) {
	node := rt.nodes[i]
	if node.local {
		return c.localLink()
	}
	return c.linkFor(node.id, linkKey{address: node.peerAddress, tenant: c.tenant.id, peer: true, proto: c.proto()})
}

// localLink returns the link to the tenant's engine on this node.
func (c *conn) localLink() (*link, error) {
	engine := c.tenant.cfg.Load().localEngine
	if engine == "" {
		return nil, errNoPartition
	}
	return c.linkFor(c.p.nodeID(), linkKey{address: engine, tenant: c.tenant.id, proto: c.proto()})
}

func (c *conn) linkFor(node string, key linkKey) (*link, error) {
	l := c.links[node]
	if l != nil && l.key == key && !l.broken.Load() {
		return l, nil
	}
	if l != nil {
		l.flush()
		c.retired = append(c.retired, l)
		delete(c.links, node)
	}
	if failed, ok := c.dialFailed[node]; ok && time.Since(failed) < dialRetryDelay {
		return nil, fmt.Errorf("node %s is unreachable", node)
	}
	l = c.p.pool.get(key)
	if l == nil {
		var err error
		l, err = c.p.dialLink(c.ctx, key, c.p.peerToken())
		if err != nil {
			if c.dialFailed == nil {
				c.dialFailed = make(map[string]time.Time)
			}
			c.dialFailed[node] = time.Now()
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
	}
	l.node = node
	l.local = !key.peer
	if key.peer {
		l.forwarded = c.tenant.stats.forwardedTo(node)
	}
	c.links[node] = l
	return l, nil
}

// proto is the RESP version of the connection (0 for memcached).
func (c *conn) proto() resp.Proto {
	if h, ok := c.handler.(*redisHandler); ok {
		return h.proto
	}
	return 0
}

// forward sends a request to a node (to the local partition on a peer connection) and queues
// its entry. A request for the local partition first waits for the tenant's tokens. It
// returns the error to answer instead, if any. size is what the request counts for.
func (c *conn) forward(rt *routes, node int, raw []byte, size int, e entry) error {
	var l *link
	var err error
	if c.peer {
		l, err = c.localLink()
	} else {
		l, err = c.linkTo(rt, node)
	}
	if err != nil {
		return err
	}
	if err := c.sendTo(l, raw, size); err != nil {
		return err
	}
	e.link = l
	e.tenant = c.tenant
	c.push(e)
	return nil
}

// admitLocal makes a request for the local partition wait for the tenant's tokens.
func (c *conn) admitLocal(size int) error {
	t := c.tenant
	if !t.cfg.Load().limited {
		return nil
	}
	c.flushLinks() // nothing forwarded so far may wait behind this request's wait
	return t.admit(c.ctx, size)
}

// send writes admitted request bytes to a link. size is what the request counts for (raw may
// carry a sentinel the proxy adds).
func (c *conn) send(l *link, raw []byte, size int) {
	if l.local {
		c.tenant.stats.bytesIn.Add(uint64(size))
	} else {
		l.forwarded.Add(1)
	}
	l.write(raw, time.Now(), c.p.opts.BackendTimeout)
}

// sendTo admits (when local) and sends a request.
func (c *conn) sendTo(l *link, raw []byte, size int) error {
	if l.local {
		if err := c.admitLocal(size); err != nil {
			return err
		}
	}
	c.send(l, raw, size)
	return nil
}

// sendSplit obtains every part's link, makes the local part wait for tokens, then sends all
// parts and queues one entry for them. If any part cannot be sent, none is, and the error is
// returned for the caller to answer.
func (c *conn) sendSplit(rt *routes, nodes []int, raws [][]byte, s *split, start int64) error {
	s.parts = make([]*link, len(nodes))
	for p, node := range nodes {
		l, err := c.linkTo(rt, node)
		if err != nil {
			return err
		}
		s.parts[p] = l
	}
	for p, l := range s.parts {
		if l.local {
			if err := c.admitLocal(len(raws[p])); err != nil {
				return err
			}
		}
	}
	for p, l := range s.parts {
		c.send(l, raws[p], len(raws[p]))
	}
	c.push(entry{kind: entrySplit, split: s, tenant: c.tenant, start: start})
	return nil
}

// writeLoop produces the replies in request order until the reader closes the queue.
func (c *conn) writeLoop() {
	for c.current = range c.queue {
		c.finish(&c.current) // a field, not a loop variable, so entries never escape to the heap
		c.inflight.Add(-1)
	}
	c.flushClient()
}

// finish produces an entry's reply, flushing the client's replies unless more are queued.
// The writer runs it, or the reader while the writer is idle.
func (c *conn) finish(e *entry) {
	if c.clientGone {
		c.abandon(e)
		return
	}
	switch e.kind {
	case entryLocal:
		c.write(e.more.reply)
	case entryRelease:
		for _, l := range e.more.links {
			c.p.pool.put(l)
		}
	default:
		c.handler.deliver(e)
	}
	if e.tenant != nil && e.start != 0 {
		e.tenant.stats.latency.observe(time.Duration(now() - e.start))
	}
	if e.close || len(c.queue) == 0 {
		c.flushClient()
	}
	if e.close {
		c.clientGone = true
		c.nc.Close()
	}
}

// abandon disposes of an entry whose reply nobody will read: links with replies still due
// are closed rather than drained.
func (c *conn) abandon(e *entry) {
	switch e.kind {
	case entryRelease:
		for _, l := range e.more.links {
			c.p.pool.put(l)
		}
	case entrySplit:
		for _, l := range e.split.parts {
			l.fail()
		}
	case entryForward, entryScan, entryDiscard:
		e.link.fail()
	}
}

// write copies reply bytes to the client.
func (c *conn) write(b []byte) {
	if c.clientGone {
		return
	}
	if c.bw.Available() < len(b) {
		c.refreshWriteDeadline()
	}
	if _, err := c.bw.Write(b); err != nil {
		c.lostClient()
	}
}

func (c *conn) flushClient() {
	if c.clientGone || c.bw.Buffered() == 0 {
		return
	}
	c.refreshWriteDeadline()
	if err := c.bw.Flush(); err != nil {
		c.lostClient()
	}
}

func (c *conn) refreshWriteDeadline() {
	timeout := c.p.opts.ClientWriteTimeout
	if now := time.Now(); now.Add(timeout / 2).After(c.writeDeadline) {
		c.writeDeadline = now.Add(timeout)
		c.nc.SetWriteDeadline(c.writeDeadline)
	}
}

// lostClient stops writing to a client that cannot take replies; the reader then fails too.
func (c *conn) lostClient() {
	c.clientGone = true
	c.nc.Close()
}

// readFailed handles a failed read from a link: the link is closed, and the error becomes the
// entry's reply.
func (c *conn) readFailed(l *link, err error) error {
	l.fail()
	var reason string
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		reason = "connection closed"
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			reason = "timed out"
		} else {
			reason = err.Error()
		}
	}
	if l.local {
		return fmt.Errorf("local partition: %s", reason)
	}
	return fmt.Errorf("node %s: %s", l.node, reason)
}

// served counts a reply of the local partition.
func (t *tenant) served(replyBytes int) {
	t.stats.served.Add(1)
	t.stats.bytesOut.Add(uint64(replyBytes))
	t.charge(replyBytes)
}

// recordRead counts a read of one key served by the local partition and reports it to the
// partition's curve tracker and ghost list. size is the value's size (unknown for a miss, so
// the mean value size stands in).
func (t *tenant) recordRead(h uint64, hit bool, size int) {
	if hit {
		t.stats.hits.Add(1)
		t.noteValueSize(size)
	} else {
		t.stats.misses.Add(1)
		size = int(t.meanValueSize())
	}
	ps := t.part.Load()
	if ps == nil {
		return
	}
	ps.tracker.AccessHash(h, int64(size))
	if _, ghostHit := ps.ghost.AccessHash(h, int64(size)); ghostHit && !hit {
		t.stats.ghostHits.Add(1)
	}
}

// recordWrite tells the ghost list that a written key is back in the cache. Writes are not
// accesses of the miss-ratio curve, which describes reads: counting the write that follows
// every read miss in a look-aside cache would make each miss look like a hit.
func (t *tenant) recordWrite(h uint64) {
	if ps := t.part.Load(); ps != nil {
		ps.ghost.AccessHash(h, t.meanValueSize())
	}
}

// protocolError counts a protocol error.
func (c *conn) protocolError() { c.p.stats.protocolErrors.Add(1) }

// authFailed counts a failed authentication and reports whether the connection must close.
func (c *conn) authFailed(claimed *tenant) bool {
	if claimed != nil {
		claimed.stats.authFailures.Add(1)
	} else {
		c.p.stats.authFailuresUnknown.Add(1)
	}
	c.authFailures++
	return c.authFailures >= c.p.opts.MaxAuthFailures
}

// authenticate checks a tenant's credentials in constant time (a dummy check for unknown
// tenants, so timing does not tell which tenants exist). It returns the claimed tenant (nil
// when unknown) and whether the password matched.
func (c *conn) authenticate(user, password []byte) (*tenant, bool) {
	t := c.p.lookupTenant(user)
	hash := dummyCredentialHash
	if t != nil {
		hash = t.cfg.Load().credentialHash
	}
	ok := verifyPassword(hash, password)
	return t, ok && t != nil
}
