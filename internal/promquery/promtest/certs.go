package promtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A basic auth user for servers that require one (Web.BasicAuthUsers).
const (
	User     = "cacheqos"
	Password = "cacheqos-test-password"
	// PasswordHash is bcrypt (cost 4, the minimum, so the server checks it quickly) of
	// Password, made once with golang.org/x/crypto/bcrypt.GenerateFromPassword, which this
	// module does not otherwise need.
	PasswordHash = "$2a$04$s1ebmdbUsjk9OEcRpZTnxOlUFYqg0mY9Qe/Fzu8EEH4ANdigR4vzK"
)

// Certs are PEM files of a throwaway CA and of a server certificate (for 127.0.0.1) and a
// client certificate it signed.
type Certs struct {
	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string
	// Pool holds the CA, for clients built in Go.
	Pool *x509.CertPool
	// Client is the client certificate with its key.
	Client tls.Certificate
}

// NewCerts writes a CA and the certificates it signs into dir.
func NewCerts(t testing.TB, dir string) Certs {
	t.Helper()
	caKey, caDER := newCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "cacheqos test CA"},
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}, nil, nil)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	c := Certs{Pool: x509.NewCertPool()}
	c.Pool.AddCert(caCert)
	c.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	serverKey, serverDER := newCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "prometheus"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, caCert, caKey)
	c.ServerCertFile = writePEM(t, dir, "server.pem", "CERTIFICATE", serverDER)
	c.ServerKeyFile = writePEM(t, dir, "server-key.pem", "PRIVATE KEY", marshalKey(t, serverKey))
	clientKey, clientDER := newCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "cacheqos-operator"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, caCert, caKey)
	c.ClientCertFile = writePEM(t, dir, "client.pem", "CERTIFICATE", clientDER)
	c.ClientKeyFile = writePEM(t, dir, "client-key.pem", "PRIVATE KEY", marshalKey(t, clientKey))
	c.Client = tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}
	return c
}

// newCert signs template with parent's key (self-signed when parent is nil) and returns the
// new key and the certificate's DER.
func newCert(t testing.TB, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func marshalKey(t testing.TB, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t testing.TB, dir, name, blockType string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// BasicAuthClient trusts the CA and sends User's credentials: a Web.Client for servers that
// require basic auth, built without the package under test.
func (c Certs) BasicAuthClient() *http.Client {
	return &http.Client{Transport: basicAuth{next: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.Pool}}}}
}

// BasicAuthWeb is the Web of a server that serves only HTTPS with the server certificate and
// requires basic auth as User.
func (c Certs) BasicAuthWeb() Web {
	return Web{
		CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile,
		BasicAuthUsers: map[string]string{User: PasswordHash},
		Client:         c.BasicAuthClient(),
	}
}

// ClientCertClient trusts the CA and presents the client certificate.
func (c Certs) ClientCertClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.Pool, Certificates: []tls.Certificate{c.Client}}}}
}

type basicAuth struct{ next http.RoundTripper }

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(User, Password)
	return b.next.RoundTrip(r)
}
