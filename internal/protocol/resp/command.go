package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Command is one client command. Its slices point into the CommandReader's buffers and stay valid
// only until the next ReadCommand or Reset on that reader: copy what must outlive that.
type Command struct {
	// Args holds the arguments as sent, Args[0] being the command name (any letter case).
	// Inline commands have their quotes and escapes already resolved.
	Args [][]byte

	raw    []byte
	inline bool
}

// Raw returns the exact bytes the client sent for this command, terminator included, to forward
// unchanged.
func (c *Command) Raw() []byte { return c.raw }

// Inline reports whether the command came as an inline (telnet-style) line rather than a RESP
// array. Redis engines accept inline commands, so Raw can be forwarded either way.
func (c *Command) Inline() bool { return c.inline }

// CommandReader reads client commands from a buffered stream. It is not safe for concurrent use;
// use one per connection.
type CommandReader struct {
	br  *bufio.Reader
	lim Limits

	raw    []byte // bytes of the current command as received
	text   []byte // resolved inline arguments (inline commands only)
	bounds []int  // start,end offsets of each argument in raw or text
	args   [][]byte
	cmd    Command
	// scannedEnd is the length of the multibulk command at the head of br that Completeness
	// found whole, its arguments' offsets left in bounds, for ReadCommand to reuse (0: none).
	scannedEnd int
}

// NewCommandReader returns a reader of commands from br under lim (zero fields: defaults).
func NewCommandReader(br *bufio.Reader, lim Limits) *CommandReader {
	return &CommandReader{br: br, lim: lim.withDefaults()}
}

// SetLimits replaces the limits for the commands read from now on (a server lowers them before
// its client authenticates, as redis does).
func (r *CommandReader) SetLimits(lim Limits) { r.lim = lim.withDefaults() }

// Reset makes the reader read from br, keeping its buffers, so readers can be pooled.
func (r *CommandReader) Reset(br *bufio.Reader) {
	r.br = br
	r.scannedEnd = 0
	r.release()
}

// Buffered returns how many bytes are already buffered: when it is zero after a command, no
// pipelined command is waiting and the proxy should flush what it has forwarded.
func (r *CommandReader) Buffered() int { return r.br.Buffered() }

// ReadCommand reads the next command. Empty commands ("*0\r\n", blank lines) are skipped without
// a reply, as redis does. It returns io.EOF when the stream ends between commands,
// io.ErrUnexpectedEOF when it ends inside one, a *ProtocolError for malformed input (the
// connection must then be closed), or the underlying read error.
func (r *CommandReader) ReadCommand() (*Command, error) {
	scanned := r.scannedEnd
	r.scannedEnd = 0
	r.release()
	if len(r.bounds) == 0 { // release dropped them
		scanned = 0
	}
	for ; ; scanned = 0 {
		first, err := r.br.Peek(1)
		if err != nil {
			return nil, err
		}
		r.raw, r.text = r.raw[:0], r.text[:0]
		if scanned == 0 {
			r.bounds = r.bounds[:0]
		}
		inline := first[0] != '*'
		switch {
		case inline:
			err = r.readInline()
		case r.parseBuffered(scanned):
		default:
			err = r.readMultibulk()
		}
		if err != nil {
			return nil, err
		}
		if len(r.bounds) == 0 {
			continue
		}
		src := r.raw
		if inline {
			src = r.text
		}
		r.args = r.args[:0]
		for i := 0; i < len(r.bounds); i += 2 {
			r.args = append(r.args, src[r.bounds[i]:r.bounds[i+1]:r.bounds[i+1]])
		}
		r.cmd = Command{Args: r.args, raw: r.raw, inline: inline}
		return &r.cmd, nil
	}
}

// release drops buffers that one large command grew beyond the retention limit.
func (r *CommandReader) release() {
	if cap(r.raw) > r.lim.RetainBytes {
		r.raw = nil
	}
	if cap(r.text) > r.lim.RetainBytes {
		r.text = nil
	}
	if cap(r.bounds) > r.lim.RetainBytes/8 {
		r.bounds = nil
		r.args = nil
	}
	r.cmd = Command{}
}

// parseBuffered is the pipelined fast path: when a complete, well-formed RESP command already
// sits in the bufio buffer, it is checked in one pass and copied with one copy. Anything else
// (incomplete, malformed, empty, over a limit) returns false without consuming input, and
// readMultibulk handles it, producing the precise error when there is one.
// scanned is where the command ends when Completeness found it whole (its bounds are in
// r.bounds), else 0.
func (r *CommandReader) parseBuffered(scanned int) bool {
	buf, _ := r.br.Peek(r.br.Buffered())
	end := scanned
	if end == 0 {
		bounds, scanEnd, framing := r.scanBuffered(buf, r.bounds[:0])
		if framing != protocol.Complete {
			return false
		}
		r.bounds, end = bounds, scanEnd
	}
	r.raw = append(r.raw[:0], buf[:end]...)
	_, _ = r.br.Discard(end) // cannot fail: the bytes are buffered
	return true
}

// Completeness tells whether ReadCommand can read the next command from buffered bytes only. An
// inline command is complete with its line; a multibulk one when the fast path takes it whole.
// Empty commands, which ReadCommand skips to read the next, and malformed ones are Undecided.
// The next ReadCommand reuses the scan of a whole multibulk command, so nothing else may read
// from the reader's bufio.Reader in between.
func (r *CommandReader) Completeness() protocol.Completeness {
	if r.br.Buffered() == 0 {
		return protocol.Incomplete
	}
	buf, _ := r.br.Peek(r.br.Buffered())
	if buf[0] != '*' {
		eol, framing := protocol.BufferedLineEnd(buf, r.lim.MaxLineLen)
		if framing != protocol.Complete {
			return framing
		}
		for _, c := range buf[:eol] {
			if !isSpace(c) {
				return protocol.Complete
			}
		}
		return protocol.Undecided
	}
	bounds, end, framing := r.scanBuffered(buf, r.bounds[:0])
	if framing == protocol.Complete {
		r.bounds, r.scannedEnd = bounds, end
	}
	return framing
}

// scanBuffered checks the multibulk command at the start of buf against the limits, appending
// its arguments' offsets to bounds, and returns where it ends: Complete when it
// is whole and well-formed with at least one argument, Incomplete when well-formed so far,
// Undecided otherwise.
func (r *CommandReader) scanBuffered(buf []byte, bounds []int) ([]int, int, protocol.Completeness) {
	count, pos, framing := r.bufferedHeader(buf, 0, '*')
	if framing != protocol.Complete {
		return bounds, 0, framing
	}
	if count <= 0 || count > r.lim.MaxArgs {
		return bounds, 0, protocol.Undecided
	}
	for range count {
		size, start, framing := r.bufferedHeader(buf, pos, '$')
		switch {
		case framing != protocol.Complete:
			return bounds, 0, framing
		case size < 0 || size > r.lim.MaxBulkLen || start+size+2 > r.lim.MaxCommandLen:
			return bounds, 0, protocol.Undecided
		case size > len(buf)-start-2:
			return bounds, 0, protocol.Incomplete
		}
		end := start + size
		if buf[end] != '\r' || buf[end+1] != '\n' {
			return bounds, 0, protocol.Undecided
		}
		bounds = append(bounds, start, end)
		pos = end + 2
	}
	return bounds, pos, protocol.Complete
}

// bufferedHeader parses a "<want><integer>\r\n" line at buf[pos:] and returns the integer and the
// position after the line; Incomplete when buf ends before the line does.
func (r *CommandReader) bufferedHeader(buf []byte, pos int, want byte) (int, int, protocol.Completeness) {
	if pos >= len(buf) {
		return 0, 0, protocol.Incomplete
	}
	if buf[pos] != want {
		return 0, 0, protocol.Undecided
	}
	eol := bytes.IndexByte(buf[pos:], '\n')
	switch {
	case eol < 0 && len(buf)-pos < r.lim.MaxLineLen:
		return 0, 0, protocol.Incomplete
	case eol < 2 || eol >= r.lim.MaxLineLen || buf[pos+eol-1] != '\r':
		return 0, 0, protocol.Undecided
	}
	n, ok := protocol.ParseInt(buf[pos+1 : pos+eol-1])
	if !ok || n > math.MaxInt32 {
		return 0, 0, protocol.Undecided
	}
	return int(n), pos + eol + 1, protocol.Complete
}

func (r *CommandReader) readMultibulk() error {
	var err error
	r.raw, err = protocol.AppendLine(r.br, r.raw, r.lim.MaxLineLen)
	if err != nil {
		return lineError(err, "too big mbulk count string")
	}
	count, ok := protocol.TrimCRLF(r.raw[1:])
	n, isInt := protocol.ParseInt(count)
	if !ok || !isInt || n > int64(r.lim.MaxArgs) {
		return &ProtocolError{Msg: "invalid multibulk length"}
	}
	for i := int64(0); i < n; i++ { // n <= 0 leaves an empty command, which is skipped
		if err := r.readBulkArg(); err != nil {
			return err
		}
	}
	return nil
}

func (r *CommandReader) readBulkArg() error {
	header := len(r.raw)
	var err error
	r.raw, err = protocol.AppendLine(r.br, r.raw, r.lim.MaxLineLen)
	if err != nil {
		return lineError(err, "too big bulk count string")
	}
	if c := r.raw[header]; c != '$' {
		return protocolErrorf("expected '$', got %s", describeByte(c))
	}
	digits, ok := protocol.TrimCRLF(r.raw[header+1:])
	size, isInt := protocol.ParseInt(digits)
	if !ok || !isInt || size < 0 || size > int64(r.lim.MaxBulkLen) {
		return &ProtocolError{Msg: "invalid bulk length"}
	}
	if int64(len(r.raw))+size+2 > int64(r.lim.MaxCommandLen) {
		return protocolErrorf("command larger than %d bytes", r.lim.MaxCommandLen)
	}
	start := len(r.raw)
	r.raw, err = protocol.AppendFull(r.br, r.raw, int(size)+2)
	if err != nil {
		return err
	}
	end := start + int(size)
	if r.raw[end] != '\r' || r.raw[end+1] != '\n' {
		return &ProtocolError{Msg: "bulk string not terminated by CRLF"}
	}
	r.bounds = append(r.bounds, start, end)
	return nil
}

func (r *CommandReader) readInline() error {
	var err error
	r.raw, err = protocol.AppendLine(r.br, r.raw, r.lim.MaxLineLen)
	if err != nil {
		return lineError(err, "too big inline request")
	}
	r.text, r.bounds, err = splitInline(protocol.TrimEOL(r.raw), r.text, r.bounds, r.lim.MaxArgs)
	return err
}

// lineError maps an AppendLine failure inside a command: too long becomes the given protocol
// error, the end of the stream is unexpected (the command has begun), read errors pass through.
func lineError(err error, tooLong string) error {
	switch {
	case errors.Is(err, protocol.ErrLineTooLong):
		return &ProtocolError{Msg: tooLong}
	case errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	default:
		return err
	}
}

var errUnbalancedQuotes = &ProtocolError{Msg: "unbalanced quotes in request"}

// splitInline splits an inline command line into arguments the way redis does (sdssplitargs):
// arguments are separated by whitespace; "double quotes" allow \n \r \t \b \a \xHH and \<c>
// escapes; 'single quotes' allow \'; a closing quote must be followed by whitespace or the end.
// Resolved argument bytes are appended to text and their offsets to bounds.
func splitInline(line, text []byte, bounds []int, maxArgs int) ([]byte, []int, error) {
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return text, bounds, nil
		}
		if len(bounds)/2 >= maxArgs {
			return text, bounds, &ProtocolError{Msg: "too many arguments in inline request"}
		}
		start := len(text)
		var err error
		text, i, err = inlineArg(line, i, text)
		if err != nil {
			return text, bounds, err
		}
		bounds = append(bounds, start, len(text))
	}
}

// inlineArg resolves the argument starting at line[i], appending it to text; it returns the index
// just past the argument.
func inlineArg(line []byte, i int, text []byte) ([]byte, int, error) {
	var quote byte
	for {
		if i == len(line) {
			if quote != 0 {
				return text, i, errUnbalancedQuotes
			}
			return text, i, nil
		}
		c := line[i]
		switch {
		case quote == 0 && isSpace(c):
			return text, i, nil
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
			i++
		case quote == c:
			i++
			if i < len(line) && !isSpace(line[i]) {
				return text, i, errUnbalancedQuotes
			}
			return text, i, nil
		case quote == '"' && c == '\\' && i+3 < len(line) && line[i+1] == 'x' &&
			isHex(line[i+2]) && isHex(line[i+3]):
			text = append(text, unhex(line[i+2])<<4|unhex(line[i+3]))
			i += 4
		case quote == '"' && c == '\\' && i+1 < len(line):
			text = append(text, unescape(line[i+1]))
			i += 2
		case quote == '\'' && c == '\\' && i+1 < len(line) && line[i+1] == '\'':
			text = append(text, '\'')
			i += 2
		default:
			text = append(text, c)
			i++
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	default:
		return c
	}
}
