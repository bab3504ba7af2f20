package memcache

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// engineStep is one client request and what the real memcached's response must describe as (a
// prefix of describeResponse, so cas values and version numbers may be left out).
type engineStep struct {
	request string
	want    string
}

// engineScript exercises every command the proxy forwards, and the framing cases that matter:
// multi-key gets with misses and duplicates, noreply, the meta q flag on hits and misses, base64
// keys, opaque tokens.
var engineScript = []engineStep{
	{"set a 5 0 3\r\nabc\r\n", "STORED"},
	{"add a 0 0 1\r\nx\r\n", "NOT_STORED"},
	{"replace a 6 0 3\r\nxyz\r\n", "STORED"},
	{"append a 0 0 1\r\n!\r\n", "STORED"},
	{"prepend a 0 0 1\r\n^\r\n", "STORED"},
	{"get a nokey a\r\n", `END value(a 6 "^xyz!") value(a 6 "^xyz!")`},
	{"get nokey\r\n", "END"},
	{"gets a\r\n", `END value(a 6 "^xyz!" cas=`},
	{"cas a 0 0 1 1\r\nz\r\n", "EXISTS"},
	{"cas nokey 0 0 1 1\r\nz\r\n", "NOT_FOUND"},
	{"set n 0 0 2\r\n10\r\n", "STORED"},
	{"incr n 5\r\n", "NUMBER 15"},
	{"decr n 100\r\n", "NUMBER 0"},
	{"incr nokey 1\r\n", "NOT_FOUND"},
	{"incr a 1\r\n", `CLIENT_ERROR text="cannot increment or decrement non-numeric value"`},
	{"touch a 100\r\n", "TOUCHED"},
	{"touch nokey 100\r\n", "NOT_FOUND"},
	{"gat 100 a\r\n", `END value(a 6 "^xyz!")`},
	{"gats 100 a nokey\r\n", `END value(a 6 "^xyz!" cas=`},
	{"delete a\r\n", "DELETED"},
	{"delete a\r\n", "NOT_FOUND"},
	{"delete n 0 noreply\r\n", "SUPPRESSED"},
	{"set q 0 0 1 noreply\r\n1\r\n", "SUPPRESSED"},
	{"incr q 1 noreply\r\n", "SUPPRESSED"},
	{"touch q 10 noreply\r\n", "SUPPRESSED"},
	{"get q\r\n", `END value(q 0 "2")`},

	{"ms m 3 T0 F7\r\nabc\r\n", "HD"},
	{"mg m v f t s k Oop\r\n", `VA data="abc" flags=["f7" "t-1" "s3" "km" "Oop"]`},
	{"mg m\r\n", "HD"},
	{"mg nokey v\r\n", "EN"},
	{"mg nokey v q\r\n", "SUPPRESSED"},
	{"mg m v q\r\n", `VA data="abc"`},
	{"mg m q\r\n", "HD"},
	{"mg bQ== b v k\r\n", `VA data="abc" flags=["km"]`}, // the item was stored under a text key
	{"ms m2 1 q\r\nz\r\n", "SUPPRESSED"},
	{"ms m2 1 MA\r\n!\r\n", "HD"},
	{"ms m2 1 C1\r\nz\r\n", "EX"},
	{"ms nokey 1 MR\r\nz\r\n", "NS"},
	{"ms bTM= 2 b q\r\nb6\r\n", "SUPPRESSED"},
	{"mg m3 v\r\n", `VA data="b6"`},
	{"md m2 q\r\n", "SUPPRESSED"},
	{"md m2 q\r\n", "NF"},
	{"md m2\r\n", "NF"},
	{"ma cnt N0 J10 v\r\n", `VA data="10"`},
	{"ma cnt MD D3 v\r\n", `VA data="7"`},
	{"ma cnt q\r\n", "SUPPRESSED"},
	{"ma nocnt q\r\n", "NF"},
	{"me m\r\n", `ME text="m exp=-1 `},
	{"me nokey\r\n", "EN"},
	{"mn\r\n", "MN"},
	{"version\r\n", `VERSION text="1.6.`},
	{"verbosity 1\r\n", "OK"},
	{"cache_memlimit 64\r\n", "OK"},
	{"stats\r\n", "STATS pid="},
	{"flush_all\r\n", "OK"},
}

// engineSession forwards requests the way the proxy will: parse with RequestReader, forward
// AppendForward's bytes, frame the response with req.Expect().
type engineSession struct {
	t        *testing.T
	conn     net.Conn
	w        *bufio.Writer
	r        *ResponseReader
	requests *RequestReader
	pending  []Expect
}

func newEngineSession(t *testing.T, sock string, readBuffer int) *engineSession {
	conn := enginetest.Dial(t, sock)
	return &engineSession{
		t: t, conn: conn, w: bufio.NewWriter(conn),
		r: NewResponseReader(bufio.NewReaderSize(conn, readBuffer), ResponseLimits{}),
	}
}

// forward parses one request from the client bytes and writes it to the engine.
func (s *engineSession) forward(client string) {
	s.t.Helper()
	s.requests = NewRequestReader(bufio.NewReader(strings.NewReader(client)), RequestLimits{})
	req, err := s.requests.ReadRequest()
	if err != nil {
		s.t.Fatalf("%q: %v", client, err)
	}
	if string(req.Raw()) != client {
		s.t.Fatalf("%q: raw %q", client, req.Raw())
	}
	if _, err := s.w.Write(req.AppendForward(nil)); err != nil {
		s.t.Fatal(err)
	}
	s.pending = append(s.pending, req.Expect())
}

func (s *engineSession) response() *Response {
	s.t.Helper()
	if err := s.w.Flush(); err != nil {
		s.t.Fatal(err)
	}
	exp := s.pending[0]
	s.pending = s.pending[1:]
	resp, err := s.r.ReadResponse(exp)
	if err != nil {
		s.t.Fatalf("%s: %v", exp.Command, err)
	}
	return resp
}

func TestEngineScriptOneByOne(t *testing.T) {
	s := newEngineSession(t, enginetest.StartMemcached(t), 4096)
	for _, step := range engineScript {
		s.forward(step.request)
		if got := describeResponse(s.response()); !strings.HasPrefix(got, step.want) {
			t.Errorf("%q: got %s, want %s...", step.request, got, step.want)
		}
	}
}

// The whole script pipelined in one write, the responses read through a 16-byte buffer: framing
// holds across buffer boundaries and back-to-back responses.
func TestEngineScriptPipelined(t *testing.T) {
	s := newEngineSession(t, enginetest.StartMemcached(t), 16)
	for _, step := range engineScript {
		s.forward(step.request)
	}
	for _, step := range engineScript {
		if got := describeResponse(s.response()); !strings.HasPrefix(got, step.want) {
			t.Errorf("%q: got %s, want %s...", step.request, got, step.want)
		}
	}
}

// Merging a get split across two engines: each part's value blocks, then one END, read back as
// one response.
func TestEngineSplitGetMerges(t *testing.T) {
	nodes := []*engineSession{
		newEngineSession(t, enginetest.StartMemcached(t), 4096),
		newEngineSession(t, enginetest.StartMemcached(t), 4096),
	}
	nodes[0].forward("set k1 1 0 2\r\nv1\r\n")
	nodes[1].forward("set k2 2 0 2\r\nv2\r\n")
	for _, n := range nodes {
		if resp := n.response(); resp.Status != StatusStored {
			t.Fatal(resp.Status)
		}
	}
	parts := [][]string{{"k1", "miss1"}, {"k2"}}
	var merged []byte
	for i, n := range nodes {
		var keys [][]byte
		for _, k := range parts[i] {
			keys = append(keys, []byte(k))
		}
		n.forward(string(AppendRetrieval(nil, CmdGet, 0, keys)))
		merged = append(merged, n.response().ValueBlocks()...)
	}
	merged = AppendEnd(merged)
	resp, err := NewResponseReader(bufio.NewReader(strings.NewReader(string(merged))), ResponseLimits{}).ReadResponse(Expect{Command: CmdGet})
	if err != nil {
		t.Fatal(err)
	}
	if got := describeResponse(resp); got != `END value(k1 1 "v1") value(k2 2 "v2")` {
		t.Fatalf("merged %s", got)
	}
}

// The proxy's own error replies read exactly like memcached's for the same bad input.
func TestEngineErrorTextsMatchMemcached(t *testing.T) {
	conn := enginetest.Dial(t, enginetest.StartMemcached(t))
	engine := NewResponseReader(bufio.NewReader(conn), ResponseLimits{})
	bad := []string{
		"GET a\r\n", "\r\n", "get\r\n", "incr\r\n",
		"get " + strings.Repeat("k", 251) + "\r\n",
		"incr a x\r\n", "gat x a\r\n", "touch a soon\r\n",
		"delete a 1\r\n",
		"mg a 1\r\n", "mg a v v\r\n", "mg YQ b v\r\n", "mg a O" + strings.Repeat("x", 32) + "\r\n",
		"ms k\r\n",
		"set big 0 0 2000000\r\n" + strings.Repeat("x", 2000000) + "\r\n",
	}
	for _, input := range bad {
		_, ourErr := NewRequestReader(bufio.NewReader(strings.NewReader(input)), RequestLimits{}).ReadRequest()
		if _, err := conn.Write([]byte(input)); err != nil {
			t.Fatal(err)
		}
		theirs, err := engine.ReadResponse(Expect{Command: CmdGet})
		if err != nil {
			t.Fatalf("%.40q: %v", input, err)
		}
		if ourErr == nil || string(theirs.Raw()) != ourErr.Error()+"\r\n" {
			t.Errorf("%.40q: memcached %q, proxy %v", input, theirs.Raw(), ourErr)
		}
	}
}

// A value near memcached's default item size limit passes through both readers intact.
func TestEngineLargeValue(t *testing.T) {
	s := newEngineSession(t, enginetest.StartMemcached(t), 4096)
	value := strings.Repeat("0123456789", 100000)
	s.forward("set big 0 0 1000000\r\n" + value + "\r\n")
	if resp := s.response(); resp.Status != StatusStored {
		t.Fatalf("set: %s", describeResponse(resp))
	}
	s.forward("get big\r\n")
	resp := s.response()
	if len(resp.Values) != 1 || string(resp.Values[0].Data) != value {
		t.Fatalf("get returned %d values", len(resp.Values))
	}
}

// memcached -Y authentication: the set the helper parses is the one memcached accepts, and the
// proxy's replies to unauthenticated and failed attempts are memcached's.
func TestEngineAuthenticationConvention(t *testing.T) {
	dir, err := os.MkdirTemp("", "cqauth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	authFile := filepath.Join(dir, "auth")
	if err := os.WriteFile(authFile, []byte("alice:s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // memcached reads it as nobody
		t.Fatal(err)
	}
	sock := enginetest.StartMemcached(t, "-Y", authFile)

	s := newEngineSession(t, sock, 4096)
	s.forward("get a\r\n")
	if got := s.response(); string(got.Raw()) != string(AppendClientError(nil, UnauthenticatedMessage)) {
		t.Fatalf("unauthenticated get: %q", got.Raw())
	}
	s.forward("set x 0 0 11\r\nalice wrong\r\n")
	if got := s.response(); string(got.Raw()) != string(AppendClientError(nil, AuthFailureMessage)) {
		t.Fatalf("bad password: %q", got.Raw())
	}

	s = newEngineSession(t, sock, 4096)
	auth := "set x 0 0 12\r\nalice s3cret\r\n"
	req, err := NewRequestReader(bufio.NewReader(strings.NewReader(auth)), RequestLimits{}).ReadRequest()
	if err != nil {
		t.Fatal(err)
	}
	user, pass, err := ParseAuthSet(req)
	if err != nil || string(user) != "alice" || string(pass) != "s3cret" {
		t.Fatalf("ParseAuthSet: %q %q %v", user, pass, err)
	}
	s.forward(auth)
	if got := s.response(); got.Status != StatusStored {
		t.Fatalf("auth: %s", describeResponse(got))
	}
	s.forward("get a\r\n")
	if got := s.response(); got.Status != StatusEnd {
		t.Fatalf("get after auth: %s", describeResponse(got))
	}
}
