package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/pki"
	"github.com/cacheqos/cacheqos/internal/pki/pkitest"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// tlsHost is the name the test certificates carry and the clients connect to.
const tlsHost = "localhost"

// tlsSidecar is a standalone sidecar serving one tenant, over TLS with a certificate from a
// real pki.Authority unless started without.
type tlsSidecar struct {
	addr, tenant, password string
	caFile, certFile       string
	keyFile                string
	authority              *pki.Authority
	logs                   *enginetest.LockedBuffer
}

func startTLSSidecar(t *testing.T, engineName string) *tlsSidecar {
	t.Helper()
	return startSidecar(t, engineName, true)
}

func startSidecar(t *testing.T, engineName string, withTLS bool, extraArgs ...string) *tlsSidecar {
	t.Helper()
	binary := map[string]string{"redis": "redis-server", "memcached": "memcached"}[engineName]
	if _, err := exec.LookPath(binary); err != nil {
		t.Fatalf("%s is not installed: run hack/bootstrap.sh apt", binary)
	}
	dir := t.TempDir()
	root, err := os.MkdirTemp("", "cqs") // short: engine sockets live below it
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil { // memcached runs as nobody when the test runs as root
		t.Fatal(err)
	}
	s := &tlsSidecar{tenant: "team-a/orders", authority: pkitest.Authority(t, "test"),
		caFile: filepath.Join(dir, pkitest.CAFile), certFile: filepath.Join(dir, pkitest.CertFile), keyFile: filepath.Join(dir, pkitest.KeyFile)}
	writeFile(t, s.caFile, string(s.authority.Bundle()))
	s.rotate(t)
	s.password = writeStandaloneFiles(t, dir, engineName, s.tenant)
	args := []string{"--engine", engineName, "--plan-file", filepath.Join(dir, "plan.yaml"),
		"--credentials-file", filepath.Join(dir, "secret.yaml"), "--state-root", root,
		"--client-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--shutdown-delay", "0s", "--stop-engines-on-exit", "--login-timeout", "2s"}
	if withTLS {
		args = append(args, "--client-tls-cert-file", s.certFile, "--client-tls-key-file", s.keyFile)
	}
	args = append(args, extraArgs...)
	ctx, cancel := context.WithCancel(context.Background())
	s.logs = &enginetest.LockedBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, s.logs) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("the sidecar exited %d:\n%s", code, s.logs)
		}
		os.RemoveAll(root)
	})
	waitLog(t, s.logs, "plan applied")
	_, port, err := net.SplitHostPort(waitLog(t, s.logs, "listening")["client"].(string))
	if err != nil {
		t.Fatal(err)
	}
	s.addr = net.JoinHostPort(tlsHost, port)
	return s
}

// rotate issues a new serving certificate and replaces the files the sidecar serves, each by
// a rename (the key first, so a handshake in between sees a mismatched pair and keeps the old
// one).
func (s *tlsSidecar) rotate(t *testing.T) {
	t.Helper()
	certPEM, keyPEM, err := s.authority.Issue([]string{tlsHost}, time.Now(), pki.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	pkitest.ReplaceFile(t, s.keyFile, keyPEM)
	pkitest.ReplaceFile(t, s.certFile, certPEM)
}

func (s *tlsSidecar) clientConfig(t *testing.T) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.authority.Bundle()) {
		t.Fatal("empty CA bundle")
	}
	return &tls.Config{RootCAs: roots, ServerName: tlsHost, MinVersion: tls.VersionTLS12}
}

// runClient runs a client program and returns its output; it fails the test on a non-zero
// exit unless wantFail.
func runClient(t *testing.T, wantFail bool, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed: run hack/bootstrap.sh", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish: %s", name, args, out)
	}
	if (err != nil) != wantFail {
		t.Fatalf("%s %v: error %v, want failure %v:\n%s", name, args, err, wantFail, out)
	}
	return string(out)
}

// TestRedisClientsOverTLS: redis-cli --tls and redis-py's rediss:// URL authenticate and read
// back their writes through the sidecar's TLS listener; clients without TLS, or without the
// CA, fail cleanly and the sidecar goes on serving.
func TestRedisClientsOverTLS(t *testing.T) {
	s := startTLSSidecar(t, "redis")
	host, port, _ := net.SplitHostPort(s.addr)
	cli := func(wantFail bool, extra ...string) string {
		args := append([]string{"-h", host, "-p", port, "--user", s.tenant, "--pass", s.password, "--no-auth-warning"}, extra...)
		return runClient(t, wantFail, "redis-cli", args...)
	}
	if out := cli(false, "--tls", "--cacert", s.caFile, "SET", "cli-key", "from redis-cli"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("redis-cli SET over TLS: %q", out)
	}
	if out := cli(false, "--tls", "--cacert", s.caFile, "GET", "cli-key"); strings.TrimSpace(out) != "from redis-cli" {
		t.Fatalf("redis-cli GET over TLS: %q", out)
	}

	redisURL := fmt.Sprintf("rediss://%s:%s@%s/0", url.QueryEscape(s.tenant), url.QueryEscape(s.password), s.addr)
	py := `import sys, redis
r = redis.Redis.from_url(sys.argv[1], ssl_ca_certs=sys.argv[2])
r.set("py-key", "from redis-py")
print(r.get("py-key").decode(), r.get("cli-key").decode(), sep="|")
`
	if out := runClient(t, false, "python3", "-c", py, redisURL, s.caFile); strings.TrimSpace(out) != "from redis-py|from redis-cli" {
		t.Fatalf("redis-py over rediss://: %q", out)
	}
	pyCheck := `import sys, redis
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), ssl=True, ssl_ca_certs=sys.argv[3], username=sys.argv[4], password=sys.argv[5])
print(r.get("py-key").decode())
`
	if out := runClient(t, false, "python3", "-c", pyCheck, host, port, s.caFile, s.tenant, s.password); strings.TrimSpace(out) != "from redis-py" {
		t.Fatalf("redis-py with ssl=True: %q", out)
	}

	// Without TLS, and with TLS but another CA: clean failures.
	if out := cli(true, "GET", "cli-key"); strings.Contains(out, "from redis-cli") {
		t.Fatalf("a plaintext redis-cli read the value: %q", out)
	} else {
		t.Logf("redis-cli without --tls: %s", strings.TrimSpace(out))
	}
	other := filepath.Join(t.TempDir(), "other.crt")
	otherCA := pkitest.Authority(t, "other")
	writeFile(t, other, string(otherCA.Bundle()))
	if out := cli(true, "--tls", "--cacert", other, "GET", "cli-key"); !strings.Contains(out, "certificate verify failed") {
		t.Fatalf("redis-cli trusting another CA: %q", out)
	}
	plaintextRefused(t, s, "*1\r\n$4\r\nPING\r\n")
	silentClientDropped(t, s, 5*time.Second) // by the 2s login timeout, as a plaintext client that never logs in
	if out := cli(false, "--tls", "--cacert", s.caFile, "GET", "py-key"); strings.TrimSpace(out) != "from redis-py" {
		t.Fatalf("after the failed clients, redis-cli over TLS: %q", out)
	}
	rotationKeepsConnections(t, s, "*3\r\n$3\r\nSET\r\n$1\r\nr\r\n$1\r\n1\r\n", "+OK\r\n",
		fmt.Sprintf("*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(s.tenant), s.tenant, len(s.password), s.password), "+OK\r\n")
}

// TestMemcachedClientOverTLS: pymemcache with a tls_context logs in (memcached's -Y
// convention) and reads back its writes through the sidecar's TLS listener.
func TestMemcachedClientOverTLS(t *testing.T) {
	s := startTLSSidecar(t, "memcached")
	host, port, _ := net.SplitHostPort(s.addr)
	py := `import sys, ssl
from pymemcache.client.base import Client
ctx = ssl.create_default_context(cafile=sys.argv[3])
c = Client((sys.argv[1], int(sys.argv[2])), tls_context=ctx, timeout=10, connect_timeout=10)
c.set("auth", sys.argv[4] + " " + sys.argv[5], noreply=False)
c.set("mc-key", "from pymemcache", noreply=False)
print(c.get("mc-key").decode())
`
	if out := runClient(t, false, "python3", "-c", py, host, port, s.caFile, s.tenant, s.password); strings.TrimSpace(out) != "from pymemcache" {
		t.Fatalf("pymemcache over TLS: %q", out)
	}
	plaintextRefused(t, s, "get mc-key\r\n")
	auth := fmt.Sprintf("set auth 0 0 %d\r\n%s %s\r\n", len(s.tenant)+1+len(s.password), s.tenant, s.password)
	rotationKeepsConnections(t, s, "set m 0 0 1\r\n1\r\n", "STORED\r\n", auth, "STORED\r\n")
}

// plaintextRefused: a client speaking the protocol without TLS gets its connection closed,
// never a reply, and the sidecar keeps running.
func plaintextRefused(t *testing.T, s *tlsSidecar, request string) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, request); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(nc)
	if err != nil && !isReset(err) {
		t.Fatalf("a plaintext client was not disconnected: %v", err)
	}
	t.Logf("a plaintext client got %q, then the connection closed (%v)", got, err)
	if bytes.Contains(got, []byte("OK")) || bytes.Contains(got, []byte("VALUE")) || bytes.Contains(got, []byte("ERR")) {
		t.Fatalf("a plaintext client got a protocol reply %q", got)
	}
}

// silentClientDropped: a client that connects and never starts the handshake is closed
// within the given time.
func silentClientDropped(t *testing.T, s *tlsSidecar, within time.Duration) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	nc.SetDeadline(start.Add(10 * time.Second))
	if _, err := io.ReadAll(nc); err != nil && !isReset(err) {
		t.Fatalf("a silent client was not disconnected: %v", err)
	}
	if took := time.Since(start); took > within {
		t.Fatalf("a silent client was disconnected after %v, want within %v", took, within)
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// rotationKeepsConnections replaces the served certificate while a client is connected: the
// open connection goes on working, and a new connection is given the new certificate.
func rotationKeepsConnections(t *testing.T, s *tlsSidecar, request, reply, login, loginReply string) {
	t.Helper()
	dial := func() (*tls.Conn, *bufio.Reader) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.addr, s.clientConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		exchange(t, c, br, login, loginReply)
		return c, br
	}
	before, beforeReader := dial()
	exchange(t, before, beforeReader, request, reply)
	old := before.ConnectionState().PeerCertificates[0]
	s.rotate(t)
	after, afterReader := dial()
	if after.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatal("a connection opened after the rotation got the old certificate")
	}
	exchange(t, after, afterReader, request, reply)
	exchange(t, before, beforeReader, request, reply)
}

func exchange(t *testing.T, w io.Writer, br *bufio.Reader, request, reply string) {
	t.Helper()
	if _, err := io.WriteString(w, request); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(reply))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != reply {
		t.Fatalf("reply %q, %v; want %q", got, err, reply)
	}
}

// TestConnectionCapOverTLS: a TLS client over --max-client-connections is told why over TLS,
// and one that connects over the cap and never starts its handshake is closed within a second
// instead of holding a goroutine.
func TestConnectionCapOverTLS(t *testing.T) {
	s := startSidecar(t, "redis", true, "--max-client-connections", "1")
	login := fmt.Sprintf("*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(s.tenant), s.tenant, len(s.password), s.password)
	held, err := tls.Dial("tcp", s.addr, s.clientConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(10 * time.Second))
	exchange(t, held, bufio.NewReader(held), login, "+OK\r\n")

	over, err := tls.Dial("tcp", s.addr, s.clientConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetDeadline(time.Now().Add(10 * time.Second))
	if got, _ := bufio.NewReader(over).ReadString('\n'); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("a TLS client over the cap read %q", got)
	}

	silentClientDropped(t, s, 3*time.Second)
}
