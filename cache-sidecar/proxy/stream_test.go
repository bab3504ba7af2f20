package proxy

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// streamOnce copies one reply from input as a link streaming it would (to no client), and
// returns the bytes it consumed or its error.
func streamOnce(proto Protocol, input []byte) (int64, error) {
	br := bufio.NewReaderSize(bytes.NewReader(input), ioBufferSize)
	l := &link{p: &Proxy{}, br: br}
	if proto == Redis {
		l.replies = resp.NewReplyReader(br, resp.ReplyLimits{})
	}
	s := &replyStream{l: l}
	sc := &streamCopy{s: s, br: br, buf: make([]byte, 0, streamChunk+maxStreamLine)}
	var err error
	if proto == Redis {
		err = sc.copyRESP()
	} else {
		err = sc.copyMemcache()
	}
	sc.flush()
	return sc.total, err
}

// wholeReplyLen is how many bytes the proxy's ordinary reader takes for the first reply of
// input (a get's response for memcached), or false when it finds none.
func wholeReplyLen(proto Protocol, input []byte) (int, bool) {
	br := bufio.NewReader(bytes.NewReader(input))
	if proto == Redis {
		r, err := resp.NewReplyReader(br, resp.ReplyLimits{}).ReadReply()
		return len(r.Raw()), err == nil
	}
	r, err := memcache.NewResponseReader(br, memcache.ResponseLimits{}).ReadResponse(memcache.Expect{Command: memcache.CmdGet})
	if err != nil || r.IsError() {
		return 0, false
	}
	return len(r.Raw()), true
}

// FuzzStreamedReplyFraming checks the streamed copy's framing against the proxy's ordinary
// reply readers (an independent parser): every reply they read whole, the stream copies
// exactly, byte for byte of the input, and it never panics on anything else.
func FuzzStreamedReplyFraming(f *testing.F) {
	seeds := []struct {
		proto Protocol
		input string
	}{
		{Redis, "$5\r\nhello\r\n"},
		{Redis, "*3\r\n$1\r\na\r\n$-1\r\n_\r\n"},
		{Redis, "%1\r\n+k\r\n*2\r\n:1\r\n,1.5\r\n"},
		{Redis, "|1\r\n+a\r\n+b\r\n$3\r\nabc\r\n"},
		{Redis, "$" + "70000\r\n" + strings.Repeat("v", 70000) + "\r\n"},
		{Redis, "*2\r\n$3\r\nab"},
		{Memcached, "VALUE a 0 1\r\nx\r\nVALUE b 5 3 9\r\nxyz\r\nEND\r\n"},
		{Memcached, "END\r\n"},
		{Memcached, "VALUE a 0 2\r\nx\r\nEND\r\n"},
		{Memcached, "SERVER_ERROR out of memory\r\n"},
	}
	for _, s := range seeds {
		f.Add(s.proto == Redis, []byte(s.input))
	}
	f.Fuzz(func(t *testing.T, redis bool, input []byte) {
		proto := Memcached
		if redis {
			proto = Redis
		}
		copied, err := streamOnce(proto, input)
		want, ok := wholeReplyLen(proto, input)
		if !ok {
			return
		}
		if err != nil || copied != int64(want) {
			t.Fatalf("%s reply %q: streamed %d bytes (%v), the whole reply is %d", proto, input, copied, err, want)
		}
	})
}

// TestStreamedReplyFramingErrors: framing the stream cannot follow fails the copy (the link
// then closes) instead of leaving it out of step.
func TestStreamedReplyFramingErrors(t *testing.T) {
	tests := []struct {
		proto Protocol
		input string
		want  string
	}{
		{Redis, "$5\r\nhelloXX", "value not terminated by CRLF"},
		{Redis, "$-7\r\n", "invalid bulk string length"},
		{Redis, "?\r\n", "unknown reply type"},
		{Redis, "$5\r\nhel", "unexpected EOF"},
		{Redis, strings.Repeat("*1\r\n", maxStreamDepth+1), "nested deeper"},
		{Redis, "+" + strings.Repeat("x", 2*maxStreamLine), "longer than"},
		{Memcached, "VALUE a 0\r\n", "expected VALUE or END"},
		{Memcached, "VALUE a 0 x\r\n", "bad VALUE line"},
		{Memcached, "NOT_STORED\r\n", `got "NOT_STORED"`},
	}
	for _, tc := range tests {
		t.Run(string(tc.proto)+" "+tc.want, func(t *testing.T) {
			_, err := streamOnce(tc.proto, []byte(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: error %v, want %q", tc.input, err, tc.want)
			}
		})
	}
}

func TestValueLineSize(t *testing.T) {
	tests := []struct {
		line string
		want int64
	}{
		{"VALUE k 0 70000", 70000},
		{"VALUE k 5 12 99", 12},
		{"VALUE k 0", -1},
		{"VALUE k 0 x", -1},
		{"VALUE k", -1},
		{"END", -1},
		{"", -1},
	}
	for _, tc := range tests {
		if got := valueLineSize([]byte(tc.line)); got != tc.want {
			t.Errorf("valueLineSize(%q) = %d, want %d", tc.line, got, tc.want)
		}
	}
}
