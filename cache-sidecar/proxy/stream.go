package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// A reply holding a value larger than streamChunk (a redis bulk string, a memcached VALUE
// block or meta VA block), a redis collection not already whole in the link's read buffer
// (LRANGE, HGETALL, SMEMBERS... of a large collection, or of a few large elements), and every
// reply to a multi-key read sent whole to one node (MGET, memcached get of several keys), is
// streamed: the link's reader hands it, unread, to its connection's writer, which copies it
// from the link's buffered reader to the client streamChunk bytes at a time, in the
// connection's reply order, and the link reads its next reply once the copy is done. So the
// proxy holds one chunk of such a reply, whatever its size; a reply read whole is under
// streamChunk, or within the link's read buffer.
//
// A streamed reply's lines (headers, simple strings, errors, numbers) may be as long as the
// ordinary reader takes (streamLineLimit), so that streaming refuses no reply it would take.
// Lines up to maxStreamLine (all a memcached VALUE line with its 250-byte key or a RESP length
// needs) fit the chunk buffer's spare room; a longer one is read into a buffer of its own,
// dropped once the line is passed on: while it is copied, a stream holds up to about
// streamLineLimit more.
const (
	streamChunk   = 64 << 10
	maxStreamLine = 1024
	// maxStreamDepth bounds the nesting of a streamed RESP reply: the ordinary reply reader's
	// bound, so that streaming refuses no reply it would take.
	maxStreamDepth = resp.DefaultReplyMaxDepth
	// maxStreamBlock is the largest value a streamed reply may hold (redis' and memcached's
	// largest: 512 MiB and 1 GiB).
	maxStreamBlock = 1 << 30
)

// A stream's hand-over: the link offers it, then either the writer takes it, or the link,
// once the connection is gone without taking it, cancels it and reads it away itself.
const (
	streamOffered int32 = iota
	streamTaken
	streamCancelled
)

// replyStream is a reply a link's reader hands to a connection's writer to copy.
type replyStream struct {
	l     *link
	e     entry // the request's (fixed once queued, so readable after the pending is reused)
	state atomic.Int32
	done  chan error // the copy's result: nil, or why the link is out of step
}

// streamBuffers recycles the chunk buffers of streamed replies.
var streamBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, streamChunk+maxStreamLine)
	return &b
}}

// streamLineLimit is the longest line a streamed reply may hold: the ordinary reader's (RESP
// 1 MiB, memcached 64 KiB; the link reads with the default limits).
func (l *link) streamLineLimit() int {
	if l.replies != nil {
		return resp.DefaultReplyMaxLineLen
	}
	return memcache.DefaultMaxLineLen
}

// streams reports whether the reply due to w is one to stream. It looks at the reply's first
// byte, and for a value its first line (already buffered, or read into the buffer), without
// consuming them; other replies cost it one look at a buffered byte.
func (l *link) streams(w waiter) bool {
	p := w.p
	if p.kind != entryForward {
		return false
	}
	first, err := l.br.Peek(1)
	if err != nil {
		return false
	}
	if l.replies != nil {
		switch first[0] {
		case byte(resp.TypeBulkString):
			line := peekLine(l.br)
			if len(line) < 2 {
				return false
			}
			n, ok := protocol.ParseInt(line[1:])
			return ok && n >= streamChunk
		case byte(resp.TypeArray), byte(resp.TypeSet), byte(resp.TypeMap):
			if p.access == accessReadMulti {
				return first[0] == byte(resp.TypeArray)
			}
			// Small collections (redis-benchmark's LRANGE_100 to _600 among them) are
			// cheaper handed over whole, and one whole in the buffer costs no more memory.
			return !replyBuffered(l.br)
		}
		return false
	}
	switch {
	case first[0] != 'V':
		return false
	case w.expect.Command == memcache.CmdMetaGet:
		return metaValueSize(peekLine(l.br)) >= streamChunk
	case !w.expect.Command.IsRetrieval() || w.expect.Sentinel:
		return false
	}
	return p.access == accessReadMulti || valueLineSize(peekLine(l.br)) >= streamChunk
}

// replyBuffered reports whether the link's read buffer holds the whole of the next RESP reply.
func replyBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bufferedReplyLen(b) > 0
}

// bufferedReplyLen is the length of the RESP reply at the start of b, or 0 when b holds only
// part of it or its framing is not one the stream copies (the copy then reports it). b is at
// most a link's read buffer, shorter than the longest line a reply may hold.
func bufferedReplyLen(b []byte) int {
	pos := 0
	var f respFrame
	for f.start(); !f.done(); {
		eol := bytes.IndexByte(b[pos:], '\n')
		if eol < 2 || b[pos+eol-1] != '\r' {
			return 0
		}
		h, err := f.header(b[pos : pos+eol-1])
		pos += eol + 1
		switch {
		case err != nil:
			return 0
		case h.blob >= 0:
			end := int64(pos) + h.blob
			if end+2 > int64(len(b)) || b[end] != '\r' || b[end+1] != '\n' {
				return 0
			}
			pos = int(end) + 2
		}
	}
	return pos
}

// respFrame follows the nesting of one RESP reply, header line by header line, for the code
// that copies or measures it without decoding it.
type respFrame struct {
	stack   [maxStreamDepth]int
	pending []int // per level, the values still due
}

// respHeader is what a header line tells of the value it starts.
type respHeader struct {
	depth    int   // the value's nesting level: 0 for the reply itself
	blob     int64 // the bytes that follow a bulk, verbatim string or blob error (and a CRLF); else -1
	verbatim bool  // the blob is a verbatim string: a 3-byte format and ':' lead it
	null     bool  // a null: RESP3's, or RESP2's null bulk string (not the null array)
	count    int64 // the elements of an array, set, map or push; else -1
}

func (f *respFrame) start()     { f.pending = append(f.stack[:0], 1) }
func (f *respFrame) done() bool { return len(f.pending) == 0 }

// header takes the next header line, without its CRLF (at least its type byte).
func (f *respFrame) header(line []byte) (respHeader, error) {
	depth := len(f.pending) - 1
	f.pending[depth]--
	h := respHeader{depth: depth, blob: -1, count: -1}
	t, body := resp.Type(line[0]), line[1:]
	switch t {
	case resp.TypeBulkString, resp.TypeVerbatim, resp.TypeBlobError:
		n, ok := protocol.ParseInt(body)
		if ok && n == -1 && t == resp.TypeBulkString {
			h.null = true
			break
		}
		if !ok || n < 0 || n > maxStreamBlock {
			return h, fmt.Errorf("invalid %s length in the reply", t)
		}
		h.blob, h.verbatim = n, t == resp.TypeVerbatim
		if h.verbatim && n < verbatimPrefixLen {
			return h, errVerbatimPrefix
		}
	case resp.TypeNull:
		h.null = true
		if err := resp.CheckScalar(t, body); err != nil {
			return h, err
		}
	case resp.TypeArray, resp.TypeSet, resp.TypeMap, resp.TypePush, resp.TypeAttribute:
		n, ok := protocol.ParseInt(body)
		if ok && n == -1 && t == resp.TypeArray {
			break
		}
		if !ok || n < 0 || n > maxStreamBlock {
			return h, fmt.Errorf("invalid %s length in the reply", t)
		}
		if t != resp.TypeAttribute {
			h.count = n
		}
		if t == resp.TypeMap || t == resp.TypeAttribute {
			n *= 2
		}
		if t == resp.TypeAttribute {
			f.pending[depth]++ // the annotated value follows
		}
		if n > 0 {
			if len(f.pending) == maxStreamDepth {
				return h, fmt.Errorf("reply nested deeper than %d levels", maxStreamDepth)
			}
			f.pending = append(f.pending, int(n))
		}
	case resp.TypeSimpleString, resp.TypeError:
	case resp.TypeInteger, resp.TypeBigNumber, resp.TypeDouble, resp.TypeBoolean:
		if err := resp.CheckScalar(t, body); err != nil {
			return h, err
		}
	default:
		return h, fmt.Errorf("unknown reply type %q", line[0])
	}
	for len(f.pending) > 0 && f.pending[len(f.pending)-1] == 0 {
		f.pending = f.pending[:len(f.pending)-1]
	}
	return h, nil
}

// verbatimPrefixLen is the length of a verbatim string's "<format>:" prefix.
const verbatimPrefixLen = 4

var errVerbatimPrefix = errors.New("verbatim string without a 3-byte format prefix")

// valueLineSize is the data size a memcached "VALUE <key> <flags> <bytes> [<cas>]" line
// announces, or -1.
func valueLineSize(line []byte) int64 {
	if v, ok := memcache.ParseValueLine(line); ok {
		return v.Size
	}
	return -1
}

// metaValueSize is the data size a memcached meta "VA <bytes> <flags>*" line announces, or -1.
func metaValueSize(line []byte) int64 {
	rest, ok := bytes.CutPrefix(line, []byte("VA "))
	if !ok {
		return -1
	}
	return sizeField(rest)
}

// sizeField is the number up to the first space of fields, or -1.
func sizeField(fields []byte) int64 {
	if i := bytes.IndexByte(fields, ' '); i >= 0 {
		fields = fields[:i]
	}
	n, ok := protocol.ParseInt(fields)
	if !ok {
		return -1
	}
	return n
}

// peekLine returns the reader's next line without its CRLF and without consuming it, or nil
// when it is longer than maxStreamLine or the stream fails (the ordinary read then reports
// the failure).
func peekLine(br *bufio.Reader) []byte {
	for n := max(br.Buffered(), 1); ; {
		b, err := br.Peek(n)
		if i := bytes.IndexByte(b[:min(len(b), maxStreamLine)], '\n'); i >= 0 {
			line, _ := protocol.TrimCRLF(b[:i+1])
			return line
		}
		if err != nil || len(b) >= maxStreamLine {
			return nil
		}
		n = len(b) + 1
	}
}

// stream hands the reply due to w to its connection's writer and waits until the writer has
// copied it. A request its connection dropped (the client is gone) has its reply read away
// here.
func (l *link) stream(w waiter) error {
	p, c := w.p, w.p.c
	s := &replyStream{l: l, e: p.entry, done: make(chan error, 1)}
	s.e.expect = w.expect
	if p.abandoned() {
		return s.copyTo(nil)
	}
	if p.kind == entrySplit {
		p.parts[w.part].stream = s
	} else {
		p.stream = s
	}
	p.remaining.Add(-1)
	l.touch(c)
	l.wakeTouched()
	select {
	case err := <-s.done:
		return err
	case <-c.ctx.Done():
	}
	if s.state.CompareAndSwap(streamOffered, streamCancelled) {
		return s.copyTo(nil)
	}
	return <-s.done
}

// copyStream copies a streamed reply to the client, after the replies buffered before it;
// c.outMu is held. A client gone before or during the copy gets no more of it, but the reply
// is still read to its end, so the link stays in step. A copy the link cuts leaves the client
// a partial reply, so its connection closes.
func (c *conn) copyStream(s *replyStream) {
	if !s.state.CompareAndSwap(streamOffered, streamTaken) {
		return
	}
	c.flushClient()
	var dst *conn
	if !c.clientGone {
		dst = c
	}
	err := s.copyTo(dst)
	if err != nil && !c.clientGone {
		c.lostClient()
	}
	s.done <- err
}

// streamCopy is one streamed reply being copied.
type streamCopy struct {
	s   *replyStream
	br  *bufio.Reader
	dst *conn // nil: the reply is read away
	// merging: the copy is one part of a split read the writer merges (copySplit): chunks go
	// to dst's reply buffer, between the other parts' values, instead of straight to the client.
	merging bool
	// buf holds what is still to pass on: the pooled chunk buffer, or after a long line one of
	// its own, which the next flush drops.
	buf    []byte
	pooled *[]byte
	// total is the reply's bytes; values what it told of the keys read (local partition
	// only), in order.
	total  int64
	values []streamedValue
}

// wholeReply is a streamed collection's length in streamedValue: the whole reply's.
const wholeReply = -1

// streamedValue is one value (or miss) of a streamed read reply.
type streamedValue struct {
	keyHash uint64 // memcached: the VALUE line's key
	keyLen  int
	len     int64
	hit     bool
}

// copyTo copies the reply to dst (nil: reads it away), pacing it through the tenant's
// bandwidth bucket when the local partition serves a limited tenant, and then counts it.
func (s *replyStream) copyTo(dst *conn) error {
	sc := newStreamCopy(s, dst)
	defer sc.release()
	var err error
	if s.l.replies != nil {
		err = sc.copyRESP()
	} else {
		err = sc.copyMemcache()
	}
	if err == nil {
		// Counted before the last chunk goes: a client that has the whole reply finds its
		// reads on the curve, as it does for replies read whole.
		sc.count(int64(len(sc.buf)))
		sc.flush()
	}
	return err
}

// newStreamCopy starts copying s to dst (nil: reading it away) with a pooled chunk buffer.
func newStreamCopy(s *replyStream, dst *conn) *streamCopy {
	bp := streamBuffers.Get().(*[]byte)
	return &streamCopy{s: s, br: s.l.br, dst: dst, buf: (*bp)[:0], pooled: bp}
}

// release returns the chunk buffer to the pool.
func (sc *streamCopy) release() {
	streamBuffers.Put(sc.pooled)
	sc.buf, sc.pooled = nil, nil
}

// copyRESP copies one RESP reply, recording the values of a read: the reply itself for a one
// key read, the array's elements for a multi-key one.
func (sc *streamCopy) copyRESP() error {
	valueDepth := 0
	if sc.s.e.access == accessReadMulti {
		valueDepth = 1
	}
	var f respFrame
	for f.start(); !f.done(); {
		if err := sc.copyHeader(&f, valueDepth); err != nil {
			return err
		}
	}
	return nil
}

// copyHeader copies the reply's next header line, and the value that follows when it is a
// bulk, verbatim string or blob error, recording the values at valueDepth.
func (sc *streamCopy) copyHeader(f *respFrame, valueDepth int) error {
	line, err := sc.line()
	if err != nil {
		return err
	}
	h, err := f.header(line)
	if err != nil {
		return err
	}
	counted := h.depth == valueDepth
	switch {
	case h.blob >= 0:
		if h.verbatim {
			// Checked before the copy, whose chunks may pass the prefix on before it ends.
			prefix, err := sc.br.Peek(verbatimPrefixLen)
			if err == nil && prefix[verbatimPrefixLen-1] != ':' {
				return errVerbatimPrefix
			}
		}
		if err := sc.block(h.blob); err != nil {
			return err
		}
		sc.value(counted, streamedValue{len: h.blob, hit: true})
	case h.null:
		sc.value(counted, streamedValue{})
	case h.count >= 0:
		// A collection read as one key's value: a hit when not empty, its size the whole
		// reply's (as payloadLen counts a collection read whole).
		sc.value(counted, streamedValue{len: wholeReply, hit: h.count > 0})
	}
	return nil
}

// copyMemcache copies one retrieval response: VALUE blocks until END (or an error line, with
// which memcached ends a retrieval it cannot finish), or a meta get's VA block.
func (sc *streamCopy) copyMemcache() error {
	if sc.s.e.expect.Command == memcache.CmdMetaGet {
		return sc.copyMetaValue()
	}
	for {
		line, err := sc.line()
		if err != nil {
			return err
		}
		if memcache.EndsRetrieval(line) {
			return nil
		}
		v, ok := memcache.ParseValueLine(line)
		key, n := v.Key, v.Size
		switch {
		case !bytes.HasPrefix(line, []byte("VALUE ")):
			return fmt.Errorf("bad response from engine: expected VALUE or END, got %q", line)
		case !ok || n > maxStreamBlock:
			return fmt.Errorf("bad response from engine: bad VALUE line %q", line)
		}
		sc.value(true, streamedValue{keyHash: keyhash.Sum64(key), keyLen: len(key), len: n, hit: true})
		if err := sc.block(n); err != nil {
			return err
		}
	}
}

// copyMetaValue copies a meta get's "VA <bytes> <flags>*" block, and reads away the "MN" after
// it when the proxy sent a no-op after a quiet request.
func (sc *streamCopy) copyMetaValue() error {
	line, err := sc.line()
	if err != nil {
		return err
	}
	n := metaValueSize(line)
	if n < 0 || n > maxStreamBlock {
		return fmt.Errorf("bad response from engine: expected VA <bytes>, got %q", line)
	}
	e := &sc.s.e
	sc.value(true, streamedValue{keyHash: e.keyHash, keyLen: int(e.keyLen), len: n, hit: true})
	if err := sc.block(n); err != nil {
		return err
	}
	if !e.expect.Sentinel {
		return nil
	}
	if line, err = sc.line(); err != nil {
		return err
	}
	if string(line) != "MN" {
		return fmt.Errorf("bad response from engine: expected MN after a quiet meta get, got %q", line)
	}
	// The no-op was the proxy's, not the client's: its MN is not passed on.
	sc.buf = sc.buf[:len(sc.buf)-len("MN\r\n")]
	return nil
}

// value notes a value the reply holds, when it is one of the read's keys and the local
// partition served it (a reply with more values than the request has keys is not counted).
func (sc *streamCopy) value(counted bool, v streamedValue) {
	if counted && sc.s.l.local && len(sc.values) <= maxStreamedValues {
		sc.values = append(sc.values, v)
	}
}

// maxStreamedValues bounds the values a streamed reply records: a request has at most this
// many keys (memcached's and redis' argument limits are lower).
const maxStreamedValues = 1 << 20

// line reads the next CRLF-terminated line into the chunk buffer (one longer than its spare
// room grows it) and returns it without its CRLF; it is valid until the next flush.
func (sc *streamCopy) line() ([]byte, error) {
	if len(sc.buf)+maxStreamLine > cap(sc.buf) {
		sc.flush()
	}
	start := len(sc.buf)
	sc.s.l.progressed()
	limit := sc.s.l.streamLineLimit()
	buf, err := protocol.AppendLine(sc.br, sc.buf, limit)
	sc.buf = buf
	switch {
	case errors.Is(err, protocol.ErrLineTooLong):
		return nil, fmt.Errorf("reply line longer than %d bytes", limit)
	case errors.Is(err, io.EOF):
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	line, ok := protocol.TrimCRLF(buf[start:])
	if !ok || len(line) == 0 {
		return nil, errors.New("reply line not terminated by CRLF")
	}
	return line, nil
}

// block copies a value of n bytes and the CRLF after it, one chunk at a time.
func (sc *streamCopy) block(n int64) error {
	for n += 2; n > 0; {
		if len(sc.buf) == cap(sc.buf) {
			sc.flush()
		}
		end := len(sc.buf) + int(min(int64(cap(sc.buf)-len(sc.buf)), n))
		sc.s.l.progressed()
		m, err := io.ReadFull(sc.br, sc.buf[len(sc.buf):end])
		sc.buf = sc.buf[:len(sc.buf)+m]
		n -= int64(m)
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
	}
	if !bytes.HasSuffix(sc.buf, []byte("\r\n")) {
		return errors.New("value not terminated by CRLF")
	}
	return nil
}

// flush passes the chunk buffer to the client (counted in the bytes the connection holds
// while it is written), after the tenant's bandwidth bucket allowed it.
func (sc *streamCopy) flush() {
	n := len(sc.buf)
	if n == 0 {
		return
	}
	sc.total += int64(n)
	sc.pace(n)
	c := sc.dst
	if c != nil && sc.merging {
		// Small values gather in the reply buffer with the merge's other values; a chunk that
		// would grow it goes out on its own, after what the buffer holds.
		if len(c.out)+n <= streamChunk {
			c.write(sc.buf)
			sc.buf = (*sc.pooled)[:0]
			return
		}
		c.flushClient()
	}
	if c != nil {
		c.addReplyBytes(int64(n))
		c.refreshWriteDeadline()
		_, err := c.nc.Write(sc.buf)
		c.addReplyBytes(-int64(n))
		if err != nil {
			c.lostClient()
			sc.dst = nil
		}
	}
	sc.buf = (*sc.pooled)[:0] // drops a buffer a long line grew
}

// pace takes a chunk's bytes from the bandwidth bucket of a limited tenant served by the local
// partition, and holds the chunk until the bucket allows it: a large reply reaches the client
// at the tenant's rate. A reply read away is only charged.
func (sc *streamCopy) pace(n int) {
	t := sc.s.e.tenant
	if !sc.s.l.local || t == nil || !t.cfg.Load().limited {
		return
	}
	if sc.dst == nil {
		t.limiter.Charge(int64(n))
		return
	}
	wait := t.limiter.PaceBytes(int64(n))
	if wait <= 0 {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-sc.dst.ctx.Done():
	}
}

// count records a reply the local partition served: its bytes (those copied, already taken
// from the bucket by pace, and unflushed still to go) and the reads it answered.
func (sc *streamCopy) count(unflushed int64) {
	e := &sc.s.e
	t := e.tenant
	if !sc.s.l.local || t == nil {
		return
	}
	t.stats.served.Add(1)
	t.stats.bytesOut.Add(uint64(sc.total + unflushed))
	switch {
	case e.access == accessRead && sc.s.l.replies != nil:
		if len(sc.values) == 1 {
			v := sc.values[0]
			if v.len == wholeReply {
				v.len = sc.total + unflushed
			}
			t.recordRead(e.keyHash, v.hit, int(e.keyLen), int(v.len))
		}
	case e.access == accessRead:
		sc.recordKeys([]uint64{e.keyHash})
	case e.access == accessReadMulti && sc.s.l.replies != nil:
		if len(sc.values) == len(e.more.keyHashes) {
			for i, v := range sc.values {
				t.recordRead(e.more.keyHashes[i], v.hit, int(e.more.keyLens[i]), int(v.len))
			}
		}
	case e.access == accessReadMulti:
		sc.recordKeys(e.more.keyHashes)
	}
}

// recordKeys counts a memcached retrieval of the keys hashed hashes: memcached answers the
// keys it has, in request order, so each key is a hit when the next value is its own.
func (sc *streamCopy) recordKeys(hashes []uint64) {
	t := sc.s.e.tenant
	next := 0
	for _, h := range hashes {
		if next < len(sc.values) && sc.values[next].keyHash == h {
			v := sc.values[next]
			t.recordRead(h, true, v.keyLen, int(v.len))
			next++
			continue
		}
		t.recordRead(h, false, 0, 0)
	}
}
