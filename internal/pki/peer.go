package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sync"
)

// Peer is one side of mutual TLS between peers: its own certificate and key (reloaded when the
// files change), the CA bundle the other side's certificate must chain to (reloaded too, so a
// rotated CA is trusted as soon as the bundle file has it), and the URI identity the other
// side's certificate must carry. Connections already open keep the session they negotiated.
type Peer struct {
	cert     *Reloader
	caFile   string
	identity string

	mu      sync.Mutex
	caStamp fileStamp
	roots   *x509.CertPool
}

// NewPeer loads the pair and the CA bundle once and fails when either does not load;
// onProblem (may be nil) hears about a later version of the pair that does not.
func NewPeer(certFile, keyFile, caFile, identity string, onProblem func(error)) (*Peer, error) {
	if identity == "" {
		return nil, errors.New("peer TLS needs the identity peers' certificates carry")
	}
	if _, err := peerSpec(identity); err != nil {
		return nil, err
	}
	cert, err := NewReloader(certFile, keyFile, onProblem)
	if err != nil {
		return nil, err
	}
	p := &Peer{cert: cert, caFile: caFile, identity: identity}
	if _, err := p.currentRoots(); err != nil {
		return nil, err
	}
	return p, nil
}

// ServerConfig accepts only clients presenting a certificate of the identity from the CA
// bundle.
func (p *Peer) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		GetCertificate:   p.cert.GetCertificate,
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error { return p.verify(cs, x509.ExtKeyUsageClientAuth) },
	}
}

// ClientConfig presents the peer certificate and accepts only a server presenting a
// certificate of the identity from the CA bundle (the identity, not the address, names the
// server: peers are reached by IP).
func (p *Peer) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: p.cert.GetClientCertificate,
		// Verified by VerifyConnection instead, against the identity.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies the chain and the identity.
		VerifyConnection:   func(cs tls.ConnectionState) error { return p.verify(cs, x509.ExtKeyUsageServerAuth) },
	}
}

func (p *Peer) verify(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	roots, err := p.currentRoots()
	if err != nil {
		return err
	}
	intermediates := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("the peer's certificate is not from this cluster's CA: %w", err)
	}
	if !slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == p.identity }) {
		return fmt.Errorf("the peer's certificate names %v, not %s", certNames(leaf), p.identity)
	}
	return nil
}

// currentRoots returns the CA bundle, read again when its file changed. A bundle that does
// not load leaves the previous one in use.
func (p *Peer) currentRoots() (*x509.CertPool, error) {
	info, err := os.Stat(p.caFile)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && p.caStamp.same(info) {
		return p.roots, nil
	}
	if err == nil {
		var data []byte
		if data, err = os.ReadFile(p.caFile); err == nil {
			var certs []*x509.Certificate
			if certs, err = parseCerts(data); err == nil && len(certs) == 0 {
				err = errors.New("it holds no certificate")
			}
			if err == nil {
				pool := x509.NewCertPool()
				for _, c := range certs {
					pool.AddCert(c)
				}
				p.roots, p.caStamp = pool, fileStamp{info}
				return pool, nil
			}
		}
	}
	if p.roots != nil {
		return p.roots, nil
	}
	return nil, fmt.Errorf("peer CA bundle %s: %w", p.caFile, err)
}
