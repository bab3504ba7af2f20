package proxy

import (
	"bufio"
	"crypto/tls"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/pki"
	"github.com/cacheqos/cacheqos/internal/pki/pkitest"
)

const testPeerIdentity = "cacheqos://team-a/cluster"

// peerFiles is a sidecar's mounted peer Secret: its certificate, key and the CA bundle.
type peerFiles struct {
	dir string
}

// issuePeer writes a peer certificate of identity from a into a new directory and returns
// the files and the loaded pki.Peer that verifies against testPeerIdentity.
func issuePeer(t *testing.T, a *pki.Authority, identity string) (peerFiles, *pki.Peer) {
	t.Helper()
	f := peerFiles{dir: t.TempDir()}
	pkitest.WritePeerFiles(t, f.dir, a, identity, a.Bundle())
	p, err := pki.NewPeer(filepath.Join(f.dir, pkitest.CertFile), filepath.Join(f.dir, pkitest.KeyFile), filepath.Join(f.dir, pkitest.CAFile),
		testPeerIdentity, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func newCA(t *testing.T) *pki.Authority { return pkitest.Authority(t, "team-a/cluster") }

// peerPair is a node that forwards a tenant's every key (no partition of it) and the node
// holding its partition.
type peerPair struct {
	acct        account
	front, back *testNode
	engine      string
}

func startPeerPair(t *testing.T, front, back Options) *peerPair {
	t.Helper()
	front.Protocol, back.Protocol = Redis, Redis
	pp := &peerPair{acct: newAccount(t, "team-a/cache"), engine: startEngine(t, Redis)}
	pp.front, pp.back = startNode(t, "node-a", front), startNode(t, "node-b", back)
	pp.configure(t, false, false)
	return pp
}

// configure loads both nodes' tables, with Config.PeerPlaintext as given.
func (pp *peerPair) configure(t *testing.T, frontPlaintext, backPlaintext bool) {
	t.Helper()
	routes := []Route{pp.back.route(1)}
	for _, n := range []struct {
		node      *testNode
		engine    string
		plaintext bool
	}{{pp.front, "", frontPlaintext}, {pp.back, pp.engine, backPlaintext}} {
		cfg := Config{NodeID: n.node.id, PeerToken: testPeerToken, PeerPlaintext: n.plaintext,
			Tenants: []Tenant{{ID: pp.acct.id, CredentialHash: pp.acct.hash, LocalEngine: n.engine, Routes: routes}}}
		if err := n.node.p.Update(cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// forward sets a key through the front node and reads it back on the back node; it returns
// the front's reply to SET.
func (pp *peerPair) forward(t *testing.T, value string) string {
	t.Helper()
	got := loginRESP(t, pp.front, pp.acct).do("SET", "k", value)
	if got == "+OK\r\n" {
		if back := loginRESP(t, pp.back, pp.acct).do("GET", "k"); back != "$"+strconv.Itoa(len(value))+"\r\n"+value+"\r\n" {
			t.Fatalf("GET on the back node: %q, want %q", back, value)
		}
	}
	return got
}

// TestPeerMutualTLS: sidecars with peer certificates from the cluster CA forward over mutual
// TLS, and what the upgrade period allows (Config.PeerPlaintext) against a sidecar without
// peer TLS: both directions work with it, neither without it.
func TestPeerMutualTLS(t *testing.T) {
	// A sidecar of the version before peer TLS reads the TLS request as a malformed hello
	// (its parser is unchanged) and answers ERR, which is what the fallback keys on; a node
	// of this version without peer TLS stands for it below.
	if _, _, err := parsePeerHello([]byte(peerTLSRequest+"\r\n"), [32]byte{}); err == nil {
		t.Fatal("the TLS request parses as a hello")
	}
	ca := newCA(t)
	peerTLS := func() Options {
		_, p := issuePeer(t, ca, testPeerIdentity)
		return Options{PeerTLS: p}
	}
	for _, tc := range []struct {
		name                  string
		front, back           Options
		frontPlain, backPlain bool
		want                  string
	}{
		{name: "both over mutual TLS", front: peerTLS(), back: peerTLS(), want: "+OK"},
		{name: "new front, old back, upgrade period", front: peerTLS(), frontPlain: true, want: "+OK"},
		{name: "new front, old back", front: peerTLS(), want: "-ERR cacheqos: node node-b: the peer does not take TLS"},
		{name: "old front, new back, upgrade period", back: peerTLS(), backPlain: true, want: "+OK"},
		{name: "old front, new back", back: peerTLS(), want: "-ERR cacheqos: node node-b: peer refused the handshake: \"ERR this node takes peers over mutual TLS only\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The refusals last: the front node need not redial for long to give up.
			tc.front.PeerRetryWindow = 100 * time.Millisecond
			pp := startPeerPair(t, tc.front, tc.back)
			pp.configure(t, tc.frontPlain, tc.backPlain)
			if got := pp.forward(t, "v"); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("SET through the front node: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPeerTLSRefusals: the peer listener of a node with peer TLS refuses, after the TLS
// request, a client whose certificate is from another CA, names another identity, or is
// missing, and a plaintext hello with the right token.
func TestPeerTLSRefusals(t *testing.T) {
	ca := newCA(t)
	_, backTLS := issuePeer(t, ca, testPeerIdentity)
	pp := startPeerPair(t, Options{}, Options{PeerTLS: backTLS})
	certificate := func(a *pki.Authority, identity string) []tls.Certificate {
		return []tls.Certificate{pkitest.PeerCertificate(t, a, identity)}
	}
	for _, tc := range []struct {
		name     string
		certs    []tls.Certificate
		accepted bool
	}{
		{"certificate of the cluster (the control)", certificate(ca, testPeerIdentity), true},
		{"certificate from another CA", certificate(newCA(t), testPeerIdentity), false},
		{"certificate of another cluster", certificate(ca, "cacheqos://team-a/other"), false},
		{"no certificate", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRESP(t, "tcp", pp.back.peerAddr)
			c.write([]byte(peerTLSRequest + "\r\n"))
			if line, err := c.br.ReadString('\n'); err != nil || line != "OK\r\n" {
				t.Fatalf("TLS request: %q, %v", line, err)
			}
			conn := tls.Client(c.nc, &tls.Config{Certificates: tc.certs, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // the server is not what this test checks
			conn.SetDeadline(time.Now().Add(testIOTimeout))
			// TLS 1.3 finishes the client's side of the handshake before the server has
			// checked the client's certificate: the refusal shows on the first read.
			_ = conn.Handshake()
			_, _ = conn.Write(appendPeerHello(nil, testPeerToken, pp.acct.id))
			line, err := bufio.NewReader(conn).ReadString('\n')
			if accepted := err == nil && line == "OK\r\n"; accepted != tc.accepted {
				t.Fatalf("the peer answered %q, %v; want accepted %v", line, err, tc.accepted)
			}
		})
	}
	t.Run("plaintext hello", func(t *testing.T) {
		c := dialRESP(t, "tcp", pp.back.peerAddr)
		c.write(appendPeerHello(nil, testPeerToken, pp.acct.id))
		if line, err := c.br.ReadString('\n'); err != nil || line != "ERR this node takes peers over mutual TLS only\r\n" {
			t.Fatalf("plaintext hello: %q, %v", line, err)
		}
		expectClosed(t, c.nc, c.br)
	})
}

// TestPeerActsOnlyForPartitionsHeld: a peer hello for a tenant the node knows but holds no
// partition of is refused.
func TestPeerActsOnlyForPartitionsHeld(t *testing.T) {
	pp := startPeerPair(t, Options{}, Options{})
	c := dialRESP(t, "tcp", pp.front.peerAddr)
	c.write(appendPeerHello(nil, testPeerToken, pp.acct.id))
	if line, err := c.br.ReadString('\n'); err != nil || line != "ERR tenant \"team-a/cache\" has no partition on this node\r\n" {
		t.Fatalf("hello for a tenant without a partition here: %q, %v", line, err)
	}
	expectClosed(t, c.nc, c.br)
}

// TestPeerCertificateRotation: new peer certificates, then a new CA, replace the mounted
// files; the open peer link keeps serving, and links dialed after each change work.
func TestPeerCertificateRotation(t *testing.T) {
	ca := newCA(t)
	frontFiles, frontTLS := issuePeer(t, ca, testPeerIdentity)
	backFiles, backTLS := issuePeer(t, ca, testPeerIdentity)
	pp := startPeerPair(t, Options{PeerTLS: frontTLS}, Options{PeerTLS: backTLS})
	client := loginRESP(t, pp.front, pp.acct)
	if got := client.do("SET", "k", "before"); got != "+OK\r\n" {
		t.Fatalf("SET before the rotation: %q", got)
	}
	peerLink := func() *link {
		t.Helper()
		var found *link
		pp.front.p.links.mu.Lock()
		defer pp.front.p.links.mu.Unlock()
		for key, slot := range pp.front.p.links.slots {
			if key.peer {
				slot.mu.Lock()
				found = slot.links[0]
				slot.mu.Unlock()
			}
		}
		if found == nil || !found.usable() {
			t.Fatal("no open peer link")
		}
		return found
	}
	open := peerLink()

	// A CA rotation as the operator does it: the new CA joins the bundle, then signs.
	next := newCA(t)
	bundle := append(ca.Bundle(), next.Bundle()...)
	for step, a := range []*pki.Authority{ca, next} {
		for _, f := range []peerFiles{frontFiles, backFiles} {
			pkitest.WritePeerFiles(t, f.dir, a, testPeerIdentity, bundle)
		}
		if got := client.do("SET", "k", "rotated"); got != "+OK\r\n" {
			t.Fatalf("step %d: SET on the open link: %q", step, got)
		}
		if peerLink() != open {
			t.Fatalf("step %d: the open peer link was replaced", step)
		}
		// A new link handshakes with the new certificates.
		pp.front.p.links.retire(func(k linkKey) bool { return k.peer }, true)
		if got := pp.forward(t, "new-link"); got != "+OK\r\n" {
			t.Fatalf("step %d: SET on a new link: %q", step, got)
		}
		open = peerLink()
	}
}

// TestRestartAnnouncedOverPeerTLS: a sidecar with peer TLS that stops (Shutdown) announces its
// restart to its routes' peer over mutual TLS, and a peer that takes peers over mutual TLS only
// notes it; the same announcement in plaintext is refused.
func TestRestartAnnouncedOverPeerTLS(t *testing.T) {
	ca := newCA(t)
	_, frontTLS := issuePeer(t, ca, testPeerIdentity)
	_, backTLS := issuePeer(t, ca, testPeerIdentity)
	pp := startPeerPair(t, Options{PeerTLS: frontTLS}, Options{PeerTLS: backTLS})
	// The back node routes to the front node too, so an announcement from there is its business.
	pp.back.update(t, Tenant{ID: pp.acct.id, CredentialHash: pp.acct.hash, LocalEngine: pp.engine,
		Routes: []Route{pp.front.route(0), pp.back.route(1)}})

	c := dialRESP(t, "tcp", pp.back.peerAddr)
	c.write(appendRestartHello(nil, testPeerToken, pp.front.id))
	if line, err := c.br.ReadString('\n'); err != nil || line != "ERR this node takes peers over mutual TLS only\r\n" {
		t.Errorf("plaintext announcement: %q, %v", line, err)
	}
	expectClosed(t, c.nc, c.br)
	if _, noted := pp.back.p.links.restarting(pp.front.id); noted {
		t.Fatal("the back node noted a restart announced in plaintext")
	}

	if err := pp.front.p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, noted := pp.back.p.links.restarting(pp.front.id); !noted {
		t.Error("the back node did not note the restart the front node announced over mutual TLS")
	}
}
