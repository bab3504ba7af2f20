package proxy

import (
	"slices"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Transactions. Links are shared by a tenant's clients, so a MULTI sent on one as it came would
// capture other clients' commands. The proxy queues a transaction's commands itself (answering
// +QUEUED), checks that all their keys live on one node, and at EXEC sends MULTI, the commands
// and EXEC in one piece to that node's link (a link's requests leave in the order they were
// queued, and a sender's bytes are never interleaved with another's), dropping the MULTI and
// QUEUED replies and passing EXEC's. So a transaction runs whole on the engine or not at all, as
// in Redis Cluster with hash tags. After WATCH the transaction goes on the connection's pinned
// link (pin.go), where the keys are watched, so the engine aborts it as redis does when one of
// them changed.
type transaction struct {
	raw   []byte // MULTI and the queued commands, as received
	queue int    // commands queued
	node  int    // the node every key lives on; -1 before the first key
	// abort says EXEC must answer EXECABORT: a command was refused while queueing.
	abort bool
}

// Replies about transactions, worded as redis words them.
const (
	replyQueued      = "QUEUED"
	replyExecAbort   = "EXECABORT Transaction discarded because of previous errors."
	replyNestedMulti = "ERR MULTI calls can not be nested"
	replyExecNoMulti = "ERR EXEC without MULTI"
	replyDiscNoMulti = "ERR DISCARD without MULTI"
)

// transaction handles MULTI, EXEC and DISCARD, and queues the commands in between, reporting
// whether it answered the command. QUIT and RESET act at once, as in redis; RESET ends the
// transaction.
func (h *redisHandler) transaction(spec *resp.CommandSpec, err error, cmd *resp.Command, start int64) bool {
	tx := h.tx
	switch {
	case tx == nil && spec == specMulti && err == nil:
		h.tx = &transaction{raw: append([]byte(nil), cmd.Raw()...), node: h.watchedNode()}
		h.c.pushLocal(resp.AppendSimpleString(nil, "OK"), start)
	case tx == nil && spec == specExec && err == nil:
		h.replyError(replyExecNoMulti, start)
	case tx == nil && spec == specDisc && err == nil:
		h.replyError(replyDiscNoMulti, start)
	case tx == nil || spec == specQuit:
		return false
	case spec == specReset:
		h.tx = nil
		return false
	case spec == specMulti && err == nil:
		h.replyError(replyNestedMulti, start)
	case spec == specWatch && err == nil:
		h.replyError(replyWatchInMulti, start)
	case spec == specDisc && err == nil && h.watching():
		// DISCARD unwatches: UNWATCH answers +OK as DISCARD does.
		h.tx = nil
		h.sendPinned(cmdUnwatch, 0, nil, resp.AppendSimpleString(nil, "OK"), start)
	case spec == specDisc && err == nil:
		h.tx = nil
		h.c.pushLocal(resp.AppendSimpleString(nil, "OK"), start)
	case spec == specExec && err == nil:
		h.tx = nil
		h.exec(tx, cmd, start)
	case err != nil:
		tx.abort = true
		h.replyError(err.Error(), start)
	default:
		if reason := h.queue(tx, spec, cmd); reason != "" {
			tx.abort = true
			h.replyError(reason, start)
			return true
		}
		h.c.pushLocal(resp.AppendSimpleString(nil, replyQueued), start)
	}
	return true
}

// queue adds a command to the transaction, or says why it cannot run in one.
func (h *redisHandler) queue(tx *transaction, spec *resp.CommandSpec, cmd *resp.Command) string {
	c := h.c
	switch spec.Handling {
	case protocol.HandleRoute, protocol.HandleSplit, protocol.HandleAnyEngine:
		if spec != specInfo { // its reply inside EXEC's would go unfiltered
			break
		}
		fallthrough
	default:
		return "ERR cacheqos: " + spec.Name + " cannot run inside a transaction"
	}
	if scriptSpecs[spec] {
		if msg := c.scriptRefusal(spec, cmd.Args); msg != "" {
			return msg
		}
	}
	idx, err := spec.KeyIndexes(cmd.Args, h.keyIdx[:0])
	h.keyIdx = idx
	if err != nil {
		return err.Error()
	}
	if !c.peer {
		rt := c.tenant.cfg.Load().routes
		for _, i := range idx {
			routing, _ := keyHashes(cmd.Args[i])
			owner, failed, ok := c.owner(rt, routing)
			switch {
			case !ok:
				return "ERR cacheqos: " + errNoRoute.Error()
			case failed >= 0 && spec.Flags&resp.FlagWrite != 0:
				if err := c.keepFailoverWrite(rt, cmd.Args[i], failed, owner); err != nil {
					return "ERR cacheqos: " + err.Error()
				}
			}
			switch {
			case tx.node < 0:
				tx.node = owner
			case owner != tx.node:
				return "CROSSSLOT cacheqos: the keys of this transaction live on different nodes of this tenant; " +
					"give them a common {hash tag} to keep them together"
			}
		}
	}
	o := &c.p.opts
	if tx.queue+1 >= o.MaxPipeline || len(tx.raw)+len(cmd.Raw()) > o.MaxRequestBytes {
		return "ERR cacheqos: transaction over the proxy's limits of commands or bytes"
	}
	tx.raw = append(tx.raw, cmd.Raw()...)
	tx.queue++
	return ""
}

// exec sends the transaction to the node that holds its keys, or answers it at once when it
// must abort or is empty.
func (h *redisHandler) exec(tx *transaction, cmd *resp.Command, start int64) {
	c := h.c
	watching := h.watching()
	switch {
	case tx.abort && watching:
		// EXECABORT unwatches too.
		abort := resp.AppendError(nil, replyExecAbort)
		h.sendPinned(cmdUnwatch, 0, abort, abort, start)
		return
	case tx.abort:
		h.replyError(replyExecAbort, start)
		return
	case watching:
		// Even an empty transaction: the engine answers it a null array if a watched key
		// changed.
		raw := append(tx.raw, cmd.Raw()...)
		h.sendPinned(raw, tx.queue+1, nil, resp.AppendNullArray(nil, c.proto), start)
		return
	case tx.queue == 0:
		c.pushLocal(resp.AppendArrayHeader(nil, 0), start)
		return
	}
	rt := c.tenant.cfg.Load().routes
	node := tx.node
	if node < 0 {
		node = rt.any
	}
	if node < 0 && !c.peer {
		h.failed(errNoRoute, start)
		return
	}
	raw := append(tx.raw, cmd.Raw()...)
	// The engine's replies to MULTI and to each queued command come before EXEC's.
	if err := c.forwardSkipping(rt, node, raw, len(raw), entry{kind: entryForward, start: start}, tx.queue+1); err != nil {
		h.failed(err, start)
	}
}

// cmdUnwatch ends a pinned link's watches for DISCARD and an aborted EXEC.
var cmdUnwatch = resp.AppendCommandStrings(nil, "UNWATCH")

// watching reports whether the connection has keys WATCHed on its pinned link.
func (h *redisHandler) watching() bool {
	return h.c.watchLost || h.c.pin != nil && h.c.pin.watching
}

// watchedNode is the node a transaction after WATCH must keep its keys on (any node on a peer
// connection, which serves its local partition only); -1 without WATCH.
func (h *redisHandler) watchedNode() int {
	c := h.c
	if !h.watching() || c.peer || c.pin == nil {
		return -1
	}
	return slices.IndexFunc(c.tenant.cfg.Load().routes.nodes, func(n routeNode) bool { return n.id == c.pin.node })
}
