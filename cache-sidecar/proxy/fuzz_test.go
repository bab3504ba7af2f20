package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// fuzzConnection feeds arbitrary bytes into a connection handler (over net.Pipe) in front of a
// real engine and fails if the handler panics or does not finish once the client hangs up.
func fuzzConnection(f *testing.F, protocol Protocol, login func(account) []byte, engineArgs []string, seeds []string) {
	acct := newAccount(f, "team-a/cache")
	engine := startEngine(f, protocol, engineArgs...)
	n := startNode(f, "node-a", Options{Protocol: protocol, MaxPipeline: 64})
	n.update(f, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}})
	auth := login(acct)
	for _, s := range seeds {
		f.Add(true, []byte(s))
		f.Add(false, []byte(s))
	}
	f.Fuzz(func(t *testing.T, authenticate bool, input []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.p.runConn(n.p.newConn(server, nil, nil))
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		// Writes fail once the proxy closes the connection (QUIT, a protocol error): expected.
		if authenticate {
			_, _ = client.Write(auth)
		}
		_, _ = client.Write(input)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection handler did not finish after the client closed (input %q)", input)
		}
	})
}

func FuzzRedisConnection(f *testing.F) {
	login := func(a account) []byte { return resp.AppendCommandStrings(nil, "AUTH", a.id, a.password) }
	fuzzConnection(f, Redis, login,
		// Small limits, so no input makes the engine allocate much.
		[]string{"--proto-max-bulk-len", "1048576", "--maxmemory", "64mb"},
		[]string{
			"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
			"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
			"PING\r\nECHO hi\r\nMGET a b c\r\nDEL a b\r\nSCAN 0\r\nDBSIZE\r\n",
			"HELLO 3\r\nGET k\r\nHELLO 2\r\nRESET\r\nGET k\r\n",
			"*1\r\n$abc\r\n", "*-1\r\n*0\r\n", "\"unbalanced\r\n", "$5\r\nhello\r\n",
			"MULTI\r\nEXEC\r\nSUBSCRIBE x\r\nCLIENT SETNAME a\r\nCLIENT GETNAME\r\nSELECT 1\r\n",
			"AUTH a b\r\nAUTH a b\r\nAUTH a b\r\n", "SCAN 18446744073709551615\r\n", "QUIT\r\nGET k\r\n",
		})
}

func FuzzMemcacheConnection(f *testing.F) {
	login := func(a account) []byte {
		creds := a.id + " " + a.password
		return fmt.Appendf(nil, "set auth 0 0 %d\r\n%s\r\n", len(creds), creds)
	}
	fuzzConnection(f, Memcached, login, []string{"-m", "64"}, []string{
		"get k\r\n", "set k 0 0 1\r\nv\r\nget k k k\r\n", "gets a b c\r\ngat 10 a\r\n",
		"mg k v\r\nms k 1 q\r\nx\r\nmd k q\r\nmn\r\n", "set k 0 0 99999999999\r\n",
		"set k 0 0 2\r\nabcdef\r\n", "incr k 1 noreply\r\ndelete k noreply\r\n", "stats\r\nflush_all\r\n",
		"version\r\nquit\r\n", "mg bWs= b v\r\n", "\x00\xff\r\n",
	})
}

// FuzzPayloadLen: any reply bytes give a length within the reply, never a panic.
func FuzzPayloadLen(f *testing.F) {
	for _, seed := range []string{"$5\r\nhello\r\n", "$0\r\n\r\n", "$-1\r\n", "*1\r\n$1\r\na\r\n", "$", ""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if n := payloadLen(raw); n < 0 || n > len(raw) {
			t.Errorf("payloadLen(%q) = %d", raw, n)
		}
	})
}

// FuzzRestartAnnouncementIsNoReply: a peer link tells a peer's announcement of a restart from
// a reply by the bytes at a reply boundary (isRestartAnnouncement), so no reply the link's
// readers accept may look like it: whatever bytes are read as redis replies (RESP2 and RESP3
// share the reader) and as memcached responses (text and meta) to any request, no reply read
// is taken for the announcement.
func FuzzRestartAnnouncementIsNoReply(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n", "-ERR x\r\n", ":1\r\n", "$18\r\n@CQPEER RESTARTING\r\n", "$-1\r\n", "*1\r\n+@\r\n",
		"_\r\n,1.5\r\n#t\r\n(1\r\n=7\r\ntxt:@ab\r\n!1\r\n@\r\n%1\r\n+k\r\n+v\r\n~0\r\n>1\r\n+@\r\n|1\r\n+k\r\n+v\r\n:1\r\n",
		"VALUE @ 0 1\r\n@\r\nEND\r\n", "STORED\r\n", "12 \r\n", "VA 1 k@\r\n@\r\n", "EN\r\n", "HD\r\nMN\r\n", "MN\r\n",
		"VERSION @\r\n", "STAT @ 1\r\nEND\r\n", "SERVER_ERROR @\r\n", peerRestarting, "+OK\r\n" + peerRestarting,
	} {
		for c := range memcache.CmdExtstore + 1 {
			f.Add(uint8(c), c%2 == 0, []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, command uint8, sentinel bool, data []byte) {
		replies := resp.NewReplyReader(bufio.NewReader(bytes.NewReader(data)), resp.ReplyLimits{})
		for {
			reply, err := replies.ReadReply()
			if err != nil {
				break
			}
			if isRestartAnnouncement(reply.Raw()) {
				t.Fatalf("the redis reply %q reads as the announcement of a restart", reply.Raw())
			}
		}
		expect := memcache.Expect{Command: memcache.Command(command), Sentinel: sentinel}
		responses := memcache.NewResponseReader(bufio.NewReader(bytes.NewReader(data)), memcache.ResponseLimits{})
		for {
			r, err := responses.ReadResponse(expect)
			if err != nil {
				break
			}
			if isRestartAnnouncement(r.Raw()) {
				t.Fatalf("the memcached response %q to %v reads as the announcement of a restart", r.Raw(), expect)
			}
		}
	})
}

// FuzzPeerHandshakeLine: whatever bytes open a connection to the peer listener, it answers one
// line, OK or an ERR, and closes the connection (unless the connection was reset under the
// answer, as closing a socket with bytes unread may), and it notes a restart exactly for the
// announcement of one (appendRestartHello): the peer token and a node its routes lead to, in a
// first line that fits maxPeerLineLen. A hello for a tenant is refused here: the node holds
// no partition of it.
func FuzzPeerHandshakeLine(f *testing.F) {
	acct := newAccount(f, "team-a/cache")
	n := startNode(f, "node-a", Options{Protocol: Redis, PeerHandshakeTimeout: time.Second})
	n.update(f, Tenant{ID: acct.id, CredentialHash: acct.hash, Routes: []Route{{Node: "node-b", Weight: 1, PeerAddress: "127.0.0.1:1"}}})
	announcement := string(appendRestartHello(nil, testPeerToken, "node-b"))
	for _, seed := range []string{
		announcement, announcement + "GET k\r\n", string(appendRestartHello(nil, testPeerToken, "node-c")),
		string(appendRestartHello(nil, "guessed", "node-b")), string(appendPeerHello(nil, testPeerToken, acct.id)),
		"CQPEER 1 " + testPeerToken + " RESTARTING\r\n", "CQPEER  1\t" + testPeerToken + " RESTARTING node-b \n",
		"CQPEER 1 " + testPeerToken + " RESTARTING node-b x\r\n", peerTLSRequest + "\r\n", peerRestarting, "CQPEER\r\n", "\r\n", "",
	} {
		f.Add([]byte(seed))
	}
	want := []string{peerHello, peerVersion, testPeerToken, peerRestartingWord, "node-b"}
	f.Fuzz(func(t *testing.T, input []byte) {
		defer n.p.links.reached("node-b")
		announces := false
		if i := bytes.IndexByte(input, '\n'); i >= 0 && i < maxPeerLineLen {
			announces = slices.Equal(strings.Fields(string(protocol.TrimEOL(input[:i+1]))), want)
		}
		nc, err := net.Dial("tcp", n.peerAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = nc.Write(input) // fails once the listener has answered and closed
		_ = nc.(*net.TCPConn).CloseWrite()
		answer, err := io.ReadAll(nc)
		switch {
		case errors.Is(err, syscall.ECONNRESET):
		case err != nil:
			t.Fatalf("%q: reading the answer: %v", input, err)
		case announces && string(answer) != peerOK+"\r\n":
			t.Errorf("%q: %q, want %q", input, answer, peerOK+"\r\n")
		case !announces && (!bytes.HasPrefix(answer, []byte("ERR ")) || bytes.IndexByte(answer, '\n') != len(answer)-1):
			t.Errorf("%q: %q, want one ERR line", input, answer)
		}
		if _, noted := n.p.links.restarting("node-b"); noted != announces {
			t.Errorf("%q: a restart of node-b noted: %v, want %v", input, noted, announces)
		}
	})
}
