package resp

import (
	"bufio"
	"bytes"
	"testing"
)

func TestWritersRoundTripThroughReplyReader(t *testing.T) {
	tests := []struct {
		name  string
		bytes []byte
		check func(v Value) bool
	}{
		{"simple string", AppendSimpleString(nil, "OK"), func(v Value) bool { return string(v.Str) == "OK" }},
		{"simple string with newline", AppendSimpleString(nil, "a\r\nb"), func(v Value) bool { return string(v.Str) == "a  b" }},
		{"error", AppendError(nil, "ERR bad\nthing"), func(v Value) bool { return v.IsError() && string(v.Str) == "ERR bad thing" }},
		{"integer", AppendInteger(nil, -9223372036854775808), func(v Value) bool { return v.Int == -9223372036854775808 }},
		{"bulk", AppendBulk(nil, []byte("a\r\nb")), func(v Value) bool { return string(v.Str) == "a\r\nb" }},
		{"bulk string", AppendBulkString(nil, ""), func(v Value) bool { return v.Type == TypeBulkString && len(v.Str) == 0 && !v.Null }},
		{"null RESP2", AppendNull(nil, RESP2), func(v Value) bool { return v.Null && v.Type == TypeBulkString }},
		{"null RESP3", AppendNull(nil, RESP3), func(v Value) bool { return v.Null && v.Type == TypeNull }},
		{"null array RESP2", AppendNullArray(nil, RESP2), func(v Value) bool { return v.Null && v.Type == TypeArray }},
		{"null array RESP3", AppendNullArray(nil, RESP3), func(v Value) bool { return v.Null && v.Type == TypeNull }},
		{"array", AppendBulkString(AppendInteger(AppendArrayHeader(nil, 2), 1), "x"), func(v Value) bool {
			return len(v.Elems) == 2 && v.Elems[0].Int == 1 && string(v.Elems[1].Str) == "x"
		}},
		{"map RESP3", AppendInteger(AppendBulkString(AppendMapHeader(nil, 1, RESP3), "k"), 5), func(v Value) bool {
			return v.Type == TypeMap && len(v.Elems) == 2 && v.Elems[1].Int == 5
		}},
		{"map RESP2", AppendInteger(AppendBulkString(AppendMapHeader(nil, 1, RESP2), "k"), 5), func(v Value) bool {
			return v.Type == TypeArray && len(v.Elems) == 2
		}},
		{"hello RESP3", AppendHelloReply(nil, RESP3, HelloInfo{Server: "redis", Version: "7.0.15", ID: 12}), func(v Value) bool {
			return v.Type == TypeMap && len(v.Elems) == 14 && string(v.Elems[0].Str) == "server" && v.Elems[5].Int == 3 && v.Elems[7].Int == 12
		}},
		{"hello RESP2", AppendHelloReply(nil, RESP2, HelloInfo{Server: "redis", Version: "7.0.15", ID: 12}), func(v Value) bool {
			return v.Type == TypeArray && len(v.Elems) == 14 && v.Elems[5].Int == 2
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, err := NewReplyReader(bufio.NewReader(bytes.NewReader(tt.bytes)), ReplyLimits{}).ReadReply()
			if err != nil {
				t.Fatalf("ReadReply(%q): %v", tt.bytes, err)
			}
			v, err := reply.Decode()
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !tt.check(v) {
				t.Fatalf("decoded %q as %+v", tt.bytes, v)
			}
		})
	}
}

func TestAppendCommandRoundTripsThroughCommandReader(t *testing.T) {
	args := [][]byte{[]byte("MSET"), []byte("k 1"), []byte("\r\n"), []byte(""), []byte("v")}
	wire := AppendCommand(nil, args)
	wire = AppendCommandStrings(wire, "GET", "k 1")
	r := NewCommandReader(bufio.NewReader(bytes.NewReader(wire)), Limits{})
	first, err := r.ReadCommand()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Args) != len(args) {
		t.Fatalf("args = %q", first.Args)
	}
	for i := range args {
		if !bytes.Equal(first.Args[i], args[i]) {
			t.Fatalf("arg %d = %q, want %q", i, first.Args[i], args[i])
		}
	}
	second, err := r.ReadCommand()
	if err != nil || string(second.Args[1]) != "k 1" {
		t.Fatalf("second = %q, %v", second.Args, err)
	}
}
