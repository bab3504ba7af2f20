package resp

import (
	"bufio"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func TestReadReplyFramesEveryType(t *testing.T) {
	tests := []struct {
		name  string
		input string
		typ   Type
	}{
		{"simple string", "+OK\r\n", TypeSimpleString},
		{"error", "-ERR wrong\r\n", TypeError},
		{"integer", ":-42\r\n", TypeInteger},
		{"bulk", "$5\r\nhel\r\n\r\n", TypeBulkString},
		{"empty bulk", "$0\r\n\r\n", TypeBulkString},
		{"null bulk", "$-1\r\n", TypeBulkString},
		{"array", "*3\r\n:1\r\n$1\r\na\r\n+b\r\n", TypeArray},
		{"empty array", "*0\r\n", TypeArray},
		{"null array", "*-1\r\n", TypeArray},
		{"nested array", "*2\r\n*2\r\n:1\r\n:2\r\n*0\r\n", TypeArray},
		{"array with nulls", "*3\r\n$-1\r\n*-1\r\n_\r\n", TypeArray},
		{"null", "_\r\n", TypeNull},
		{"map", "%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n", TypeMap},
		{"set", "~2\r\n+a\r\n+b\r\n", TypeSet},
		{"double", ",3.25\r\n", TypeDouble},
		{"double inf", ",-inf\r\n", TypeDouble},
		{"double exponent", ",1.5e-3\r\n", TypeDouble},
		{"boolean", "#t\r\n", TypeBoolean},
		{"big number", "(3492890328409238509324850943850943825024385\r\n", TypeBigNumber},
		{"verbatim", "=15\r\ntxt:Some string\r\n", TypeVerbatim},
		{"blob error", "!21\r\nSYNTAX invalid syntax\r\n", TypeBlobError},
		{"push", ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", TypePush},
		{"attribute before value", "|1\r\n+ttl\r\n:3600\r\n*2\r\n:1\r\n:2\r\n", TypeArray},
		{"attribute inside array", "*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n", TypeArray},
		{"two attributes", "|1\r\n+a\r\n:1\r\n|1\r\n+b\r\n:2\r\n+OK\r\n", TypeSimpleString},
	}
	for _, tt := range tests {
		// The trailing reply checks that exactly one reply was consumed.
		input := tt.input + "+NEXT\r\n"
		for how, br := range readers(input) {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				r := NewReplyReader(br, ReplyLimits{})
				reply, err := r.ReadReply()
				if err != nil {
					t.Fatalf("ReadReply: %v", err)
				}
				if string(reply.Raw()) != tt.input {
					t.Fatalf("raw = %q, want %q", reply.Raw(), tt.input)
				}
				if reply.Type() != tt.typ {
					t.Fatalf("type = %v, want %v", reply.Type(), tt.typ)
				}
				if _, err := reply.Decode(); err != nil {
					t.Fatalf("Decode: %v", err)
				}
				next, err := r.ReadReply()
				if err != nil || string(next.Raw()) != "+NEXT\r\n" {
					t.Fatalf("next reply = %q, %v", next.Raw(), err)
				}
				if _, err := r.ReadReply(); !errors.Is(err, io.EOF) {
					t.Fatalf("at the end: %v, want io.EOF", err)
				}
			})
		}
	}
}

func TestReadReplyRejectsMalformedInput(t *testing.T) {
	tests := []struct {
		name  string
		input string
		lim   ReplyLimits
		want  string
	}{
		{"unknown type", "?x\r\n", ReplyLimits{}, "unknown reply type '?'"},
		{"no CR", "+OK\n", ReplyLimits{}, "reply line not terminated by CRLF"},
		{"empty line", "\r\n", ReplyLimits{}, "reply line not terminated by CRLF"},
		{"bad integer", ":12a\r\n", ReplyLimits{}, "invalid integer"},
		{"integer overflow", ":9223372036854775808\r\n", ReplyLimits{}, "invalid integer"},
		{"bad double", ",0x10\r\n", ReplyLimits{}, "invalid double"},
		{"bad boolean", "#x\r\n", ReplyLimits{}, "invalid boolean"},
		{"null with body", "_x\r\n", ReplyLimits{}, "invalid null"},
		{"bad big number", "(12x\r\n", ReplyLimits{}, "invalid big number"},
		{"bad bulk length", "$abc\r\n", ReplyLimits{}, "invalid bulk string length"},
		{"streamed string", "$?\r\n;4\r\nHell\r\n;0\r\n", ReplyLimits{}, "invalid bulk string length"},
		{"negative verbatim", "=-1\r\n", ReplyLimits{}, "invalid verbatim string length"},
		{"bulk over limit", "$11\r\nhello world\r\n", ReplyLimits{MaxBulkLen: 10}, "invalid bulk string length"},
		{"bulk without CRLF", "$2\r\nabcd", ReplyLimits{}, "bulk string not terminated by CRLF"},
		{"verbatim without format", "=3\r\nabc\r\n", ReplyLimits{}, "verbatim string without a 3-byte format prefix"},
		{"null map", "%-1\r\n", ReplyLimits{}, "invalid map length"},
		{"streamed array", "*?\r\n:1\r\n.\r\n", ReplyLimits{}, "invalid array length"},
		{"aggregate over limit", "*5\r\n", ReplyLimits{MaxAggregateLen: 4}, "invalid array length"},
		{"too deep", "*1\r\n*1\r\n*1\r\n:1\r\n", ReplyLimits{MaxDepth: 2}, "reply nested deeper than 2 levels"},
		{"line too long", "+" + strings.Repeat("a", 100) + "\r\n", ReplyLimits{MaxLineLen: 50}, "reply line longer than 50 bytes"},
		{"reply too large", "*2\r\n$10\r\n0123456789\r\n$10\r\n0123456789\r\n", ReplyLimits{MaxReplyLen: 30}, "reply larger than 30 bytes"},
	}
	for _, tt := range tests {
		for how, br := range readers(tt.input) {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				_, err := NewReplyReader(br, tt.lim).ReadReply()
				var perr *ProtocolError
				if !errors.As(err, &perr) {
					t.Fatalf("err = %v, want *ProtocolError", err)
				}
				if perr.Msg != tt.want {
					t.Fatalf("message = %q, want %q", perr.Msg, tt.want)
				}
			})
		}
	}
}

func TestReadReplyEndOfStream(t *testing.T) {
	for _, input := range []string{"*2\r\n:1\r\n", "$5\r\nab", "+OK", "%1\r\n+k\r\n", "|1\r\n+a\r\n+b\r\n"} {
		_, err := NewReplyReader(bufio.NewReader(strings.NewReader(input)), ReplyLimits{}).ReadReply()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: err = %v, want io.ErrUnexpectedEOF", input, err)
		}
	}
}

func TestReadReplyDoesNotAllocateDeclaredLength(t *testing.T) {
	r := NewReplyReader(bufio.NewReader(strings.NewReader("$500000000\r\nshort")), ReplyLimits{})
	if _, err := r.ReadReply(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
	if c := cap(r.raw); c > 1<<20 {
		t.Fatalf("buffer grew to %d bytes for a 500 MB declaration", c)
	}
}

func TestDecodeValue(t *testing.T) {
	v, err := DecodeValue([]byte("|1\r\n+ttl\r\n:9\r\n*9\r\n+ok\r\n-ERR bad\r\n:7\r\n$3\r\nabc\r\n$-1\r\n" +
		",2.5\r\n#f\r\n=7\r\nmkd:*x*\r\n%1\r\n+k\r\n~1\r\n(-12\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Type != TypeArray || len(v.Elems) != 9 || len(v.Attrs) != 2 || v.Attrs[1].Int != 9 {
		t.Fatalf("top = %+v", v)
	}
	e := v.Elems
	checks := []struct {
		name string
		ok   bool
	}{
		{"simple", e[0].Type == TypeSimpleString && string(e[0].Str) == "ok"},
		{"error", e[1].IsError() && string(e[1].Str) == "ERR bad"},
		{"integer", e[2].Int == 7 && string(e[2].Raw) == ":7\r\n"},
		{"bulk", string(e[3].Str) == "abc" && string(e[3].Raw) == "$3\r\nabc\r\n"},
		{"null bulk", e[4].Null && e[4].Type == TypeBulkString},
		{"double", e[5].Float == 2.5},
		{"boolean", e[6].Type == TypeBoolean && !e[6].Bool},
		{"verbatim", string(e[7].Format) == "mkd" && string(e[7].Str) == "*x*"},
		{"map with set value", e[8].Type == TypeMap && len(e[8].Elems) == 2 && e[8].Elems[1].Type == TypeSet &&
			string(e[8].Elems[1].Elems[0].Str) == "-12"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
	nan, err := DecodeValue([]byte(",nan\r\n"))
	if err != nil || !math.IsNaN(nan.Float) {
		t.Errorf("nan: %v %v", nan.Float, err)
	}
	nullArray, err := DecodeValue([]byte("*-1\r\n"))
	if err != nil || !nullArray.Null {
		t.Errorf("null array: %+v %v", nullArray, err)
	}
	for _, bad := range []string{"", "+OK", "+OK\r\n+extra\r\n", "*2\r\n:1\r\n", "*99999999\r\n:1\r\n", "$3\r\nab", "$1\r\nabc"} {
		if _, err := DecodeValue([]byte(bad)); err == nil {
			t.Errorf("DecodeValue(%q) succeeded", bad)
		}
	}
}
