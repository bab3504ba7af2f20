package proxy

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Pinned links. WATCH and the blocking pops act on the engine connection that sends them: the
// engine aborts EXEC when a key WATCHed on that connection changed, and holds a blocked pop's
// reply (and every later request on that connection) until the pop is served or times out.
// Shared links cannot carry them, so a client connection that sends one gets a link of its
// own to the node of its keys, pinned: every later request of that client for that node goes
// on it, in order, until the client neither watches nor blocks and the link owes no reply,
// when it is closed and the client goes back to the shared links. A peer connection pins a link
// to its local partition the same way, so the commands keep their meaning through a peer.
type pin struct {
	l *link
	// node is the node ID of the pinned link's partition; unused on a peer connection, whose
	// links all go to its local partition.
	node string
	// watching: keys are WATCHed on the link, so it stays pinned until EXEC, DISCARD or
	// UNWATCH.
	watching bool
	// sending: the command that pinned the link is on its way to it, which is idle meanwhile.
	sending bool
	// stop cancels the link's closing with the connection.
	stop func() bool
}

// errPinnedElsewhere refuses a WATCH or blocking command for one node while the connection
// watches keys, or blocks, on another.
var errPinnedElsewhere = errors.New("CROSSSLOT cacheqos: this connection watches keys or blocks on another node of this " +
	"tenant; give the keys a common {hash tag}")

// pinnedLink returns the link pinned for node i of rt, nil when requests for that node take
// the shared links. A pinned link that failed, or that no longer watches and owes no reply, is
// let go here.
func (c *conn) pinnedLink(rt *routes, i int) *link {
	pn := c.pin
	if pn == nil || !c.peer && rt.nodes[i].id != pn.node {
		return nil
	}
	if lost := !pn.l.usable(); lost || !pn.watching && !pn.sending && pn.l.idle() {
		c.unpin()
		c.watchLost = lost && pn.watching
		return nil
	}
	return pn.l
}

// pinLink pins a link to node i of rt for the connection, unless one is pinned there already,
// for the command about to be sent (the caller clears pin.sending once it is).
func (c *conn) pinLink(rt *routes, i int) error {
	if c.pinnedLink(rt, i) != nil {
		c.pin.sending = true
		return nil
	}
	if c.pin != nil {
		if c.pin.watching || !c.pin.l.idle() {
			return errPinnedElsewhere
		}
		c.unpin()
	}
	c.awaitAnswered()
	var key linkKey
	node := c.p.nodeID()
	switch {
	case c.peer || rt.nodes[i].local:
		var err error
		if key, err = c.localLinkKey(); err != nil {
			return err
		}
	default:
		n := rt.nodes[i]
		node = n.id
		key = linkKey{address: n.peerAddress, tenant: c.tenant.id, peer: true, proto: c.proto}
	}
	ctx, cancel := context.WithTimeout(c.p.ctx, c.p.opts.DialTimeout)
	l, err := c.p.dialLink(ctx, key, node)
	cancel()
	if err != nil {
		return err
	}
	l.pinned = true
	if key.peer {
		l.forwarded = c.tenant.stats.forwardedTo(node)
	}
	if !l.start() {
		l.nc.Close()
		return ErrClosed
	}
	// The link ends with the connection, or with the proxy's Close (its context is the
	// connection's parent), whatever it waits for.
	stop := context.AfterFunc(c.ctx, func() { l.fail(errors.New("client connection closed")) })
	c.pin = &pin{l: l, stop: stop, sending: true}
	if !c.peer {
		c.pin.node = rt.nodes[i].id
	}
	return nil
}

// answeredPoll is how often a connection about to pin a link looks whether its requests in
// flight are answered.
const answeredPoll = 200 * time.Microsecond

// awaitAnswered waits until every request the connection has queued is answered (its reply
// read, or failed), so that a request sent next on a new link cannot overtake, on the engine,
// those still on their way on the shared link.
func (c *conn) awaitAnswered() {
	for {
		c.mu.Lock()
		waiting := false
		for i := range c.queue.len() {
			if c.queue.at(i).remaining.Load() > 0 {
				waiting = true
				break
			}
		}
		c.mu.Unlock()
		if !waiting {
			return
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(answeredPoll):
		}
	}
}

// unpin lets the pinned link go: it closes once it has read the replies it owes (none, unless
// the client logs out or resets meanwhile, or the proxy shuts down, when they are still
// answered). A link that still owes replies keeps closing with the connection or the proxy,
// whatever it waits for (a block without a timeout).
func (c *conn) unpin() {
	if pn := c.pin; pn != nil {
		idle := pn.l.idle()
		pn.l.retire()
		if idle {
			pn.stop()
		}
		c.pin = nil
		c.blockUntil, c.blockForever, c.watchLost = time.Time{}, false, false
	}
}

// endPin closes the pinned link when the connection's reader ends: gracefully when the client
// quit or the proxy shuts down (its requests in flight are answered), at once when the client
// is gone (a pop blocked without a timeout would otherwise hold the connection forever).
func (c *conn) endPin(readErr error) {
	pn := c.pin
	if pn == nil {
		return
	}
	if readErr == nil || c.p.draining.Load() {
		c.unpin()
		return
	}
	pn.stop()
	pn.l.fail(errors.New("client connection closed"))
	c.pin = nil
}

// blocked reports whether the connection waits for a blocking command's reply on its pinned
// link, or another reply due there.
func (c *conn) blocked() bool { return c.pin != nil && !c.pin.l.idle() }

// idle reports whether the link owes no reply.
func (l *link) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.due.len() == 0
}

// farFuture stands for "no deadline" in a link's read deadline, which must stay comparable.
var farFuture = time.Now().AddDate(100, 0, 0)

// awaitBlockedReply lets the reply to the request just queued on l (a blocking command's) take
// until until instead of one backend timeout; the zero time is no limit.
func (l *link) awaitBlockedReply(until time.Time) {
	if until.IsZero() {
		until = farFuture
	}
	l.mu.Lock()
	if until.After(l.readDeadline) {
		l.setReadDeadline(until)
	}
	l.mu.Unlock()
}

// maxBlockSeconds is the longest block timeout the proxy waits out; longer ones (redis accepts
// them) are waited for without a limit, as 0 is.
const maxBlockSeconds = 1e9

// blockDeadline is when the reply to a blocking command sent now is due: its timeout (seconds,
// a float as redis takes it) plus one backend timeout; the zero time for no limit (timeout 0).
// ok is false when the timeout is not one redis accepts: the engine answers it with an error
// at once.
func blockDeadline(spec *resp.CommandSpec, args [][]byte, backend time.Duration) (until time.Time, ok bool) {
	at := len(args) - 1
	if spec.Keys.NumKeysAt > 0 {
		at = 1 // BLMPOP and BZMPOP: the timeout comes before the key count
	}
	if at >= len(args) {
		return time.Time{}, false
	}
	seconds, err := strconv.ParseFloat(string(args[at]), 64)
	switch {
	case err != nil || math.IsNaN(seconds) || seconds < 0:
		return time.Time{}, false
	case seconds == 0 || seconds > maxBlockSeconds:
		return time.Time{}, true
	}
	return time.Now().Add(time.Duration(seconds*float64(time.Second)) + backend), true
}

// Replies about WATCH, worded as redis words them.
const replyWatchInMulti = "ERR WATCH inside MULTI is not allowed"

var (
	specWatch   = resp.Lookup([]byte("watch"))
	specUnwatch = resp.Lookup([]byte("unwatch"))
)

// unwatch answers UNWATCH: on the pinned link when keys are watched there, by the proxy
// otherwise (nothing is watched anywhere else).
func (h *redisHandler) unwatch(cmd *resp.Command, start int64) {
	ok := resp.AppendSimpleString(nil, "OK")
	if !h.watching() {
		h.c.pushLocal(ok, start)
		return
	}
	h.sendPinned(cmd.Raw(), 0, nil, ok, start)
}

// sendPinned sends raw on the pinned link, whose watches it ends (EXEC, DISCARD and UNWATCH
// all clear them), and answers the client with the reply of raw's last command (after skips),
// or with instead when not nil. When the pinned link failed, or its node left the tenant's
// routes, the watches are lost and nothing is sent: the client gets lost, for EXEC what redis
// answers a transaction whose watched keys changed (a null array).
func (h *redisHandler) sendPinned(raw []byte, skips int, instead, lost []byte, start int64) {
	c := h.c
	pn := c.pin
	rt := c.tenant.cfg.Load().routes
	node := 0 // any index does on a peer connection
	if pn != nil && !c.peer {
		node = slices.IndexFunc(rt.nodes, func(n routeNode) bool { return n.id == pn.node })
	}
	if c.watchLost || pn == nil || node < 0 || !pn.l.usable() {
		c.unpin()
		c.watchLost = false
		c.pushLocal(lost, start)
		return
	}
	e := entry{kind: entryForward, start: start}
	if instead != nil {
		e.more = &entryMore{instead: instead}
	}
	err := c.forwardSkipping(rt, node, raw, len(raw), e, skips)
	// Only now: a link that no longer watches is let go once idle.
	pn.watching = false
	if err != nil {
		h.failed(err, start)
	}
}
