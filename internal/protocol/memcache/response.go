package memcache

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Expect says how to frame the response to one forwarded request.
type Expect struct {
	Command Command
	// Sentinel: NoopSentinel was forwarded right after the request, so the response ends with
	// the engine's "MN" (and may consist of nothing else).
	Sentinel bool
}

// Status is the kind of a response.
type Status uint8

// Response statuses.
const (
	// StatusEnd: a retrieval's VALUE blocks (possibly none) and END.
	StatusEnd Status = iota + 1
	StatusStored
	StatusNotStored
	StatusExists
	StatusNotFound
	StatusDeleted
	StatusTouched
	// StatusNumber: incr/decr's new value, in Number.
	StatusNumber
	// StatusVersion: "VERSION <version>", the version in Text.
	StatusVersion
	StatusOK
	// StatusStats: "STAT <name> <value>" lines and END, in Stats.
	StatusStats
	// Meta return codes.
	StatusHD
	StatusVA
	StatusEN
	StatusNF
	StatusNS
	StatusEX
	StatusMN
	StatusME
	// StatusError: "ERROR"; StatusClientError and StatusServerError carry their message in Text.
	StatusError
	StatusClientError
	StatusServerError
	// StatusSuppressed: a noreply or quiet request that got no response, only the sentinel's MN;
	// nothing goes back to the client.
	StatusSuppressed
)

var statusNames = [...]string{
	StatusEnd: "END", StatusStored: "STORED", StatusNotStored: "NOT_STORED", StatusExists: "EXISTS",
	StatusNotFound: "NOT_FOUND", StatusDeleted: "DELETED", StatusTouched: "TOUCHED",
	StatusNumber: "NUMBER", StatusVersion: "VERSION", StatusOK: "OK", StatusStats: "STATS",
	StatusHD: "HD", StatusVA: "VA", StatusEN: "EN", StatusNF: "NF", StatusNS: "NS", StatusEX: "EX",
	StatusMN: "MN", StatusME: "ME", StatusError: "ERROR", StatusClientError: "CLIENT_ERROR",
	StatusServerError: "SERVER_ERROR", StatusSuppressed: "SUPPRESSED",
}

func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Value is one item of a retrieval response.
type Value struct {
	Key    []byte
	Flags  uint32
	Cas    uint64
	HasCas bool
	Data   []byte
	// Raw is the item's VALUE line and data block, CRLFs included.
	Raw []byte
}

// Stat is one "STAT <name> <value>" line.
type Stat struct{ Name, Value []byte }

// Response is one response. Its slices point into the ResponseReader's buffers and stay valid
// only until the next ReadResponse or Reset.
type Response struct {
	Status Status
	// Values are a retrieval's items.
	Values []Value
	// Number is incr/decr's result.
	Number uint64
	// Data is the data block of a meta VA response.
	Data []byte
	// MetaFlags are a meta response's flag tokens ("Oopaque", "t30", "kkey").
	MetaFlags [][]byte
	// Text is an error's message, VERSION's version, or ME's key and item details.
	Text  []byte
	Stats []Stat

	raw    []byte
	blocks int // retrievals: length of the VALUE blocks before END
}

// Raw returns the exact response bytes to pass to the client (without the sentinel's MN; empty
// for StatusSuppressed).
func (r *Response) Raw() []byte { return r.raw }

// ValueBlocks returns a retrieval's VALUE blocks without the closing END, for concatenating the
// responses of a get split across nodes before one AppendEnd.
func (r *Response) ValueBlocks() []byte { return r.raw[:r.blocks] }

// IsError reports ERROR, CLIENT_ERROR and SERVER_ERROR.
func (r *Response) IsError() bool {
	return r.Status == StatusError || r.Status == StatusClientError || r.Status == StatusServerError
}

// ResponseLimits bounds what a ResponseReader accepts. Zero fields take the defaults.
type ResponseLimits struct {
	// MaxLineLen is the longest response line (default 64 KiB).
	MaxLineLen int
	// MaxValueLen is the largest data block (default 1 GiB, memcached's largest item).
	MaxValueLen int
	// MaxResponseLen is the largest whole response (default 1 GiB).
	MaxResponseLen int
	// RetainBytes is the buffer capacity kept between responses (default 64 KiB).
	RetainBytes int
}

func (l ResponseLimits) withDefaults() ResponseLimits {
	l.MaxLineLen = protocol.OrDefault(l.MaxLineLen, DefaultMaxLineLen)
	l.MaxValueLen = protocol.OrDefault(l.MaxValueLen, defaultMaxRespValue)
	l.MaxResponseLen = protocol.OrDefault(l.MaxResponseLen, defaultMaxRespValue)
	l.RetainBytes = protocol.OrDefault(l.RetainBytes, DefaultRetainBytes)
	return l
}

// valueSpan locates a Value in the raw buffer until the response is complete.
type valueSpan struct {
	key, data, raw span
	flags          uint32
	cas            uint64
	hasCas         bool
}

// ResponseReader reads an engine's (or peer sidecar's) responses. Not safe for concurrent use.
type ResponseReader struct {
	br  *bufio.Reader
	lim ResponseLimits

	raw    []byte
	tokens []span
	values []valueSpan
	flags  []span
	stats  []span // name, value, name, value...
	text   span
	data   span

	valueOut []Value
	flagOut  [][]byte
	statOut  []Stat
	resp     Response
}

// NewResponseReader returns a reader of responses from br under lim (zero fields: defaults).
func NewResponseReader(br *bufio.Reader, lim ResponseLimits) *ResponseReader {
	return &ResponseReader{br: br, lim: lim.withDefaults()}
}

// Reset makes the reader read from br, keeping its buffers.
func (r *ResponseReader) Reset(br *bufio.Reader) {
	r.br = br
	r.Release()
}

// ReadResponse reads exactly one response framed as exp says. It returns io.EOF when the stream
// ends before the response, io.ErrUnexpectedEOF inside it, and a fatal *ProtocolError when the
// bytes are not a valid response to that request (the engine connection is then out of step).
func (r *ResponseReader) ReadResponse(exp Expect) (*Response, error) {
	r.Release()
	r.raw, r.values, r.flags, r.stats = r.raw[:0], r.values[:0], r.flags[:0], r.stats[:0]
	r.text, r.data = span{}, span{}
	r.resp = Response{}

	if !canFrame(exp.Command) {
		return nil, fmt.Errorf("memcache: no response framing for %s requests", exp.Command)
	}
	line, err := r.readLine()
	if err != nil {
		return nil, err
	}
	if exp.Sentinel && string(line) == "MN" {
		r.resp.Status = StatusSuppressed
		r.raw = r.raw[:0]
		return &r.resp, nil
	}
	if err := r.parse(exp.Command, line); err != nil {
		return nil, err
	}
	if exp.Sentinel {
		end := len(r.raw)
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if string(line) != "MN" {
			return nil, responseErrorf("expected MN after the response to %s, got %q", exp.Command, line)
		}
		r.raw = r.raw[:end]
	}
	r.finish()
	return &r.resp, nil
}

// canFrame reports the commands whose responses the reader knows how to delimit.
func canFrame(c Command) bool {
	switch c {
	case CmdQuit, CmdShutdown, CmdSlabs, CmdLruCrawler, CmdLru, CmdWatch, CmdExtstore:
		return false
	}
	return c > 0 && c < numCommands
}

func responseErrorf(format string, args ...any) *ProtocolError {
	return &ProtocolError{Kind: KindServerError, Msg: "bad response from engine: " + fmt.Sprintf(format, args...), Fatal: true}
}

// readLine appends the next CRLF-terminated line to raw and returns it without the CRLF.
func (r *ResponseReader) readLine() ([]byte, error) {
	start := len(r.raw)
	var err error
	r.raw, err = protocol.AppendLine(r.br, r.raw, r.lim.MaxLineLen)
	switch {
	case errors.Is(err, protocol.ErrLineTooLong):
		return nil, responseErrorf("line longer than %d bytes", r.lim.MaxLineLen)
	case errors.Is(err, io.EOF) && start > 0:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	if len(r.raw) > r.lim.MaxResponseLen {
		return nil, responseErrorf("response larger than %d bytes", r.lim.MaxResponseLen)
	}
	line, ok := protocol.TrimCRLF(r.raw[start:])
	if !ok {
		return nil, responseErrorf("line not terminated by CRLF")
	}
	return line, nil
}

// readBlock appends a data block of size bytes and its CRLF, returning the block's position.
func (r *ResponseReader) readBlock(size int64) (span, error) {
	if size < 0 || size > int64(r.lim.MaxValueLen) {
		return span{}, responseErrorf("data block length %d out of range", size)
	}
	if int64(len(r.raw))+size+2 > int64(r.lim.MaxResponseLen) {
		return span{}, responseErrorf("response larger than %d bytes", r.lim.MaxResponseLen)
	}
	start := len(r.raw)
	var err error
	if r.raw, err = protocol.AppendFull(r.br, r.raw, int(size)+2); err != nil {
		return span{}, err
	}
	end := start + int(size)
	if r.raw[end] != '\r' || r.raw[end+1] != '\n' {
		return span{}, responseErrorf("data block not terminated by CRLF")
	}
	return span{start, end}, nil
}

// lineStart returns where the line just read begins in raw.
func (r *ResponseReader) lineStart(line []byte) int { return len(r.raw) - len(line) - 2 }

func (r *ResponseReader) parse(cmd Command, line []byte) error {
	if r.parseError(line) {
		return nil
	}
	switch {
	case cmd.IsRetrieval():
		return r.parseRetrieval(line)
	case cmd == CmdStats:
		return r.parseStats(line)
	case cmd.IsMeta():
		return r.parseMeta(cmd, line)
	case cmd == CmdIncr || cmd == CmdDecr:
		// The number may be space-padded when it got shorter.
		if n, ok := protocol.ParseUint(bytes.TrimRight(line, " ")); ok {
			r.resp.Status, r.resp.Number = StatusNumber, n
			return nil
		}
	case cmd == CmdVersion:
		if bytes.HasPrefix(line, []byte("VERSION ")) {
			r.resp.Status = StatusVersion
			start := r.lineStart(line) + len("VERSION ")
			r.text = span{start, start + len(line) - len("VERSION ")}
			return nil
		}
	}
	status, ok := classicStatus(line)
	if !ok || !allowedClassic(cmd, status) {
		return responseErrorf("unexpected %q in response to %s", line, cmd)
	}
	r.resp.Status = status
	return nil
}

// parseError recognises the three error lines, which may answer any request.
func (r *ResponseReader) parseError(line []byte) bool {
	status, text, ok := errorLine(line)
	if !ok {
		return false
	}
	r.resp.Status = status
	if text > 0 {
		start := r.lineStart(line)
		r.text = span{start + text, start + len(line)}
	}
	return true
}

// errorLine recognises the three error lines: their status and where their text starts in
// line (0: no text).
func errorLine(line []byte) (status Status, text int, ok bool) {
	for _, e := range []struct {
		prefix string
		status Status
	}{{"CLIENT_ERROR", StatusClientError}, {"SERVER_ERROR", StatusServerError}} {
		if bytes.HasPrefix(line, []byte(e.prefix)) && (len(line) == len(e.prefix) || line[len(e.prefix)] == ' ') {
			if len(line) > len(e.prefix) {
				text = len(e.prefix) + 1
			}
			return e.status, text, true
		}
	}
	if string(line) == "ERROR" {
		return StatusError, 0, true
	}
	return 0, 0, false
}

// EndsRetrieval reports whether a line (without its CRLF) of a retrieval response ends it, as
// the response reader takes it: END, or an error line.
func EndsRetrieval(line []byte) bool {
	_, _, isError := errorLine(line)
	return string(line) == "END" || isError
}

func classicStatus(line []byte) (Status, bool) {
	switch string(line) {
	case "STORED":
		return StatusStored, true
	case "NOT_STORED":
		return StatusNotStored, true
	case "EXISTS":
		return StatusExists, true
	case "NOT_FOUND":
		return StatusNotFound, true
	case "DELETED":
		return StatusDeleted, true
	case "TOUCHED":
		return StatusTouched, true
	case "OK":
		return StatusOK, true
	}
	return 0, false
}

func allowedClassic(cmd Command, s Status) bool {
	switch {
	case cmd.IsStorage():
		return s == StatusStored || s == StatusNotStored || s == StatusExists || s == StatusNotFound
	case cmd == CmdDelete:
		return s == StatusDeleted || s == StatusNotFound
	case cmd == CmdTouch:
		return s == StatusTouched || s == StatusNotFound
	case cmd == CmdIncr || cmd == CmdDecr:
		return s == StatusNotFound
	case cmd == CmdVerbosity || cmd == CmdFlushAll || cmd == CmdCacheMemlimit:
		return s == StatusOK
	}
	return false
}

// parseRetrieval reads VALUE blocks until END.
func (r *ResponseReader) parseRetrieval(line []byte) error {
	for {
		if string(line) == "END" {
			r.resp.Status = StatusEnd
			r.resp.blocks = r.lineStart(line)
			return nil
		}
		if r.parseError(line) {
			return nil
		}
		if err := r.parseValue(line); err != nil {
			return err
		}
		var err error
		if line, err = r.readLine(); err != nil {
			return err
		}
	}
}

// parseValue reads "VALUE <key> <flags> <bytes> [<cas unique>]" and the data block after it.
func (r *ResponseReader) parseValue(line []byte) error {
	start := r.lineStart(line)
	r.tokens = appendTokens(r.tokens[:0], line, 0)
	vl, ok := valueLineOf(line, r.tokens)
	if !ok {
		if len(r.tokens) < 4 || len(r.tokens) > 5 || !bytes.HasPrefix(line, []byte("VALUE ")) {
			return responseErrorf("expected VALUE or END, got %q", line)
		}
		return responseErrorf("bad VALUE line %q", line)
	}
	key := r.tokens[1]
	v := valueSpan{key: span{start + key.start, start + key.end}, flags: vl.Flags, cas: vl.CAS, hasCas: vl.HasCAS}
	var err error
	if v.data, err = r.readBlock(vl.Size); err != nil {
		return err
	}
	v.raw = span{start, len(r.raw)}
	r.values = append(r.values, v)
	return nil
}

// ValueLine is what a retrieval's "VALUE <key> <flags> <bytes> [<cas unique>]" line says.
type ValueLine struct {
	Key    []byte // within the line
	Flags  uint32
	Size   int64
	CAS    uint64
	HasCAS bool
}

// ParseValueLine reads a VALUE line (without its CRLF) as the response reader does: fields
// apart at runs of spaces, flags within 32 bits; ok is false for any other line.
func ParseValueLine(line []byte) (v ValueLine, ok bool) {
	var tokens [5]span
	return valueLineOf(line, appendTokens(tokens[:0], line, 0))
}

// valueLineOf is ParseValueLine of a line split into tokens (positions within line).
func valueLineOf(line []byte, tokens []span) (ValueLine, bool) {
	n := len(tokens)
	if n < 4 || n > 5 || !bytes.HasPrefix(line, []byte("VALUE ")) {
		return ValueLine{}, false
	}
	tok := func(i int) []byte { return line[tokens[i].start:tokens[i].end:tokens[i].end] }
	flags, flagsOK := protocol.ParseUint(tok(2))
	size, sizeOK := protocol.ParseInt(tok(3))
	if !flagsOK || !sizeOK || flags > math.MaxUint32 || size < 0 {
		return ValueLine{}, false
	}
	v := ValueLine{Key: tok(1), Flags: uint32(flags), Size: size}
	if n == 5 {
		if v.CAS, v.HasCAS = protocol.ParseUint(tok(4)); !v.HasCAS {
			return ValueLine{}, false
		}
	}
	return v, true
}

// parseStats reads "STAT <name> <value>" lines until END.
func (r *ResponseReader) parseStats(line []byte) error {
	for string(line) != "END" {
		start := r.lineStart(line)
		name, value, ok := bytes.Cut(line, []byte(" "))
		_, rest, ok2 := bytes.Cut(value, []byte(" "))
		if !ok || !ok2 || string(name) != "STAT" {
			return responseErrorf("expected STAT or END, got %q", line)
		}
		nameStart := start + len("STAT ")
		valueStart := start + len(line) - len(rest)
		r.stats = append(r.stats, span{nameStart, valueStart - 1}, span{valueStart, start + len(line)})
		var err error
		if line, err = r.readLine(); err != nil {
			return err
		}
	}
	r.resp.Status = StatusStats
	return nil
}

// metaCodes maps meta return codes to statuses.
var metaCodes = map[string]Status{
	"HD": StatusHD, "VA": StatusVA, "EN": StatusEN, "NF": StatusNF, "NS": StatusNS,
	"EX": StatusEX, "MN": StatusMN, "ME": StatusME,
}

// metaAllowed lists the return codes each meta command may answer.
var metaAllowed = map[Command][]Status{
	CmdMetaGet:        {StatusVA, StatusHD, StatusEN},
	CmdMetaSet:        {StatusHD, StatusNS, StatusEX, StatusNF},
	CmdMetaDelete:     {StatusHD, StatusNF, StatusEX},
	CmdMetaArithmetic: {StatusHD, StatusVA, StatusNF, StatusNS, StatusEX},
	CmdMetaNoop:       {StatusMN},
	CmdMetaDebug:      {StatusME, StatusEN},
}

// parseMeta reads "<RC> [<datalen>] <flag>*" and, for VA, the data block.
func (r *ResponseReader) parseMeta(cmd Command, line []byte) error {
	start := r.lineStart(line)
	r.tokens = appendTokens(r.tokens[:0], line, start)
	if len(r.tokens) == 0 {
		return responseErrorf("empty line in response to %s", cmd)
	}
	status, ok := metaCodes[string(r.tok(0))]
	allowed := false
	for _, s := range metaAllowed[cmd] {
		allowed = allowed || s == status
	}
	if !ok || !allowed {
		return responseErrorf("unexpected %q in response to %s", line, cmd)
	}
	r.resp.Status = status
	switch status {
	case StatusME:
		// "ME <key> <k>=<v>*": key and details are free text for the client.
		r.text = span{r.tokens[0].end + 1, start + len(line)}
		if r.text.start > r.text.end {
			r.text.start = r.text.end
		}
		return nil
	case StatusVA:
		if len(r.tokens) < 2 {
			return responseErrorf("VA without a length: %q", line)
		}
		size, ok := protocol.ParseInt(r.tok(1))
		if !ok {
			return responseErrorf("bad VA length in %q", line)
		}
		r.flags = append(r.flags, r.tokens[2:]...)
		var err error
		r.data, err = r.readBlock(size)
		return err
	default:
		r.flags = append(r.flags, r.tokens[1:]...)
		return nil
	}
}

func (r *ResponseReader) tok(i int) []byte { return r.slice(r.tokens[i]) }

func (r *ResponseReader) slice(s span) []byte { return r.raw[s.start:s.end:s.end] }

// finish builds the response's slices once no more reads can move the raw buffer.
func (r *ResponseReader) finish() {
	r.valueOut = r.valueOut[:0]
	for _, v := range r.values {
		r.valueOut = append(r.valueOut, Value{
			Key: r.slice(v.key), Flags: v.flags, Cas: v.cas, HasCas: v.hasCas,
			Data: r.slice(v.data), Raw: r.slice(v.raw),
		})
	}
	r.flagOut = r.flagOut[:0]
	for _, f := range r.flags {
		r.flagOut = append(r.flagOut, r.slice(f))
	}
	r.statOut = r.statOut[:0]
	for i := 0; i+1 < len(r.stats); i += 2 {
		r.statOut = append(r.statOut, Stat{Name: r.slice(r.stats[i]), Value: r.slice(r.stats[i+1])})
	}
	if len(r.valueOut) > 0 {
		r.resp.Values = r.valueOut
	}
	if len(r.flagOut) > 0 {
		r.resp.MetaFlags = r.flagOut
	}
	if len(r.statOut) > 0 {
		r.resp.Stats = r.statOut
	}
	if r.text.end > 0 {
		r.resp.Text = r.slice(r.text)
	}
	if r.resp.Status == StatusVA {
		r.resp.Data = r.slice(r.data)
	}
	r.resp.raw = r.raw
}

// Release drops the buffers one large response grew beyond RetainBytes, and the slices that
// point into them, so a reader about to wait for the next response pins nothing large
// meanwhile. The last response read is invalid after it. ReadResponse releases too.
func (r *ResponseReader) Release() {
	clear(r.valueOut)
	clear(r.flagOut)
	clear(r.statOut)
	if cap(r.raw) > r.lim.RetainBytes {
		r.raw = nil
	}
	if cap(r.values) > r.lim.RetainBytes/64 {
		r.values, r.valueOut = nil, nil
	}
	if cap(r.stats) > r.lim.RetainBytes/16 {
		r.stats, r.statOut = nil, nil
	}
	r.resp = Response{}
}
