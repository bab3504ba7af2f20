package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// testPeerToken is the shared peer secret of the test nodes.
const testPeerToken = "test-peer-token"

// testIOTimeout bounds every client read and write in tests, so a bug fails the test instead of
// hanging it.
const testIOTimeout = 10 * time.Second

// account is a tenant's credentials.
type account struct {
	id, password, hash string
}

func newAccount(t testing.TB, id string) account {
	t.Helper()
	password, hash, err := credentials.Issue()
	if err != nil {
		t.Fatal(err)
	}
	return account{id: id, password: password, hash: hash}
}

// testNode is a running proxy with its client and peer listeners on loopback ports, and one
// more client listener on a unix socket.
type testNode struct {
	id         string
	p          *Proxy
	addr       string
	peerAddr   string
	socketPath string
	registry   *prometheus.Registry
	http       *httptest.Server
}

// startNode starts a proxy serving on loopback; opts.Protocol must be set.
func startNode(t testing.TB, id string, opts Options) *testNode {
	t.Helper()
	return startNodeOn(t, id, opts, listen(t), listen(t))
}

// startNodeOn is startNode with the client and peer listeners given: a node restarted on the
// addresses it had.
func startNodeOn(t testing.TB, id string, opts Options, client, peer net.Listener) *testNode {
	t.Helper()
	n := &testNode{id: id, registry: prometheus.NewRegistry()}
	opts.Registry = n.registry
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	n.p = p
	n.addr, n.peerAddr = client.Addr().String(), peer.Addr().String()
	n.socketPath = t.TempDir() + "/proxy.sock"
	socket, err := net.Listen("unix", n.socketPath)
	if err != nil {
		t.Fatal(err)
	}
	serveInBackground(t, p.Serve, client)
	serveInBackground(t, p.Serve, socket)
	serveInBackground(t, p.ServePeer, peer)
	n.http = httptest.NewServer(p.Handler())
	t.Cleanup(func() {
		n.http.Close()
		p.Close()
	})
	return n
}

// serveInBackground serves l until the proxy closes, then checks how serving ended. It must be
// called before the proxy's Close is registered as a cleanup, which then runs first.
func serveInBackground(t testing.TB, serve func(net.Listener) error, l net.Listener) {
	done := make(chan error, 1)
	go func() { done <- serve(l) }()
	t.Cleanup(func() {
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("serving %s ended with %v, want ErrClosed", l.Addr(), err)
		}
	})
}

func listen(t testing.TB) net.Listener { return listenOn(t, "127.0.0.1:0") }

// listenOn listens on a TCP address.
func listenOn(t testing.TB, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// route is this node's route for a tenant.
func (n *testNode) route(weight float64) Route {
	return Route{Node: n.id, Weight: weight, PeerAddress: n.peerAddr}
}

// update loads a configuration naming n as this node.
func (n *testNode) update(t testing.TB, tenants ...Tenant) {
	t.Helper()
	if err := n.p.Update(Config{NodeID: n.id, PeerToken: testPeerToken, Tenants: tenants}); err != nil {
		t.Fatal(err)
	}
}

// singleNode starts an engine and a proxy serving one tenant from it, returning the proxy and
// the engine socket.
func singleNode(t testing.TB, protocol Protocol, acct account, opts Options) (*testNode, string) {
	t.Helper()
	tc := Tenant{ID: acct.id, CredentialHash: acct.hash}
	if protocol == Redis {
		tc.LocalEngine, tc.LocalEnginePassword = restrictedRedis(t)
	} else {
		tc.LocalEngine = startEngine(t, protocol)
	}
	opts.Protocol = protocol
	n := startNode(t, "node-a", opts)
	tc.Routes = []Route{n.route(1)}
	n.update(t, tc)
	return n, tc.LocalEngine
}

// restrictedRedis starts a redis engine with the ACL the engine manager gives its engines and
// returns its socket and engine.RedisLinkUser's password on it.
func restrictedRedis(t testing.TB) (socket, password string) {
	t.Helper()
	dir := t.TempDir()
	password, err := engine.WriteRedisACL(dir)
	if err != nil {
		t.Fatal(err)
	}
	return enginetest.StartRedis(t, "--aclfile", filepath.Join(dir, engine.RedisACLFile)), password
}

func startEngine(t testing.TB, protocol Protocol, extra ...string) string {
	t.Helper()
	if protocol == Redis {
		return enginetest.StartRedis(t, extra...)
	}
	return enginetest.StartMemcached(t, extra...)
}

// respClient speaks RESP to a proxy or an engine.
type respClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
	rr *resp.ReplyReader
}

func dialRESP(t testing.TB, network, addr string) *respClient {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return newRESPClient(t, nc)
}

func newRESPClient(t testing.TB, nc net.Conn) *respClient {
	br := bufio.NewReader(nc)
	return &respClient{t: t, nc: nc, br: br, rr: resp.NewReplyReader(br, resp.ReplyLimits{})}
}

// loginRESP connects to a proxy and authenticates.
func loginRESP(t testing.TB, n *testNode, acct account) *respClient {
	t.Helper()
	c := dialRESP(t, "tcp", n.addr)
	if got := c.do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
		t.Fatalf("AUTH as %s: %q", acct.id, got)
	}
	return c
}

func (c *respClient) send(args ...string) {
	c.t.Helper()
	c.write(resp.AppendCommandStrings(nil, args...))
}

func (c *respClient) write(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(testIOTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next reply's raw bytes.
func (c *respClient) read() string {
	c.t.Helper()
	reply, err := c.readErr()
	if err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	return reply
}

func (c *respClient) readErr() (string, error) {
	c.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
	reply, err := c.rr.ReadReply()
	if err != nil {
		return "", err
	}
	return string(reply.Raw()), nil
}

func (c *respClient) do(args ...string) string {
	c.t.Helper()
	c.send(args...)
	return c.read()
}

// value decodes a reply.
func value(t testing.TB, raw string) resp.Value {
	t.Helper()
	v, err := resp.DecodeValue([]byte(raw))
	if err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return v
}

// isError reports an error reply.
func isError(raw string) bool { return strings.HasPrefix(raw, "-") || strings.HasPrefix(raw, "!") }

// expectClosed checks that the server closes the connection (after any replies still due).
func expectClosed(t testing.TB, nc net.Conn, br *bufio.Reader) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(testIOTimeout))
	rest, err := io.ReadAll(br)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection still open (read %q)", rest)
		}
	}
}

// mcClient speaks memcached's text protocol.
type mcClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialMC(t testing.TB, network, addr string) *mcClient {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &mcClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func loginMC(t testing.TB, n *testNode, acct account) *mcClient {
	t.Helper()
	return loginMCOn(t, "tcp", n.addr, acct)
}

func loginMCOn(t testing.TB, network, addr string, acct account) *mcClient {
	t.Helper()
	c := dialMC(t, network, addr)
	data := acct.id + " " + acct.password
	c.write(fmt.Sprintf("set auth 0 0 %d\r\n%s\r\n", len(data), data))
	if got := c.line(); got != "STORED" {
		t.Fatalf("memcached auth as %s: %q", acct.id, got)
	}
	return c
}

func (c *mcClient) write(s string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(testIOTimeout))
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// line reads one response line without its CRLF.
func (c *mcClient) line() string {
	c.t.Helper()
	line, err := c.lineErr()
	if err != nil {
		c.t.Fatalf("read line: %v", err)
	}
	return line
}

func (c *mcClient) lineErr() (string, error) {
	c.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
	line, err := protocol.AppendLine(c.br, nil, 1<<20)
	return string(protocol.TrimEOL(line)), err
}

// response reads one whole response whose values are the tests' one-line "v-..." strings:
// lines up to the first that is neither a VALUE header nor such a value.
func (c *mcClient) response() string {
	c.t.Helper()
	response, err := c.responseErr()
	if err != nil {
		c.t.Fatalf("read response: %v (so far %q)", err, response)
	}
	return response
}

func (c *mcClient) responseErr() (string, error) {
	var out strings.Builder
	for {
		line, err := c.lineErr()
		if err != nil {
			return out.String(), err
		}
		out.WriteString(line + "\r\n")
		if !strings.HasPrefix(line, "VALUE ") && !strings.HasPrefix(line, "v-") {
			return out.String(), nil
		}
	}
}

// get runs a retrieval and returns the values by key.
func (c *mcClient) get(keys ...string) map[string]string {
	c.t.Helper()
	c.write("get " + strings.Join(keys, " ") + "\r\n")
	out := map[string]string{}
	for {
		line := c.line()
		if line == "END" {
			return out
		}
		var key string
		var flags, size int
		if _, err := fmt.Sscanf(line, "VALUE %s %d %d", &key, &flags, &size); err != nil {
			c.t.Fatalf("unexpected line %q", line)
		}
		data := make([]byte, size+2)
		if _, err := io.ReadFull(c.br, data); err != nil {
			c.t.Fatal(err)
		}
		out[key] = string(data[:size])
	}
}

func (c *mcClient) set(key, value string) {
	c.t.Helper()
	c.write(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, len(value), value))
	if got := c.line(); got != "STORED" {
		c.t.Fatalf("set %s: %q", key, got)
	}
}
