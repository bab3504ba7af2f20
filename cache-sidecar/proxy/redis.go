package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Replies the redis side of the proxy makes itself.
const (
	replyNoAuth    = "NOAUTH Authentication required."
	replyWrongPass = "WRONGPASS invalid username-password pair or user is disabled."
)

var (
	specAuth  = resp.Lookup([]byte("auth"))
	specHello = resp.Lookup([]byte("hello"))
	specQuit  = resp.Lookup([]byte("quit"))
	specGet   = resp.Lookup([]byte("get"))
	specMGet  = resp.Lookup([]byte("mget"))
	specTake  = resp.Lookup([]byte("getdel"))
	specMulti = resp.Lookup([]byte("multi"))
	specExec  = resp.Lookup([]byte("exec"))
	specDisc  = resp.Lookup([]byte("discard"))
	specReset = resp.Lookup([]byte("reset"))
)

// writeValueArg is, for the writes that store a whole string value, the index of that value
// among the command's arguments: the size the curve counts for the key.
var writeValueArg = map[*resp.CommandSpec]int{
	resp.Lookup([]byte("set")):    2,
	resp.Lookup([]byte("setnx")):  2,
	resp.Lookup([]byte("getset")): 2,
	resp.Lookup([]byte("setex")):  3,
	resp.Lookup([]byte("psetex")): 3,
}

// writeValueInReply is, for the writes whose request does not tell the value they leave, what
// the reply says of it: the value itself (valueInReply) or its length (lengthInReply,
// appendInReply).
var writeValueInReply = map[*resp.CommandSpec]int32{
	resp.Lookup([]byte("incr")):        valueInReply,
	resp.Lookup([]byte("incrby")):      valueInReply,
	resp.Lookup([]byte("decr")):        valueInReply,
	resp.Lookup([]byte("decrby")):      valueInReply,
	resp.Lookup([]byte("incrbyfloat")): valueInReply,
	specAppend:                         appendInReply,
	specSetrange:                       lengthInReply,
}

// specAppend is APPEND, whose argument tells how redis holds the value when it creates the key;
// specSetrange SETRANGE, whose offset and argument tell whether it wrote up to the string's end.
var (
	specAppend   = resp.Lookup([]byte("append"))
	specSetrange = resp.Lookup([]byte("setrange"))
)

// deletesKeys are the commands that remove their keys (not members of them, as HDEL does).
var deletesKeys = map[*resp.CommandSpec]bool{
	resp.Lookup([]byte("del")):    true,
	resp.Lookup([]byte("unlink")): true,
}

// SCAN cursors: the low scanNodeBits bits number the tenant's node (in node ID order) and the
// rest is that node's engine cursor. Cursor 0 starts at the first node; when a node's engine
// cursor returns to 0 the proxy moves on to the next node, and answers 0 after the last.
const (
	scanNodeBits = 10
	scanNodeMask = 1<<scanNodeBits - 1
)

// redisHandler serves RESP2/RESP3 connections.
type redisHandler struct {
	c      *conn
	cr     *resp.CommandReader
	name   []byte
	keyIdx []int
	// tx is the transaction the client opened with MULTI, nil outside one.
	tx *transaction
}

func newRedisHandler(c *conn) *redisHandler {
	return &redisHandler{c: c, cr: resp.NewCommandReader(c.br, resp.Limits{})}
}

// preAuthMaxArgs is the most arguments a command may have before the client authenticates
// (redis-server's own limit; HELLO 3 AUTH user pass SETNAME name has 7).
const preAuthMaxArgs = 10

func (h *redisHandler) setAuthenticated(authenticated bool) {
	o := &h.c.p.opts
	lim := resp.Limits{MaxBulkLen: o.MaxRequestBytes, MaxCommandLen: o.MaxRequestBytes}
	if !authenticated {
		lim = resp.Limits{
			MaxArgs:       preAuthMaxArgs,
			MaxBulkLen:    o.PreAuthMaxRequestBytes,
			MaxCommandLen: o.PreAuthMaxRequestBytes,
			MaxLineLen:    min(o.PreAuthMaxRequestBytes, resp.DefaultMaxLineLen),
		}
	}
	h.cr.SetLimits(lim)
}

func (h *redisHandler) completeness() protocol.Completeness { return h.cr.Completeness() }

func (h *redisHandler) next() error {
	c := h.c
	wasBuffered := h.cr.Buffered() > 0
	if !wasBuffered {
		c.armReadDeadline()
	}
	cmd, err := h.cr.ReadCommand()
	if err != nil {
		var pe *resp.ProtocolError
		if errors.As(err, &pe) {
			c.protocolError()
			c.pushClose(resp.AppendError(nil, "ERR "+pe.Error()))
		}
		return err
	}
	h.handle(cmd, c.requestStart(wasBuffered))
	return nil
}

func (h *redisHandler) handle(cmd *resp.Command, start int64) {
	c := h.c
	spec, err := resp.Classify(cmd.Args)
	if c.tenant == nil {
		h.unauthenticated(spec, err, cmd.Args)
		return
	}
	if c.peer {
		start = 0 // the ingress node measures latency and counts requests
	} else {
		class := protocol.ClassOther
		if spec != nil {
			class = spec.Class
		}
		c.tenant.stats.requests[class].Add(1)
	}
	if h.transaction(spec, err, cmd, start) {
		return
	}
	if err != nil {
		h.replyError(err.Error(), start)
		return
	}
	switch {
	case spec == specUnwatch:
		h.unwatch(cmd, start)
		return
	case spec.Flags&resp.FlagMovableKeys != 0 && scriptSpecs[spec]: // the flag spares most requests a map lookup
		if msg := c.scriptRefusal(spec, cmd.Args); msg != "" {
			h.replyError(msg, start)
			return
		}
	case spec == specScriptLoad:
		if !c.tenant.scripts.admit(c.tenant.cfg.Load().localEngine, cmd.Args[2]) {
			h.replyError(replyTooManyScripts, start)
			return
		}
	}
	c.startRouting()
	h.dispatch(spec, cmd, start)
	for c.routeAgain() {
		h.dispatch(spec, cmd, start)
	}
}

// dispatch answers, routes or splits a command by its handling.
func (h *redisHandler) dispatch(spec *resp.CommandSpec, cmd *resp.Command, start int64) {
	switch spec.Handling {
	case protocol.HandleProxy:
		h.local(spec, cmd.Args, start)
	case protocol.HandleRoute:
		h.route(spec, cmd, start)
	case protocol.HandleSplit:
		h.split(spec, cmd, start)
	case protocol.HandleAnyEngine:
		h.forwardAny(spec, cmd, start)
	case protocol.HandleAllEngines:
		if spec.Merge == resp.MergeScan {
			h.scan(spec, cmd, start)
		} else {
			h.fanOut(spec, cmd, start)
		}
	}
}

func (h *redisHandler) replyError(msg string, start int64) {
	h.c.pushLocal(resp.AppendError(nil, msg), start)
}

// failed answers a request that could not be forwarded, unless it is routed again.
func (h *redisHandler) failed(err error, start int64) {
	if h.c.reroute(err) {
		return
	}
	h.c.tenant.stats.countUnreachable(err, false)
	switch {
	case errors.Is(err, errThrottledBytes), errors.Is(err, errThrottledOps):
		h.replyError("ERR cacheqos: throttled: "+err.Error(), start)
	case errors.Is(err, context.Canceled):
		h.replyError("ERR cacheqos: connection closing", start)
	default:
		h.replyError("ERR cacheqos: "+err.Error(), start)
	}
}

func (h *redisHandler) unauthenticated(spec *resp.CommandSpec, err error, args [][]byte) {
	switch {
	case (spec == specAuth || spec == specHello) && err != nil:
		h.replyError(err.Error(), 0)
	case spec == specAuth:
		h.auth(args, 0)
	case spec == specHello:
		h.hello(args, 0)
	case spec == specQuit:
		h.c.pushClose(resp.AppendSimpleString(nil, "OK"))
	default:
		h.replyError(replyNoAuth, 0)
	}
}

// login authenticates the connection as a tenant, answering failures itself.
func (h *redisHandler) login(user, password []byte, start int64) bool {
	c := h.c
	if c.peer {
		h.replyError("ERR cacheqos: a peer connection is bound to one tenant", start)
		return false
	}
	t, ok := c.authenticate(user, password)
	if !ok {
		reply := resp.AppendError(nil, replyWrongPass)
		if c.authFailed(t) {
			c.pushClose(reply)
		} else {
			c.pushLocal(reply, 0)
		}
		return false
	}
	if !c.setTenant(t) {
		h.replyError(replyWrongPass, start)
		return false
	}
	return true
}

func (h *redisHandler) auth(args [][]byte, start int64) {
	user, password, err := resp.ParseAuth(args)
	if err != nil {
		h.replyError(err.Error(), start)
		return
	}
	if h.login(user, password, start) {
		h.c.pushLocal(resp.AppendSimpleString(nil, "OK"), start)
	}
}

func (h *redisHandler) hello(args [][]byte, start int64) {
	c := h.c
	hl, err := resp.ParseHello(args)
	if err != nil {
		h.replyError(err.Error(), start)
		return
	}
	if hl.HasAuth {
		if !h.login(hl.User, hl.Password, start) {
			return
		}
	} else if c.tenant == nil {
		h.replyError(replyNoAuth, start)
		return
	}
	if hl.ClientName != nil {
		if msg := checkClientName(hl.ClientName); msg != "" {
			h.replyError(msg, start)
			return
		}
		h.name = slices.Clone(hl.ClientName)
	}
	if hl.Proto != 0 {
		h.setProto(hl.Proto)
	}
	info := resp.HelloInfo{Server: "redis", Version: c.p.engineVersion(c.tenant), ID: c.id}
	c.pushLocal(resp.AppendHelloReply(nil, c.proto, info), start)
}

// setProto switches the connection to a RESP version. Replies pass through unchanged, so its
// later requests go to links that speak that version; those in flight are answered in the
// version they were sent in, as redis would.
func (h *redisHandler) setProto(proto resp.Proto) { h.c.proto = proto }

// checkClientName applies redis' rule for client names.
func checkClientName(name []byte) string {
	for _, ch := range name {
		if ch < '!' || ch > '~' {
			return "ERR Client names cannot contain spaces, newlines or special characters."
		}
	}
	return ""
}

// local answers the connection commands.
func (h *redisHandler) local(spec *resp.CommandSpec, args [][]byte, start int64) {
	c := h.c
	var reply []byte
	switch spec.Name {
	case "auth":
		h.auth(args, start)
		return
	case "hello":
		h.hello(args, start)
		return
	case "quit":
		c.pushClose(resp.AppendSimpleString(nil, "OK"))
		return
	case "reset":
		h.setProto(resp.RESP2)
		h.name = nil
		if !c.peer {
			c.setTenant(nil)
		}
		c.unpin() // and with it the engine connection's watches
		reply = resp.AppendSimpleString(nil, "RESET")
	case "ping":
		switch len(args) {
		case 1:
			reply = resp.AppendSimpleString(nil, "PONG")
		case 2:
			reply = resp.AppendBulk(nil, args[1])
		default:
			reply = resp.AppendError(nil, "ERR wrong number of arguments for 'ping' command")
		}
	case "echo":
		reply = resp.AppendBulk(nil, args[1])
	case "select":
		switch db, ok := protocol.ParseInt(args[1]); {
		case !ok:
			reply = resp.AppendError(nil, "ERR value is not an integer or out of range")
		case db != 0:
			reply = resp.AppendError(nil, "ERR DB index is out of range")
		default:
			reply = resp.AppendSimpleString(nil, "OK")
		}
	case "client|setname":
		if msg := checkClientName(args[2]); msg != "" {
			reply = resp.AppendError(nil, msg)
			break
		}
		h.name = slices.Clone(args[2])
		if len(h.name) == 0 {
			h.name = nil
		}
		reply = resp.AppendSimpleString(nil, "OK")
	case "client|getname":
		if h.name == nil {
			reply = resp.AppendNull(nil, c.proto)
		} else {
			reply = resp.AppendBulk(nil, h.name)
		}
	case "client|id":
		reply = resp.AppendInteger(nil, c.id)
	case "client|setinfo":
		reply = resp.AppendSimpleString(nil, "OK")
	default:
		reply = resp.AppendError(nil, fmt.Sprintf("ERR %s is not supported by the cacheqos proxy", spec.Name))
	}
	c.pushLocal(reply, start)
}

// accessOf says what a routed command's reply tells the curves.
func accessOf(spec *resp.CommandSpec) access {
	switch {
	case spec == specTake:
		return accessTake
	case deletesKeys[spec]:
		return accessDelete
	}
	switch spec.Class {
	case protocol.ClassRead:
		return accessRead
	case protocol.ClassWrite:
		return accessWrite
	default:
		return accessNone
	}
}

// route forwards a command whose keys must all live on one node.
func (h *redisHandler) route(spec *resp.CommandSpec, cmd *resp.Command, start int64) {
	c := h.c
	args := cmd.Args
	idx, err := spec.KeyIndexes(args, h.keyIdx[:0])
	h.keyIdx = idx
	if err != nil {
		h.replyError(err.Error(), start)
		return
	}
	rt := c.tenant.cfg.Load().routes
	e := entry{kind: entryForward, start: start, missOnUnreachable: spec == specGet}
	node := rt.any
	var failedOver []int // for each key, its ejected owner (see eject.go), once one was
	for n, i := range idx {
		routing, full := keyHashes(args[i])
		if c.peer {
			e.keyHash = full
			break
		}
		owner, failed, ok := c.owner(rt, routing)
		if !ok {
			h.failed(errNoRoute, start)
			return
		}
		if n == 0 {
			node, e.keyHash = owner, full
		} else if owner != node {
			h.replyError(fmt.Sprintf("CROSSSLOT cacheqos: the keys of %s live on different nodes of this tenant; "+
				"give them a common {hash tag} to keep them together", spec.Name), start)
			return
		}
		if failed >= 0 && failedOver == nil {
			failedOver = slices.Repeat([]int{-1}, len(idx))
		}
		if failedOver != nil {
			failedOver[n] = failed
		}
	}
	if failedOver != nil && spec.Flags&resp.FlagWrite != 0 {
		for n, i := range idx {
			if failedOver[n] < 0 {
				continue
			}
			if err := c.keepFailoverWrite(rt, args[i], failedOver[n], node); err != nil {
				h.failed(err, start)
				return
			}
		}
	}
	if len(idx) == 1 {
		e.access = accessOf(spec)
		e.keyLen, e.valueLen = int32(len(args[idx[0]])), unknownValue
		if e.access == accessWrite {
			if i, ok := writeValueArg[spec]; ok && i < len(args) {
				e.valueLen = int32(mrc.RedisValueLen(args[i]))
			} else if v, ok := writeValueInReply[spec]; ok {
				e.valueLen = v
			}
			switch {
			case spec == specAppend && len(args) == 3:
				e.more = &entryMore{appendArgLen: int32(len(args[2])), appendArgInteger: mrc.RedisValueLen(args[2]) == mrc.IntegerValue}
			case spec == specSetrange && len(args) == 4 && len(args[3]) == 0:
				e.valueLen = unknownValue // writes nothing: the key stays as it was
			case spec == specSetrange && len(args) == 4:
				if offset, ok := protocol.ParseUint(args[2]); ok && offset < 1<<40 { // redis refuses past 512 MiB
					e.more = &entryMore{setrangeEnd: int64(offset) + int64(len(args[3]))}
				}
			}
		}
	}
	blocking := spec.Flags&resp.FlagBlocking != 0
	if blocking || spec == specWatch {
		if err := c.pinLink(rt, node); errors.Is(err, errPinnedElsewhere) {
			h.replyError(err.Error(), start)
			return
		} else if err != nil {
			h.failed(err, start)
			return
		}
	}
	err = c.forward(rt, node, cmd.Raw(), len(cmd.Raw()), e)
	if pn := c.pin; pn != nil && pn.sending {
		pn.sending = false
		switch {
		case err != nil:
		case spec == specWatch:
			pn.watching = true
		case blocking:
			if until, ok := blockDeadline(spec, args, c.p.opts.BackendTimeout); ok {
				pn.l.awaitBlockedReply(until)
				c.blockUntil, c.blockForever = until, until.IsZero()
			}
		}
	}
	if err != nil && !c.reroute(err) && (spec != specGet || !c.missOnUnreachable(err, resp.AppendNull(nil, c.proto), start)) {
		h.failed(err, start)
	}
}

// errNoRoute answers requests of a tenant without any node with a positive weight.
var errNoRoute = errors.New("the tenant has no partition to serve this key")

// split forwards a multi-key command as one sub-command per node that owns some of its keys.
func (h *redisHandler) split(spec *resp.CommandSpec, cmd *resp.Command, start int64) {
	c := h.c
	args := cmd.Args
	idx, err := spec.KeyIndexes(args, h.keyIdx[:0])
	h.keyIdx = idx
	if err != nil {
		h.replyError(err.Error(), start)
		return
	}
	rt := c.tenant.cfg.Load().routes
	step := spec.Keys.Step
	if step > 1 && (len(args)-spec.Keys.First)%step != 0 {
		h.replyError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", spec.Name), start)
		return
	}
	owners := make([]int, len(idx))
	var hashes []uint64
	var lens []int32
	switch {
	case spec == specMGet:
		hashes, lens = make([]uint64, len(idx)), make([]int32, len(idx))
	case deletesKeys[spec]:
		hashes = make([]uint64, len(idx))
	}
	same := true
	for n, i := range idx {
		routing, full := keyHashes(args[i])
		if hashes != nil {
			hashes[n] = full
		}
		if lens != nil {
			lens[n] = int32(len(args[i]))
		}
		if c.peer {
			continue
		}
		owner, failed, ok := c.owner(rt, routing)
		if !ok {
			h.failed(errNoRoute, start)
			return
		}
		if failed >= 0 && spec.Flags&resp.FlagWrite != 0 {
			if err := c.keepFailoverWrite(rt, args[i], failed, owner); err != nil {
				h.failed(err, start)
				return
			}
		}
		owners[n] = owner
		same = same && owner == owners[0]
	}
	if same {
		e := entry{kind: entryForward, start: start, missOnUnreachable: spec == specMGet}
		switch {
		case lens != nil:
			e.access, e.more = accessReadMulti, &entryMore{keyHashes: hashes, keyLens: lens}
		case hashes != nil:
			e.access, e.more = accessDelete, &entryMore{keyHashes: hashes}
		}
		err := c.forward(rt, owners[0], cmd.Raw(), len(cmd.Raw()), e)
		if err != nil && !c.reroute(err) && (spec != specMGet || !c.missOnUnreachable(err, nullArray(c.proto, len(idx)), start)) {
			h.failed(err, start)
		}
		return
	}
	// One sub-command per node, in the order nodes first appear among the keys.
	var nodes []int
	var subArgs [][][]byte
	s := &split{merge: spec.Merge, owner: make([]int, len(idx)), keyHashes: hashes, keyLens: lens, deletes: deletesKeys[spec]}
	for n, i := range idx {
		part := slices.Index(nodes, owners[n])
		if part < 0 {
			part = len(nodes)
			nodes = append(nodes, owners[n])
			subArgs = append(subArgs, [][]byte{args[0]})
		}
		s.owner[n] = part
		subArgs[part] = append(subArgs[part], args[i:i+step]...)
	}
	raws := make([][]byte, len(nodes))
	for p := range nodes {
		raws[p] = resp.AppendCommand(nil, subArgs[p])
	}
	if err := c.sendSplit(rt, nodes, raws, entry{split: s, start: start, missOnUnreachable: spec == specMGet}); err != nil {
		h.failed(err, start)
	}
}

// fanOut sends a keyless command to every node of the tenant and merges the replies (DBSIZE).
func (h *redisHandler) fanOut(spec *resp.CommandSpec, cmd *resp.Command, start int64) {
	c := h.c
	rt := c.tenant.cfg.Load().routes
	if c.peer || len(rt.nodes) == 1 {
		h.forwardAny(spec, cmd, start)
		return
	}
	if len(rt.nodes) == 0 {
		h.failed(errNoRoute, start)
		return
	}
	nodes := make([]int, len(rt.nodes))
	raws := make([][]byte, len(rt.nodes))
	for i := range nodes {
		nodes[i], raws[i] = i, cmd.Raw()
	}
	if err := c.sendSplit(rt, nodes, raws, entry{split: &split{merge: spec.Merge}, start: start}); err != nil {
		h.failed(err, start)
	}
}

// forwardAny sends a keyless command to one engine of the tenant (this node's if it has one).
func (h *redisHandler) forwardAny(spec *resp.CommandSpec, cmd *resp.Command, start int64) {
	c := h.c
	rt := c.tenant.cfg.Load().routes
	if rt.any < 0 && !c.peer {
		h.failed(errNoRoute, start)
		return
	}
	if spec == specInfo {
		h.info(rt, cmd, start)
		return
	}
	if err := c.forward(rt, rt.any, cmd.Raw(), len(cmd.Raw()), entry{kind: entryForward, start: start}); err != nil {
		h.failed(err, start)
	}
}

// info sends INFO to one engine of the tenant, on a privileged link when the engine is this
// node's: the link user may not run INFO, so that a script cannot read it unfiltered.
func (h *redisHandler) info(rt *routes, cmd *resp.Command, start int64) {
	c := h.c
	var l *link
	var err error
	if c.peer || rt.nodes[rt.any].local {
		l, err = c.privilegedLocalLink()
	} else {
		l, err = c.backend(rt, rt.any)
	}
	if err == nil {
		err = c.forwardOn(l, rt, rt.any, cmd.Raw(), len(cmd.Raw()), entry{kind: entryInfo, start: start}, 0)
	}
	if err != nil {
		h.failed(err, start)
	}
}

// scan runs SCAN over the tenant's nodes one after the other (see scanNodeBits).
func (h *redisHandler) scan(spec *resp.CommandSpec, cmd *resp.Command, start int64) {
	c := h.c
	args := cmd.Args
	if c.peer {
		h.forwardAny(spec, cmd, start)
		return
	}
	rt := c.tenant.cfg.Load().routes
	cursor, ok := protocol.ParseUint(args[1])
	node, engineCursor := int(cursor&scanNodeMask), cursor>>scanNodeBits
	switch {
	case !ok:
		h.replyError("ERR invalid cursor", start)
		return
	case len(rt.nodes) == 0:
		h.failed(errNoRoute, start)
		return
	case len(rt.nodes) > scanNodeMask+1:
		h.replyError(fmt.Sprintf("ERR cacheqos: SCAN supports tenants on at most %d nodes", scanNodeMask+1), start)
		return
	case node >= len(rt.nodes):
		h.replyError("ERR invalid cursor", start)
		return
	}
	sub := slices.Clone(args)
	sub[1] = strconv.AppendUint(nil, engineCursor, 10)
	raw := resp.AppendCommand(nil, sub)
	e := entry{kind: entryScan, start: start, more: &entryMore{scanNode: node, scanNodes: len(rt.nodes)}}
	if err := c.forward(rt, node, raw, len(raw), e); err != nil {
		h.failed(err, start)
	}
}

// completeRESP takes a link's reply to p (to one part of a split request): it counts the
// reply for the local partition and keeps its bytes for the writer. It runs on the link's
// reader, which then no longer touches p.
func (p *pending) completeRESP(l *link, part int, reply resp.Reply) {
	raw := reply.Raw()
	keep := raw
	if p.abandoned() {
		keep = nil
	}
	switch {
	case p.kind == entrySplit:
		pr := &p.parts[part]
		pr.raw = append(pr.raw[:0], keep...)
		pr.isError = reply.IsError()
		if l.local {
			p.tenant.served(len(raw))
			if p.split.deletes && !pr.isError {
				recordPartDeletes(p.tenant, p.split, part)
			}
		}
	case l.local && p.kind == entryForward:
		countRESP(p, reply)
		p.reply = append(p.reply[:0], keep...)
	default:
		if l.local {
			p.tenant.served(len(raw))
		}
		p.reply = append(p.reply[:0], keep...)
	}
	p.holdReply(len(keep))
	p.remaining.Add(-1)
}

// countRESP updates the counters of the local partition for one reply.
func countRESP(p *pending, reply resp.Reply) {
	t := p.tenant
	t.served(len(reply.Raw()))
	switch p.access {
	case accessRead:
		if hit, counted := classifyRead(reply); counted {
			t.recordRead(p.keyHash, hit, int(p.keyLen), readValueLen(reply.Raw()))
		}
	case accessReadMulti:
		if v, err := reply.Decode(); err == nil && v.Type == resp.TypeArray && len(v.Elems) == len(p.more.keyHashes) {
			for i, elem := range v.Elems {
				recordElement(t, p.more.keyHashes[i], int(p.more.keyLens[i]), elem)
			}
		}
	case accessWrite:
		if valueLen, ok := writtenValueLen(p.valueLen, p.more, reply); ok {
			t.recordWrite(p.keyHash, int(p.keyLen), valueLen)
		}
	case accessTake:
		if hit, counted := classifyRead(reply); counted {
			t.recordRead(p.keyHash, hit, int(p.keyLen), readValueLen(reply.Raw()))
			t.recordDelete(p.keyHash)
		}
	case accessDelete:
		if reply.IsError() {
			return
		}
		if p.more == nil {
			t.recordDelete(p.keyHash)
			return
		}
		for _, h := range p.more.keyHashes {
			t.recordDelete(h)
		}
	}
}

// recordPartDeletes records the removal of the keys a split delete sent to part.
func recordPartDeletes(t *tenant, s *split, part int) {
	for n, owner := range s.owner {
		if owner == part {
			t.recordDelete(s.keyHashes[n])
		}
	}
}

// writtenValueLen is the length of the value a write left, as the curve counts it: valueLen as
// the request told it, or read from the reply for valueInReply, lengthInReply and
// appendInReply (more holding APPEND's argument); and whether it stored anything.
func writtenValueLen(valueLen int32, more *entryMore, reply resp.Reply) (int, bool) {
	raw := reply.Raw()
	switch {
	case valueLen != valueInReply && valueLen != lengthInReply && valueLen != appendInReply:
		return int(valueLen), stored(reply)
	case reply.IsError():
		return 0, false
	case reply.Type() == resp.TypeInteger && len(raw) > 3 && valueLen != valueInReply:
		n, ok := protocol.ParseUint(raw[1 : len(raw)-2])
		switch {
		case !ok:
			return 0, false
		case valueLen == lengthInReply && n == 0:
			return 0, false // SETRANGE of nothing on a missing key creates none
		case more == nil:
			return mrc.UnknownValue, true
		case valueLen == lengthInReply && int64(n) == more.setrangeEnd:
			return mrc.ExtendedRawValue(int(n)), true
		case valueLen == lengthInReply:
			return mrc.RawValue(int(n)), true
		case int64(n) != int64(more.appendArgLen):
			return mrc.GrownRawValue(int(n)), true
		case more.appendArgInteger:
			return mrc.IntegerValue, true // the key was created: held as SET holds its argument
		}
		return int(n), true
	case reply.Type() == resp.TypeInteger && len(raw) > 3:
		return mrc.IntegerValue, true // INCR and DECR leave an integer-encoded value
	case reply.Type() == resp.TypeBulkString:
		return payloadLen(raw), true // INCRBYFLOAT leaves a string, even of an integer's digits
	}
	return 0, false
}

// failureReply is the error reply for a request whose reply will not come.
func failureReply(err error) []byte { return resp.AppendError(nil, "ERR cacheqos: "+err.Error()) }

func (h *redisHandler) deliver(p *pending) {
	c := h.c
	switch {
	case p.kind == entrySplit:
		h.deliverSplit(p)
	case p.failure != nil && p.failedAsMiss():
		c.write(forwardedMiss(p))
	case p.failure != nil:
		c.write(failureReply(p.failure))
	case p.kind == entryScan:
		h.deliverScan(p)
	case p.kind == entryInfo:
		h.deliverInfo(p)
	case p.more != nil && p.more.instead != nil:
		c.write(p.more.instead)
	default:
		c.writeReply(p)
	}
}

// recordElement counts one key of a multi-key read.
func recordElement(t *tenant, h uint64, keyLen int, elem resp.Value) {
	t.recordRead(h, !elem.Null, keyLen, readValueLen(elem.Raw))
}

// readValueLen is the value length a read's reply tells the curve: mrc.RedisValueLen of a bulk
// string's bytes (redis stores a value SET as an integer without a string), else payloadLen.
func readValueLen(raw []byte) int {
	n := payloadLen(raw)
	if len(raw) == 0 || resp.Type(raw[0]) != resp.TypeBulkString || n+2 > len(raw) {
		return n
	}
	return mrc.RedisValueLen(raw[len(raw)-2-n : len(raw)-2])
}

// payloadLen is the length of a reply's payload: a bulk string's bytes without its header and
// CRLF; other replies' whole length, for want of a better measure of what they hold.
func payloadLen(raw []byte) int {
	if len(raw) > 0 && resp.Type(raw[0]) == resp.TypeBulkString {
		if eol := bytes.IndexByte(raw, '\n'); eol >= 0 && len(raw) >= eol+3 {
			return len(raw) - eol - 3
		}
	}
	return len(raw)
}

// stored tells whether a write's reply says it stored its value: not an error, nor a null
// (SET NX/XX that did not apply).
func stored(reply resp.Reply) bool {
	return !reply.IsError() && reply.Type() != resp.TypeNull && !bytes.HasPrefix(reply.Raw(), []byte("$-1")) &&
		!bytes.Equal(reply.Raw(), []byte(":0\r\n")) // SETNX on an existing key
}

// classifyRead tells whether a read's reply found its key: a null, or an empty aggregate (what
// redis answers for a missing list, set, hash or sorted set) is a miss; a string or a non-empty
// aggregate is a hit. Integers and status replies (EXISTS, TTL, TYPE) and errors are neither.
func classifyRead(reply resp.Reply) (hit, counted bool) {
	raw := reply.Raw()
	if len(raw) < 3 || resp.Type(raw[0]) != reply.Type() {
		return false, false // an attribute precedes the value: redis sends none for reads
	}
	switch reply.Type() {
	case resp.TypeNull:
		return false, true
	case resp.TypeBulkString, resp.TypeArray:
		return raw[1] != '-' && !isEmptyAggregate(raw), true
	case resp.TypeVerbatim:
		return true, true
	case resp.TypeSet, resp.TypeMap:
		return !isEmptyAggregate(raw), true
	}
	return false, false
}

func isEmptyAggregate(raw []byte) bool {
	t := resp.Type(raw[0])
	return (t == resp.TypeArray || t == resp.TypeSet || t == resp.TypeMap) && bytes.HasPrefix(raw[1:], []byte("0\r\n"))
}

// decodeReply decodes the reply to p, which the proxy rewrites (what names the command): it
// reports false once it has answered the client itself, passing on an error reply as it is
// and answering an error for a reply that is not what want accepts.
func (h *redisHandler) decodeReply(p *pending, what string, want func(resp.Value) bool) (resp.Value, bool) {
	v, err := resp.DecodeValue(p.reply)
	switch {
	case err == nil && v.IsError():
		h.c.write(p.reply)
		return v, false
	case err != nil || !want(v):
		h.c.write(resp.AppendError(nil, "ERR cacheqos: unexpected "+what+" reply from the engine"))
		return v, false
	}
	return v, true
}

// deliverScan rewrites an engine's SCAN cursor into the tenant-wide cursor.
func (h *redisHandler) deliverScan(p *pending) {
	c := h.c
	v, ok := h.decodeReply(p, "SCAN", func(v resp.Value) bool { return v.Type == resp.TypeArray && len(v.Elems) == 2 })
	if !ok {
		return
	}
	engineCursor, ok := protocol.ParseUint(v.Elems[0].Str)
	if !ok || engineCursor >= 1<<(64-scanNodeBits) {
		c.write(resp.AppendError(nil, "ERR cacheqos: engine SCAN cursor out of the proxy's range"))
		return
	}
	var cursor uint64
	switch {
	case engineCursor != 0:
		cursor = engineCursor<<scanNodeBits | uint64(p.more.scanNode)
	case p.more.scanNode+1 < p.more.scanNodes:
		cursor = uint64(p.more.scanNode + 1)
	}
	out := resp.AppendArrayHeader(nil, 2)
	out = resp.AppendBulk(out, strconv.AppendUint(nil, cursor, 10))
	c.write(out)
	c.write(v.Elems[1].Raw)
}

// deliverSplit merges the parts' replies.
func (h *redisHandler) deliverSplit(p *pending) {
	c := h.c
	s := p.split
	values := make([]resp.Value, len(p.parts))
	var failure []byte
	for i := range p.parts {
		pr := &p.parts[i]
		switch {
		case p.partMissed(i):
			values[i] = missedPart(p.proto, s, i)
		case pr.failure != nil:
			failure = firstFailure(failure, failureReply(pr.failure))
		case pr.isError:
			failure = firstFailure(failure, pr.raw)
		default:
			v, err := resp.DecodeValue(pr.raw)
			if err != nil {
				failure = firstFailure(failure, resp.AppendError(nil, "ERR cacheqos: "+err.Error()))
				continue
			}
			values[i] = v
		}
	}
	countSplitUnreachable(p, failure == nil)
	if failure != nil {
		c.write(failure)
		return
	}
	switch s.merge {
	case resp.MergeArrayInKeyOrder:
		h.mergeArrays(p, values)
	case resp.MergeSumIntegers:
		var sum int64
		for _, v := range values {
			if v.Type != resp.TypeInteger {
				c.write(resp.AppendError(nil, "ERR cacheqos: a node answered "+v.Type.String()+" where an integer was expected"))
				return
			}
			sum += v.Int
		}
		c.write(resp.AppendInteger(nil, sum))
	case resp.MergeAllOK:
		c.write(resp.AppendSimpleString(nil, "OK"))
	case resp.MergeSame:
		for _, v := range values[1:] {
			if !bytes.Equal(v.Raw, values[0].Raw) {
				c.write(resp.AppendError(nil, "ERR cacheqos: the tenant's nodes answered differently"))
				return
			}
		}
		c.write(values[0].Raw)
	}
}

// nullArray is an array of n missing values.
func nullArray(proto resp.Proto, n int) []byte {
	out := resp.AppendArrayHeader(nil, n)
	for range n {
		out = resp.AppendNull(out, proto)
	}
	return out
}

// forwardedMiss is the reply of a GET, or an MGET of one node's keys, that failed as a miss
// (failedAsMiss).
func forwardedMiss(p *pending) []byte {
	if p.access == accessReadMulti {
		return nullArray(p.proto, len(p.more.keyHashes))
	}
	return resp.AppendNull(nil, p.proto)
}

// missedPart is the reply of an MGET's part whose node is unreachable: a missing value for
// each of its keys.
func missedPart(proto resp.Proto, s *split, part int) resp.Value {
	null := resp.Value{Type: resp.TypeNull, Null: true, Raw: resp.AppendNull(nil, proto)}
	v := resp.Value{Type: resp.TypeArray}
	for _, owner := range s.owner {
		if owner == part {
			v.Elems = append(v.Elems, null)
		}
	}
	return v
}

// mergeArrays puts the elements of the parts' arrays back in the order of the keys.
func (h *redisHandler) mergeArrays(p *pending, values []resp.Value) {
	c := h.c
	s := p.split
	next := make([]int, len(values))
	for _, part := range s.owner {
		next[part]++
	}
	for part, v := range values {
		if v.Type != resp.TypeArray || len(v.Elems) != next[part] {
			c.write(resp.AppendError(nil, "ERR cacheqos: a node answered a reply that does not match its keys"))
			return
		}
		next[part] = 0
	}
	c.write(resp.AppendArrayHeader(nil, len(s.owner)))
	for n, part := range s.owner {
		elem := values[part].Elems[next[part]]
		next[part]++
		if p.parts[part].local && s.keyLens != nil {
			recordElement(p.tenant, s.keyHashes[n], int(s.keyLens[n]), elem)
		}
		c.write(elem.Raw)
	}
}

// firstFailure keeps the first failure.
func firstFailure(first, next []byte) []byte {
	if first != nil {
		return first
	}
	return next
}

func (h *redisHandler) buffered() int { return h.cr.Buffered() }
