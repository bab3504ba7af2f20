package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// streamOnce copies one reply from input as a link streaming it to a client would, and
// returns the bytes the client received, and the copy's error; expect is a memcached
// request's.
func streamOnce(proto Protocol, expect memcache.Expect, input []byte) ([]byte, error) {
	br := bufio.NewReaderSize(bytes.NewReader(input), ioBufferSize)
	l := &link{p: &Proxy{}, br: br}
	if proto == Redis {
		l.replies = resp.NewReplyReader(br, resp.ReplyLimits{})
	}
	client, proxySide := net.Pipe()
	received := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(client)
		received <- b
	}()
	dst := &conn{p: &Proxy{opts: Options{ClientWriteTimeout: time.Minute}}, nc: proxySide, ctx: context.Background()}
	sc := newStreamCopy(&replyStream{l: l, e: entry{expect: expect}}, dst)
	defer sc.release()
	var err error
	if proto == Redis {
		err = sc.copyRESP()
	} else {
		err = sc.copyMemcache()
	}
	sc.flush()
	proxySide.Close()
	return <-received, err
}

// getExpect is a memcached get's.
var getExpect = memcache.Expect{Command: memcache.CmdGet}

// wholeReplyLen is how many bytes the proxy's ordinary reader takes for the first reply of
// input (for memcached, a response to a request expecting expect), or false when it finds none.
func wholeReplyLen(proto Protocol, expect memcache.Expect, input []byte) (int, bool) {
	br := bufio.NewReader(bytes.NewReader(input))
	if proto == Redis {
		r, err := resp.NewReplyReader(br, resp.ReplyLimits{}).ReadReply()
		return len(r.Raw()), err == nil
	}
	r, err := memcache.NewResponseReader(br, memcache.ResponseLimits{}).ReadResponse(expect)
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
		{Redis, "*2\r\n-ERR " + strings.Repeat("e", 3000) + "\r\n(" + strings.Repeat("9", 5000) + "\r\n"},
		{Redis, "|1\r\n+a\r\n+b\r\n$3\r\nabc\r\n"},
		{Redis, "$" + "70000\r\n" + strings.Repeat("v", 70000) + "\r\n"},
		{Redis, "*2\r\n$3\r\nab"},
		{Memcached, "VALUE a 0 1\r\nx\r\nVALUE b 5 3 9\r\nxyz\r\nEND\r\n"},
		{Memcached, "END\r\n"},
		{Memcached, "VALUE \r  0 3 \r\n000\r\nEND\r\n"},
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
		checkStreamedCopy(t, proto, getExpect, input)
	})
}

// checkStreamedCopy fails the test unless the stream copies exactly the reply the ordinary
// reader reads from input, when it reads one, and (redis) refuses what the reader refuses.
// (The stream's memcached framing is looser: it passes on a VALUE line's flags and cas
// unchecked.)
func checkStreamedCopy(t *testing.T, proto Protocol, expect memcache.Expect, input []byte) {
	t.Helper()
	copied, err := streamOnce(proto, expect, input)
	want, ok := wholeReplyLen(proto, expect, input)
	if !ok {
		if proto == Redis && err == nil {
			t.Fatalf("redis reply %.200q: streamed %d bytes, the ordinary reader refuses it", input, len(copied))
		}
		return
	}
	if err != nil || !bytes.Equal(copied, input[:want]) {
		t.Fatalf("%s reply %.200q (%+v): streamed %d bytes (%v), the whole reply is %d", proto, input, expect, len(copied), err, want)
	}
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
		{Redis, "*1\r\n+" + strings.Repeat("x", resp.DefaultReplyMaxLineLen), "longer than 1048576 bytes"},
		{Redis, "*1\r\n:" + strings.Repeat("1", 2*maxStreamLine) + "\r\n", "invalid integer"},
		{Redis, "*2\r\n#x\r\n", "invalid boolean"},
		{Redis, "*1\r\n=3\r\ntxt\r\n", "format prefix"},
		{Redis, "*1\r\n=5\r\ntxt!x\r\n", "format prefix"},
		{Memcached, "SERVER_ERROR " + strings.Repeat("x", memcache.DefaultMaxLineLen), "longer than 65536 bytes"},
		{Memcached, "VALUE a 0\r\n", "bad VALUE line"},
		{Memcached, "VALUE a 4294967296 1\r\nx\r\nEND\r\n", "bad VALUE line"},
		{Memcached, "VALUE a 0 x\r\n", "bad VALUE line"},
		{Memcached, "NOT_STORED\r\n", `got "NOT_STORED"`},
	}
	for _, tc := range tests {
		t.Run(string(tc.proto)+" "+tc.want, func(t *testing.T) {
			_, err := streamOnce(tc.proto, getExpect, []byte(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: error %v, want %q", tc.input, err, tc.want)
			}
		})
	}
}

// FuzzStreamedMetaGetFraming checks the streamed copy of a meta get's VA block (and the MN
// after a quiet one) against the ordinary response reader, as FuzzStreamedReplyFraming does
// for other replies: every VA response it reads, the stream copies exactly.
func FuzzStreamedMetaGetFraming(f *testing.F) {
	for _, seed := range []string{"VA 2 t1\r\nab\r\n", "VA 0\r\n\r\n", "VA 3 f5 c9\r\nxyz\r\nMN\r\n", "VA 2\r\nabc\r\n", "EN\r\n"} {
		f.Add(strings.HasSuffix(seed, "MN\r\n"), []byte(seed))
	}
	f.Fuzz(func(t *testing.T, quiet bool, input []byte) {
		if metaValueSize(peekLine(bufio.NewReader(bytes.NewReader(input)))) < 0 {
			return // not a VA block: never streamed
		}
		checkStreamedCopy(t, Memcached, memcache.Expect{Command: memcache.CmdMetaGet, Sentinel: quiet}, input)
	})
}

// FuzzBufferedReplyLen checks, against the ordinary reply reader, the scan that tells whether
// a collection reply is whole in a link's read buffer (read whole) or not (streamed): for every
// reply the reader reads, a length it finds is the whole reply's, and no proper prefix passes
// for a whole one. (It follows framing only: what it finds whole and the reader refuses for
// its content fails the link either way.)
func FuzzBufferedReplyLen(f *testing.F) {
	for _, seed := range []string{"*3\r\n$1\r\na\r\n$-1\r\n_\r\n", "%1\r\n+k\r\n*2\r\n:1\r\n,1.5\r\n",
		"|1\r\n+a\r\n+b\r\n$3\r\nabc\r\n", "*2\r\n$3\r\nab", "*-1\r\n", "~2\r\n#t\r\n(12\r\n", "*1\r\n$4\r\nab\r\n\r\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) { checkBufferedScan(t, Redis, bufferedReplyLen, input) })
}

// checkBufferedScan fails the test unless, when the ordinary reader reads a reply (a get's
// response for memcached) from input, scan finds none or one of the same length, and finds
// none in any proper prefix of it.
func checkBufferedScan(t *testing.T, proto Protocol, scan func([]byte) int, input []byte) {
	t.Helper()
	want, ok := wholeReplyLen(proto, getExpect, input)
	if !ok {
		return
	}
	if n := scan(input); n != 0 && n != want {
		t.Fatalf("%q: found a whole reply of %d bytes, the reader read %d", input, n, want)
	}
	for k := range want {
		if m := scan(input[:k]); m != 0 {
			t.Fatalf("%q: its first %d bytes pass for a whole reply of %d", input, k, m)
		}
	}
}

// TestBufferedReplyLen covers the scans that tell a reply whole in a link's read buffer.
func TestBufferedReplyLen(t *testing.T) {
	tests := []struct {
		scan  func([]byte) int
		input string
		want  int
	}{
		{bufferedReplyLen, "*2\r\n$1\r\na\r\n:5\r\n+next", 15},
		{bufferedReplyLen, "*2\r\n$1\r\na\r\n", 0},
		{bufferedReplyLen, "$3\r\nabc\r\n", 9},
		{bufferedReplyLen, "$3\r\nab", 0},
		{bufferedReplyLen, "*1\r\n$70000\r\n" + strings.Repeat("v", 100), 0},
		{bufferedReplyLen, "%1\r\n+k\r\n_\r\n", 11},
		{bufferedReplyLen, "*-1\r\n", 5},
		{bufferedReplyLen, "*1\r\n?x\r\n", 0},
		{bufferedReplyLen, "*9999999999\r\n", 0},
		{bufferedReplyLen, strings.Repeat("*1\r\n", maxStreamDepth+1) + ":1\r\n", 0},
		{bufferedResponseLen, "VALUE a 0 1\r\nx\r\nEND\r\nVALUE", 21},
		{bufferedResponseLen, "VALUE a 0 1\r\nx\r\n", 0},
		{bufferedResponseLen, "VALUE a 0 70000\r\n" + strings.Repeat("v", 100), 0},
		{bufferedResponseLen, "END\r\n", 5},
		{bufferedResponseLen, "SERVER_ERROR out of memory\r\n", 28},
		{bufferedResponseLen, "VALUE a 0 x\r\n", 0},
		{bufferedResponseLen, "VALUE a 0 1\r\nxy\r\nEND\r\n", 0},
		{bufferedResponseLen, "VALUE a 0 2\r\nxy\n\nEND\r\n", 0},
	}
	for _, tc := range tests {
		if got := tc.scan([]byte(tc.input)); got != tc.want {
			t.Errorf("%.40q: length %d, want %d", tc.input, got, tc.want)
		}
	}
}

// TestValueLineSize covers the value sizes memcached's VALUE and meta VA lines announce.
func TestValueLineSize(t *testing.T) {
	tests := []struct {
		line string
		size func([]byte) int64
		want int64
	}{
		{"VALUE k 0 70000", valueLineSize, 70000},
		{"VALUE k 5 12 99", valueLineSize, 12},
		{"VALUE k  0  12 ", valueLineSize, 12},
		{" VALUE k 0 12", valueLineSize, -1},
		{"VALUE k 4294967296 12", valueLineSize, -1},
		{"VALUE k 0 12 x", valueLineSize, -1},
		{"VALUE k 0 12 9 9", valueLineSize, -1},
		{"VALUE k 0", valueLineSize, -1},
		{"VALUE k 0 x", valueLineSize, -1},
		{"VALUE k", valueLineSize, -1},
		{"END", valueLineSize, -1},
		{"", valueLineSize, -1},
		{"VA 70000", metaValueSize, 70000},
		{"VA 12 f5 t-1", metaValueSize, 12},
		{"VA", metaValueSize, -1},
		{"VA x f1", metaValueSize, -1},
		{"VALUE k 0 12", metaValueSize, -1},
		{"HD", metaValueSize, -1},
	}
	for _, tc := range tests {
		if got := tc.size([]byte(tc.line)); got != tc.want {
			t.Errorf("%q: size %d, want %d", tc.line, got, tc.want)
		}
	}
}

// TestStreamedRepliesKeepOrderAcrossNodes pipelines reads of large and small values through
// node A of a two-node tenant, against real engines: with every key on node B, large replies
// are streamed twice (by B from its engine, by A from its peer link); with the keys spread,
// some are local and multi-key reads are split. Every reply comes back whole and in order.
func TestStreamedRepliesKeepOrderAcrossNodes(t *testing.T) {
	values := map[string]string{
		"big1":  strings.Repeat("a", 200_000),
		"big2":  strings.Repeat("b", 1000*1000),
		"small": "s",
	}
	for _, weights := range [][2]float64{{0, 1}, {1, 1}} {
		for _, proto := range []Protocol{Redis, Memcached} {
			t.Run(fmt.Sprintf("%s weights %v", proto, weights), func(t *testing.T) {
				cl := startCluster(t, proto, weights[0], weights[1])
				reads := [][]string{{"big1"}, {"small"}, {"big1", "small", "big2", "missing"}, {"big2"}, {"small", "big1"}}
				if proto == Redis {
					c := loginRESP(t, cl.a, cl.acct)
					for k, v := range values {
						if got := c.do("SET", k, v); got != "+OK\r\n" {
							t.Fatalf("SET %s: %q", k, got)
						}
					}
					if held := enginesHold(t, []string{cl.engineA, cl.engB}, []string{"big1", "big2", "small"}); weights[0] == 0 && slices.Contains(held[0], true) {
						t.Fatalf("node A's engine holds keys with weight 0: %v", held)
					}
					var batch []byte
					for _, keys := range reads {
						batch = resp.AppendCommandStrings(batch, append([]string{"MGET"}, keys...)...)
					}
					go c.write(batch)
					for _, keys := range reads {
						want := fmt.Sprintf("*%d\r\n", len(keys))
						for _, k := range keys {
							if v, ok := values[k]; ok {
								want += fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
							} else {
								want += "$-1\r\n"
							}
						}
						if got := c.read(); got != want {
							t.Fatalf("MGET %v: %d bytes, want %d", keys, len(got), len(want))
						}
					}
					return
				}
				c := loginMC(t, cl.a, cl.acct)
				for k, v := range values {
					c.set(k, v)
				}
				var batch string
				for _, keys := range reads {
					batch += "get " + strings.Join(keys, " ") + "\r\n"
				}
				go c.write(batch)
				for _, keys := range reads {
					for _, k := range keys {
						v, ok := values[k]
						if !ok {
							continue
						}
						if line := c.line(); line != fmt.Sprintf("VALUE %s 0 %d", k, len(v)) {
							t.Fatalf("get %v: %q", keys, line)
						}
						if data := c.line(); data != v {
							t.Fatalf("get %v: value of %s: %d bytes, want %d", keys, k, len(data), len(v))
						}
					}
					if line := c.line(); line != "END" {
						t.Fatalf("get %v: %q, want END", keys, line)
					}
				}
			})
		}
	}
}

// TestStreamedLongLinesMatchOrdinaryReader: a streamed reply may hold lines as long as the
// ordinary reader takes. For generated replies holding one line of 1 KiB to just over the
// reader's limit (simple strings, errors and numbers in a collection; memcached VALUE and VA
// lines), the stream accepts exactly the replies the ordinary reader accepts and passes on
// exactly their bytes, wherever the line falls in the stream's chunk.
func TestStreamedLongLinesMatchOrdinaryReader(t *testing.T) {
	type lineKind struct {
		prefix string
		fill   byte
		valid  bool // a line of any length within the limit is a valid reply line
	}
	respKinds := []lineKind{{"+", 's', true}, {"-ERR ", 'e', true}, {"(", '7', true}, {",1.", '0', true},
		{":", '1', false}, {"#", 't', false}, {"_", 'x', false}, {"$", '9', false}, {"*", '9', false}}
	mcKinds := []lineKind{{"VALUE ", 'k', true}, {"VA 1 O", 'o', true}}
	check := func(t *testing.T, proto Protocol, expect memcache.Expect, input []byte, wantAccepted bool) {
		t.Helper()
		copied, err := streamOnce(proto, expect, input)
		whole, ok := wholeReplyLen(proto, expect, input)
		switch {
		case ok != wantAccepted:
			t.Fatalf("%.80q (%d bytes): the ordinary reader accepts it: %v, want %v", input, len(input), ok, wantAccepted)
		case ok != (err == nil):
			t.Fatalf("%.80q (%d bytes): the ordinary reader accepts it: %v, the stream's error: %v", input, len(input), ok, err)
		case ok && !bytes.Equal(copied, input[:whole]):
			t.Fatalf("%.80q: streamed %d bytes, not the reply's %d", input, len(copied), whole)
		}
	}
	for _, proto := range []Protocol{Redis, Memcached} {
		limit, kinds := resp.DefaultReplyMaxLineLen, respKinds
		if proto == Memcached {
			limit, kinds = memcache.DefaultMaxLineLen, mcKinds
		}
		for _, kind := range kinds {
			// n is the line's length with its CRLF.
			for _, n := range []int{maxStreamLine - 1, maxStreamLine, maxStreamLine + 1, 4 << 10, ioBufferSize + 1, 70_000, limit, limit + 1} {
				if n > limit+1 {
					continue
				}
				line := kind.prefix + strings.Repeat(string(kind.fill), n-2-len(kind.prefix))
				accepted := kind.valid && n <= limit
				t.Run(fmt.Sprintf("%s %q %d", proto, kind.prefix, n), func(t *testing.T) {
					if proto == Memcached {
						if strings.HasPrefix(line, "VA ") {
							check(t, proto, memcache.Expect{Command: memcache.CmdMetaGet}, []byte(line+"\r\nv\r\n"), accepted)
							return
						}
						// A VALUE line of a long key, its flags and size.
						line = line[:len(line)-len(" 0 1")] + " 0 1"
						check(t, proto, getExpect, []byte(line+"\r\nv\r\nEND\r\n"), accepted)
						return
					}
					bulk := strings.Repeat("b", streamChunk-100)
					for _, reply := range []string{
						"*3\r\n$1\r\na\r\n" + line + "\r\n:7\r\n",
						"%1\r\n+k\r\n*1\r\n" + line + "\r\n",
						fmt.Sprintf("*2\r\n$%d\r\n%s\r\n%s\r\n", len(bulk), bulk, line), // the line crosses the chunk's end
					} {
						check(t, proto, getExpect, []byte(reply), accepted)
					}
				})
			}
		}
	}
}

// TestStreamedLongLinesFromRedis: real redis replies whose collections hold long lines (a
// script's status and error replies; a big collection makes them streamed) reach the client
// byte for byte as redis sends them, in RESP2 and RESP3. (Which replies of a real engine hold
// lines over 1 KiB: in redis, only what scripts return; memcached's VALUE and VA lines stay
// within its 250-byte keys and 32-byte opaques.)
func TestStreamedLongLinesFromRedis(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	n, engine := singleNode(t, Redis, acct, Options{})
	const script = "return {redis.status_reply(string.rep('s', tonumber(ARGV[1]))), " +
		"redis.error_reply('ERR ' .. string.rep('e', tonumber(ARGV[1]))), redis.call('LRANGE', KEYS[1], 0, -1)}"
	for _, proto := range []string{"2", "3"} {
		c, direct := loginRESP(t, n, acct), dialRESP(t, "unix", engine)
		for _, cl := range []*respClient{c, direct} {
			if got := cl.do("HELLO", proto); isError(got) {
				t.Fatalf("HELLO %s: %q", proto, got)
			}
		}
		for i := range 20 {
			if got := c.do("RPUSH", "list", strings.Repeat(string(rune('a'+i)), 5000)); isError(got) {
				t.Fatalf("RPUSH: %q", got)
			}
		}
		for _, lineLen := range []int{maxStreamLine, 70_000, 900_000} {
			args := []string{"EVAL", script, "1", "list", fmt.Sprint(lineLen)}
			got, want := c.do(args...), direct.do(args...)
			if got != want || len(want) < 2*lineLen {
				t.Errorf("RESP%s, lines of %d bytes: %d bytes through the proxy, %d from redis", proto, lineLen, len(got), len(want))
			}
		}
		if got := c.do("DEL", "list"); got != ":1\r\n" {
			t.Fatalf("DEL: %q", got)
		}
	}
}

// TestLongLineBufferIsDropped: a line longer than the chunk buffer's spare room grows a
// buffer of its own, about the line's size, which the next flush drops: the stream is back to
// its pooled chunk buffer.
func TestLongLineBufferIsDropped(t *testing.T) {
	line := "+" + strings.Repeat("s", 900_000)
	input := []byte("*2\r\n" + line + "\r\n:1\r\n")
	br := bufio.NewReaderSize(bytes.NewReader(input), ioBufferSize)
	l := &link{p: &Proxy{}, br: br, replies: resp.NewReplyReader(br, resp.ReplyLimits{})}
	sc := newStreamCopy(&replyStream{l: l}, nil)
	defer sc.release()
	pooled := cap(sc.buf)
	var f respFrame
	f.start()
	for range 2 {
		if err := sc.copyHeader(&f, -1); err != nil {
			t.Fatal(err)
		}
	}
	if grown := cap(sc.buf); grown < len(line) || grown > 2*len(line) {
		t.Errorf("buffer of %d bytes for a line of %d", grown, len(line))
	}
	sc.flush()
	if cap(sc.buf) != pooled {
		t.Errorf("after the flush the buffer holds %d bytes, want the pooled %d", cap(sc.buf), pooled)
	}
	if err := sc.copyHeader(&f, -1); err != nil || !f.done() || sc.total != int64(len(input)-len(":1\r\n")) {
		t.Errorf("rest of the reply: %v, done %v, %d bytes passed on", err, f.done(), sc.total)
	}
}
