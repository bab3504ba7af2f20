package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// entryKind says how the writer produces a request's reply.
type entryKind uint8

const (
	// entryForward: one reply from a link, passed to the client.
	entryForward entryKind = iota
	// entryLocal: a reply made by the proxy.
	entryLocal
	// entrySplit: one reply from each part's link, merged.
	entrySplit
	// entryScan: a SCAN reply from a link, its cursor rewritten.
	entryScan
	// entryInfo: an INFO reply from a link, filtered for the tenant (info.go).
	entryInfo
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
	// accessDelete: a removal of one key (keyHash) or several (more.keyHashes).
	accessDelete
	// accessTake: a read of one key (keyHash) that removes it (GETDEL).
	accessTake
)

// entry describes a request for the code that produces its reply. The reader sets it before
// the request is queued and nobody changes it afterwards, so links' readers (counting
// replies) and the connection's writer read it without locks. What only some requests need is
// in more.
type entry struct {
	kind   entryKind
	access access
	close  bool // close the connection once the reply is written
	expect memcache.Expect
	tenant *tenant
	// start is when the request was read (now()), for the latency histogram; 0 when not
	// measured (peer connections: the ingress node measures).
	start   int64
	keyHash uint64
	// keyLen and valueLen size the object of a one-key read or write (valueLen: writes only;
	// unknownValue when neither request nor reply tells the stored value, valueInReply,
	// lengthInReply or appendInReply when the reply does).
	keyLen, valueLen int32
	split            *split
	more             *entryMore
	// missOnUnreachable: a plain read (GET, MGET, get, gets) whose keys are answered as misses
	// when their node cannot be reached (see holdsFor for when) or closes the link the read
	// was sent on (peerUnreachableError).
	missOnUnreachable bool
	// proto is the RESP version the request came in, which a miss made for it speaks.
	proto resp.Proto
}

// entryMore holds the fields of the less common entries.
type entryMore struct {
	keyHashes []uint64 // accessReadMulti, accessDelete of several keys: the keys' hashes in request order
	keyLens   []int32  // redis accessReadMulti: the keys' lengths in request order
	// scanNode and scanNodes place a SCAN reply in the tenant's node order.
	scanNode, scanNodes int
	// instead is the reply the client gets in place of the link's (see sendPinned).
	instead []byte
	// appendArgLen is the length of APPEND's argument, and appendArgInteger whether redis holds
	// it as an integer when APPEND creates the key with it.
	appendArgLen     int32
	appendArgInteger bool
	// setrangeEnd is where SETRANGE's argument ends in the string (offset plus length): a
	// reply of that length says the write reached the string's end.
	setrangeEnd int64
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
	// keyHashes are the keys' hashes in request order, for counting reads or deletes of the
	// local partition (nil for other commands); keyLens their lengths (redis reads).
	keyHashes []uint64
	keyLens   []int32
	// deletes: the command removes its keys (DEL, UNLINK; keyHashes set).
	deletes bool
}

// pending is a request in a connection's pipeline, from the moment the reader queues it until
// the writer has written its reply. Links' readers fill in the reply: they write the fields
// below remaining and then decrement it, and the writer reads them once it sees 0.
type pending struct {
	entry
	c         *conn
	remaining atomic.Int32 // replies still due: 0 for a local reply, 1, or one per split part
	reply     []byte       // forward, scan, local: the reply's bytes
	// held counts the reply bytes links completed for this request while the connection holds
	// them (holdReply); abandonedReply once the writer dropped the request unanswered.
	held    atomic.Int64
	failure error       // forward, scan: why the reply will not come
	parts   []partReply // split
	// stream is a forward's reply the writer copies from its link (see stream.go), instead
	// of reply.
	stream *replyStream
}

// partReply is one part's reply of a split request.
type partReply struct {
	local   bool // served by the local partition
	raw     []byte
	isError bool
	failure error
	// values locate a memcached retrieval's VALUE blocks in raw, in order.
	values []partValue
	// stream is the part's reply the writer copies from its link as it merges the parts
	// (copySplit), instead of raw.
	stream *replyStream
}

// partValue is one VALUE block of a memcached retrieval: its key's hash, its bytes in raw, and
// its key's and data's sizes.
type partValue struct {
	keyHash                 uint64
	start, end, keyLen, len int
}

// pendingPool recycles pending requests, with their reply buffers, across connections.
var pendingPool = sync.Pool{New: func() any { return new(pending) }}

// maxRetainedReply bounds the reply buffer a recycled pending request keeps.
const maxRetainedReply = 64 << 10

func (c *conn) newPending(e entry, replies int) *pending {
	p := pendingPool.Get().(*pending)
	p.entry, p.c = e, c
	p.proto = c.proto
	p.remaining.Store(int32(replies))
	p.held.Store(0)
	return p
}

// abandonedReply marks a request the writer dropped before its replies came (the client is
// gone): replies completing it later are not counted for the connection.
const abandonedReply = math.MinInt64 / 2

// holdReply counts n bytes of a reply a link completed for p: the connection holds them until
// its writer passes them to the client. Links call it before they mark the reply complete.
func (p *pending) holdReply(n int) {
	if p.held.Add(int64(n)) >= 0 {
		p.c.addReplyBytes(int64(n))
	}
}

// abandoned reports whether the writer dropped p unanswered: its replies need not be kept.
func (p *pending) abandoned() bool { return p.held.Load() < 0 }

// dropHeld stops counting p's reply bytes for the connection; mark is what p.held becomes
// (0, or abandonedReply for a request dropped unanswered).
func (c *conn) dropHeld(p *pending, mark int64) {
	if n := p.held.Swap(mark); n > 0 {
		c.addReplyBytes(-n)
	}
}

// addReplyBytes changes the reply bytes the connection and the proxy hold, and wakes the
// connection's reader and a link waiting for room when the connection falls below its bound.
func (c *conn) addReplyBytes(n int64) {
	after := c.replyBytes.Add(n)
	c.p.stats.replyBytes.Add(n)
	if bound := c.p.opts.MaxConnectionReplyBytes; n < 0 && after < bound && after-n >= bound {
		kick(c.readerWake)
		kick(c.replyRoom)
	}
}

// syncOut counts the reply buffer's change since the last call; c.outMu is held.
func (c *conn) syncOut() {
	n := int64(len(c.out))
	if d := n - c.outBytes.Load(); d != 0 {
		c.outBytes.Store(n)
		c.addReplyBytes(d)
	}
}

// overReplyBound reports whether a link must read no more replies for c yet: c holds its bound
// of reply bytes, or the proxy holds its bound and c holds some.
func (c *conn) overReplyBound() bool {
	held := c.replyBytes.Load()
	return held >= c.p.opts.MaxConnectionReplyBytes ||
		held > 0 && c.p.stats.replyBytes.Load() >= c.p.opts.MaxReplyBytesInFlight
}

// writerCanDrain reports whether c's writer can lower what c holds with no further reply from
// a link: it has bytes buffered for the client, or the pipeline's front reply is complete.
// Only then may a link wait for c without risking a wait on itself.
func (c *conn) writerCanDrain() bool {
	if c.outBytes.Load() > 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queue.len() > 0 && c.queue.front().remaining.Load() == 0
}

func (p *pending) release() {
	if cap(p.reply) > maxRetainedReply {
		p.reply = nil
	}
	p.reply = p.reply[:0]
	for i := range p.parts {
		pr := &p.parts[i]
		if cap(pr.raw) > maxRetainedReply {
			pr.raw = nil
		}
		*pr = partReply{raw: pr.raw[:0], values: pr.values[:0]}
	}
	p.parts = p.parts[:0]
	p.entry, p.c, p.failure, p.stream = entry{}, nil, nil, nil
	pendingPool.Put(p)
}

// streamed reports whether a complete p has a reply (or a part's) to copy from its link.
func (p *pending) streamed() bool {
	if p.stream != nil {
		return true
	}
	for i := range p.parts {
		if p.parts[i].stream != nil {
			return true
		}
	}
	return false
}

// fail records that a reply of p (part, for a split request) will not come.
func (p *pending) fail(part int, err error) {
	if p.kind == entrySplit {
		p.parts[part].failure = err
	} else {
		p.failure = err
	}
	p.remaining.Add(-1)
}

// protocolHandler is a connection's protocol: the reader side parses requests and queues
// them, the writer side writes their replies.
type protocolHandler interface {
	// next reads and queues one request; an error ends the connection (c.readRequests).
	next() error
	// completeness tells whether the next request is whole in the read buffer.
	completeness() protocol.Completeness
	// deliver writes the reply of a forwarded request (forward, scan, split) to the client
	// writer.
	deliver(p *pending)
	// buffered is how many bytes of the client's next requests the reader already holds.
	buffered() int
	// setAuthenticated applies the request limits for an authenticated client, or the lower
	// ones before authentication.
	setAuthenticated(bool)
}

// conn is one client (or peer sidecar) connection. The reader goroutine (readRequests) parses
// requests, queues each and sends it to the shared link (engine or peer connection) that
// serves it, without waiting for the reply. Replies leave in request order, written by
// whoever holds outMu: a link's reader, which right after handing out a batch of replies
// writes those at the front of the queue without blocking (one system call per connection
// and batch, and no goroutine switch), or the connection's writer goroutine (writeLoop), which
// it wakes when it cannot: the writer is busy, the client reads slowly, or a reply closes the
// connection.
type conn struct {
	p      *Proxy
	nc     net.Conn
	raw    syscall.RawConn // nil when nc is not a socket: the writer writes everything
	id     int64
	peer   bool
	ctx    context.Context // ends with the connection or the proxy: stops token waits
	cancel context.CancelFunc

	br      *bufio.Reader
	sock    *socketReader // br's source, when the reader may poll the socket (clientread.go)
	handler protocolHandler

	// The pipeline, shared by the reader (push) and whoever writes replies (pop).
	mu            sync.Mutex
	queue         ring[*pending]
	readerDone    bool
	readerWaiting bool // the pipeline is full; the reader waits on readerWake
	hungUp        bool // the client is gone (hangUp): the reader waits for no room and stops
	writerWake    chan struct{}
	readerWake    chan struct{}

	// replyBytes is what the proxy holds of this connection's replies: completed by links and
	// not yet taken by the client (Options.MaxConnectionReplyBytes). outBytes is the part of it
	// buffered in out (written with outMu held). replyRoom wakes a link waiting for room.
	replyBytes atomic.Int64
	outBytes   atomic.Int64
	replyRoom  chan struct{}

	// Reader-owned.
	tenant *tenant
	proto  resp.Proto       // RESP version of the connection, so of its links (0: memcached)
	local  *link            // the link to the tenant's local partition
	links  map[string]*link // links to peers, by node ID
	pin    *pin             // the link of this connection's own, if any (pin.go)
	// blockUntil is when the reply to the last blocking command is due at the latest, unless
	// blockForever (sent without a timeout).
	blockUntil   time.Time
	blockForever bool
	// watchLost: the pinned link failed while keys were watched on it; the next EXEC aborts.
	watchLost bool
	// reroutes is how many more times the request being dispatched may be routed again
	// (see reroute); rerouted says it must be.
	reroutes     int
	rerouted     bool
	authFailures int
	closing      bool
	readStart    int64 // when the buffered requests were read
	// loginDeadline is when an unauthenticated client connection closes; readDeadline is the
	// deadline last set on reads (see armReadDeadline).
	loginDeadline, readDeadline time.Time

	// Held by whoever writes replies; it guards the fields below.
	outMu         sync.Mutex
	out           []byte             // replies not yet written to the client
	writeOnceFn   func(uintptr) bool // c.writeOnce, bound once
	wrote         int                // result of writeOnce
	writeErr      error              // result of writeOnce
	clientGone    bool
	writeDeadline time.Time
	finishedAt    int64 // the time replies are stamped with (now(), taken once per batch)
	stamped       int   // replies stamped with finishedAt
}

// maxStampedReplies bounds how many replies share one finishing time.
const maxStampedReplies = 64

// initialPipelineSlots is a connection's initial pipeline capacity; it grows up to
// Options.MaxPipeline.
const initialPipelineSlots = 16

func (p *Proxy) newConn(nc net.Conn, br *bufio.Reader, peerTenant *tenant) *conn {
	ctx, cancel := context.WithCancel(p.ctx)
	c := &conn{
		p:          p,
		nc:         nc,
		id:         p.connIDs.Add(1),
		peer:       peerTenant != nil,
		ctx:        ctx,
		cancel:     cancel,
		br:         br,
		queue:      newRing[*pending](initialPipelineSlots),
		writerWake: make(chan struct{}, 1),
		readerWake: make(chan struct{}, 1),
		replyRoom:  make(chan struct{}, 1),
		links:      make(map[string]*link),
		tenant:     peerTenant,
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
			c.writeOnceFn = c.writeOnce
		}
	}
	if c.br == nil {
		src := io.Reader(nc)
		if c.raw != nil {
			c.sock = &socketReader{nc: nc}
			src = c.sock
		}
		c.br = bufio.NewReaderSize(src, ioBufferSize)
	}
	if p.opts.Protocol == Redis {
		c.proto = resp.RESP2
		c.handler = newRedisHandler(c)
	} else {
		c.handler = newMemcacheHandler(c)
	}
	c.handler.setAuthenticated(peerTenant != nil)
	if peerTenant == nil {
		c.loginDeadline = time.Now().Add(p.opts.LoginTimeout)
	}
	return c
}

// serve runs the connection to its end.
func (c *conn) serve() {
	defer c.nc.Close() // reader and writer are done, so the close waits for nobody (see hangUp)
	if !c.peer {
		c.p.stats.unauthenticated.Add(1)
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readRequests()
	c.endPin(err)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !c.p.draining.Load() {
		c.p.log.Debug("connection ended", "conn", c.id, "err", err)
	}
	c.mu.Lock()
	c.readerDone = true
	c.mu.Unlock()
	c.wakeWriter()
	<-writerDone
	if c.peer && c.p.draining.Load() {
		c.announceRestart()
	}
	c.cancel()
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

// restartLinger bounds how long a stopping sidecar waits, after announcing its restart on a
// peer connection, for the sender to close it.
const restartLinger = time.Second

// announceRestart ends a peer connection that Shutdown stopped, once every reply it owes is
// written, with the announcement that this sidecar is restarting (peerRestarting). It then
// reads and drops what the sender still sends until the sender closes the connection, as it
// does on reading the announcement, or restartLinger passes: closing a socket with requests
// left unread resets the connection, which could cost the sender the announcement.
func (c *conn) announceRestart() {
	c.outMu.Lock()
	c.write([]byte(peerRestarting))
	c.flushClient()
	gone := c.clientGone
	c.outMu.Unlock()
	if !gone {
		c.nc.SetReadDeadline(time.Now().Add(restartLinger))
		_, _ = io.Copy(io.Discard, c.nc)
	}
}

// stopReading makes the reader end at its next blocking read: requests it has already
// buffered are still served and answered (graceful shutdown).
func (c *conn) stopReading() { c.nc.SetReadDeadline(time.Now()) }

// requestStart returns the time a request was read: one clock reading serves all the requests
// that arrived in one read from the client. wasBuffered is whether the request's first bytes
// were already buffered before the reader asked for it.
func (c *conn) requestStart(wasBuffered bool) int64 {
	if !wasBuffered || c.readStart == 0 {
		c.readStart = now()
	}
	return c.readStart
}

// setTenant changes the tenant the connection acts for (after AUTH, or nil after RESET). Its
// requests in flight still get their replies, in order. It fails when the tenant was removed
// meanwhile.
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
		c.unpin()
		c.local = nil
		clear(c.links)
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
	if (old == nil) != (t == nil) {
		c.handler.setAuthenticated(t != nil)
		if t == nil {
			c.loginDeadline = time.Now().Add(c.p.opts.LoginTimeout)
		}
	}
	return true
}

// push queues a request, waiting while the pipeline is full or the connection holds its bound
// of reply bytes (the writer makes room as the client reads its replies). Once the client is
// gone it waits no more, and the reader stops after this request: the writer drops its reply.
func (c *conn) push(p *pending) {
	c.mu.Lock()
	for c.queue.len() >= c.p.opts.MaxPipeline ||
		c.queue.len() > 0 && c.replyBytes.Load() >= c.p.opts.MaxConnectionReplyBytes {
		if c.hungUp {
			c.closing = true
			break
		}
		c.readerWaiting = true
		c.mu.Unlock()
		<-c.readerWake
		c.mu.Lock()
	}
	c.queue.push(p)
	c.mu.Unlock()
	if p.remaining.Load() == 0 {
		c.wakeWriter()
	}
}

// pushLocal queues a reply made by the proxy.
func (c *conn) pushLocal(reply []byte, start int64) {
	p := c.newPending(entry{kind: entryLocal, tenant: c.tenant, start: start}, 0)
	p.reply = append(p.reply, reply...)
	c.push(p)
}

// pushClose queues a last reply, after which the connection closes.
func (c *conn) pushClose(reply []byte) {
	p := c.newPending(entry{kind: entryLocal, close: true}, 0)
	p.reply = append(p.reply, reply...)
	c.push(p)
	c.closing = true
}

// wakeWriter wakes the writer to look at the pipeline again.
func (c *conn) wakeWriter() { kick(c.writerWake) }

// maxReroutes bounds how often one request is routed again, each time because an Update took
// the node it waited for out of its tenant's routes.
const maxReroutes = 3

// startRouting lets the request about to be dispatched be routed again (reroute).
func (c *conn) startRouting() { c.reroutes, c.rerouted = maxReroutes, false }

// reroute reports whether a request that failed with err, before anything was queued for it,
// is routed again instead of being answered: it waited for a link to a node that an Update
// meanwhile took out of the routes (errRouteChanged), or its node could not be dialed and is
// ejected since (routedAround). Requests outside a dispatch (transactions, pinned links) are
// answered with the error.
func (c *conn) reroute(err error) bool {
	if c.reroutes == 0 || !errors.Is(err, errRouteChanged) && !c.p.routedAround(err) {
		return false
	}
	c.reroutes--
	c.rerouted = true
	return true
}

// routeAgain reports whether the request just dispatched must be dispatched again under the
// new routes; once it need not, it can be routed again no more.
func (c *conn) routeAgain() bool {
	again := c.rerouted
	c.rerouted = false
	if !again {
		c.reroutes = 0
	}
	return again
}

// errNoPartition answers requests for a local partition that does not exist (yet).
var errNoPartition = errors.New("the tenant has no partition on this node")

// backend returns the link to node i of rt (the local partition on a peer connection), fetching
// a shared one when the connection has none or the one it had stopped taking requests.
func (c *conn) backend(rt *routes, i int) (*link, error) {
	if l := c.pinnedLink(rt, i); l != nil {
		return l, nil
	}
	if c.peer || rt.nodes[i].local {
		return c.localLink()
	}
	node := rt.nodes[i]
	key := linkKey{address: node.peerAddress, tenant: c.tenant.id, peer: true, proto: c.proto}
	if l := c.links[node.id]; l != nil && l.key == key && l.usable() {
		return l, nil
	}
	stats := &c.tenant.stats
	l, err := c.p.sharedLink(key, node.id, c.id, func() *atomic.Uint64 { return stats.forwardedTo(node.id) })
	if err != nil {
		return nil, err
	}
	c.links[node.id] = l
	return l, nil
}

// localLinkKey names a link to the tenant's engine on this node.
func (c *conn) localLinkKey() (linkKey, error) {
	cfg := c.tenant.cfg.Load()
	if cfg.localEngine == "" {
		return linkKey{}, errNoPartition
	}
	return linkKey{address: cfg.localEngine, enginePassword: cfg.enginePassword, tenant: c.tenant.id, proto: c.proto}, nil
}

// localLink returns the link to the tenant's engine on this node.
func (c *conn) localLink() (*link, error) {
	key, err := c.localLinkKey()
	if err != nil {
		return nil, err
	}
	if l := c.local; l != nil && l.key == key && l.usable() {
		return l, nil
	}
	l, err := c.p.sharedLink(key, c.p.nodeID(), c.id, nil)
	if err != nil {
		return nil, err
	}
	c.local = l
	return l, nil
}

// privilegedLocalLink returns the link to the tenant's engine on this node that runs as the
// engine's default user (see linkKey.privileged): the link user's own links when the engine
// has no link user.
func (c *conn) privilegedLocalLink() (*link, error) {
	key, err := c.localLinkKey()
	if err != nil {
		return nil, err
	}
	if key.enginePassword == "" {
		return c.localLink()
	}
	key.enginePassword, key.privileged = "", true
	return c.p.sharedLink(key, c.p.nodeID(), 0, nil)
}

// relink returns the link to send on in place of l, which stopped taking requests: one of the
// same kind to the same node.
func (c *conn) relink(l *link, rt *routes, node int) (*link, error) {
	if l.key.privileged {
		return c.privilegedLocalLink()
	}
	return c.backend(rt, node)
}

// forward queues a request for a node (the local partition on a peer connection) and sends
// it. A request for the local partition first waits for the tenant's tokens. It returns the
// error to answer instead, if any. size is what the request counts for.
func (c *conn) forward(rt *routes, node int, raw []byte, size int, e entry) error {
	return c.forwardSkipping(rt, node, raw, size, e, 0)
}

// forwardSkipping is forward for requests whose bytes carry skips commands before the one
// whose reply the client gets (a transaction): their replies are read and dropped.
func (c *conn) forwardSkipping(rt *routes, node int, raw []byte, size int, e entry, skips int) error {
	l, err := c.backend(rt, node)
	if err != nil {
		return err
	}
	return c.forwardOn(l, rt, node, raw, size, e, skips)
}

// forwardOn is forwardSkipping on l, a link to node.
func (c *conn) forwardOn(l *link, rt *routes, node int, raw []byte, size int, e entry, skips int) error {
	if l.local {
		if err := c.admitLocal(size); err != nil {
			return err
		}
	}
	e.tenant = c.tenant
	p := c.newPending(e, 1)
	c.push(p)
	c.send(l, rt, node, raw, size, waiter{p: p, expect: e.expect}, skips)
	return nil
}

// admitLocal makes a request for the local partition wait for the tenant's tokens. Requests
// queued before it are on their links already, so nothing waits behind this request but the
// connection's later ones. Without a wait it takes the tokens and returns at once.
func (c *conn) admitLocal(size int) error {
	t := c.tenant
	if !t.cfg.Load().limited {
		return nil
	}
	return t.admit(c.ctx, size)
}

// send sends a queued request's bytes on l, or on a fresh link to the same node if l stopped
// taking requests meanwhile. A request that cannot be sent is answered with the failure. The
// request may be answered, and its pending entry reused, as soon as it is sent: w.p is not
// touched afterwards.
func (c *conn) send(l *link, rt *routes, node int, raw []byte, size int, w waiter, skips int) {
	alone := c.handler.buffered() == 0
	err := l.send(raw, w, skips, alone)
	// A pinned link's requests (WATCH, a blocking pop, what follows them) mean something on
	// that link only: they fail with it.
	if errors.Is(err, errLinkClosed) && !l.pinned {
		if l, err = c.relink(l, rt, node); err == nil {
			err = l.send(raw, w, skips, alone)
		}
	}
	if err != nil {
		w.p.fail(w.part, err)
		c.wakeWriter()
		return
	}
	if l.local {
		c.tenant.stats.bytesIn.Add(uint64(size))
	} else {
		l.forwarded.Add(1)
	}
}

// sendSplit obtains every part's link and makes the local part wait for tokens, then queues
// one request for all parts (e, its split and start set) and sends them. If a link cannot be
// had or the tokens are refused, nothing is sent and the error is returned for the caller to
// answer; but the parts of a plain read (e.missOnUnreachable) whose node is unreachable are
// not sent and fail with that, which answers their keys as misses.
func (c *conn) sendSplit(rt *routes, nodes []int, raws [][]byte, e entry) error {
	links := make([]*link, len(nodes))
	unreachable := make([]error, len(nodes))
	var sent []int // the parts sent, by index
	for i, node := range nodes {
		l, err := c.backend(rt, node)
		if _, ok := unreachablePeer(err); ok && e.missOnUnreachable {
			unreachable[i] = err
			continue
		}
		if err != nil {
			return err
		}
		links[i] = l
		sent = append(sent, i)
	}
	for _, i := range sent {
		if l := links[i]; l.local {
			if err := c.admitLocal(len(raws[i])); err != nil {
				return err
			}
		}
	}
	e.kind, e.tenant = entrySplit, c.tenant
	p := c.newPending(e, len(links))
	p.parts = slices.Grow(p.parts[:0], len(links))[:len(links)]
	for i, l := range links {
		p.parts[i].local = l != nil && l.local
	}
	c.push(p)
	for i, err := range unreachable {
		if err != nil {
			p.fail(i, err)
		}
	}
	if len(sent) == 0 {
		c.wakeWriter() // answered: every part is a miss
		return nil
	}
	sentLinks, sentRaws, waiters := make([]*link, len(sent)), make([][]byte, len(sent)), make([]waiter, len(sent))
	for n, i := range sent {
		sentLinks[n], sentRaws[n] = links[i], raws[i]
		waiters[n] = waiter{p: p, part: i, expect: memcache.Expect{Command: e.split.cmd}}
	}
	err := sendParts(sentLinks, sentRaws, waiters)
	if errors.Is(err, errLinkClosed) {
		// A link stopped taking requests meanwhile: once more, with fresh links.
		for n, i := range sent {
			if sentLinks[n], err = c.relink(sentLinks[n], rt, nodes[i]); err != nil {
				break
			}
		}
		if err == nil {
			err = sendParts(sentLinks, sentRaws, waiters)
		}
	}
	if err != nil {
		for _, i := range sent {
			p.fail(i, err)
		}
		c.wakeWriter()
		return nil
	}
	for n, l := range sentLinks {
		if l.local {
			c.tenant.stats.bytesIn.Add(uint64(len(sentRaws[n])))
		} else {
			l.forwarded.Add(1)
		}
	}
	return nil
}

// missOnUnreachable answers a plain read that could not be forwarded because err says its
// node cannot be reached with miss, and counts it; it reports whether it did.
func (c *conn) missOnUnreachable(err error, miss []byte, start int64) bool {
	if !c.tenant.stats.countUnreachable(err, true) {
		return false
	}
	c.pushLocal(miss, start)
	return true
}

// failedAsMiss reports whether p, forwarded whole and failed (p.failure), is answered as a
// miss: a plain read whose node is unreachable or closed the link. It counts p for the node
// either way.
func (p *pending) failedAsMiss() bool {
	return p.tenant.stats.countUnreachable(p.failure, p.missOnUnreachable) && p.missOnUnreachable
}

// partMissed reports whether part i of a split request failed as an unreachable node (see
// failedAsMiss) of a plain read: its keys are misses.
func (p *pending) partMissed(i int) bool {
	_, unreachable := unreachablePeer(p.parts[i].failure)
	return unreachable && p.missOnUnreachable
}

// countSplitUnreachable counts the parts of a split request whose node was unreachable: as
// misses when the request is a plain read answered without error (answered), else as errors.
func countSplitUnreachable(p *pending, answered bool) {
	for i := range p.parts {
		if err := p.parts[i].failure; err != nil {
			p.tenant.stats.countUnreachable(err, answered && p.missOnUnreachable)
		}
	}
}

// writeLoop writes replies whenever woken, until the reader is done and every reply is out.
func (c *conn) writeLoop() {
	for {
		c.outMu.Lock()
		stop := c.writeReady(true)
		c.flushClient()
		c.finishedAt = 0
		c.outMu.Unlock()
		if stop == writerDone {
			return
		}
		<-c.writerWake
	}
}

// writeStop says why writeReady stopped.
type writeStop uint8

const (
	// waitingForReply: the queue is empty or its front's reply has not arrived.
	waitingForReply writeStop = iota
	// writerNeeded: the front's reply is ready but only the writer may write it (it closes
	// the connection).
	writerNeeded
	// writerDone: the reader ended and every reply is out.
	writerDone
)

// writeReady writes the replies at the front of the queue that are ready; c.outMu is held.
// Only the writer (blocking) writes a reply that closes the connection or is streamed, and
// drops, once the client is gone, replies still due from links.
func (c *conn) writeReady(blocking bool) writeStop {
	for {
		c.mu.Lock()
		if c.queue.len() == 0 {
			done := c.readerDone
			c.mu.Unlock()
			if done {
				return writerDone
			}
			return waitingForReply
		}
		p := c.queue.front()
		ready := p.remaining.Load() == 0
		switch {
		case !blocking && ready && (p.close || p.streamed()):
			c.mu.Unlock()
			return writerNeeded
		case !ready && (!blocking || !c.clientGone):
			c.mu.Unlock()
			return waitingForReply
		}
		c.queue.pop()
		wakeReader := c.readerWaiting
		c.readerWaiting = false
		c.mu.Unlock()
		if wakeReader {
			kick(c.readerWake)
		}
		// A reply nobody will read may still be due from a link: its pending entry is left
		// to the garbage collector rather than reused under the link's feet.
		if ready {
			c.finish(p)
			p.release()
			if blocking && len(c.out) >= ioBufferSize {
				c.flushClient()
			}
		} else {
			c.dropHeld(p, abandonedReply)
		}
	}
}

// deliverReady writes, from a link's reader that just handed out replies, those at the front
// of the queue without blocking, and wakes the writer for what it cannot do. Whatever becomes
// ready while it holds c.outMu is left to the writer, which the completing link's reader
// wakes.
func (c *conn) deliverReady() {
	if c.raw == nil || !c.outMu.TryLock() {
		c.wakeWriter()
		return
	}
	c.finishedAt = 0
	stop := c.writeReady(false)
	complete := c.flushNonblocking()
	c.outMu.Unlock()
	if stop != waitingForReply || !complete {
		c.wakeWriter()
	}
}

// finish writes a ready request's reply and records its latency; c.outMu is held.
func (c *conn) finish(p *pending) {
	switch {
	case p.stream != nil:
		c.copyStream(p.stream)
	case p.streamed():
		c.copySplit(p)
	case c.clientGone:
	case p.kind == entryLocal:
		c.write(p.reply)
	default:
		c.handler.deliver(p)
	}
	// Counted in out before it stops counting in p, so that the connection never looks, to a
	// link checking its bound meanwhile, as if it held less than it does.
	c.syncOut()
	c.dropHeld(p, 0)
	if p.tenant != nil && p.start != 0 {
		if c.finishedAt == 0 || c.stamped >= maxStampedReplies {
			c.finishedAt, c.stamped = now(), 0
		}
		c.stamped++
		p.tenant.stats.latency.observe(time.Duration(c.finishedAt - p.start))
	}
	if p.close && !c.clientGone {
		c.flushClient()
		c.clientGone = true
		c.hangUp()
	}
}

// write buffers reply bytes for the client; c.outMu is held. The writer (the only one that
// may block) writes out a full buffer first; a link's reader lets it grow, the replies being
// in memory already.
func (c *conn) write(b []byte) {
	if c.clientGone {
		return
	}
	c.out = append(c.out, b...)
}

// writeReply buffers p's reply for the client; c.outMu is held. A large reply that finds the
// buffer empty becomes the buffer instead of being copied (p takes the empty one), so it is
// held once.
func (c *conn) writeReply(p *pending) {
	if len(c.out) == 0 && len(p.reply) >= ioBufferSize && !c.clientGone {
		c.out, p.reply = p.reply, c.out
		return
	}
	c.write(p.reply)
}

// flushClient writes the buffered replies, blocking until the client takes them; c.outMu is
// held.
func (c *conn) flushClient() {
	if c.clientGone || len(c.out) == 0 {
		return
	}
	c.refreshWriteDeadline()
	if _, err := c.nc.Write(c.out); err != nil {
		c.lostClient()
	}
	c.resetOut()
}

// flushNonblocking writes what the client's socket takes right now and keeps the rest; it
// reports whether everything was written. c.outMu is held.
func (c *conn) flushNonblocking() bool {
	if c.clientGone || len(c.out) == 0 {
		return true
	}
	err := c.raw.Write(c.writeOnceFn)
	n, werr := c.wrote, c.writeErr
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The write deadline the blocking writer set has passed: this write would not have
		// waited, so leave it to the writer, which renews the deadline first.
		return false
	case err == nil && werr == nil && n == len(c.out):
		c.resetOut()
		return true
	case err == nil && (werr == nil || errors.Is(werr, syscall.EAGAIN) || errors.Is(werr, syscall.EINTR)):
		n = max(n, 0)
		c.out = c.out[:copy(c.out, c.out[n:])]
		c.syncOut()
		return false
	default:
		c.lostClient()
		return true
	}
}

// writeOnce is the system call of flushNonblocking, made once per connection (a closure per
// call would allocate): it writes what the socket takes of c.out and never waits for it.
func (c *conn) writeOnce(fd uintptr) bool {
	c.wrote, c.writeErr = rawWrite(int(fd), c.out)
	return true
}

// resetOut empties the reply buffer, dropping it if one large reply grew it.
func (c *conn) resetOut() {
	if cap(c.out) > maxRetainedReply {
		c.out = nil
	}
	c.out = c.out[:0]
	c.syncOut()
}

func (c *conn) refreshWriteDeadline() {
	timeout := c.p.opts.ClientWriteTimeout
	if now := time.Now(); now.Add(timeout / 2).After(c.writeDeadline) {
		c.writeDeadline = now.Add(timeout)
		c.nc.SetWriteDeadline(c.writeDeadline)
	}
}

// lostClient stops writing to a client that cannot take replies and hangs up on it, which
// ends the reader too; c.outMu is held.
func (c *conn) lostClient() {
	c.clientGone = true
	c.resetOut()
	c.hangUp()
}

// hangUp ends the connection for the client without waiting for the reader; c.outMu is held.
// Closing a socket waits for a raw read of it in progress (pollRequests), and the request
// that read is handling may wait in push for room that only the writer makes, once it has
// outMu: a close here would never return, and a link's reader delivering replies
// (deliverReady) would hang with it. So the socket is shut down instead, which the client sees
// as a close and which ends the reader's next read, push waits no more, and serve closes the
// socket once the reader and the writer are done.
func (c *conn) hangUp() {
	c.mu.Lock()
	c.hungUp = true
	c.mu.Unlock()
	kick(c.readerWake)
	if c.raw == nil {
		c.nc.Close() // no raw read to wait for
		return
	}
	if err := c.raw.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }); err != nil {
		c.nc.Close() // the socket is already closed: there is no read to wait for
	}
}

// served counts a reply of the local partition.
func (t *tenant) served(replyBytes int) {
	t.stats.served.Add(1)
	t.stats.bytesOut.Add(uint64(replyBytes))
	t.charge(replyBytes)
}

// recordRead counts a read of one key served by the local partition and reports it to the
// partition's curve (mrc.Recorder.Read) and ghost list. A hit tells the object's size (its
// key and value lengths, unknownValue when the reply holds no value); a miss does not.
func (t *tenant) recordRead(h uint64, hit bool, keyLen, valueLen int) {
	if hit {
		t.stats.hits.Add(1)
		if valueLen >= 0 {
			t.noteValueSize(valueLen)
		}
	} else {
		t.stats.misses.Add(1)
	}
	ps := t.part.Load()
	if ps == nil {
		return
	}
	size := ps.curves.Read(h, hit, keyLen, valueLen) // 0: unknown
	ghostSize := size
	if size == 0 {
		ghostSize = t.meanValueSize()
	}
	if _, ghostHit := ps.ghost.AccessHash(h, ghostSize); ghostHit && !hit {
		t.stats.ghostHits.Add(1)
	}
}

// Value lengths of a write (entry.valueLen) that the request does not tell; distinct from
// mrc.IntegerValue, which entry.valueLen may also hold.
const (
	// unknownValue: nor does the reply (memcached append, touch); the curve keeps the size
	// it knows.
	unknownValue = mrc.UnknownValue
	// valueInReply: the reply is the new value (INCR, INCRBYFLOAT, memcached incr).
	valueInReply = -2
	// lengthInReply: the reply is the new value's length, a string redis holds raw
	// (SETRANGE; entryMore.setrangeEnd tells whether the write reached its end).
	lengthInReply = -3
	// appendInReply: the reply is APPEND's new value length; equal to the argument's length,
	// APPEND created the key and redis holds it as SET would (entryMore.appendArgLen),
	// else it grew a raw string.
	appendInReply = -5
)

// recordWrite tells the curve that a written key now holds a value of valueLen bytes (or
// unknownValue) at the top of the LRU order (mrc.Recorder.Write), and the ghost list that it
// is back in the cache.
func (t *tenant) recordWrite(h uint64, keyLen, valueLen int) {
	ps := t.part.Load()
	if ps == nil {
		return
	}
	size := ps.curves.Write(h, keyLen, valueLen)
	if size == 0 {
		size = t.meanValueSize()
	}
	ps.ghost.AccessHash(h, size)
}

// recordGrow is recordWrite for a write that leaves a value of at least valueLen bytes.
func (t *tenant) recordGrow(h uint64, keyLen, valueLen int) {
	if ps := t.part.Load(); ps != nil {
		ps.ghost.AccessHash(h, ps.curves.Grow(h, keyLen, valueLen))
	}
}

// recordDelete tells the curve that the key hashed h left the local partition.
func (t *tenant) recordDelete(h uint64) {
	if ps := t.part.Load(); ps != nil {
		ps.curves.Delete(h)
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
// A source backing off after repeated failures is refused without a check.
func (c *conn) authenticate(user, password []byte) (*tenant, bool) {
	t := c.p.lookupTenant(user)
	src, now := sourceOf(c.nc), time.Now()
	if c.p.authLimit.blocked(src, now) {
		c.p.stats.authBackoffRefusals.Add(1)
		return t, false
	}
	hash := dummyCredentialHash
	if t != nil {
		hash = t.cfg.Load().credentialHash
	}
	ok := verifyPassword(hash, password) && t != nil
	if ok {
		c.p.authLimit.succeeded(src)
	} else {
		c.p.authLimit.failed(src, now)
	}
	return t, ok
}
