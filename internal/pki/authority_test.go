package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

var testPolicy = Policy{CAValidity: 90 * time.Hour, LeafValidity: 9 * time.Hour, Publish: 6 * time.Hour}

var names = []string{"shared.team.svc", "shared.team.svc.cluster.local"}

// verify checks the serving certificate as a client holding bundle does, for host at now.
func verify(t *testing.T, certPEM, bundle []byte, host string, now time.Time) error {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("the bundle holds no certificate")
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func mustRotate(t *testing.T, a *Authority, now time.Time) bool {
	t.Helper()
	changed, err := a.Rotate(now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// TestLifecycle walks an authority through two CA rotations, checking at each step with
// crypto/x509's own verifier (what clients run) that a client holding the published bundle
// accepts the serving certificate the authority says is current.
func TestLifecycle(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAuthority("team/shared")
	if !mustRotate(t, a, start) {
		t.Fatal("an empty authority made no CA")
	}
	certPEM, keyPEM, err := a.Issue(names, start, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if p := a.ServingProblem(certPEM, keyPEM, names, start, testPolicy); p != "" {
		t.Fatalf("a fresh certificate has a problem: %s", p)
	}
	if err := verify(t, certPEM, a.Bundle(), names[0], start); err != nil {
		t.Fatal(err)
	}
	if err := verify(t, certPEM, a.Bundle(), "other.team.svc", start); err == nil {
		t.Fatal("the certificate verified for a name it does not carry")
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("crypto/tls does not load the pair: %v", err)
	}

	for now := start; now.Before(start.Add(3 * testPolicy.CAValidity)); now = now.Add(time.Hour) {
		mustRotate(t, a, now)
		if p := a.ServingProblem(certPEM, keyPEM, names, now, testPolicy); p != "" {
			if certPEM, keyPEM, err = a.Issue(names, now, testPolicy); err != nil {
				t.Fatal(err)
			}
		}
		if next := a.NextChange(certPEM, now, testPolicy); next.IsZero() || next.After(now.Add(testPolicy.LeafValidity)) {
			t.Fatalf("at %v the next change %v is not within a serving certificate's life", now, next)
		}
		if err := verify(t, certPEM, a.Bundle(), names[1], now); err != nil {
			t.Fatalf("at %v (%d CAs): %v", now.Sub(start), len(a.cas), err)
		}
		if len(a.cas) > 2 {
			t.Fatalf("at %v the authority holds %d CAs; expired ones must go", now.Sub(start), len(a.cas))
		}
	}
}

// TestNewCAIsPublishedBeforeItSigns: a client that took the bundle just before the rotation
// still verifies every certificate issued until the new CA has been published for Publish.
func TestNewCAIsPublishedBeforeItSigns(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAuthority("x")
	mustRotate(t, a, start)
	oldBundle := a.Bundle()
	rotation := start.Add(testPolicy.CAValidity * 2 / 3)
	if mustRotate(t, a, rotation.Add(-time.Hour)) {
		t.Fatal("rotated before two thirds of the CA's life")
	}
	if !mustRotate(t, a, rotation) || len(a.cas) != 2 {
		t.Fatalf("no second CA at two thirds of the first's life (%d CAs)", len(a.cas))
	}
	cert, _, err := a.Issue(names, rotation.Add(testPolicy.Publish-time.Minute), testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, cert, oldBundle, names[0], rotation.Add(testPolicy.Publish-time.Minute)); err != nil {
		t.Fatalf("a certificate issued while the new CA is being published fails the old bundle: %v", err)
	}
	cert, key, err := a.Issue(names, rotation.Add(testPolicy.Publish), testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, cert, oldBundle, names[0], rotation.Add(testPolicy.Publish)); err == nil {
		t.Fatal("after publishing, the new CA does not sign")
	}
	if p := a.ServingProblem(cert, key, names, rotation.Add(testPolicy.Publish), testPolicy); p != "" {
		t.Fatal(p)
	}
}

func TestServingProblem(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, other := NewAuthority("a"), NewAuthority("b")
	mustRotate(t, a, now)
	mustRotate(t, other, now)
	cert, key, err := a.Issue(names, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	foreign, foreignKey, err := other.Issue(names, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
		names     []string
		at        time.Time
		want      string
	}{
		{"good", cert, key, names, now, ""},
		{"missing", nil, nil, names, now, "there is no certificate"},
		{"garbage", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), key, names, now, "its certificate is unreadable"},
		{"no key", cert, nil, names, now, "there is no private key"},
		{"key of another", cert, foreignKey, names, now, "its key does not belong to its certificate"},
		{"another CA", foreign, foreignKey, names, now, "not signed by the current CA"},
		{"names changed", cert, key, names[:1], now, "its names"},
		{"due", cert, key, names, now.Add(testPolicy.LeafValidity * 2 / 3), "due for renewal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := a.ServingProblem(tc.cert, tc.key, tc.names, tc.at, testPolicy)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problem %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEncodeParse(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAuthority("x")
	mustRotate(t, a, now)
	mustRotate(t, a, now.Add(testPolicy.CAValidity*2/3))
	certs, keys, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseAuthority("x", certs, keys)
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Bundle()) != string(a.Bundle()) || len(b.cas) != 2 {
		t.Fatal("parsing the encoding changed the authority")
	}
	other := NewAuthority("y")
	mustRotate(t, other, now)
	otherCerts, otherKeys, err := other.Encode()
	if err != nil {
		t.Fatal(err)
	}
	leaf, leafKey, err := a.Issue(names, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		certs, keys []byte
		want        string
	}{
		{"counts differ", certs, otherKeys, "2 CA certificates but 1 keys"},
		{"no keys", otherCerts, nil, "1 CA certificates but 0 keys"},
		{"swapped key", otherCerts, keys[:len(keys)/2], "does not belong"},
		{"not a CA", leaf, leafKey, "is not a CA"},
		{"a key where certificates go", keys, keys, "not a CERTIFICATE"},
		{"a certificate where keys go", certs, certs, "not a PRIVATE KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAuthority("x", tc.certs, tc.keys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Policy{CAValidity: 9 * time.Hour, LeafValidity: time.Hour, Publish: 3 * time.Hour}).Validate(); err == nil || !strings.Contains(err.Error(), "third") {
		t.Fatalf("error %v", err)
	}
	if err := (Policy{}).Validate(); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Fatalf("error %v", err)
	}
}

func FuzzParseAuthority(f *testing.F) {
	a := NewAuthority("x")
	if _, err := a.Rotate(time.Now(), testPolicy); err != nil {
		f.Fatal(err)
	}
	certs, keys, err := a.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(certs, keys)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n"), []byte{})
	f.Fuzz(func(t *testing.T, certs, keys []byte) {
		if b, err := ParseAuthority("x", certs, keys); err == nil {
			if _, _, err := b.Encode(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestShortLifetimesIgnoreBackdating: lifetimes shorter than the backdating (certificates
// start a minute early for clients with slow clocks) still renew two thirds into the time
// they were made for, not at once.
func TestShortLifetimesIgnoreBackdating(t *testing.T) {
	short := Policy{CAValidity: 24 * time.Second, LeafValidity: 6 * time.Second, Publish: 3 * time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAuthority("x")
	if changed, err := a.Rotate(now, short); err != nil || !changed {
		t.Fatalf("no first CA: %v", err)
	}
	cert, key, err := a.Issue(names, now.Add(time.Second), short)
	if err != nil {
		t.Fatal(err)
	}
	if p := a.ServingProblem(cert, key, names, now.Add(4*time.Second), short); p != "" {
		t.Fatalf("a certificate 3s old of 6s has a problem: %s", p)
	}
	if p := a.ServingProblem(cert, key, names, now.Add(5*time.Second), short); !strings.Contains(p, "due") {
		t.Fatalf("a certificate 4s old of 6s: %q, want due", p)
	}
	if changed, _ := a.Rotate(now.Add(15*time.Second), short); changed {
		t.Fatal("the CA was replaced before two thirds of its 24s")
	}
	if changed, _ := a.Rotate(now.Add(16*time.Second), short); !changed {
		t.Fatal("the CA was not replaced at two thirds of its 24s")
	}
}

// TestPeerProblem: a peer certificate is good for its identity only, and a serving
// certificate (no URI, server use only) is no peer certificate; an identity that is no URI is
// refused when issuing.
func TestPeerProblem(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAuthority("a")
	mustRotate(t, a, now)
	const identity = "cacheqos://team/shared"
	cert, key, err := a.IssuePeer(identity, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	serving, servingKey, err := a.Issue(names, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
		identity  string
		at        time.Time
		want      string
	}{
		{"good", cert, key, identity, now, ""},
		{"another identity", cert, key, "cacheqos://team/other", now, "its names"},
		{"a serving certificate", serving, servingKey, identity, now, "its names"},
		{"not a URI", cert, key, "shared", now, "not an absolute URI"},
		{"due", cert, key, identity, now.Add(testPolicy.LeafValidity * 2 / 3), "due for renewal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := a.PeerProblem(tc.cert, tc.key, tc.identity, tc.at, testPolicy)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problem %q, want %q", got, tc.want)
			}
		})
	}
	if _, _, err := a.IssuePeer("shared", now, testPolicy); err == nil || !strings.Contains(err.Error(), "not an absolute URI") {
		t.Fatalf("issuing for a bare name: %v", err)
	}
	if p := a.ServingProblem(cert, key, names, now, testPolicy); !strings.Contains(p, "its names") {
		t.Fatalf("a peer certificate as the serving one: %q", p)
	}
}

// signWith signs a leaf for names with the CA pair in PEM as an outside issuer would (plain
// crypto/x509, not Issue).
func signWith(t *testing.T, caCertPEM, caKeyPEM []byte, now time.Time) []byte {
	t.Helper()
	pair, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		t.Fatalf("the signer's certificate and key do not pair: %v", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(7), DNSNames: names, NotBefore: now, NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), pair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestSigner: SignerPEM hands out the CA that signs (the old one while a new one is being
// published, then the new one) with its key; SignedBySigner accepts a certificate an outside
// issuer signed with that pair only while that CA signs.
func TestSigner(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAuthority("x")
	mustRotate(t, a, start)
	oldCert, oldKey, err := a.SignerPEM(start, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	fromOld := signWith(t, oldCert, oldKey, start)
	rotation := start.Add(testPolicy.CAValidity * 2 / 3)
	mustRotate(t, a, rotation)
	published := rotation.Add(testPolicy.Publish)
	newCert, newKey, err := a.SignerPEM(published, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	fromNew := signWith(t, newCert, newKey, published)
	for _, tc := range []struct {
		name string
		cert []byte
		now  time.Time
		want bool
	}{
		{"old CA before the new one signs", fromOld, published.Add(-time.Minute), true},
		{"old CA once the new one signs", fromOld, published, false},
		{"new CA once it signs", fromNew, published, true},
		{"new CA while it is published", fromNew, published.Add(-time.Minute), false},
		{"no certificate", nil, published, false},
		{"not PEM", []byte("garbage"), published, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.SignedBySigner(tc.cert, tc.now, testPolicy); got != tc.want {
				t.Fatalf("SignedBySigner = %v, want %v", got, tc.want)
			}
		})
	}
	if bytes.Equal(oldCert, newCert) {
		t.Fatal("the signer did not change after the new CA was published")
	}
	if _, _, err := NewAuthority("empty").SignerPEM(start, testPolicy); err == nil {
		t.Fatal("an authority without a CA handed out a signer")
	}
}
