package memcache

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"math"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// NoopSentinel is the meta no-op the proxy forwards right after a request that may get no
// response (Request.MayOmitResponse): the engine's "MN" then ends the response, so the proxy
// reads exactly one response per request either way.
const NoopSentinel = "mn\r\n"

// MaxKeyLen is memcached's key length limit.
const MaxKeyLen = 250

// maxOpaqueLen is memcached's limit on a meta opaque value: 32 bytes counting the O itself.
const maxOpaqueLen = 31

// RequestLimits bounds what a RequestReader accepts. Zero fields take the defaults.
type RequestLimits struct {
	// MaxLineLen is the longest command line, which bounds the keys of one get (default 64 KiB).
	MaxLineLen int
	// MaxValueLen is the largest data block of a storage command (default 1 MiB, memcached's
	// default item size limit -I). Larger blocks are read and discarded, and the request is
	// answered "SERVER_ERROR object too large for cache", as memcached does.
	MaxValueLen int
	// RetainBytes is the buffer capacity kept between requests (default 64 KiB).
	RetainBytes int
}

// Default request limits.
const (
	DefaultMaxLineLen   = 64 << 10
	DefaultMaxValueLen  = 1 << 20
	DefaultRetainBytes  = 64 << 10
	defaultMaxRespValue = 1 << 30
)

func (l RequestLimits) withDefaults() RequestLimits {
	l.MaxLineLen = protocol.OrDefault(l.MaxLineLen, DefaultMaxLineLen)
	l.MaxValueLen = protocol.OrDefault(l.MaxValueLen, DefaultMaxValueLen)
	l.RetainBytes = protocol.OrDefault(l.RetainBytes, DefaultRetainBytes)
	return l
}

// Request is one parsed request. Its slices point into the RequestReader's buffers and stay
// valid only until the next ReadRequest or Reset.
type Request struct {
	Command Command
	// Keys are the keys to route by: one or more for get/gets/gat/gats, one for other keyed
	// commands, none for the rest. Keys of meta commands with the b flag are base64-decoded.
	Keys [][]byte
	// ClientFlags, Exptime and CasUnique are the storage command fields; Exptime is also set for
	// touch, gat and gats.
	ClientFlags uint32
	Exptime     int64
	CasUnique   uint64
	// Delta is the incr/decr amount.
	Delta uint64
	// NoReply is the classic "noreply" option.
	NoReply bool
	// Data is the data block of storage commands and ms, without its CRLF.
	Data []byte
	// Quiet is the meta q flag, Base64Key the meta b flag, Opaque the meta O token (nil when
	// absent), MetaFlags every meta flag token as sent.
	Quiet     bool
	Base64Key bool
	Opaque    []byte
	MetaFlags [][]byte
	// Args are the tokens after the name of commands without keys (verbosity, flush_all, stats).
	Args [][]byte

	raw []byte
}

// Key returns the first key, or nil.
func (q *Request) Key() []byte {
	if len(q.Keys) == 0 {
		return nil
	}
	return q.Keys[0]
}

// Raw returns the exact bytes of the request, data block included.
func (q *Request) Raw() []byte { return q.raw }

// MayOmitResponse reports whether the engine may send nothing back (noreply, meta q): such a
// request must be forwarded followed by NoopSentinel.
func (q *Request) MayOmitResponse() bool { return q.NoReply || q.Quiet }

// Expect returns what to read for this request's response; it holds no references into the
// reader's buffers, so the proxy can queue it while it reads further requests.
func (q *Request) Expect() Expect {
	return Expect{Command: q.Command, Sentinel: q.MayOmitResponse()}
}

// AppendForward appends the bytes to send to the engine: Raw, then NoopSentinel when the
// response may be omitted.
func (q *Request) AppendForward(dst []byte) []byte {
	dst = append(dst, q.raw...)
	if q.MayOmitResponse() {
		dst = append(dst, NoopSentinel...)
	}
	return dst
}

// span is a token's position in the reader's raw buffer; slices are made only once all reads
// are done, because reading a data block may move the buffer.
type span struct{ start, end int }

// RequestReader reads requests from a client connection. Not safe for concurrent use.
type RequestReader struct {
	br  *bufio.Reader
	lim RequestLimits

	raw     []byte
	tokens  []span
	keys    []span
	rest    []span // meta flag tokens, or the arguments of other commands
	opaque  span
	decoded []byte // the base64-decoded key
	data    span
	slices  [][]byte // backing store for Keys, MetaFlags and Args
	req     Request
	// scannedLine is the length of the command line at the head of br whose tokens
	// Completeness left in tokens, and scannedCmd its command (0: unknown), for ReadRequest to
	// reuse (scannedLine 0: none).
	scannedLine int
	scannedCmd  Command
}

// NewRequestReader returns a reader of requests from br under lim (zero fields: defaults).
func NewRequestReader(br *bufio.Reader, lim RequestLimits) *RequestReader {
	return &RequestReader{br: br, lim: lim.withDefaults()}
}

// SetLimits replaces the limits for the requests read from now on (a server lowers them before
// its client authenticates).
func (r *RequestReader) SetLimits(lim RequestLimits) { r.lim = lim.withDefaults() }

// Reset makes the reader read from br, keeping its buffers.
func (r *RequestReader) Reset(br *bufio.Reader) {
	r.br = br
	r.scannedLine = 0
	r.release()
}

// Buffered returns how many bytes are already buffered (zero: no pipelined request waits).
func (r *RequestReader) Buffered() int { return r.br.Buffered() }

// ReadRequest reads the next request. It returns io.EOF when the stream ends between requests,
// io.ErrUnexpectedEOF inside one, and a *ProtocolError for a bad request: reply with its
// AppendReply, then go on reading unless it is Fatal.
func (r *RequestReader) ReadRequest() (*Request, error) {
	r.release()
	scanned := r.scannedLine
	r.scannedLine = 0
	r.raw, r.keys, r.rest = r.raw[:0], r.keys[:0], r.rest[:0]
	r.opaque, r.data, r.decoded = span{}, span{}, r.decoded[:0]
	r.req = Request{}

	var err error
	r.raw, err = protocol.AppendLine(r.br, r.raw, r.lim.MaxLineLen)
	switch {
	case errors.Is(err, protocol.ErrLineTooLong):
		return nil, errLineTooLong
	case err != nil:
		return nil, err
	}
	cmd, ok := r.scannedCmd, r.scannedCmd != 0
	if scanned != len(r.raw) || len(r.tokens) == 0 { // release may have dropped the tokens
		r.tokens = appendTokens(r.tokens[:0], protocol.TrimEOL(r.raw), 0)
		if len(r.tokens) == 0 {
			return nil, errUnknownCommand
		}
		cmd, ok = commandsByName[string(r.token(0))]
	}
	if !ok {
		return nil, errUnknownCommand
	}
	r.req.Command = cmd
	if err := r.parse(cmd); err != nil {
		return nil, err
	}
	r.finish()
	return &r.req, nil
}

// Completeness tells whether ReadRequest can read the next request from buffered bytes only:
// its command line and, for a storage command (set... cas, ms), its data block, which
// ReadRequest reads even to refuse the request. A line that does not end within the line
// limit is Undecided. The next ReadRequest reuses the line's tokens, so nothing else may read
// from the reader's bufio.Reader in between.
func (r *RequestReader) Completeness() protocol.Completeness {
	if r.br.Buffered() == 0 {
		return protocol.Incomplete
	}
	buf, _ := r.br.Peek(r.br.Buffered())
	eol, framing := protocol.BufferedLineEnd(buf, r.lim.MaxLineLen)
	if framing != protocol.Complete {
		return framing
	}
	tokens := appendTokens(r.tokens[:0], protocol.TrimEOL(buf[:eol+1]), 0)
	r.tokens, r.scannedLine = tokens, eol+1
	if len(tokens) == 0 {
		return protocol.Complete
	}
	token := func(i int) []byte { return buf[tokens[i].start:tokens[i].end] }
	cmd, ok := commandsByName[string(token(0))]
	r.scannedCmd = cmd
	sizeToken := 0
	switch {
	case !ok:
		return protocol.Complete
	case cmd == CmdMetaSet && len(tokens) >= 3:
		sizeToken = 2
	case cmd == CmdCas && (len(tokens) == 6 || len(tokens) == 7),
		cmd.IsStorage() && cmd != CmdCas && (len(tokens) == 5 || len(tokens) == 6):
		sizeToken = 4
	default: // no data block, or refused from the line (as parseStorage and parseMeta do)
		return protocol.Complete
	}
	size, err := dataLen(token(sizeToken))
	switch {
	case err != nil:
		return protocol.Complete
	case int64(eol+1)+size+2 > int64(len(buf)):
		return protocol.Incomplete
	}
	return protocol.Complete
}

func (r *RequestReader) parse(cmd Command) error {
	switch {
	case cmd.IsRetrieval():
		return r.parseRetrieval(cmd)
	case cmd.IsStorage():
		return r.parseStorage(cmd)
	case cmd == CmdDelete:
		return r.parseDelete()
	case cmd == CmdIncr || cmd == CmdDecr:
		return r.parseKeyAndNumber(func(tok []byte) error {
			delta, ok := protocol.ParseUint(tok)
			if !ok {
				return errBadDelta
			}
			r.req.Delta = delta
			return nil
		})
	case cmd == CmdTouch:
		return r.parseKeyAndNumber(func(tok []byte) error {
			exptime, ok := protocol.ParseInt(tok)
			if !ok {
				return errBadExptime
			}
			r.req.Exptime = exptime
			return nil
		})
	case cmd == CmdMetaNoop:
		return nil
	case cmd.IsMeta():
		return r.parseMeta(cmd)
	case cmd == CmdVersion || cmd == CmdQuit:
		return nil // memcached ignores anything after these
	default:
		// Administrative commands: keep their arguments; a trailing noreply counts.
		r.req.NoReply = len(r.tokens) > 1 && string(r.token(len(r.tokens)-1)) == "noreply"
		r.rest = append(r.rest, r.tokens[1:]...)
		return nil
	}
}

// parseRetrieval: get|gets <key>+, gat|gats <exptime> <key>+.
func (r *RequestReader) parseRetrieval(cmd Command) error {
	first := 1
	if cmd == CmdGat || cmd == CmdGats {
		first = 2
	}
	if len(r.tokens) <= first {
		return errUnknownCommand
	}
	if first == 2 {
		exptime, ok := protocol.ParseInt(r.token(1))
		if !ok {
			return errBadExptime
		}
		r.req.Exptime = exptime
	}
	for _, tok := range r.tokens[first:] {
		if !validKey(r.raw[tok.start:tok.end]) {
			return errBadFormat
		}
	}
	r.keys = append(r.keys, r.tokens[first:]...)
	return nil
}

// parseStorage: <cmd> <key> <flags> <exptime> <bytes> [<cas unique>] [noreply], then the data.
func (r *RequestReader) parseStorage(cmd Command) error {
	fields := 5 // the name, key, flags, exptime and bytes
	if cmd == CmdCas {
		fields = 6
	}
	if len(r.tokens) != fields && len(r.tokens) != fields+1 {
		return errUnknownCommand
	}
	size, err := dataLen(r.token(4))
	if err != nil {
		return err
	}
	// From here the data block's length is known: on any error it is discarded, so its bytes
	// are never read as a command. (memcached reads them as one; the proxy is stricter.)
	fail := func(err *ProtocolError) error { return r.swallow(size, err) }
	flags, ok := protocol.ParseUint(r.token(2))
	if !ok || flags > math.MaxUint32 {
		return fail(errBadFormat)
	}
	exptime, ok := protocol.ParseInt(r.token(3))
	if !ok {
		return fail(errBadFormat)
	}
	if cmd == CmdCas {
		if r.req.CasUnique, ok = protocol.ParseUint(r.token(5)); !ok {
			return fail(errBadFormat)
		}
	}
	if len(r.tokens) == fields+1 {
		if string(r.token(fields)) != "noreply" {
			return fail(errBadFormat)
		}
		r.req.NoReply = true
	}
	if !validKey(r.token(1)) {
		return fail(errBadFormat)
	}
	r.req.ClientFlags, r.req.Exptime = uint32(flags), exptime
	r.keys = append(r.keys, r.tokens[1])
	return r.readData(size)
}

// parseDelete: delete <key> [0] [noreply] (the 0 is a legacy hold time memcached still accepts).
func (r *RequestReader) parseDelete() error {
	n := len(r.tokens)
	if n < 2 {
		return errUnknownCommand
	}
	if n > 4 {
		return errBadDelete
	}
	holdZero := n >= 3 && string(r.token(2)) == "0"
	noreply := string(r.token(n-1)) == "noreply"
	if valid := n == 2 || n == 3 && (holdZero || noreply) || n == 4 && holdZero && noreply; !valid {
		return errBadDelete
	}
	if !validKey(r.token(1)) {
		return errBadFormat
	}
	r.req.NoReply = n > 2 && noreply
	r.keys = append(r.keys, r.tokens[1])
	return nil
}

// parseKeyAndNumber: incr|decr|touch <key> <number> [noreply].
func (r *RequestReader) parseKeyAndNumber(number func([]byte) error) error {
	n := len(r.tokens)
	if n != 3 && n != 4 {
		return errUnknownCommand
	}
	if !validKey(r.token(1)) {
		return errBadFormat
	}
	if err := number(r.token(2)); err != nil {
		return err
	}
	if n == 4 {
		if string(r.token(3)) != "noreply" {
			return errBadFormat
		}
		r.req.NoReply = true
	}
	r.keys = append(r.keys, r.tokens[1])
	return nil
}

// parseMeta: mg|md|ma|me <key> <flag>*, ms <key> <datalen> <flag>* then the data.
func (r *RequestReader) parseMeta(cmd Command) error {
	if len(r.tokens) < 2 {
		return errUnknownCommand
	}
	firstFlag := 2
	size := int64(-1)
	if cmd == CmdMetaSet {
		firstFlag = 3
		if len(r.tokens) < 3 {
			return errBadFormat
		}
		var err error
		if size, err = dataLen(r.token(2)); err != nil {
			return err
		}
	}
	fail := func(err *ProtocolError) error {
		if size >= 0 {
			return r.swallow(size, err)
		}
		return err
	}
	if r.tokens[1].end-r.tokens[1].start > MaxKeyLen {
		return fail(errBadFormat)
	}
	if err := r.parseMetaFlags(r.tokens[firstFlag:]); err != nil {
		return fail(err)
	}
	key := r.token(1)
	if r.req.Base64Key {
		decoded, err := base64.StdEncoding.AppendDecode(r.decoded[:0], key)
		if err != nil || len(decoded) == 0 {
			return fail(errBadBase64Key)
		}
		r.decoded = decoded
	} else if !validKey(key) {
		return fail(errBadFormat)
	}
	r.keys = append(r.keys, r.tokens[1])
	if size >= 0 {
		return r.readData(size)
	}
	return nil
}

// parseMetaFlags checks the flag tokens (a letter, then an optional argument; no flag twice)
// and notes the flags that change framing or routing: q, b and O.
func (r *RequestReader) parseMetaFlags(tokens []span) *ProtocolError {
	var seen uint64
	for _, tok := range tokens {
		c := r.raw[tok.start]
		var bit uint64
		switch {
		case 'a' <= c && c <= 'z':
			bit = 1 << (c - 'a')
		case 'A' <= c && c <= 'Z':
			bit = 1 << (26 + c - 'A')
		default:
			return errInvalidFlag
		}
		if seen&bit != 0 {
			return errDuplicateFlag
		}
		seen |= bit
		switch c {
		case 'q':
			r.req.Quiet = true
		case 'b':
			r.req.Base64Key = true
		case 'O':
			if tok.end-tok.start-1 > maxOpaqueLen {
				return errOpaqueTooLong
			}
			r.opaque = span{tok.start + 1, tok.end}
		}
	}
	r.rest = append(r.rest, tokens...)
	return nil
}

// readData reads a data block of size bytes and its CRLF.
func (r *RequestReader) readData(size int64) error {
	if size > int64(r.lim.MaxValueLen) {
		return r.swallow(size, errTooLarge)
	}
	start := len(r.raw)
	var err error
	if r.raw, err = protocol.AppendFull(r.br, r.raw, int(size)+2); err != nil {
		return err
	}
	end := start + int(size)
	if r.raw[end] != '\r' || r.raw[end+1] != '\n' {
		return errBadDataChunk // the block and the two bytes after it are consumed, as memcached does
	}
	r.data = span{start, end}
	return nil
}

// maxDataLen is the largest data block length memcached parses (a C int, less the CRLF); a
// larger declaration is nonsense, and since its block cannot be skipped the connection must close.
const maxDataLen = math.MaxInt32 - 2

var errDataLenOutOfRange = &ProtocolError{Kind: KindClientError, Msg: "bad command line format", Fatal: true}

// dataLen parses a data block length token.
func dataLen(tok []byte) (int64, error) {
	size, ok := protocol.ParseInt(tok)
	switch {
	case !ok && protocol.IsDigits(tok), ok && size > maxDataLen:
		return 0, errDataLenOutOfRange
	case !ok || size < 0:
		return 0, errBadFormat
	}
	return size, nil
}

// swallow discards a refused request's data block (and its CRLF) without buffering it, and
// returns err, or the read error that prevented discarding.
func (r *RequestReader) swallow(size int64, err *ProtocolError) error {
	if derr := protocol.Discard(r.br, int(size)+2); derr != nil {
		return derr
	}
	return err
}

// finish builds the request's slices once no more reads can move the raw buffer.
func (r *RequestReader) finish() {
	r.slices = r.slices[:0]
	for _, k := range r.keys {
		if r.req.Base64Key {
			r.slices = append(r.slices, r.decoded)
		} else {
			r.slices = append(r.slices, r.slice(k))
		}
	}
	nKeys := len(r.slices)
	for _, f := range r.rest {
		r.slices = append(r.slices, r.slice(f))
	}
	r.req.Keys = r.slices[:nKeys:nKeys]
	if rest := r.slices[nKeys:]; len(rest) == 0 {
		// neither flags nor arguments
	} else if r.req.Command.IsMeta() {
		r.req.MetaFlags = rest
	} else {
		r.req.Args = rest
	}
	if r.opaque.end > 0 {
		r.req.Opaque = r.slice(r.opaque)
	}
	if r.req.Command.IsStorage() || r.req.Command == CmdMetaSet {
		r.req.Data = r.slice(r.data)
	}
	r.req.raw = r.raw
}

func (r *RequestReader) slice(s span) []byte { return r.raw[s.start:s.end:s.end] }

func (r *RequestReader) token(i int) []byte { return r.slice(r.tokens[i]) }

// appendTokens splits line on spaces, as memcached does (tabs are not separators, runs of
// spaces separate once), and appends each token's position, offset by start, to dst.
func appendTokens(dst []span, line []byte, start int) []span {
	for i := 0; i < len(line); {
		if line[i] == ' ' {
			i++
			continue
		}
		end := bytes.IndexByte(line[i:], ' ')
		if end < 0 {
			end = len(line)
		} else {
			end += i
		}
		dst = append(dst, span{start + i, start + end})
		i = end
	}
	return dst
}

// validKey: 1 to 250 bytes, no control characters or spaces (bytes above 0x7f are allowed).
func validKey(key []byte) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for _, c := range key {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func (r *RequestReader) release() {
	if cap(r.raw) > r.lim.RetainBytes {
		r.raw = nil
	}
	if cap(r.tokens) > r.lim.RetainBytes/16 {
		r.tokens, r.keys, r.rest, r.slices = nil, nil, nil, nil
	}
	r.req = Request{}
}
