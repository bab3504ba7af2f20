package proxy

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
)

// memcacheHandler serves memcached text-protocol connections (classic and meta commands).
type memcacheHandler struct {
	c   *conn
	rr  *memcache.RequestReader
	buf []byte // a request followed by the no-op sentinel
}

// maxRetainedForwardBuffer bounds the sentinel buffer kept between requests.
const maxRetainedForwardBuffer = 64 << 10

func newMemcacheHandler(c *conn) *memcacheHandler {
	return &memcacheHandler{c: c, rr: memcache.NewRequestReader(c.br, memcache.RequestLimits{})}
}

func (h *memcacheHandler) setAuthenticated(authenticated bool) {
	o := &h.c.p.opts
	lim := memcache.RequestLimits{MaxValueLen: o.MaxRequestBytes}
	if !authenticated {
		lim = memcache.RequestLimits{
			MaxValueLen: o.PreAuthMaxRequestBytes,
			MaxLineLen:  min(o.PreAuthMaxRequestBytes, memcache.DefaultMaxLineLen),
		}
	}
	h.rr.SetLimits(lim)
}

func (h *memcacheHandler) completeness() protocol.Completeness { return h.rr.Completeness() }

func (h *memcacheHandler) next() error {
	c := h.c
	wasBuffered := h.rr.Buffered() > 0
	if !wasBuffered {
		c.armReadDeadline()
	}
	req, err := h.rr.ReadRequest()
	if err != nil {
		var pe *memcache.ProtocolError
		if !errors.As(err, &pe) {
			return err
		}
		c.protocolError()
		if pe.Fatal {
			c.pushClose(pe.AppendReply(nil))
			return err
		}
		c.pushLocal(pe.AppendReply(nil), 0)
		return nil
	}
	h.handle(req, c.requestStart(wasBuffered))
	return nil
}

func (h *memcacheHandler) handle(req *memcache.Request, start int64) {
	c := h.c
	if c.tenant == nil {
		h.unauthenticated(req)
		return
	}
	spec := req.Command.Spec()
	if c.peer {
		start = 0
	} else {
		c.tenant.stats.requests[spec.Class].Add(1)
	}
	c.startRouting()
	h.dispatch(spec, req, start)
	for c.routeAgain() {
		h.dispatch(spec, req, start)
	}
}

// dispatch answers, routes or splits a request by its handling.
func (h *memcacheHandler) dispatch(spec *memcache.Spec, req *memcache.Request, start int64) {
	c := h.c
	switch spec.Handling {
	case protocol.HandleRefuse:
		c.pushLocal(protocol.AppendReplyLine(nil, spec.Refusal), start)
	case protocol.HandleProxy:
		if req.Command == memcache.CmdQuit {
			c.pushClose(nil)
		} else {
			c.pushLocal(memcache.AppendStatusLine(nil, "MN"), start)
		}
	case protocol.HandleAnyEngine:
		rt := c.tenant.cfg.Load().routes
		if rt.any < 0 && !c.peer {
			h.failed(errNoRoute, start)
			return
		}
		h.forward(rt, rt.any, req, entry{kind: entryForward, start: start})
	case protocol.HandleRoute:
		h.route(req, start)
	case protocol.HandleSplit:
		h.retrieve(req, start)
	}
}

// unauthenticated applies memcached's -Y convention: the first set carries "<user> <password>"
// as its data; anything else is refused until then.
func (h *memcacheHandler) unauthenticated(req *memcache.Request) {
	c := h.c
	switch req.Command {
	case memcache.CmdQuit:
		c.pushClose(nil)
	case memcache.CmdSet:
		user, password, err := memcache.ParseAuthSet(req)
		var t *tenant
		ok := false
		if err == nil {
			t, ok = c.authenticate(user, password)
		}
		if !ok || !c.setTenant(t) {
			reply := memcache.AppendClientError(nil, memcache.AuthFailureMessage)
			if c.authFailed(t) {
				c.pushClose(reply)
			} else {
				c.pushLocal(reply, 0)
			}
			return
		}
		c.pushLocal(memcache.AppendStatusLine(nil, "STORED"), 0)
	default:
		c.pushLocal(memcache.AppendClientError(nil, memcache.UnauthenticatedMessage), 0)
	}
}

// failed answers a request that could not be forwarded, unless it is routed again.
func (h *memcacheHandler) failed(err error, start int64) {
	if h.c.reroute(err) {
		return
	}
	h.c.tenant.stats.countUnreachable(err, false)
	var reply []byte
	switch {
	case errors.Is(err, errThrottledBytes), errors.Is(err, errThrottledOps):
		reply = memcache.AppendServerError(nil, "throttled: "+err.Error())
	case errors.Is(err, context.Canceled):
		reply = memcache.AppendServerError(nil, "cacheqos: connection closing")
	default:
		reply = memcache.AppendServerError(nil, "cacheqos: "+err.Error())
	}
	h.c.pushLocal(reply, start)
}

// forward sends a request to a node; requests whose reply may be suppressed (noreply, meta q)
// carry the no-op sentinel, so their reply is always framed.
func (h *memcacheHandler) forward(rt *routes, node int, req *memcache.Request, e entry) {
	raw := req.Raw()
	if req.MayOmitResponse() {
		if cap(h.buf) > maxRetainedForwardBuffer {
			h.buf = nil
		}
		h.buf = req.AppendForward(h.buf[:0])
		raw = h.buf
	}
	e.expect = req.Expect()
	e.missOnUnreachable = plainRetrieval(req.Command)
	if err := h.c.forward(rt, node, raw, len(req.Raw()), e); err != nil && !h.c.reroute(err) {
		if miss, ok := missReply(req); !ok || !h.c.missOnUnreachable(err, miss, e.start) {
			h.failed(err, e.start)
		}
	}
}

// plainRetrieval reports whether cmd is a plain read of its keys (get, gets), whose miss is
// END whatever the keys.
func plainRetrieval(cmd memcache.Command) bool {
	return cmd == memcache.CmdGet || cmd == memcache.CmdGets
}

// missReply is what memcached answers a plain read (get, gets, mg that only reads) that
// finds none of its keys; ok is false for other requests. An mg miss echoes the opaque and
// the key when asked (k), and is silent with q.
func missReply(req *memcache.Request) (reply []byte, ok bool) {
	switch {
	case plainRetrieval(req.Command):
		return memcache.AppendEnd(nil), true
	case req.Command != memcache.CmdMetaGet, req.Base64Key:
		return nil, false
	}
	reply = []byte("EN")
	for _, flag := range req.MetaFlags {
		switch flag[0] {
		case 'v', 'f', 's', 't', 'c', 'h', 'l', 'q':
		case 'O':
			reply = append(append(reply, ' '), flag...)
		case 'k':
			reply = append(append(reply, " k"...), req.Key()...)
		default: // N, T, E and the rest write, or answer a miss otherwise
			return nil, false
		}
	}
	if req.Quiet {
		return []byte{}, true
	}
	return append(reply, "\r\n"...), true
}

// accessOfRequest says what a keyed request's reply tells the curves.
func accessOfRequest(cmd memcache.Command) access {
	switch {
	case cmd == memcache.CmdMetaGet, cmd.IsRetrieval():
		return accessRead
	case cmd.IsStorage(), cmd == memcache.CmdMetaSet, cmd == memcache.CmdMetaArithmetic,
		cmd == memcache.CmdIncr, cmd == memcache.CmdDecr, cmd == memcache.CmdTouch:
		return accessWrite
	case cmd == memcache.CmdDelete, cmd == memcache.CmdMetaDelete:
		return accessDelete
	default:
		return accessNone
	}
}

func (h *memcacheHandler) route(req *memcache.Request, start int64) {
	c := h.c
	rt := c.tenant.cfg.Load().routes
	routing, full := keyHashes(req.Key())
	node := rt.any
	access := accessOfRequest(req.Command)
	if !c.peer {
		owner, failed, ok := c.owner(rt, routing)
		if !ok {
			h.failed(errNoRoute, start)
			return
		}
		if failed >= 0 && changesItem(req, access) {
			if err := c.keepFailoverWrite(rt, req.Key(), failed, owner); err != nil {
				h.failed(err, start)
				return
			}
		}
		node = owner
	}
	e := entry{kind: entryForward, start: start, keyHash: full, access: access,
		keyLen: int32(len(req.Key())), valueLen: unknownValue}
	switch {
	case storesValue(req.Command):
		e.valueLen = int32(len(req.Data))
	case req.Command == memcache.CmdIncr, req.Command == memcache.CmdDecr, req.Command == memcache.CmdMetaArithmetic:
		e.valueLen = valueInReply
	}
	h.forward(rt, node, req, e)
}

// changesItem tells whether a keyed request (of access) changes its item: writes and
// deletions, and the reads that touch it (gat, gats; mg with T) or create it (mg with N).
func changesItem(req *memcache.Request, access access) bool {
	switch {
	case access == accessWrite, access == accessDelete, req.Command == memcache.CmdGat, req.Command == memcache.CmdGats:
		return true
	case req.Command == memcache.CmdMetaGet:
		for _, flag := range req.MetaFlags {
			if flag[0] == 'N' || flag[0] == 'T' {
				return true
			}
		}
	}
	return false
}

// storesValue tells whether a command stores its data block as the key's whole value (not
// append or prepend, whose stored size the request does not tell; ms in its default set mode,
// the only one cacheqos' clients use, is counted so too).
func storesValue(cmd memcache.Command) bool {
	switch cmd {
	case memcache.CmdSet, memcache.CmdAdd, memcache.CmdReplace, memcache.CmdCas, memcache.CmdMetaSet:
		return true
	}
	return false
}

// retrieve forwards get/gets/gat/gats, split by node when the keys live on several.
func (h *memcacheHandler) retrieve(req *memcache.Request, start int64) {
	c := h.c
	if len(req.Keys) == 1 {
		h.route(req, start)
		return
	}
	rt := c.tenant.cfg.Load().routes
	keys := req.Keys
	owners := make([]int, len(keys))
	hashes := make([]uint64, len(keys))
	same := true
	for n, key := range keys {
		routing, full := keyHashes(key)
		hashes[n] = full
		if c.peer {
			continue
		}
		owner, failed, ok := c.owner(rt, routing)
		if !ok {
			h.failed(errNoRoute, start)
			return
		}
		if failed >= 0 && changesItem(req, accessRead) {
			if err := c.keepFailoverWrite(rt, key, failed, owner); err != nil {
				h.failed(err, start)
				return
			}
		}
		owners[n] = owner
		same = same && owner == owners[0]
	}
	if same {
		e := entry{kind: entryForward, start: start, access: accessReadMulti, more: &entryMore{keyHashes: hashes}}
		h.forward(rt, owners[0], req, e)
		return
	}
	var nodes []int
	var partKeys [][][]byte
	s := &split{cmd: req.Command, owner: make([]int, len(keys)), keyHashes: hashes}
	for n, key := range keys {
		part := slices.Index(nodes, owners[n])
		if part < 0 {
			part = len(nodes)
			nodes = append(nodes, owners[n])
			partKeys = append(partKeys, nil)
		}
		s.owner[n] = part
		partKeys[part] = append(partKeys[part], key)
	}
	raws := make([][]byte, len(nodes))
	for p := range nodes {
		raws[p] = memcache.AppendRetrieval(nil, req.Command, req.Exptime, partKeys[p])
	}
	if err := c.sendSplit(rt, nodes, raws, entry{split: s, start: start, missOnUnreachable: plainRetrieval(req.Command)}); err != nil {
		h.failed(err, start)
	}
}

// completeMemcache takes a link's response to p (to one part of a split retrieval): it
// counts the response for the local partition and keeps what the writer needs. It runs on
// the link's reader, which then no longer touches p.
func (p *pending) completeMemcache(l *link, part int, r *memcache.Response) {
	keep := r.Raw()
	if p.abandoned() {
		keep = nil
	}
	if p.kind == entrySplit {
		pr := &p.parts[part]
		pr.isError = r.IsError()
		pr.raw, pr.values = pr.raw[:0], pr.values[:0]
		switch {
		case keep == nil:
		case pr.isError:
			pr.raw = append(pr.raw, keep...)
		default:
			for _, v := range r.Values {
				start := len(pr.raw)
				pr.raw = append(pr.raw, v.Raw...)
				pr.values = append(pr.values, partValue{keyHash: keyhash.Sum64(v.Key), start: start, end: len(pr.raw), keyLen: len(v.Key), len: len(v.Data)})
			}
		}
		if l.local {
			p.tenant.served(len(r.Raw()))
		}
	} else {
		if l.local {
			countMemcache(p, r)
		}
		p.reply = append(p.reply[:0], keep...)
	}
	p.holdReply(len(keep))
	p.remaining.Add(-1)
}

// countMemcache updates the counters of the local partition for one response.
func countMemcache(p *pending, r *memcache.Response) {
	t := p.tenant
	t.served(len(r.Raw()))
	if r.IsError() {
		return
	}
	switch p.access {
	case accessRead:
		if p.expect.Command.IsRetrieval() {
			recordValue(t, p.keyHash, r.Values, 0)
			return
		}
		switch r.Status { // mg
		case memcache.StatusVA:
			t.recordRead(p.keyHash, true, int(p.keyLen), len(r.Data))
		case memcache.StatusHD: // no value asked for: its size stays what the curve knows
			t.recordRead(p.keyHash, true, int(p.keyLen), unknownValue)
		case memcache.StatusEN, memcache.StatusSuppressed:
			t.recordRead(p.keyHash, false, int(p.keyLen), 0)
		}
	case accessReadMulti:
		next := 0
		for _, h := range p.more.keyHashes {
			next += recordValue(t, h, r.Values, next)
		}
	case accessWrite:
		valueLen := int(p.valueLen)
		if valueLen == valueInReply {
			valueLen = unknownValue // HD: ma without v
		}
		switch r.Status {
		// incr, decr, ma with v tell the new number; memcached pads it to the length the
		// value had when it rewrites it in place (not when another connection holds the
		// item: then the item has the number's length, which the curve cannot tell).
		case memcache.StatusNumber:
			t.recordGrow(p.keyHash, int(p.keyLen), len(strconv.AppendUint(nil, r.Number, 10)))
		case memcache.StatusVA:
			t.recordGrow(p.keyHash, int(p.keyLen), len(r.Data))
		case memcache.StatusStored, memcache.StatusHD, memcache.StatusTouched:
			t.recordWrite(p.keyHash, int(p.keyLen), valueLen)
		}
	case accessDelete:
		switch r.Status {
		case memcache.StatusDeleted, memcache.StatusNotFound, memcache.StatusHD, memcache.StatusNF,
			memcache.StatusSuppressed: // md q: gone either way
			t.recordDelete(p.keyHash)
		}
	}
}

// recordValue counts the read of the key hashed h, which found the next value if that value
// has the key. It returns how many values it consumed (0 or 1).
func recordValue(t *tenant, h uint64, values []memcache.Value, next int) int {
	if next < len(values) && keyhash.Sum64(values[next].Key) == h {
		t.recordRead(h, true, len(values[next].Key), len(values[next].Data))
		return 1
	}
	t.recordRead(h, false, 0, 0)
	return 0
}

// memcacheFailure is the response for a request whose response will not come.
func memcacheFailure(err error) []byte {
	return memcache.AppendServerError(nil, "cacheqos: "+err.Error())
}

func (h *memcacheHandler) deliver(p *pending) {
	c := h.c
	switch {
	case p.kind == entrySplit:
		h.deliverSplit(p)
	case p.failure != nil && p.failedAsMiss():
		c.write(memcache.AppendEnd(nil))
	case p.failure != nil:
		c.write(memcacheFailure(p.failure))
	default:
		c.writeReply(p)
	}
}

// deliverSplit merges the parts of a retrieval into one response, values in key order.
func (h *memcacheHandler) deliverSplit(p *pending) {
	c := h.c
	s := p.split
	var failure []byte
	for i := range p.parts {
		pr := &p.parts[i]
		switch {
		case p.partMissed(i): // no values: its keys are misses
		case pr.failure != nil:
			failure = firstFailure(failure, memcacheFailure(pr.failure))
		case pr.isError:
			failure = firstFailure(failure, pr.raw)
		}
	}
	countSplitUnreachable(p, failure == nil)
	if failure != nil {
		c.write(failure)
		return
	}
	next := make([]int, len(p.parts))
	for n, part := range s.owner {
		pr := &p.parts[part]
		var found *partValue
		if i := next[part]; i < len(pr.values) && pr.values[i].keyHash == s.keyHashes[n] {
			found = &pr.values[i]
			next[part]++
		}
		if pr.local {
			if found != nil {
				p.tenant.recordRead(s.keyHashes[n], true, found.keyLen, found.len)
			} else {
				p.tenant.recordRead(s.keyHashes[n], false, 0, 0)
			}
		}
		if found != nil {
			c.write(pr.raw[found.start:found.end])
		}
	}
	c.write(memcache.AppendEnd(nil))
}

func (h *memcacheHandler) buffered() int { return h.rr.Buffered() }
