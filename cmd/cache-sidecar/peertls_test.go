package main

import (
	"bufio"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/pki/pkitest"
)

// TestPeerTLSFlags: a sidecar started with the --peer-tls flags takes TLS on its peer port and
// lets through, inside TLS, a peer certificate of its identity from its CA, and refuses one
// from another CA; a sidecar without them does not take TLS there.
func TestPeerTLSFlags(t *testing.T) {
	const identity = "cacheqos://team-a/local"
	dir := t.TempDir()
	ca, other := pkitest.Authority(t, "local"), pkitest.Authority(t, "other")
	pkitest.WritePeerFiles(t, dir, ca, identity, ca.Bundle())
	withPeerTLS := startSidecar(t, "redis", false, "--peer-tls-cert-file", filepath.Join(dir, pkitest.CertFile),
		"--peer-tls-key-file", filepath.Join(dir, pkitest.KeyFile), "--peer-tls-ca-file", filepath.Join(dir, pkitest.CAFile), "--peer-tls-identity", identity)
	without := startSidecar(t, "redis", false)

	// askTLS sends the TLS request to a sidecar's peer port and returns its answer and the
	// connection.
	askTLS := func(s *tlsSidecar) (string, net.Conn, *bufio.Reader) {
		t.Helper()
		nc, err := net.DialTimeout("tcp", waitLog(t, s.logs, "listening")["peer"].(string), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write([]byte("CQPEER 2 TLS\r\n")); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line, nc, br
	}
	if line, _, _ := askTLS(without); line != "ERR this node takes peers without TLS only\r\n" {
		t.Fatalf("a sidecar without --peer-tls answered the TLS request %q", line)
	}
	for _, tc := range []struct {
		name     string
		cert     tls.Certificate
		accepted bool
	}{
		{"certificate of the identity from the CA", pkitest.PeerCertificate(t, ca, identity), true},
		{"certificate from another CA", pkitest.PeerCertificate(t, other, identity), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, nc, _ := askTLS(withPeerTLS)
			if line != "OK\r\n" {
				t.Fatalf("the TLS request was answered %q", line)
			}
			conn := tls.Client(nc, &tls.Config{Certificates: []tls.Certificate{tc.cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // the client's certificate is what is checked
			_ = conn.Handshake()
			// The standalone sidecar has no peer token: a hello read inside TLS is answered
			// with the token refusal, which shows the TLS session was accepted.
			_, _ = conn.Write([]byte("CQPEER 1 some-token team-a/orders\r\n"))
			answer, err := bufio.NewReader(conn).ReadString('\n')
			if accepted := err == nil && answer == "ERR wrong peer token\r\n"; accepted != tc.accepted {
				t.Fatalf("answer inside TLS %q, %v; want accepted %v", answer, err, tc.accepted)
			}
		})
	}
}
