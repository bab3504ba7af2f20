package resp

import (
	"bufio"
	"errors"
	"io"
	"strconv"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Type is the RESP type byte that starts a value.
type Type byte

// RESP2 and RESP3 types.
const (
	TypeSimpleString Type = '+'
	TypeError        Type = '-'
	TypeInteger      Type = ':'
	TypeBulkString   Type = '$'
	TypeArray        Type = '*'
	TypeNull         Type = '_'
	TypeMap          Type = '%'
	TypeSet          Type = '~'
	TypeDouble       Type = ','
	TypeBoolean      Type = '#'
	TypeBigNumber    Type = '('
	TypeVerbatim     Type = '='
	TypeBlobError    Type = '!'
	TypePush         Type = '>'
	TypeAttribute    Type = '|'
)

// String names the type for errors and logs.
func (t Type) String() string {
	switch t {
	case TypeSimpleString:
		return "simple string"
	case TypeError:
		return "error"
	case TypeInteger:
		return "integer"
	case TypeBulkString:
		return "bulk string"
	case TypeArray:
		return "array"
	case TypeNull:
		return "null"
	case TypeMap:
		return "map"
	case TypeSet:
		return "set"
	case TypeDouble:
		return "double"
	case TypeBoolean:
		return "boolean"
	case TypeBigNumber:
		return "big number"
	case TypeVerbatim:
		return "verbatim string"
	case TypeBlobError:
		return "blob error"
	case TypePush:
		return "push"
	case TypeAttribute:
		return "attribute"
	default:
		return "type " + strconv.Quote(string(rune(t)))
	}
}

// Reply is one complete reply read by a ReplyReader. Its bytes belong to the reader and stay
// valid only until the next ReadReply or Reset.
type Reply struct {
	raw []byte
	typ Type
}

// Raw returns the exact bytes of the reply, any attribute that precedes it included.
func (r Reply) Raw() []byte { return r.raw }

// Type returns the type of the reply's value (after any attribute). A TypePush reply is
// out-of-band data (RESP3 client tracking, pub/sub), not the answer to a request.
func (r Reply) Type() Type { return r.typ }

// IsError reports whether the reply is an error (simple or blob).
func (r Reply) IsError() bool { return r.typ == TypeError || r.typ == TypeBlobError }

// Decode parses the reply into a Value tree whose slices point into the reply's bytes.
func (r Reply) Decode() (Value, error) { return DecodeValue(r.raw) }

// ReplyReader reads replies from an engine or peer sidecar. Not safe for concurrent use.
type ReplyReader struct {
	br      *bufio.Reader
	lim     ReplyLimits
	raw     []byte
	pending []int // per open aggregate level, the elements still to read
}

// NewReplyReader returns a reader of replies from br under lim (zero fields: defaults).
func NewReplyReader(br *bufio.Reader, lim ReplyLimits) *ReplyReader {
	return &ReplyReader{br: br, lim: lim.withDefaults()}
}

// Reset makes the reader read from br, keeping its buffers.
func (r *ReplyReader) Reset(br *bufio.Reader) {
	r.br = br
	r.Release()
}

// ReadReply reads exactly one complete reply: a whole value, aggregates with all their elements,
// preceded by any attributes. It validates the framing and the syntax of numbers, booleans and
// nulls but keeps the bytes as received. It returns io.EOF when the stream ends between replies,
// io.ErrUnexpectedEOF inside one, and a *ProtocolError for malformed bytes. RESP3 streamed
// strings and aggregates ("$?", "*?") are rejected: redis never sends them.
func (r *ReplyReader) ReadReply() (Reply, error) {
	r.Release()
	raw := r.raw[:0]
	pending := append(r.pending[:0], 1)
	var typ Type
	for len(pending) > 0 {
		top := len(pending) - 1
		pending[top]--
		t, children, err := r.readElement(&raw)
		if err != nil {
			r.raw, r.pending = raw, pending
			if errors.Is(err, io.EOF) && len(raw) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Reply{}, err
		}
		if t == TypeAttribute {
			pending[top]++ // the annotated value still follows at this level
		} else if typ == 0 && len(pending) == 1 {
			typ = t // the first value at the top level, after any attributes
		}
		if children > 0 {
			if len(pending) >= r.lim.MaxDepth {
				r.raw, r.pending = raw, pending
				return Reply{}, protocolErrorf("reply nested deeper than %d levels", r.lim.MaxDepth)
			}
			pending = append(pending, children)
		}
		for len(pending) > 0 && pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
		}
	}
	r.raw, r.pending = raw, pending
	return Reply{raw: raw, typ: typ}, nil
}

// readElement appends one element header (and its payload for strings) to *raw and returns its
// type and how many child elements follow it.
func (r *ReplyReader) readElement(raw *[]byte) (Type, int, error) {
	start := len(*raw)
	buf, err := protocol.AppendLine(r.br, *raw, r.lim.MaxLineLen)
	*raw = buf
	if err != nil {
		if errors.Is(err, protocol.ErrLineTooLong) {
			return 0, 0, protocolErrorf("reply line longer than %d bytes", r.lim.MaxLineLen)
		}
		return 0, 0, err
	}
	if len(buf) > r.lim.MaxReplyLen {
		return 0, 0, protocolErrorf("reply larger than %d bytes", r.lim.MaxReplyLen)
	}
	line, ok := protocol.TrimCRLF(buf[start:])
	if !ok || len(line) == 0 {
		return 0, 0, &ProtocolError{Msg: "reply line not terminated by CRLF"}
	}
	t, body := Type(line[0]), line[1:]
	switch t {
	case TypeSimpleString, TypeError:
		return t, 0, nil
	case TypeInteger, TypeBigNumber, TypeDouble, TypeBoolean, TypeNull:
		if err := CheckScalar(t, body); err != nil {
			return 0, 0, err
		}
		return t, 0, nil
	case TypeBulkString, TypeVerbatim, TypeBlobError:
		return t, 0, r.readBlob(raw, t, body)
	case TypeArray, TypeSet, TypeMap, TypePush, TypeAttribute:
		n, err := aggregateLen(t, body, r.lim.MaxAggregateLen)
		return t, n, err
	default:
		return 0, 0, protocolErrorf("unknown reply type %s", describeByte(byte(t)))
	}
}

func (r *ReplyReader) readBlob(raw *[]byte, t Type, header []byte) error {
	size, ok := protocol.ParseInt(header)
	if ok && size == -1 && t == TypeBulkString {
		return nil // RESP2 null bulk string
	}
	if !ok || size < 0 || size > int64(r.lim.MaxBulkLen) {
		return protocolErrorf("invalid %s length", t)
	}
	if int64(len(*raw))+size+2 > int64(r.lim.MaxReplyLen) {
		return protocolErrorf("reply larger than %d bytes", r.lim.MaxReplyLen)
	}
	start := len(*raw)
	buf, err := protocol.AppendFull(r.br, *raw, int(size)+2)
	*raw = buf
	if err != nil {
		return err
	}
	return checkBlob(t, buf[start:])
}

// checkBlob validates a string payload followed by its CRLF.
func checkBlob(t Type, payloadCRLF []byte) error {
	payload, ok := protocol.TrimCRLF(payloadCRLF)
	if !ok {
		return protocolErrorf("%s not terminated by CRLF", t)
	}
	if t == TypeVerbatim && (len(payload) < 4 || payload[3] != ':') {
		return &ProtocolError{Msg: "verbatim string without a 3-byte format prefix"}
	}
	return nil
}

// aggregateLen parses an aggregate header and returns how many elements follow (key and value
// count separately for maps and attributes).
func aggregateLen(t Type, header []byte, limit int) (int, error) {
	n, ok := protocol.ParseInt(header)
	if ok && n == -1 && t == TypeArray {
		return 0, nil // RESP2 null array
	}
	if !ok || n < 0 || n > int64(limit) {
		return 0, protocolErrorf("invalid %s length", t)
	}
	if t == TypeMap || t == TypeAttribute {
		n *= 2
	}
	return int(n), nil
}

// CheckScalar validates the text of a one-line scalar (t an integer, big number, double, boolean or
// null; other types pass): the check ReplyReader makes, for code that copies replies without it.
func CheckScalar(t Type, body []byte) error {
	ok := true
	switch t {
	case TypeInteger:
		_, ok = protocol.ParseInt(body)
	case TypeBigNumber:
		digits := body
		if len(digits) > 0 && (digits[0] == '-' || digits[0] == '+') {
			digits = digits[1:]
		}
		ok = protocol.IsDigits(digits)
	case TypeDouble:
		_, ok = parseDouble(body)
	case TypeBoolean:
		ok = len(body) == 1 && (body[0] == 't' || body[0] == 'f')
	case TypeNull:
		ok = len(body) == 0
	}
	if !ok {
		return protocolErrorf("invalid %s", t)
	}
	return nil
}

// parseDouble parses a RESP3 double: a decimal or exponent number, "inf", "-inf" or "nan".
func parseDouble(b []byte) (float64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		if !isDoubleByte(c) {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	return f, err == nil
}

// isDoubleByte admits the bytes of decimal and exponent numbers, "inf" and "nan", and so rejects
// what strconv accepts but RESP3 does not: hex floats, underscores, "infinity".
func isDoubleByte(c byte) bool {
	switch c {
	case '.', '-', '+', 'e', 'E', 'i', 'n', 'f', 'a':
		return true
	}
	return '0' <= c && c <= '9'
}

// Release drops the buffers one large reply grew beyond RetainBytes, so a reader about to wait
// for the next reply pins nothing large meanwhile. The last reply read is invalid after it.
// ReadReply releases too.
func (r *ReplyReader) Release() {
	if cap(r.raw) > r.lim.RetainBytes {
		r.raw = nil
	}
	if cap(r.pending) > r.lim.RetainBytes/8 {
		r.pending = nil
	}
}
