// Package pkitest issues certificates for tests of the sidecar's TLS: a ready certificate
// authority, peer certificates, and a sidecar's certificate files written as a mounted Secret
// has them.
package pkitest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/pki"
)

// The files of a mounted TLS Secret.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Authority returns a certificate authority named name with a signing certificate.
func Authority(tb testing.TB, name string) *pki.Authority {
	tb.Helper()
	a := pki.NewAuthority(name)
	if _, err := a.Rotate(time.Now(), pki.DefaultPolicy); err != nil {
		tb.Fatal(err)
	}
	return a
}

// PeerCertificate issues a peer certificate of identity from a.
func PeerCertificate(tb testing.TB, a *pki.Authority, identity string) tls.Certificate {
	tb.Helper()
	cert, key, err := a.IssuePeer(identity, time.Now(), pki.DefaultPolicy)
	if err != nil {
		tb.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		tb.Fatal(err)
	}
	return pair
}

// WritePeerFiles issues a peer certificate of identity from a and writes it, its key and bundle
// (the CA certificates trusted) into dir as CertFile, KeyFile and CAFile.
func WritePeerFiles(tb testing.TB, dir string, a *pki.Authority, identity string, bundle []byte) {
	tb.Helper()
	cert, key, err := a.IssuePeer(identity, time.Now(), pki.DefaultPolicy)
	if err != nil {
		tb.Fatal(err)
	}
	for name, data := range map[string][]byte{CertFile: cert, KeyFile: key, CAFile: bundle} {
		ReplaceFile(tb, filepath.Join(dir, name), data)
	}
}

// ReplaceFile replaces a file the way a volume update does: the new content is a new inode,
// renamed into place.
func ReplaceFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}
