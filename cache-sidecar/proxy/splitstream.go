package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"

	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// A multi-key read whose keys live on several nodes (MGET, a memcached get/gets/gat/gats) is
// sent as one part per node, and its reply merges the parts' values in key order. A part's
// reply that is not whole in its link's read buffer is streamed: the link hands it to the
// connection's writer as it hands a whole reply (stream.go), and the writer, once every part
// has come or been handed over, copies the values in key order, one at a time from whichever
// part holds the next key, through the connection's reply buffer. So the proxy holds one chunk
// per streamed part, whatever the parts' sizes.
//
// Meanwhile the writer holds the links of the streamed parts, each stopped at a value. A link
// that waits for a writer must never be one that writer's own wait depends on: sendParts
// queues all of a split's parts at once, holding all their links' locks, so every link orders
// requests as one order over the whole proxy does, and every connection's writer takes its
// replies in its own send order. The earliest request not yet answered then finds its replies
// first on each of its links, whatever other writers hold, so the proxy always progresses.

// partCopy is one streamed part of a split read being merged.
type partCopy struct {
	sc *streamCopy
	// redis: where the copy is in the part's array (opened once its header is read).
	frame  respFrame
	opened bool
	// memcached: the response's END is read.
	ended bool
	err   error // the link cut the copy: it closes
}

// copySplit merges a split read one or more of whose parts are streamed; c.outMu is held. A
// part that does not match its keys, or fails, makes the reply the first failure (the streamed
// parts are then read away), but for a plain read's part whose node is unreachable: its keys
// are misses (partMissed). A link that fails during the merge leaves the client a partial
// reply, so its connection closes. Whatever happens, every streamed part is read to its end,
// so its link stays in step.
func (c *conn) copySplit(p *pending) {
	copies := make([]*partCopy, len(p.parts))
	cancelled := false
	for i := range p.parts {
		s := p.parts[i].stream
		if s == nil {
			continue
		}
		if !s.state.CompareAndSwap(streamOffered, streamTaken) {
			cancelled = true // the connection ended: the link reads the part away itself
			continue
		}
		sc := newStreamCopy(s, c)
		sc.merging = true
		copies[i] = &partCopy{sc: sc}
	}
	cut := cancelled
	if !cancelled && !c.clientGone {
		if c.p.opts.Protocol == Redis {
			cut = c.mergeRESPParts(p, copies)
		} else {
			cut = c.mergeMemcacheParts(p, copies)
		}
	}
	for _, pc := range copies {
		if pc == nil {
			continue
		}
		if pc.err == nil && !pc.finished() {
			pc.sc.dst = nil
			pc.err = pc.readAway()
		}
		if pc.err == nil {
			pc.sc.count(int64(len(pc.sc.buf)))
			pc.sc.flush()
		}
		pc.sc.release()
		pc.sc.s.done <- pc.err
	}
	if cut && !c.clientGone {
		c.lostClient()
	}
}

// finished reports whether the part's reply is read to its end.
func (pc *partCopy) finished() bool {
	if pc.sc.s.l.replies != nil {
		return pc.opened && pc.frame.done()
	}
	return pc.ended
}

// readAway reads the rest of the part's reply without passing it on.
func (pc *partCopy) readAway() error {
	if pc.sc.s.l.replies == nil {
		return pc.sc.copyMemcache()
	}
	if !pc.opened {
		return pc.sc.copyRESP()
	}
	for !pc.frame.done() {
		if err := pc.sc.copyHeader(&pc.frame, -1); err != nil {
			return err
		}
	}
	return nil
}

// failure words the link's error for the client.
func (pc *partCopy) failure(err error) error {
	pc.err = err
	return pc.sc.s.l.failure(err)
}

// mergeRESPParts writes an MGET's reply from its parts, whole or streamed, in key order, and
// reports whether a link cut it midway.
func (c *conn) mergeRESPParts(p *pending, copies []*partCopy) (cut bool) {
	s := p.split
	keys := make([]int, len(p.parts))
	for _, part := range s.owner {
		keys[part]++
	}
	values := make([]resp.Value, len(p.parts))
	var failure []byte
	for i := range p.parts {
		pr := &p.parts[i]
		switch pc := copies[i]; {
		case p.partMissed(i):
			values[i] = missedPart(p.proto, s, i)
		case pr.failure != nil:
			failure = firstFailure(failure, failureReply(pr.failure))
		case pc != nil:
			failure = firstFailure(failure, pc.openArray(keys[i]))
		case pr.isError:
			failure = firstFailure(failure, pr.raw)
		default:
			v, err := resp.DecodeValue(pr.raw)
			if err != nil || v.Type != resp.TypeArray || len(v.Elems) != keys[i] {
				failure = firstFailure(failure, errReplyMismatch)
				continue
			}
			values[i] = v
		}
	}
	countSplitUnreachable(p, failure == nil)
	if failure != nil {
		c.write(failure)
		return false
	}
	c.write(resp.AppendArrayHeader(nil, len(s.owner)))
	next := make([]int, len(p.parts))
	for n, part := range s.owner {
		counted := p.parts[part].local && s.keyLens != nil
		if pc := copies[part]; pc != nil {
			v, err := pc.copyElement()
			if err != nil {
				pc.err = err
				return true
			}
			if counted {
				p.tenant.recordRead(s.keyHashes[n], v.hit, int(s.keyLens[n]), int(v.len))
			}
			continue
		}
		elem := values[part].Elems[next[part]]
		next[part]++
		if counted {
			recordElement(p.tenant, s.keyHashes[n], int(s.keyLens[n]), elem)
		}
		c.write(elem.Raw)
	}
	return false
}

// errReplyMismatch answers a split read one of whose parts is not an array of its keys' values.
var errReplyMismatch = resp.AppendError(nil, "ERR cacheqos: a node answered a reply that does not match its keys")

// openArray reads the header of a streamed MGET part, which the merged reply replaces: nil when
// it is an array of keys values, else the client's failure (the part is then read away).
func (pc *partCopy) openArray(keys int) []byte {
	sc := pc.sc
	pc.frame.start()
	pc.opened = true
	line, err := sc.line()
	if err != nil {
		return failureReply(pc.failure(err))
	}
	header := string(line)
	sc.buf = sc.buf[:len(sc.buf)-len(line)-2]
	h, err := pc.frame.header(line)
	switch {
	case err != nil:
		return failureReply(pc.failure(err))
	case h.count == int64(keys) && header[0] == byte(resp.TypeArray):
		return nil
	}
	sc.dst = nil
	if h.blob >= 0 {
		if err := sc.block(h.blob); err != nil {
			return failureReply(pc.failure(err))
		}
	}
	if header[0] == byte(resp.TypeError) {
		return []byte(header + "\r\n")
	}
	return errReplyMismatch
}

// copyElement copies the open array's next element to the merged reply and returns what it
// told of its key (local partition only).
func (pc *partCopy) copyElement() (streamedValue, error) {
	sc, f := pc.sc, &pc.frame
	left := f.pending[1]
	sc.values = sc.values[:0]
	for {
		if err := sc.copyHeader(f, 1); err != nil {
			return streamedValue{}, err
		}
		if len(f.pending) < 2 || len(f.pending) == 2 && f.pending[1] == left-1 {
			break
		}
	}
	sc.flush() // before the next value, which may come from another part
	if len(sc.values) == 0 {
		return streamedValue{}, nil
	}
	return sc.values[0], nil
}

// mergeMemcacheParts writes a retrieval's response from its parts, whole or streamed: the
// values found, in key order, and END. It reports whether a link cut it midway.
func (c *conn) mergeMemcacheParts(p *pending, copies []*partCopy) (cut bool) {
	s := p.split
	var failure []byte
	for i := range p.parts {
		pr := &p.parts[i]
		switch pc := copies[i]; {
		case p.partMissed(i): // no values: its keys are misses
		case pr.failure != nil:
			failure = firstFailure(failure, memcacheFailure(pr.failure))
		case pc != nil:
			failure = firstFailure(failure, pc.openResponse())
		case pr.isError:
			failure = firstFailure(failure, pr.raw)
		}
	}
	countSplitUnreachable(p, failure == nil)
	if failure != nil {
		c.write(failure)
		return false
	}
	next := make([]int, len(p.parts))
	for n, part := range s.owner {
		pr := &p.parts[part]
		hit, keyLen, size := false, 0, 0
		if pc := copies[part]; pc != nil {
			var err error
			if hit, keyLen, size, err = pc.copyValueOf(s.keyHashes[n]); err != nil {
				pc.err = err
				return true
			}
		} else if i := next[part]; i < len(pr.values) && pr.values[i].keyHash == s.keyHashes[n] {
			v := &pr.values[i]
			next[part]++
			hit, keyLen, size = true, v.keyLen, v.len
			c.write(pr.raw[v.start:v.end])
		}
		if pr.local {
			p.tenant.recordRead(s.keyHashes[n], hit, keyLen, size)
		}
	}
	for _, pc := range copies {
		if pc == nil {
			continue
		}
		if err := pc.closeResponse(); err != nil {
			pc.err = err
			return true
		}
	}
	c.write(memcache.AppendEnd(nil))
	return false
}

// openResponse looks at a streamed retrieval part's first line: nil when it is a VALUE or
// END, else the client's failure (the part is then read away).
func (pc *partCopy) openResponse() []byte {
	line := peekLine(pc.sc.br)
	if valueLineSize(line) >= 0 || string(line) == "END" {
		return nil
	}
	text := string(line)
	pc.sc.dst = nil
	pc.ended = true
	if err := pc.sc.copyMemcache(); err != nil {
		return memcacheFailure(pc.failure(err))
	}
	return []byte(text + "\r\n") // an error line, with which memcached ends a retrieval
}

// copyValueOf copies the part's next VALUE block when it is the key hashed h (memcached
// answers the keys it has, in request order), and reports what it told of the key.
func (pc *partCopy) copyValueOf(h uint64) (hit bool, keyLen, size int, err error) {
	sc := pc.sc
	line := peekLine(sc.br)
	if line == nil {
		if _, err := sc.line(); err != nil {
			return false, 0, 0, err
		}
		return false, 0, 0, errors.New("bad response from engine: no line where a VALUE or END was due")
	}
	v, ok := memcache.ParseValueLine(line)
	key, n := v.Key, v.Size
	switch {
	case memcache.EndsRetrieval(line):
		return false, 0, 0, nil // END: the key is a miss
	case !ok || n > maxStreamBlock:
		return false, 0, 0, fmt.Errorf("bad response from engine: bad VALUE line %q", line)
	case keyhash.Sum64(key) != h:
		return false, 0, 0, nil
	}
	keyLen = len(key)
	if _, err := sc.line(); err != nil {
		return false, 0, 0, err
	}
	if err := sc.block(n); err != nil {
		return false, 0, 0, err
	}
	sc.flush() // before the next value, which may come from another part
	return true, keyLen, int(n), nil
}

// closeResponse reads the part's END, which the merged response replaces.
func (pc *partCopy) closeResponse() error {
	sc := pc.sc
	line, err := sc.line()
	if err != nil {
		return err
	}
	if string(line) != "END" {
		return fmt.Errorf("bad response from engine: expected END after the part's values, got %q", line)
	}
	sc.buf = sc.buf[:len(sc.buf)-len("END\r\n")]
	pc.ended = true
	return nil
}

// streamsPart reports whether the reply to a split read's part is to be streamed (copySplit):
// a part of an MGET or memcached retrieval whose reply is not whole in the read buffer.
func (l *link) streamsPart(w waiter) bool {
	if l.replies != nil {
		return w.p.split.merge == resp.MergeArrayInKeyOrder && !replyBuffered(l.br)
	}
	return w.expect.Command.IsRetrieval() && !responseBuffered(l.br)
}

// responseBuffered reports whether the link's read buffer holds the whole of the next
// memcached retrieval response.
func responseBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bufferedResponseLen(b) > 0
}

// bufferedResponseLen is the length of the memcached retrieval response at the start of b
// (VALUE blocks up to END, or an error line), or 0 when b holds only part of it or a VALUE
// line the stream copy would refuse. b is at most a link's read buffer, shorter than the
// longest line a response may hold.
func bufferedResponseLen(b []byte) int {
	pos := 0
	for {
		eol := bytes.IndexByte(b[pos:], '\n')
		if eol < 1 || b[pos+eol-1] != '\r' {
			return 0
		}
		line := b[pos : pos+eol-1]
		pos += eol + 1
		if memcache.EndsRetrieval(line) {
			return pos
		}
		n := valueLineSize(line)
		if n < 0 || int64(len(b)-pos) < n+2 {
			return 0
		}
		pos += int(n) + 2
		if b[pos-2] != '\r' || b[pos-1] != '\n' {
			return 0
		}
	}
}
