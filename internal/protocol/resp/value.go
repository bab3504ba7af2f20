package resp

import (
	"bytes"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Value is a decoded RESP value. Its byte slices point into the bytes it was decoded from.
type Value struct {
	Type Type
	// Raw is the exact encoding of this value, attributes included: merging replies (MGET across
	// nodes) copies element Raws behind a new array header without re-encoding them.
	Raw []byte
	// Str is the payload of simple strings, errors, bulk strings, blob errors, big numbers and
	// doubles (as text), and of verbatim strings after their format prefix.
	Str []byte
	// Format is the 3-byte format of a verbatim string ("txt", "mkd").
	Format []byte
	// Int is the value of an integer.
	Int int64
	// Float is the value of a double.
	Float float64
	// Bool is the value of a boolean.
	Bool bool
	// Null marks RESP3 null and the RESP2 null bulk string ("$-1") and null array ("*-1").
	Null bool
	// Elems are the elements of arrays, sets and pushes; for maps, keys and values alternate.
	Elems []Value
	// Attrs are the keys and values (alternating) of an attribute that preceded the value.
	Attrs []Value
}

// IsError reports whether v is an error (simple or blob).
func (v *Value) IsError() bool { return v.Type == TypeError || v.Type == TypeBlobError }

// DecodeValue decodes exactly one RESP value from b (trailing bytes are an error). It never
// panics on malformed input and allocates in proportion to len(b), whatever the declared lengths.
func DecodeValue(b []byte) (Value, error) {
	d := decoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return Value{}, err
	}
	if d.pos != len(b) {
		return Value{}, &ProtocolError{Msg: "trailing bytes after reply"}
	}
	return v, nil
}

type decoder struct {
	b   []byte
	pos int
}

var errTruncated = &ProtocolError{Msg: "truncated reply"}

// line returns the next line without its CRLF. Like ReplyReader, it ends a line at the first LF,
// which must follow a CR.
func (d *decoder) line() ([]byte, error) {
	i := bytes.IndexByte(d.b[d.pos:], '\n')
	if i < 0 {
		return nil, errTruncated
	}
	line, ok := protocol.TrimCRLF(d.b[d.pos : d.pos+i+1])
	if !ok {
		return nil, &ProtocolError{Msg: "reply line not terminated by CRLF"}
	}
	d.pos += i + 1
	return line, nil
}

func (d *decoder) value(depth int) (Value, error) {
	if depth > DefaultReplyMaxDepth {
		return Value{}, protocolErrorf("reply nested deeper than %d levels", DefaultReplyMaxDepth)
	}
	start := d.pos
	line, err := d.line()
	if err != nil {
		return Value{}, err
	}
	if len(line) == 0 {
		return Value{}, &ProtocolError{Msg: "empty reply line"}
	}
	v := Value{Type: Type(line[0])}
	body := line[1:]
	switch v.Type {
	case TypeSimpleString, TypeError:
		v.Str = body
	case TypeInteger, TypeBigNumber, TypeDouble, TypeBoolean, TypeNull:
		if err := CheckScalar(v.Type, body); err != nil {
			return Value{}, err
		}
		switch v.Type {
		case TypeInteger:
			v.Int, _ = protocol.ParseInt(body)
		case TypeDouble:
			v.Float, _ = parseDouble(body)
			v.Str = body
		case TypeBigNumber:
			v.Str = body
		case TypeBoolean:
			v.Bool = body[0] == 't'
		case TypeNull:
			v.Null = true
		}
	case TypeBulkString, TypeVerbatim, TypeBlobError:
		if err := d.blob(&v, body); err != nil {
			return Value{}, err
		}
	case TypeArray, TypeSet, TypeMap, TypePush:
		n, err := aggregateLen(v.Type, body, DefaultReplyMaxAggregateLen)
		if err != nil {
			return Value{}, err
		}
		v.Null = v.Type == TypeArray && bytes.Equal(body, []byte("-1"))
		if v.Elems, err = d.values(n, depth); err != nil {
			return Value{}, err
		}
	case TypeAttribute:
		n, err := aggregateLen(v.Type, body, DefaultReplyMaxAggregateLen)
		if err != nil {
			return Value{}, err
		}
		attrs, err := d.values(n, depth)
		if err != nil {
			return Value{}, err
		}
		if v, err = d.value(depth); err != nil {
			return Value{}, err
		}
		v.Attrs = attrs
	default:
		return Value{}, protocolErrorf("unknown reply type %s", describeByte(line[0]))
	}
	v.Raw = d.b[start:d.pos]
	return v, nil
}

func (d *decoder) blob(v *Value, header []byte) error {
	size, ok := protocol.ParseInt(header)
	if ok && size == -1 && v.Type == TypeBulkString {
		v.Null = true
		return nil
	}
	if !ok || size < 0 || size > int64(len(d.b)-d.pos) {
		return protocolErrorf("invalid %s length", v.Type)
	}
	end := d.pos + int(size)
	if len(d.b)-end < 2 {
		return errTruncated
	}
	if err := checkBlob(v.Type, d.b[d.pos:end+2]); err != nil {
		return err
	}
	v.Str = d.b[d.pos:end]
	if v.Type == TypeVerbatim {
		v.Format, v.Str = v.Str[:3], v.Str[4:]
	}
	d.pos = end + 2
	return nil
}

// values decodes n elements one level down. The slice grows as elements decode, so a huge
// declared count over few bytes fails on truncation instead of allocating the count.
func (d *decoder) values(n, depth int) ([]Value, error) {
	if n == 0 {
		return nil, nil
	}
	// Every element takes at least 3 bytes ("_\r\n"), which bounds the capacity worth reserving.
	elems := make([]Value, 0, min(n, (len(d.b)-d.pos)/3))
	for range n {
		e, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		elems = append(elems, e)
	}
	return elems, nil
}
