package proxy

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Buffer sizes of client connections and links: large enough for deep pipelines to move in few
// system calls, small enough for thousands of connections.
const ioBufferSize = 16 << 10

// Bounds of a link's request buffer: senders wait while this much is queued and not yet
// written (a slow engine slows its tenant's clients instead of growing the buffer), and a
// buffer that one large request grew beyond the retention size is dropped after use.
const (
	maxLinkBacklog      = 1 << 20
	maxRetainedLinkBuf  = 256 << 10
	initialLinkDueSlots = 64
)

// linkKey identifies interchangeable backend connections.
type linkKey struct {
	address string // engine socket path, or peer "host:port"
	// enginePassword logs a link to a local redis engine in as engine.RedisLinkUser.
	enginePassword string
	// privileged: a link to a local engine that stays its default user, for the commands
	// engine.RedisLinkUser may not run and the proxy runs on the tenant's behalf (INFO, whose
	// reply it filters); no client request is sent unchecked on it.
	privileged bool
	tenant     string // links carry one tenant's requests (a peer link's handshake names it)
	peer       bool
	proto      resp.Proto // the RESP version the link speaks (0 for memcached)
}

// waiter is one reply a link owes: the request it answers and, for a split request, which
// part.
type waiter struct {
	p      *pending
	part   int
	expect memcache.Expect // memcached: how to frame the response
	// skip: a reply nobody reads, before p's own (the MULTI and QUEUED replies of a
	// transaction): it is read and dropped.
	skip bool
}

// linkState is a link's life cycle: open links take requests; a draining link takes none and
// closes once it has read its last reply; a closed link is done.
type linkState uint8

const (
	linkOpen linkState = iota
	linkDraining
	linkClosed
)

// errLinkClosed makes a sender fetch another link: this one stopped taking requests.
var errLinkClosed = errors.New("link closed")

// link is a pipelined connection from the proxy to an engine or a peer sidecar, shared by
// every client connection of one tenant that picked it. Senders append request bytes to out
// and the reply they are owed to due, under mu; whoever holds the writer role (the link's
// writer goroutine, or a sender that found the link idle) writes out in batches, one system
// call for whatever many clients queued meanwhile. The link's reader goroutine reads replies
// in the same order, hands each to its waiter and, once no more replies are buffered, has the
// client connections it completed write them out.
type link struct {
	id    uint64 // orders the locking of several links (sendParts)
	p     *Proxy
	key   linkKey
	node  string
	local bool
	// pinned: the link is one client connection's own (pin.go), not shared.
	pinned bool
	nc     net.Conn
	// forwarded counts requests sent on a peer link, by tenant and peer (a metrics series).
	forwarded *atomic.Uint64

	open atomic.Bool // state == linkOpen, read without the lock on every request

	mu           sync.Mutex
	state        linkState
	out          []byte       // request bytes the writer has not taken yet
	due          ring[waiter] // replies owed, in request order
	writing      bool         // someone holds the writer role: out will be written
	blocked      int          // senders waiting for room in out
	room         sync.Cond    // signalled when the writer takes out
	readDeadline time.Time

	wake chan struct{} // hands the writer role to the writer goroutine

	// Owned by the holder of the writer role.
	wbuf          []byte
	writeDeadline time.Time

	// Reader-owned.
	br        *bufio.Reader
	replies   *resp.ReplyReader
	responses *memcache.ResponseReader
	touched   []*conn // connections with a completed reply, served once no reply is buffered
}

func newLink(p *Proxy, key linkKey, node string, nc net.Conn, br *bufio.Reader) *link {
	l := &link{
		id:    linkIDs.Add(1),
		p:     p,
		key:   key,
		node:  node,
		local: !key.peer,
		nc:    nc,
		br:    br,
		wake:  make(chan struct{}, 1),
		due:   newRing[waiter](initialLinkDueSlots),
	}
	l.room.L = &l.mu
	l.open.Store(true)
	if p.opts.Protocol == Redis {
		l.replies = resp.NewReplyReader(br, resp.ReplyLimits{})
	} else {
		l.responses = memcache.NewResponseReader(br, memcache.ResponseLimits{})
	}
	return l
}

// start runs the link's writer and reader; false when the proxy is closing.
func (l *link) start() bool {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	if l.p.closed {
		return false
	}
	l.p.wg.Add(2)
	go l.writeLoop()
	go l.readLoop()
	return true
}

// usable reports whether the link takes requests.
func (l *link) usable() bool { return l.open.Load() }

// send queues a request and the reply it is owed (after skips replies to drop), and sees that
// it gets written; the request's bytes go out together, whatever other senders queue. It waits
// while the link's backlog is full and fails with errLinkClosed once the link takes no more
// requests. alone says the sender has nothing more to send right away: if then the link has
// nothing else in flight, no batch is worth waiting for and the sender writes the request
// itself, saving a goroutine switch on the way; otherwise the link's writer goroutine writes
// it in a batch.
func (l *link) send(raw []byte, w waiter, skips int, alone bool) error {
	l.mu.Lock()
	for l.state == linkOpen && len(l.out) > 0 && len(l.out)+len(raw) > maxLinkBacklog {
		l.blocked++
		l.room.Wait()
		l.blocked--
	}
	if l.state != linkOpen {
		l.mu.Unlock()
		return errLinkClosed
	}
	if l.due.len() == 0 {
		// The reader may be blocked without a deadline, or with one that expired while the
		// link was idle: this reply is due within the backend timeout from now.
		l.setReadDeadline(time.Now().Add(l.p.opts.BackendTimeout))
	}
	l.out = append(l.out, raw...)
	for range skips {
		l.due.push(waiter{p: w.p, skip: true})
	}
	l.due.push(w)
	wake, write := false, false
	if !l.writing {
		l.writing = true
		write = alone && l.due.len() == skips+1
		wake = !write
	}
	l.mu.Unlock()
	if wake {
		kick(l.wake)
	}
	if write {
		l.writeOut(false)
	}
	return nil
}

// linkIDs numbers links.
var linkIDs atomic.Uint64

// sendParts queues the parts of a split request on their links (one each) in one step,
// holding every link's lock, so that all links order them the same way against every other
// request (see splitstream.go). It fails with errLinkClosed, queuing nothing, when a link
// takes no more requests. Unlike send it does not wait for room in a full backlog, and leaves
// the writing to the links' writers.
func sendParts(links []*link, raws [][]byte, waiters []waiter) error {
	order := slices.Clone(links)
	slices.SortFunc(order, func(a, b *link) int { return cmp.Compare(a.id, b.id) })
	order = slices.Compact(order)
	for _, l := range order {
		l.mu.Lock()
	}
	var err error
	for _, l := range order {
		if l.state != linkOpen {
			err = errLinkClosed
		}
	}
	var wake []*link
	for i, l := range links {
		if err != nil {
			break
		}
		if l.due.len() == 0 {
			l.setReadDeadline(time.Now().Add(l.p.opts.BackendTimeout))
		}
		l.out = append(l.out, raws[i]...)
		l.due.push(waiters[i])
		if !l.writing {
			l.writing = true
			wake = append(wake, l)
		}
	}
	for _, l := range order {
		l.mu.Unlock()
	}
	for _, l := range wake {
		kick(l.wake)
	}
	return err
}

// setReadDeadline sets the reader's deadline; l.mu is held.
func (l *link) setReadDeadline(t time.Time) {
	l.readDeadline = t
	l.nc.SetReadDeadline(t)
}

// writeLoop takes the writer role whenever a sender hands it over, until the link closes.
func (l *link) writeLoop() {
	defer l.p.wg.Done()
	for {
		<-l.wake
		l.mu.Lock()
		closed := l.state == linkClosed
		l.mu.Unlock()
		if closed {
			return
		}
		l.writeOut(true)
	}
}

// writeOut writes the queued requests for the holder of the writer role, which it gives up
// once nothing is queued. The writer goroutine (batching) first lets the client connections
// that are ready to run queue their requests, so that they leave in one write, and writes
// until nothing is queued; a sender writes once and hands what others queued meanwhile to the
// writer goroutine.
func (l *link) writeOut(batching bool) {
	timeout := l.p.opts.BackendTimeout
	for round := 0; ; round++ {
		if batching {
			runtime.Gosched()
		}
		l.mu.Lock()
		if l.state == linkClosed || len(l.out) == 0 {
			l.writing = false
			l.mu.Unlock()
			return
		}
		if !batching && round > 0 {
			l.mu.Unlock()
			kick(l.wake)
			return
		}
		l.wbuf, l.out = l.out, l.wbuf[:0]
		if l.blocked > 0 {
			l.room.Broadcast()
		}
		l.mu.Unlock()
		if now := time.Now(); now.Add(timeout / 2).After(l.writeDeadline) {
			l.writeDeadline = now.Add(timeout)
			l.nc.SetWriteDeadline(l.writeDeadline)
		}
		if _, err := l.nc.Write(l.wbuf); err != nil {
			l.fail(l.failure(err))
			return
		}
		if cap(l.wbuf) > maxRetainedLinkBuf {
			l.wbuf = nil
		}
	}
}

// readLoop reads replies in request order and completes their waiters until the link closes.
func (l *link) readLoop() {
	defer l.p.wg.Done()
	defer l.wakeTouched()
	for {
		if l.br.Buffered() == 0 {
			l.wakeTouched()
			l.releaseReplyBuffers()
			if err := l.awaitReply(); err != nil {
				l.fail(l.failure(err))
				return
			}
		}
		if l.restartAnnounced() {
			return
		}
		l.mu.Lock()
		if l.due.len() == 0 {
			l.mu.Unlock()
			l.fail(l.failure(errors.New("the engine sent a reply nobody asked for")))
			return
		}
		w := l.due.pop()
		l.mu.Unlock()
		// The writer may reuse w.p as soon as it is complete: its connection is read first.
		c := w.p.c
		if c.overReplyBound() {
			l.awaitRoom(c)
		}
		var err error
		switch {
		case w.skip:
			err = l.skipReply(w)
		case w.p.kind == entrySplit && l.streamsPart(w), w.p.kind != entrySplit && l.streams(w):
			// The writer answered the request, or the link reads its reply away: either way
			// the failure is the link's only.
			if err = l.stream(w); err != nil {
				l.fail(l.failure(err))
				return
			}
		case l.replies != nil:
			err = l.readRESP(w)
		default:
			err = l.readMemcache(w)
		}
		if err != nil {
			failure := l.failure(err)
			if !w.skip {
				w.p.fail(w.part, failure)
			}
			l.touch(c)
			l.fail(failure)
			return
		}
		l.touch(c)
		if l.drained() {
			return
		}
	}
}

// restartAnnounced reports whether the bytes at this reply boundary, some of which are
// buffered, are a peer's announcement that its sidecar is restarting (peerRestarting). If so
// it notes the announcement for the node and closes the link as a closed connection does: the
// replies still due are lost (the peer sends none after it).
func (l *link) restartAnnounced() bool {
	if l.local {
		return false
	}
	if b, _ := l.br.Peek(1); !isRestartAnnouncement(b) {
		return false
	}
	l.p.restartAnnounced(l.node)
	l.fail(l.failure(io.EOF))
	return true
}

// replyRoomPoll is how often a link waiting for room for a connection's replies looks again
// when nothing wakes it: the proxy-wide bound falls without a connection crossing its own.
const replyRoomPoll = 2 * time.Millisecond

// awaitRoom holds the reader back, before it reads a reply for c, while c holds its bound of
// reply bytes (or the proxy its bound and c some) and c's writer can lower that by itself: the
// client takes its replies, or is dropped after Options.ClientWriteTimeout. The engine keeps the
// unread replies meanwhile, so the sidecar's memory stays bounded whatever the client does;
// the link's other requests (the same tenant's) wait too. The replies already read go out
// first. When c's writer waits for a reply still due from a link, the reader does not wait:
// that link may be this one.
func (l *link) awaitRoom(c *conn) {
	l.wakeTouched()
	var poll *time.Timer
	for c.overReplyBound() && c.writerCanDrain() {
		if poll == nil {
			poll = time.NewTimer(replyRoomPoll)
			defer poll.Stop()
		} else {
			poll.Reset(replyRoomPoll)
		}
		select {
		case <-c.replyRoom:
		case <-poll.C:
		case <-c.ctx.Done():
			return
		}
	}
	// The wait did not read the engine: the reply's deadline runs from now.
	l.mu.Lock()
	l.setReadDeadline(time.Now().Add(l.p.opts.BackendTimeout))
	l.mu.Unlock()
}

// releaseReplyBuffers drops what a large reply left in the link's reader before it waits for
// the next, so an idle link pins no large reply.
func (l *link) releaseReplyBuffers() {
	if l.replies != nil {
		l.replies.Release()
	} else {
		l.responses.Release()
	}
}

// skipReply reads a reply nobody is owed and drops it, counting it for the local partition.
func (l *link) skipReply(w waiter) error {
	reply, err := l.replies.ReadReply()
	if err == nil && l.local {
		w.p.tenant.served(len(reply.Raw()))
	}
	return err
}

func (l *link) readRESP(w waiter) error {
	reply, err := l.replies.ReadReply()
	if err != nil {
		return err
	}
	w.p.completeRESP(l, w.part, reply)
	return nil
}

func (l *link) readMemcache(w waiter) error {
	r, err := l.responses.ReadResponse(w.expect)
	if err != nil {
		return err
	}
	w.p.completeMemcache(l, w.part, r)
	return nil
}

// awaitReply blocks until reply bytes arrive. While replies are due it keeps a deadline of
// one backend timeout after the last progress; a deadline that passes with nothing due (the
// link went idle) is cleared.
func (l *link) awaitReply() error {
	timeout := l.p.opts.BackendTimeout
	for {
		l.mu.Lock()
		if l.due.len() > 0 {
			if now := time.Now(); now.Add(timeout / 2).After(l.readDeadline) {
				l.setReadDeadline(now.Add(timeout))
			}
		}
		l.mu.Unlock()
		_, err := l.br.Peek(1)
		if err == nil {
			return nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return err
		}
		l.mu.Lock()
		switch {
		case l.state == linkClosed:
			l.mu.Unlock()
			return err
		case l.due.len() == 0:
			l.setReadDeadline(time.Time{})
		case !time.Now().Before(l.readDeadline):
			l.mu.Unlock()
			return err
		}
		// Otherwise a sender moved the deadline after this one passed.
		l.mu.Unlock()
	}
}

// touch notes a connection to wake once the replies read so far are handed out.
func (l *link) touch(c *conn) {
	if n := len(l.touched); n == 0 || l.touched[n-1] != c {
		l.touched = append(l.touched, c)
	}
}

// wakeTouched hands out the replies of the connections completed in this batch: each
// connection's replies leave in one system call.
func (l *link) wakeTouched() {
	for i, c := range l.touched {
		c.deliverReady()
		l.touched[i] = nil
	}
	l.touched = l.touched[:0]
}

// drained closes a draining link that owes no more replies, and reports whether it did.
func (l *link) drained() bool {
	l.mu.Lock()
	done := l.state == linkDraining && l.due.len() == 0
	l.mu.Unlock()
	if done {
		l.fail(nil)
	}
	return done
}

// errConnectionClosed words the failure of a link whose connection closed.
var errConnectionClosed = errors.New("connection closed")

// failure words a link's I/O error for the clients whose replies it loses. A peer link whose
// connection closed (the peer's sidecar stopping, which answers the requests it read and not
// those still on the way) fails as an unreachable peer: the plain reads it loses are answered
// as misses (see peerUnreachableError). A link that timed out does not: its peer is there but
// does not answer, which its clients are told.
func (l *link) failure(err error) error {
	var reason string
	var ne net.Error
	closed := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	switch {
	case closed && !l.local:
		return &peerUnreachableError{node: l.node, err: errConnectionClosed}
	case closed:
		reason = errConnectionClosed.Error()
	case errors.As(err, &ne) && ne.Timeout():
		reason = "timed out"
	default:
		reason = err.Error()
	}
	if l.local {
		return fmt.Errorf("local partition: %s", reason)
	}
	return fmt.Errorf("node %s: %s", l.node, reason)
}

// fail closes the link; every reply still due is answered with failure (nil: the link was
// drained and owes none).
func (l *link) fail(failure error) {
	l.mu.Lock()
	if l.state == linkClosed {
		l.mu.Unlock()
		return
	}
	l.state = linkClosed
	l.open.Store(false)
	var lost []waiter
	for l.due.len() > 0 {
		lost = append(lost, l.due.pop())
	}
	l.out = nil
	l.room.Broadcast()
	l.mu.Unlock()
	l.nc.Close()
	kick(l.wake)
	if failure == nil {
		failure = errConnectionClosed
	}
	for _, w := range lost {
		if w.skip {
			continue
		}
		c := w.p.c
		w.p.fail(w.part, failure)
		c.wakeWriter()
	}
}

// retire stops the link taking requests; it closes once it has read the replies it owes.
func (l *link) retire() {
	l.mu.Lock()
	if l.state != linkOpen {
		l.mu.Unlock()
		return
	}
	l.state = linkDraining
	l.open.Store(false)
	idle := l.due.len() == 0
	l.room.Broadcast()
	l.mu.Unlock()
	if idle {
		l.fail(nil)
	}
}

// linkSlot holds the shared links of one key: a small fixed number, each dialed on first use
// and again after it fails. Client connections spread over them by connection ID.
type linkSlot struct {
	// ctx ends when the slot is retired (its key's tenant no longer routes there, or the proxy
	// closes): the dial in progress and the requests waiting for it stop.
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	links []*link
	// dialing is closed when the dial in progress ends (nil: none). The requests that need a
	// link meanwhile wait for it without holding mu, so that retiring the slot never waits
	// for a dial.
	dialing  chan struct{}
	failedAt time.Time // last failed dial: others fail fast for dialRetryDelay
	failure  error
	// unreachableSince is the first of the dials that failed in a row (zero once one
	// succeeds, or when the node announces a restart after it: see
	// forgetFailuresBeforeRestart): a peer that is waited for (see holdsFor) is redialed while
	// it has been unreachable for less than Options.PeerRetryWindow.
	unreachableSince time.Time
}

// errRouteChanged answers a request that waited for a link whose slot was retired meanwhile:
// an Update took the node (or the local engine) out of its tenant's routes. Nothing was queued
// for the request, so it is routed again under the new routes (see conn.reroute).
var errRouteChanged = errors.New("the tenant's routes changed while the request waited for its node")

// peerUnreachableError is the failure of a peer that could not be reached (the dial or the
// handshake failed on the network, not by the peer's answer; holdsFor says whether that is
// answered at once or after the retry window), or that closed the link a request was sent on
// before it answered (see link.failure). A plain read of a key the peer owns is then answered
// as a miss (see missOnUnreachable): the key's value is out of reach, which a look-aside
// client handles as it handles an eviction.
type peerUnreachableError struct {
	node string
	err  error
}

func (e *peerUnreachableError) Error() string { return "node " + e.node + ": " + e.err.Error() }
func (e *peerUnreachableError) Unwrap() error { return e.err }

// dialFailure is the error a failed dial of key answers requests with.
func dialFailure(key linkKey, node string, err error) error {
	var alert tls.AlertError
	var netErr net.Error
	if key.peer && !errors.As(err, &alert) &&
		(errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return &peerUnreachableError{node: node, err: err}
	}
	return fmt.Errorf("node %s: %w", node, err)
}

// unreachablePeer returns the node of a peerUnreachableError in err's chain.
func unreachablePeer(err error) (string, bool) {
	var u *peerUnreachableError
	if errors.As(err, &u) {
		return u.node, true
	}
	return "", false
}

// dialRetryDelay is how long requests for an unreachable backend are answered with an error
// at once instead of dialing again, once a failed dial was answered.
const dialRetryDelay = time.Second

// Backoff of the redials within Options.PeerRetryWindow: short at first, since a sidecar
// restarting in place listens again within seconds, and never much longer than a client
// would notice.
const (
	firstPeerRedial = 50 * time.Millisecond
	maxPeerRedial   = 250 * time.Millisecond
)

// restartGrace is how long a node's announcement of a restart (peerRestarting) is remembered
// while no dial of it succeeds. A sidecar announces as its Shutdown begins; it then drains its
// connections (up to --drain-timeout, 10 s by default), saves its engines and exits, and the
// new process loads its engines and plan before it listens again. That may outlast
// Options.PeerRetryWindow, which therefore bounds each wait from the first dial refused after
// the announcement (see forgetFailuresBeforeRestart), not the announcement's life. Bounded, so
// that a node that announced a restart and never came back (its pod deleted, its node lost
// after) is soon answered at once again, as any unreachable node is.
const restartGrace = 30 * time.Second

// linkSet is every shared link of the proxy, by key.
type linkSet struct {
	mu     sync.Mutex
	slots  map[linkKey]*linkSlot
	closed bool

	// restartsMu guards restarts; it is taken last (a slot's mu may be held).
	restartsMu sync.Mutex
	// restarts holds when each node last announced that its sidecar is restarting
	// (peerRestarting), until a dial of the node succeeds or the announcement is older than
	// restartGrace.
	restarts map[string]time.Time
}

func newLinkSet() *linkSet {
	return &linkSet{slots: make(map[linkKey]*linkSlot), restarts: make(map[string]time.Time)}
}

// announceRestart notes that node's sidecar announced it is restarting.
func (s *linkSet) announceRestart(node string) {
	s.restartsMu.Lock()
	s.restarts[node] = time.Now()
	s.restartsMu.Unlock()
}

// restarting returns when node announced a restart, if it did less than restartGrace ago and
// no dial of it has succeeded since (reached); an older announcement is forgotten.
func (s *linkSet) restarting(node string) (time.Time, bool) {
	s.restartsMu.Lock()
	defer s.restartsMu.Unlock()
	at, ok := s.restarts[node]
	if ok && time.Since(at) >= restartGrace {
		delete(s.restarts, node)
		return time.Time{}, false
	}
	return at, ok
}

// reached forgets node's announced restart: a dial of it succeeded.
func (s *linkSet) reached(node string) {
	s.restartsMu.Lock()
	delete(s.restarts, node)
	s.restartsMu.Unlock()
}

// slot returns key's slot, creating it with n links. A key no tenant uses any more gets no new
// slot: the request that asks for it was routed before an Update that retired the key's
// slot, and is routed again (errRouteChanged).
func (p *Proxy) slot(key linkKey, n int) (*linkSlot, error) {
	s := p.links
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if slot := s.slots[key]; slot != nil {
		return slot, nil
	}
	if !linkInUse(*p.tenants.Load(), p.nodeID(), key) {
		return nil, errRouteChanged
	}
	ctx, cancel := context.WithCancel(p.ctx)
	slot := &linkSlot{ctx: ctx, cancel: cancel, links: make([]*link, n)}
	s.slots[key] = slot
	return slot, nil
}

// ended is the error of a dial or a wait that the slot's retirement stopped.
func (p *Proxy) ended() error {
	if p.ctx.Err() != nil {
		return ErrClosed
	}
	return errRouteChanged
}

// sharedLink returns an open link for key, dialing it if needed. pick chooses among the key's links
// (a client connection always picks the same one, so its replies mostly come in order from
// one link); forwarded is the counter of a peer link. While another request dials the slot,
// it waits for that dial, unless the dial only probes a peer whose last failed dial was
// answered (see dialSlot): then it fails at once with that dial's error. A failed dial of a
// peer from before its node's latest announcement of a restart is forgotten first, so the
// requests after the announcement wait for the node again.
func (p *Proxy) sharedLink(key linkKey, node string, pick int64, forwarded func() *atomic.Uint64) (*link, error) {
	n := p.opts.EngineLinks
	if key.peer {
		n = p.opts.PeerLinks
	}
	slot, err := p.slot(key, n)
	if err != nil {
		return nil, err
	}
	i := int(pick % int64(n))
	for {
		slot.mu.Lock()
		if l := slot.links[i]; l != nil && l.usable() {
			slot.mu.Unlock()
			return l, nil
		}
		if key.peer {
			p.forgetFailuresBeforeRestart(slot, node)
		}
		switch {
		case slot.ctx.Err() != nil:
			slot.mu.Unlock()
			return nil, p.ended()
		case slot.dialing != nil && (slot.failure == nil || !key.peer):
			dialing := slot.dialing
			slot.mu.Unlock()
			select {
			case <-dialing:
			case <-slot.ctx.Done():
			}
			continue
		case slot.dialing != nil, !slot.failedAt.IsZero() && time.Since(slot.failedAt) < dialRetryDelay:
			failure := slot.failure
			slot.mu.Unlock()
			return nil, failure
		}
		dialing := make(chan struct{})
		slot.dialing = dialing
		slot.mu.Unlock()
		l, err := p.dialSlot(slot, key, node)
		slot.mu.Lock()
		slot.dialing = nil
		close(dialing)
		if err == nil {
			err = p.install(slot, i, l, forwarded)
		}
		slot.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// install starts a freshly dialed link as the slot's link i; slot.mu is held. A slot retired
// during the dial gets no link: the link is closed.
func (p *Proxy) install(slot *linkSlot, i int, l *link, forwarded func() *atomic.Uint64) error {
	if slot.ctx.Err() != nil {
		l.nc.Close()
		return p.ended()
	}
	if l.key.peer {
		l.forwarded = forwarded()
	}
	if !l.start() {
		l.nc.Close()
		return ErrClosed
	}
	slot.links[i] = l
	return nil
}

// dialSlot dials a link for slot, which is marked as dialing. A peer that fails the dial and
// is waited for (holdsFor: a sidecar that announced its restart refuses connections until it
// listens again) is redialed with backoff until it has been unreachable for
// Options.PeerRetryWindow (since the first dial that failed after its announcement), the
// requests that need it waiting meanwhile; only then is the failure returned. Any other failed dial (a peer killed without a word, a lost node, an
// engine) is returned at once. Either way the requests of the next dialRetryDelay fail at once
// with it. Every dial within the window ends with it (the last one at most firstPeerRedial
// later), so that a peer that does not answer at all holds no request much longer than the
// window. Once the window is over, or after a failure returned at once, a request dials the
// peer once, with the full dial timeout, to learn whether it is back. Retiring the slot ends
// the dial and the wait at once.
func (p *Proxy) dialSlot(slot *linkSlot, key linkKey, node string) (*link, error) {
	slot.mu.Lock()
	since := slot.unreachableSince
	slot.mu.Unlock()
	var windowEnd time.Time // zero: one dial, no redials
	if begin := time.Now(); key.peer && (since.IsZero() || begin.Sub(since) < p.opts.PeerRetryWindow) {
		if since.IsZero() {
			since = begin
		}
		windowEnd = since.Add(p.opts.PeerRetryWindow)
	}
	redial := firstPeerRedial
	for {
		timeout := p.opts.DialTimeout
		if !windowEnd.IsZero() {
			// The dial that starts as the window ends still gets a moment: a refusal then is
			// the answer the requests get.
			timeout = min(timeout, max(time.Until(windowEnd), firstPeerRedial))
		}
		ctx, cancel := context.WithTimeout(slot.ctx, timeout)
		l, err := p.dialLink(ctx, key, node)
		cancel()
		if slot.ctx.Err() != nil {
			if err == nil {
				l.nc.Close()
			}
			return nil, p.ended()
		}
		if err == nil && key.peer {
			p.links.reached(node)
		}
		now := time.Now()
		slot.mu.Lock()
		if err == nil {
			slot.failedAt, slot.failure, slot.unreachableSince = time.Time{}, nil, time.Time{}
			slot.mu.Unlock()
			return l, nil
		}
		if slot.unreachableSince.IsZero() {
			slot.unreachableSince = now
		}
		wait := min(redial, windowEnd.Sub(now))
		if windowEnd.IsZero() || wait <= 0 || !p.holdsFor(key, node, err) {
			slot.failedAt, slot.failure = now, dialFailure(key, node, err)
			failure := slot.failure
			slot.mu.Unlock()
			if _, ok := unreachablePeer(failure); ok {
				p.eject(node, key.address)
			}
			return nil, failure
		}
		slot.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-slot.ctx.Done():
			timer.Stop()
			return nil, p.ended()
		}
		redial = min(2*redial, maxPeerRedial)
	}
}

// holdsFor reports whether the requests for a peer whose dial just failed with err wait while
// it is redialed: the node announced that its sidecar is restarting (peerRestarting, less
// than restartGrace ago, and no dial of it has succeeded since), or the peer answered and
// refused the handshake (a sidecar that has not yet loaded the plan that gives it the
// tenant's partition). A peer that is not reachable without having announced a restart
// (killed, crashed, its node lost, or never reached) is not waited for: its requests are
// answered at once.
func (p *Proxy) holdsFor(key linkKey, node string, err error) bool {
	if _, unreachable := unreachablePeer(dialFailure(key, node, err)); !unreachable {
		return true
	}
	_, restarting := p.links.restarting(node)
	return restarting
}

// forgetFailuresBeforeRestart makes a peer slot forget the dials that failed before its node
// last announced a restart; slot.mu is held. The requests that come after the announcement
// then wait for the node (dialSlot), up to Options.PeerRetryWindow from the first dial that
// fails after it, instead of failing at once on an earlier failure: one answered at once
// because the dial came before the announcement did, or a window that ran out in a restart
// before.
func (p *Proxy) forgetFailuresBeforeRestart(slot *linkSlot, node string) {
	at, ok := p.links.restarting(node)
	if !ok || !slot.unreachableSince.Before(at) {
		return
	}
	slot.unreachableSince = time.Time{}
	if slot.failedAt.Before(at) {
		slot.failedAt, slot.failure = time.Time{}, nil
	}
}

// retire retires the links whose key matches: gracefully (they close once they have read
// the replies they owe) or at once.
func (s *linkSet) retire(match func(linkKey) bool, now bool) {
	s.mu.Lock()
	var slots []*linkSlot
	for key, slot := range s.slots {
		if match(key) {
			slots = append(slots, slot)
			delete(s.slots, key)
		}
	}
	s.mu.Unlock()
	for _, slot := range slots {
		// First the slot's context: a dial in progress and the requests waiting on it stop.
		slot.cancel()
		slot.mu.Lock()
		links := slot.links
		slot.mu.Unlock()
		for _, l := range links {
			switch {
			case l == nil:
			case now:
				l.fail(errConnectionClosed)
			default:
				l.retire()
			}
		}
	}
}

// closeAll closes every link at once and refuses new ones.
func (s *linkSet) closeAll() {
	s.retire(func(linkKey) bool { return true }, true)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	// Links dialed while closing found the set open; retire them too.
	s.retire(func(linkKey) bool { return true }, true)
}

// The peer protocol. A sidecar forwarding a tenant's requests to another node's peer listener
// opens a TCP connection and, with peer TLS, first sends
//
//	CQPEER 2 TLS\r\n
//
// The peer answers "OK\r\n" and both run a mutual TLS handshake on the connection; the rest
// goes inside TLS. Then (or at once, without peer TLS) the sender sends one line
//
//	CQPEER 1 <peer token> <tenant ID>\r\n
//
// The peer answers "OK\r\n" and from then on the connection carries the engine protocol
// exactly as a client connection authenticated as that tenant would, except that everything
// is served by the peer's local partition (the sender already chose the node). Any other
// answer is "ERR <reason>\r\n", after which the peer closes the connection. A sidecar of a
// version without peer TLS answers the first line with an ERR too.
//
// A peer that stops gracefully (Proxy.Shutdown) ends each such connection, after the last reply
// it owes there, with one line
//
//	@CQPEER RESTARTING\r\n
//
// and closes it once the sender has (or after restartLinger). No redis reply (RESP2, RESP3)
// and no memcached response (text or meta) starts with "@", so the sender's link tells the
// line from a reply by its first byte at a reply boundary, also while requests are still due
// that the peer will not answer. It means that the node's sidecar is restarting in place and
// will listen again shortly: the sender's dials of the node wait for it (holdsFor).
//
// A sidecar may have no such connection from the stopping one (it restarted itself since, or
// never forwarded to it), so Shutdown also dials every peer node of its plan's routes, as a
// link does (with TLS first when configured), and sends, instead of the tenant's hello,
//
//	CQPEER 1 <peer token> RESTARTING <node ID>\r\n
//
// naming its own node. A peer that checks the token, and knows the node from its own plan's
// routes, notes the restart as if it had come on a link and answers "OK\r\n"; any other answer
// is "ERR <reason>\r\n" (a sidecar of the version before answers so: it expects a tenant), and
// the peer closes the connection either way.
const (
	peerHello          = "CQPEER"
	peerVersion        = "1"
	peerTLSRequest     = peerHello + " 2 TLS"
	peerOK             = "OK"
	peerRestarting     = "@" + peerHello + " RESTARTING\r\n"
	peerRestartingWord = "RESTARTING"
	maxPeerLineLen     = 1024
)

// isRestartAnnouncement reports whether b, the bytes at a reply boundary of a peer link,
// start the announcement of a restart (peerRestarting).
func isRestartAnnouncement(b []byte) bool { return len(b) > 0 && b[0] == peerRestarting[0] }

// isPeerTLSRequest reports whether a handshake line asks for TLS.
func isPeerTLSRequest(line []byte) bool { return string(protocol.TrimEOL(line)) == peerTLSRequest }

// errPeerWithoutTLS: the peer answered the TLS request with an error, as a sidecar without
// peer TLS does.
var errPeerWithoutTLS = errors.New("the peer does not take TLS")

// appendPeerHello appends the handshake line.
func appendPeerHello(dst []byte, token, tenant string) []byte {
	return append(dst, peerHello+" "+peerVersion+" "+token+" "+tenant+"\r\n"...)
}

// appendRestartHello appends the line with which a stopping sidecar of node tells a peer that
// it is restarting.
func appendRestartHello(dst []byte, token, node string) []byte {
	return append(dst, peerHello+" "+peerVersion+" "+token+" "+peerRestartingWord+" "+node+"\r\n"...)
}

// parsePeerHello checks a handshake line against the expected token digest and returns the
// tenant it names, or, for the announcement of a restart (appendRestartHello), the node that
// announces it.
func parsePeerHello(line []byte, tokenDigest [sha256.Size]byte) (tenant, restarting string, err error) {
	fields := strings.Fields(string(protocol.TrimEOL(line)))
	announces := len(fields) == 5 && fields[3] == peerRestartingWord
	if (len(fields) != 4 && !announces) || fields[0] != peerHello {
		return "", "", errors.New("expected CQPEER <version> <token> <tenant> or CQPEER <version> <token> " + peerRestartingWord + " <node>")
	}
	if fields[1] != peerVersion {
		return "", "", fmt.Errorf("unsupported peer protocol version %q, want %s", fields[1], peerVersion)
	}
	got := sha256.Sum256([]byte(fields[2]))
	if subtle.ConstantTimeCompare(got[:], tokenDigest[:]) != 1 {
		return "", "", errors.New("wrong peer token")
	}
	if announces {
		return "", fields[4], nil
	}
	return fields[3], "", nil
}

// dialLink connects a new link within ctx's deadline: to the local engine's socket, or to a
// peer's listener with the handshake. A redis link then switches to its RESP version with HELLO.
func (p *Proxy) dialLink(ctx context.Context, key linkKey, node string) (*link, error) {
	nc, stop, err := p.connect(ctx, key)
	if err != nil {
		return nil, err
	}
	progress := &progressReader{nc: nc}
	br := bufio.NewReaderSize(progress, ioBufferSize)
	err = p.linkHandshake(nc, br, key)
	if !stop() && err == nil {
		err = ctx.Err() // it ended as the handshake did: the connection's deadline may be cut
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	l := newLink(p, key, node, nc, br)
	progress.l = l
	return l, nil
}

// connect connects to key's address: a peer's over mutual TLS when the proxy has peer TLS,
// falling back to plaintext against a peer without it while Config.PeerPlaintext allows. See
// dialConn for ctx and stop.
func (p *Proxy) connect(ctx context.Context, key linkKey) (nc net.Conn, stop func() bool, err error) {
	withTLS := key.peer && p.opts.PeerTLS != nil
	nc, stop, err = p.dialConn(ctx, key, withTLS)
	if errors.Is(err, errPeerWithoutTLS) && p.conf.Load().peerPlaintext {
		nc, stop, err = p.dialConn(ctx, key, false)
	}
	return nc, stop, err
}

// dialConn connects to key's address, over mutual TLS when withTLS, with the context's
// deadline set for the handshakes to come. The context's end cuts the handshakes short too (a
// retired slot's dial ends at once), until stop is called.
func (p *Proxy) dialConn(ctx context.Context, key linkKey, withTLS bool) (nc net.Conn, stop func() bool, err error) {
	var d net.Dialer
	network := "unix"
	if key.peer {
		network = "tcp"
	}
	nc, err = d.DialContext(ctx, network, key.address)
	if err != nil {
		return nil, nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		nc.SetDeadline(deadline)
	}
	stop = context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	if !withTLS {
		return nc, stop, nil
	}
	tc, err := p.startPeerTLS(ctx, nc)
	if err != nil {
		stop()
		nc.Close()
		return nil, nil, err
	}
	return tc, stop, nil
}

// startPeerTLS asks the peer for TLS and runs the handshake.
func (p *Proxy) startPeerTLS(ctx context.Context, nc net.Conn) (net.Conn, error) {
	if _, err := nc.Write([]byte(peerTLSRequest + "\r\n")); err != nil {
		return nil, err
	}
	// The peer sends nothing after its answer until the TLS client speaks: reading the line
	// through a buffer takes nothing of the handshake.
	line, err := protocol.AppendLine(bufio.NewReaderSize(nc, 64), nil, maxPeerLineLen)
	if err != nil {
		return nil, fmt.Errorf("peer TLS request: %w", err)
	}
	if reply := string(protocol.TrimEOL(line)); reply != peerOK {
		return nil, fmt.Errorf("%w: it answered %q", errPeerWithoutTLS, reply)
	}
	tc := tls.Client(nc, p.opts.PeerTLS.ClientConfig())
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("peer TLS handshake: %w", err)
	}
	return tc, nil
}

// progressReader reads a link's connection for the link's reader, and every read that brings
// bytes moves the read deadline forward: Options.BackendTimeout bounds a stall, not a reply,
// so a long reply that keeps arriving does not fail the requests in flight behind it.
type progressReader struct {
	nc net.Conn
	l  *link // nil during the handshake, which has its own deadline
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.nc.Read(b)
	if n > 0 && r.l != nil {
		r.l.progressed()
	}
	return n, err
}

// progressed moves a set read deadline to one backend timeout from now once half of it has
// passed (an idle link's cleared deadline stays cleared).
func (l *link) progressed() {
	timeout := l.p.opts.BackendTimeout
	now := time.Now()
	l.mu.Lock()
	if !l.readDeadline.IsZero() && now.Add(timeout/2).After(l.readDeadline) {
		l.setReadDeadline(now.Add(timeout))
	}
	l.mu.Unlock()
}

func (p *Proxy) linkHandshake(nc net.Conn, br *bufio.Reader, key linkKey) error {
	if key.peer {
		if err := peerHandshake(nc, br, appendPeerHello(nil, p.peerToken(), key.tenant)); err != nil {
			return err
		}
	}
	// A redis link switches to RESP3 and logs in with one command (HELLO 3 AUTH), or logs in
	// with AUTH; the password stays out of the errors.
	var login []string
	switch {
	case key.proto == resp.RESP3:
		login = []string{"HELLO", "3"}
		if key.enginePassword != "" {
			login = append(login, "AUTH", engine.RedisLinkUser, key.enginePassword)
		}
	case key.enginePassword != "":
		login = []string{"AUTH", engine.RedisLinkUser, key.enginePassword}
	default:
		return nil
	}
	if _, err := nc.Write(resp.AppendCommandStrings(nil, login...)); err != nil {
		return err
	}
	reply, err := resp.NewReplyReader(br, resp.ReplyLimits{}).ReadReply()
	if err != nil {
		return fmt.Errorf("%s: %w", login[0], err)
	}
	if reply.IsError() {
		return fmt.Errorf("%s: %s", login[0], protocol.TrimEOL(reply.Raw()))
	}
	return nil
}

// peerHandshake sends a peer handshake line (appendPeerHello, appendRestartHello) and reads
// the peer's answer, which must be OK.
func peerHandshake(nc net.Conn, br *bufio.Reader, hello []byte) error {
	if _, err := nc.Write(hello); err != nil {
		return err
	}
	line, err := protocol.AppendLine(br, nil, maxPeerLineLen)
	if err != nil {
		return fmt.Errorf("peer handshake: %w", err)
	}
	if reply := string(protocol.TrimEOL(line)); reply != peerOK {
		return fmt.Errorf("peer refused the handshake: %q", reply)
	}
	return nil
}

// kick wakes the goroutine waiting on a one-slot channel, or leaves it a wake-up.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
