package memcache

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// readers feeds the same bytes whole and one byte per Read through the smallest bufio buffer.
func readers(data string) map[string]*bufio.Reader {
	return map[string]*bufio.Reader{
		"whole":        bufio.NewReader(strings.NewReader(data)),
		"byte-by-byte": bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(data)), 16),
	}
}

// describe renders the fields a request test checks, omitting zero values.
func describe(q *Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s keys=%q", q.Command, q.Keys)
	if q.ClientFlags != 0 {
		fmt.Fprintf(&b, " flags=%d", q.ClientFlags)
	}
	if q.Exptime != 0 {
		fmt.Fprintf(&b, " exptime=%d", q.Exptime)
	}
	if q.CasUnique != 0 {
		fmt.Fprintf(&b, " cas=%d", q.CasUnique)
	}
	if q.Delta != 0 {
		fmt.Fprintf(&b, " delta=%d", q.Delta)
	}
	if q.NoReply {
		b.WriteString(" noreply")
	}
	if q.Data != nil {
		fmt.Fprintf(&b, " data=%q", q.Data)
	}
	if q.Quiet {
		b.WriteString(" quiet")
	}
	if q.Base64Key {
		b.WriteString(" base64")
	}
	if q.Opaque != nil {
		fmt.Fprintf(&b, " opaque=%q", q.Opaque)
	}
	if q.MetaFlags != nil {
		fmt.Fprintf(&b, " meta=%q", q.MetaFlags)
	}
	if q.Args != nil {
		fmt.Fprintf(&b, " args=%q", q.Args)
	}
	return b.String()
}

func TestReadRequestParsesEveryCommand(t *testing.T) {
	long := strings.Repeat("d", 3000)
	tests := []struct {
		input string
		want  string
	}{
		{"get k\r\n", `get keys=["k"]`},
		{"get a b  c\r\n", `get keys=["a" "b" "c"]`},
		{"gets a b\n", `gets keys=["a" "b"]`},
		{"gat 30 a b\r\n", `gat keys=["a" "b"] exptime=30`},
		{"gats -1 a\r\n", `gats keys=["a"] exptime=-1`},
		{"set k 5 100 3\r\nabc\r\n", `set keys=["k"] flags=5 exptime=100 data="abc"`},
		{"set k 0 0 0\r\n\r\n", `set keys=["k"] data=""`},
		{"set k 4294967295 0 2 noreply\r\n\r\n\r\n", `set keys=["k"] flags=4294967295 noreply data="\r\n"`},
		{"set k 0 0 3000\r\n" + long + "\r\n", `set keys=["k"] data="` + long + `"`},
		{"add k 1 2 1\r\nx\r\n", `add keys=["k"] flags=1 exptime=2 data="x"`},
		{"replace k 0 0 1\r\nx\r\n", `replace keys=["k"] data="x"`},
		{"append k 0 0 1\r\nx\r\n", `append keys=["k"] data="x"`},
		{"prepend k 0 0 1 noreply\r\nx\r\n", `prepend keys=["k"] noreply data="x"`},
		{"cas k 0 0 1 18446744073709551615\r\nx\r\n", `cas keys=["k"] cas=18446744073709551615 data="x"`},
		{"cas k 0 0 1 7 noreply\r\nx\r\n", `cas keys=["k"] cas=7 noreply data="x"`},
		{"delete k\r\n", `delete keys=["k"]`},
		{"delete k noreply\r\n", `delete keys=["k"] noreply`},
		{"delete k 0\r\n", `delete keys=["k"]`},
		{"delete k 0 noreply\r\n", `delete keys=["k"] noreply`},
		{"incr k 5\r\n", `incr keys=["k"] delta=5`},
		{"decr k 18446744073709551615 noreply\r\n", `decr keys=["k"] delta=18446744073709551615 noreply`},
		{"touch k 60\r\n", `touch keys=["k"] exptime=60`},
		{"touch k -1 noreply\r\n", `touch keys=["k"] exptime=-1 noreply`},
		{"mg k v t f\r\n", `mg keys=["k"] meta=["v" "t" "f"]`},
		{"mg k\r\n", `mg keys=["k"]`},
		{"mg k v q Oab12 k\r\n", `mg keys=["k"] quiet opaque="ab12" meta=["v" "q" "Oab12" "k"]`},
		{"mg a2V5 b v\r\n", `mg keys=["key"] base64 meta=["b" "v"]`},
		{"mg AAEC/w== b v\r\n", `mg keys=["\x00\x01\x02\xff"] base64 meta=["b" "v"]`},
		{"ms k 3 T30 F5\r\nabc\r\n", `ms keys=["k"] data="abc" meta=["T30" "F5"]`},
		{"ms k 0 q\r\n\r\n", `ms keys=["k"] data="" quiet meta=["q"]`},
		{"md k q\r\n", `md keys=["k"] quiet meta=["q"]`},
		{"ma k D5 MD v\r\n", `ma keys=["k"] meta=["D5" "MD" "v"]`},
		{"me k\r\n", `me keys=["k"]`},
		{"mn\r\n", `mn keys=[]`},
		{"version\r\n", `version keys=[]`},
		{"quit\r\n", `quit keys=[]`},
		{"verbosity 1 noreply\r\n", `verbosity keys=[] noreply args=["1" "noreply"]`},
		{"flush_all\r\n", `flush_all keys=[]`},
		{"flush_all 10\r\n", `flush_all keys=[] args=["10"]`},
		{"stats items\r\n", `stats keys=[] args=["items"]`},
		{"cache_memlimit 64\r\n", `cache_memlimit keys=[] args=["64"]`},
		{"get " + strings.Repeat("k", 250) + "\r\n", `get keys=["` + strings.Repeat("k", 250) + `"]`},
		{"get ключ\r\n", `get keys=["ключ"]`},
	}
	for _, tt := range tests {
		for how, br := range readers(tt.input + "mn\r\n") {
			t.Run(strings.Fields(tt.input)[0]+"/"+how, func(t *testing.T) {
				r := NewRequestReader(br, RequestLimits{})
				req, err := r.ReadRequest()
				if err != nil {
					t.Fatalf("%q: %v", tt.input, err)
				}
				if got := describe(req); got != tt.want {
					t.Fatalf("%q:\n got %s\nwant %s", tt.input, got, tt.want)
				}
				if string(req.Raw()) != tt.input {
					t.Fatalf("raw %q, want %q", req.Raw(), tt.input)
				}
				next, err := r.ReadRequest()
				if err != nil || next.Command != CmdMetaNoop {
					t.Fatalf("the next request: %v, %v", next, err)
				}
			})
		}
	}
}

func TestReadRequestErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		lim   RequestLimits
		want  string
		fatal bool
	}{
		{"empty line", "\r\n", RequestLimits{}, "ERROR", false},
		{"unknown command", "GET k\r\n", RequestLimits{}, "ERROR", false},
		{"get without keys", "get\r\n", RequestLimits{}, "ERROR", false},
		{"gat without keys", "gat 10\r\n", RequestLimits{}, "ERROR", false},
		{"key too long", "get " + strings.Repeat("k", 251) + "\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"control character in key", "get a\tb\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"bad gat exptime", "gat x a\r\n", RequestLimits{}, "CLIENT_ERROR invalid exptime argument", false},
		{"set missing fields", "set k 0 0\r\n", RequestLimits{}, "ERROR", false},
		{"set bad length", "set k 0 0 x\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"set negative length", "set k 0 0 -1\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"set absurd length", "set k 0 0 99999999999\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", true},
		{"set bad flags", "set k x 0 1\r\na\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"set flags over 32 bits", "set k 4294967296 0 1\r\na\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"set bad exptime", "set k 0 x 1\r\na\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"set bad noreply", "set k 0 0 1 please\r\na\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"set key too long", "set " + strings.Repeat("k", 251) + " 0 0 1\r\na\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"cas bad unique", "cas k 0 0 1 x\r\na\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		// As in memcached, the two bytes after the block are consumed as its terminator and what
		// follows (the "\r\n" here) is read as the next request: see readsLeftover.
		{"bad data chunk", "set k 0 0 1\r\nabc\r\n", RequestLimits{}, "CLIENT_ERROR bad data chunk", false},
		{"value too large", "set k 0 0 11\r\nhello world\r\n", RequestLimits{MaxValueLen: 10}, "SERVER_ERROR object too large for cache", false},
		{"delete extra token", "delete k 1\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", false},
		{"delete too many", "delete k 0 noreply x\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", false},
		{"incr missing delta", "incr k\r\n", RequestLimits{}, "ERROR", false},
		{"incr bad delta", "incr k -1\r\n", RequestLimits{}, "CLIENT_ERROR invalid numeric delta argument", false},
		{"touch bad exptime", "touch k soon\r\n", RequestLimits{}, "CLIENT_ERROR invalid exptime argument", false},
		{"meta without key", "mg\r\n", RequestLimits{}, "ERROR", false},
		{"meta key too long", "mg " + strings.Repeat("k", 251) + " v\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"meta bad flag", "mg k 1\r\n", RequestLimits{}, "CLIENT_ERROR invalid flag", false},
		{"meta duplicate flag", "mg k v v\r\n", RequestLimits{}, "CLIENT_ERROR duplicate flag", false},
		{"meta opaque too long", "mg k O" + strings.Repeat("x", 32) + "\r\n", RequestLimits{}, "CLIENT_ERROR opaque token too long", false},
		{"meta bad base64", "mg YQ b v\r\n", RequestLimits{}, "CLIENT_ERROR error decoding key", false},
		{"ms without length", "ms k\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"ms bad length", "ms k abc\r\n", RequestLimits{}, "CLIENT_ERROR bad command line format", false},
		{"ms bad flag", "ms k 2 !\r\nab\r\n", RequestLimits{}, "CLIENT_ERROR invalid flag", false},
		{"ms bad data chunk", "ms k 2\r\nabc\r\n", RequestLimits{}, "CLIENT_ERROR bad data chunk", false},
		{"ms too large", "ms k 5\r\nhello\r\n", RequestLimits{MaxValueLen: 4}, "SERVER_ERROR object too large for cache", false},
		{"line too long", "get " + strings.Repeat("k ", 100), RequestLimits{MaxLineLen: 64}, "CLIENT_ERROR line too long", true},
	}
	for _, tt := range tests {
		// A request that is not fatal must leave the reader at the next request.
		for how, br := range readers(tt.input + "mn\r\n") {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				r := NewRequestReader(br, tt.lim)
				_, err := r.ReadRequest()
				var perr *ProtocolError
				if !errors.As(err, &perr) {
					t.Fatalf("err = %v, want *ProtocolError", err)
				}
				if perr.Error() != tt.want || perr.Fatal != tt.fatal {
					t.Fatalf("error %q fatal %v, want %q fatal %v", perr.Error(), perr.Fatal, tt.want, tt.fatal)
				}
				if string(perr.AppendReply(nil)) != tt.want+"\r\n" {
					t.Fatalf("reply %q", perr.AppendReply(nil))
				}
				if tt.fatal {
					return
				}
				if strings.HasSuffix(tt.name, "bad data chunk") {
					readsLeftover(t, r)
				}
				next, err := r.ReadRequest()
				if err != nil || next.Command != CmdMetaNoop {
					t.Fatalf("after the error the next request is %v, %v", next, err)
				}
			})
		}
	}
}

// readsLeftover reads the empty line a bad data chunk leaves behind, which memcached answers
// with ERROR too.
func readsLeftover(t *testing.T, r *RequestReader) {
	t.Helper()
	if _, err := r.ReadRequest(); err == nil || err.Error() != "ERROR" {
		t.Fatalf("leftover line: %v", err)
	}
}

func TestReadRequestEndOfStream(t *testing.T) {
	tests := []struct {
		input string
		want  error
	}{
		{"", io.EOF},
		{"get k", io.ErrUnexpectedEOF},
		{"set k 0 0 5\r\nab", io.ErrUnexpectedEOF},
		{"set k 0 0 500000000\r\nab", io.ErrUnexpectedEOF}, // too large: swallowing meets the end
	}
	for _, tt := range tests {
		_, err := NewRequestReader(bufio.NewReader(strings.NewReader(tt.input)), RequestLimits{}).ReadRequest()
		if !errors.Is(err, tt.want) {
			t.Errorf("%q: %v, want %v", tt.input, err, tt.want)
		}
	}
}

// A declared data length within the limit but never sent must not allocate the declared size.
func TestReadRequestDoesNotAllocateDeclaredLength(t *testing.T) {
	r := NewRequestReader(bufio.NewReader(strings.NewReader("set k 0 0 1000000\r\nshort")), RequestLimits{})
	if _, err := r.ReadRequest(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	if c := cap(r.raw); c > 128<<10 {
		t.Fatalf("buffer grew to %d bytes", c)
	}
}

func TestRequestForwarding(t *testing.T) {
	tests := []struct {
		input    string
		sentinel bool
	}{
		{"get a b\r\n", false},
		{"set k 0 0 1 noreply\r\nx\r\n", true},
		{"mg k v q\r\n", true},
		{"ms k 1 q\r\nx\r\n", true},
		{"mg k v\r\n", false},
		{"mn\r\n", false},
	}
	for _, tt := range tests {
		req, err := NewRequestReader(bufio.NewReader(strings.NewReader(tt.input)), RequestLimits{}).ReadRequest()
		if err != nil {
			t.Fatal(err)
		}
		want := tt.input
		if tt.sentinel {
			want += NoopSentinel
		}
		if got := string(req.AppendForward(nil)); got != want || req.Expect().Sentinel != tt.sentinel {
			t.Errorf("%q: forward %q sentinel %v", tt.input, got, req.Expect().Sentinel)
		}
		if req.Expect().Command != req.Command {
			t.Errorf("%q: expect %v", tt.input, req.Expect())
		}
	}
}

func TestReadRequestPipelineReusesBuffers(t *testing.T) {
	input := "set a 0 0 1\r\n1\r\nget a b\r\nmg b v q\r\ndelete a\r\n"
	r := NewRequestReader(bufio.NewReader(strings.NewReader(input)), RequestLimits{})
	var raw strings.Builder
	for range 4 {
		req, err := r.ReadRequest()
		if err != nil {
			t.Fatal(err)
		}
		raw.Write(req.Raw())
	}
	if raw.String() != input {
		t.Fatalf("raw bytes %q", raw.String())
	}
	if _, err := r.ReadRequest(); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	r.Reset(bufio.NewReader(strings.NewReader("get z\r\n")))
	req, err := r.ReadRequest()
	if err != nil || string(req.Key()) != "z" {
		t.Fatalf("after Reset: %v %v", req, err)
	}
}

func TestParseAuthSet(t *testing.T) {
	tests := []struct {
		input      string
		user, pass string
		ok         bool
	}{
		{"set auth 0 0 12\r\nalice s3cret\r\n", "alice", "s3cret", true},
		{"set x 1 2 13\r\nbob pass word\r\n", "bob", "pass word", true},
		{"set x 0 0 5\r\nalice\r\n", "", "", false},
		{"set x 0 0 6\r\nalice \r\n", "", "", false},
		{"add x 0 0 12\r\nalice s3cret\r\n", "", "", false},
	}
	for _, tt := range tests {
		req, err := NewRequestReader(bufio.NewReader(strings.NewReader(tt.input)), RequestLimits{}).ReadRequest()
		if err != nil {
			t.Fatal(err)
		}
		user, pass, err := ParseAuthSet(req)
		if (err == nil) != tt.ok || string(user) != tt.user || string(pass) != tt.pass {
			t.Errorf("%q: %q %q %v", tt.input, user, pass, err)
		}
		if err != nil && err.Error() != "CLIENT_ERROR authentication failure" {
			t.Errorf("%q: error %q", tt.input, err)
		}
	}
}

// errNeedMore ends the bytes a completeness test buffers: a parser that returns it needed more.
var errNeedMore = errors.New("needs more bytes")

func TestCompletenessTellsWhetherReadRequestWaits(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       protocol.Completeness
	}{
		{"nothing", "", protocol.Incomplete},
		{"line in part", "get k", protocol.Incomplete},
		{"retrieval", "get k\r\n", protocol.Complete},
		{"two requests", "get a\r\nget b", protocol.Complete},
		{"set without data", "set k 0 0 5\r\n", protocol.Incomplete},
		{"set with data in part", "set k 0 0 5\r\nhello\r", protocol.Incomplete},
		{"set", "set k 0 0 5\r\nhello\r\n", protocol.Complete},
		{"set noreply", "set k 0 0 5 noreply\r\nhello\r\n", protocol.Complete},
		{"cas in part", "cas k 0 0 5 1\r\nhe", protocol.Incomplete},
		{"cas", "cas k 0 0 5 1\r\nhello\r\n", protocol.Complete},
		{"meta set in part", "ms k 5 T0\r\nhe", protocol.Incomplete},
		{"meta set", "ms k 5\r\nhello\r\n", protocol.Complete},
		{"meta get", "mg k v\r\n", protocol.Complete},
		{"refused set still reads its data", "set k x 0 5\r\nhel", protocol.Incomplete},
		{"set refused from its line", "set k 0 0\r\n", protocol.Complete},
		{"set with a bad length", "set k 0 0 x\r\n", protocol.Complete},
		{"meta set without a length", "ms k\r\n", protocol.Complete},
		{"unknown command", "bogus\r\n", protocol.Complete},
		{"empty line", "\r\n", protocol.Complete},
		{"line over the limit", strings.Repeat("a", 40), protocol.Undecided},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(io.MultiReader(strings.NewReader(tc.data), iotest.ErrReader(errNeedMore)), 64)
			_, _ = br.Peek(len(tc.data))
			r := NewRequestReader(br, RequestLimits{MaxLineLen: 32})
			got := r.Completeness()
			if got != tc.want {
				t.Fatalf("Completeness() = %d, want %d", got, tc.want)
			}
			req, err := r.ReadRequest()
			needed := errors.Is(err, errNeedMore)
			if got == protocol.Complete && needed || got == protocol.Incomplete && !needed {
				t.Fatalf("Completeness() = %d, but ReadRequest returned %v", got, err)
			}
			// The request read after Completeness is the one read without it.
			alone, aloneErr := NewRequestReader(bufio.NewReader(strings.NewReader(tc.data)), RequestLimits{MaxLineLen: 32}).ReadRequest()
			if (err == nil) != (aloneErr == nil) || err == nil && describe(req) != describe(alone) {
				t.Fatalf("after Completeness: %v, %v; alone: %v, %v", req, err, alone, aloneErr)
			}
		})
	}
}
