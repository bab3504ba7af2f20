// Package pki keeps the certificate authority the operator runs for each CacheCluster, issues
// from it the sidecars' serving certificates (client-facing TLS) and peer certificates (mutual
// TLS between sidecars, named by a URI), reloads a certificate from files when they change (a
// mounted Secret updated in place), and verifies peers against a reloaded CA bundle.
//
// An Authority is every CA certificate still valid, oldest first. Rotation overlaps: a new CA
// is added once the newest has lived two thirds of its validity, but it signs serving
// certificates only after Policy.Publish has passed, so tenants that refresh their CA bundle
// within that time trust the new CA before any sidecar presents a certificate it signed. A
// retired CA stays in the bundle until it expires; no serving certificate outlives its signer.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"time"
)

// Policy says how long certificates live.
type Policy struct {
	// CAValidity is the lifetime of a CA certificate.
	CAValidity time.Duration
	// LeafValidity is the lifetime of a serving certificate (shortened to its signer's).
	LeafValidity time.Duration
	// Publish is how long a new CA is only in the bundle before it signs serving certificates.
	Publish time.Duration
}

// DefaultPolicy: a CA lives a year (replaced after 8 months, signing 2 months after that), a
// serving certificate 90 days (replaced after 60).
var DefaultPolicy = Policy{CAValidity: 365 * 24 * time.Hour, LeafValidity: 90 * 24 * time.Hour, Publish: 60 * 24 * time.Hour}

// Validate refuses a policy under which a new CA would not sign before the old one expires.
func (p Policy) Validate() error {
	if p.CAValidity <= 0 || p.LeafValidity <= 0 || p.Publish < 0 {
		return fmt.Errorf("certificate lifetimes must be positive (CA %v, serving %v, publish %v)", p.CAValidity, p.LeafValidity, p.Publish)
	}
	if p.Publish >= p.CAValidity/3 {
		return fmt.Errorf("publish %v must be shorter than a third of the CA validity %v: the old CA expires a third of its validity after the new one is made", p.Publish, p.CAValidity)
	}
	return nil
}

// clockSkew backdates every certificate, for clients whose clocks run behind the operator's.
const clockSkew = time.Minute

// publishedAt is when a CA starts signing: p.Publish after it was made.
func publishedAt(ca *x509.Certificate, p Policy) time.Time {
	return ca.NotBefore.Add(clockSkew + p.Publish)
}

// renewAt is when a certificate is due for replacement: two thirds into its lifetime, counted
// from when it was made (the backdating is not part of it).
func renewAt(c *x509.Certificate) time.Time {
	made := c.NotBefore.Add(clockSkew)
	return made.Add(c.NotAfter.Sub(made) * 2 / 3)
}

// keyPair is a parsed certificate with its private key.
type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// Authority holds the CAs of one cluster, oldest first.
type Authority struct {
	name string
	cas  []keyPair
}

// NewAuthority returns an empty authority whose CAs are named after name.
func NewAuthority(name string) *Authority { return &Authority{name: name} }

// ParseAuthority reads the CAs as Encode wrote them: certificates and keys in the same order.
func ParseAuthority(name string, certsPEM, keysPEM []byte) (*Authority, error) {
	certs, err := parseCerts(certsPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	var keys []crypto.Signer
	for rest := keysPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		key, err := parseKey(block)
		if err != nil {
			return nil, fmt.Errorf("CA key %d: %w", len(keys)+1, err)
		}
		keys = append(keys, key)
	}
	if len(certs) != len(keys) {
		return nil, fmt.Errorf("%d CA certificates but %d keys", len(certs), len(keys))
	}
	a := &Authority{name: name}
	for i, c := range certs {
		if !c.IsCA {
			return nil, fmt.Errorf("CA certificate %d (%s) is not a CA", i+1, c.Subject.CommonName)
		}
		if !publicKeysEqual(c.PublicKey, keys[i].Public()) {
			return nil, fmt.Errorf("CA key %d does not belong to certificate %d (%s)", i+1, i+1, c.Subject.CommonName)
		}
		a.cas = append(a.cas, keyPair{cert: c, key: keys[i]})
	}
	return a, nil
}

// Encode returns the CA certificates and their keys, PEM, in the same order.
func (a *Authority) Encode() (certsPEM, keysPEM []byte, err error) {
	var certs, keys bytes.Buffer
	for _, ca := range a.cas {
		der, err := x509.MarshalPKCS8PrivateKey(ca.key)
		if err != nil {
			return nil, nil, err
		}
		certs.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
		keys.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	return certs.Bytes(), keys.Bytes(), nil
}

// Bundle is every CA certificate, PEM: what clients trust.
func (a *Authority) Bundle() []byte {
	var out bytes.Buffer
	for _, ca := range a.cas {
		out.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
	}
	return out.Bytes()
}

// Rotate drops expired CAs and adds a new one when there is none or the newest is due for
// replacement; it says whether anything changed.
func (a *Authority) Rotate(now time.Time, p Policy) (bool, error) {
	before := len(a.cas)
	a.cas = slices.DeleteFunc(a.cas, func(ca keyPair) bool { return !now.Before(ca.cert.NotAfter) })
	changed := len(a.cas) != before
	if len(a.cas) > 0 && now.Before(renewAt(a.cas[len(a.cas)-1].cert)) {
		return changed, nil
	}
	key, err := newKey()
	if err != nil {
		return changed, err
	}
	serial, err := serialNumber()
	if err != nil {
		return changed, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s CA %s", a.name, now.UTC().Format("2006-01-02T15:04:05Z"))},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(p.CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return changed, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return changed, err
	}
	a.cas = append(a.cas, keyPair{cert: cert, key: key})
	return true, nil
}

// signer is the newest CA that has been published for p.Publish, or the oldest when none has.
func (a *Authority) signer(now time.Time, p Policy) (keyPair, error) {
	if len(a.cas) == 0 {
		return keyPair{}, errors.New("the authority has no CA: rotate it first")
	}
	for i := len(a.cas) - 1; i >= 0; i-- {
		if !now.Before(publishedAt(a.cas[i].cert, p)) {
			return a.cas[i], nil
		}
	}
	return a.cas[0], nil
}

// leafSpec is what a leaf certificate says: its names and what it may be used for.
type leafSpec struct {
	dnsNames []string
	uris     []*url.URL
	usages   []x509.ExtKeyUsage
}

// Issue returns a serving certificate for dnsNames signed by the current signer, and its key.
func (a *Authority) Issue(dnsNames []string, now time.Time, p Policy) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 {
		return nil, nil, errors.New("a serving certificate needs at least one DNS name")
	}
	return a.issue(servingSpec(dnsNames), now, p)
}

// IssuePeer returns a certificate for mutual TLS between peers named by the URI identity
// (usable to serve and to connect), signed by the current signer, and its key.
func (a *Authority) IssuePeer(identity string, now time.Time, p Policy) (certPEM, keyPEM []byte, err error) {
	spec, err := peerSpec(identity)
	if err != nil {
		return nil, nil, err
	}
	return a.issue(spec, now, p)
}

func servingSpec(dnsNames []string) leafSpec {
	return leafSpec{dnsNames: dnsNames, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}

func peerSpec(identity string) (leafSpec, error) {
	u, err := url.Parse(identity)
	if err != nil || u.Scheme == "" {
		return leafSpec{}, fmt.Errorf("peer identity %q is not an absolute URI", identity)
	}
	return leafSpec{uris: []*url.URL{u}, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, nil
}

func (a *Authority) issue(spec leafSpec, now time.Time, p Policy) (certPEM, keyPEM []byte, err error) {
	ca, err := a.signer(now, p)
	if err != nil {
		return nil, nil, err
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(p.LeafValidity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName()},
		DNSNames:     spec.dnsNames,
		URIs:         spec.uris,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  spec.usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func (s leafSpec) commonName() string {
	if len(s.dnsNames) > 0 {
		return s.dnsNames[0]
	}
	return s.uris[0].String()
}

// names is every name of the spec, for comparing with a certificate's.
func (s leafSpec) names() []string {
	out := slices.Clone(s.dnsNames)
	for _, u := range s.uris {
		out = append(out, u.String())
	}
	return out
}

func certNames(c *x509.Certificate) []string {
	return leafSpec{dnsNames: c.DNSNames, uris: c.URIs}.names()
}

// ServingProblem says why a serving certificate must be issued again: it is missing or
// unreadable, its key does not match, it is not signed by the current signer, its names
// differ from dnsNames, or it is due for renewal. Empty when it can stay.
func (a *Authority) ServingProblem(certPEM, keyPEM []byte, dnsNames []string, now time.Time, p Policy) string {
	return a.problem(certPEM, keyPEM, servingSpec(dnsNames), now, p)
}

// PeerProblem is ServingProblem for a peer certificate of identity.
func (a *Authority) PeerProblem(certPEM, keyPEM []byte, identity string, now time.Time, p Policy) string {
	spec, err := peerSpec(identity)
	if err != nil {
		return err.Error()
	}
	return a.problem(certPEM, keyPEM, spec, now, p)
}

func (a *Authority) problem(certPEM, keyPEM []byte, spec leafSpec, now time.Time, p Policy) string {
	leaf, err := parseLeaf(certPEM, keyPEM)
	if err != nil {
		return err.Error()
	}
	ca, err := a.signer(now, p)
	if err != nil {
		return err.Error()
	}
	switch {
	case leaf.CheckSignatureFrom(ca.cert) != nil:
		return "it is not signed by the current CA " + ca.cert.Subject.CommonName
	case !slices.Equal(certNames(leaf), spec.names()):
		return fmt.Sprintf("its names %v are not %v", certNames(leaf), spec.names())
	case !slices.Equal(leaf.ExtKeyUsage, spec.usages):
		return "its key usages are not the ones wanted"
	case !now.Before(renewAt(leaf)):
		return "it is due for renewal since " + renewAt(leaf).UTC().Format(time.RFC3339)
	}
	return ""
}

// NextChange is when, after now, Rotate or ServingProblem will next have something to do for
// a serving certificate that is fine now: the newest CA's renewal, a published CA starting to
// sign, the oldest CA's expiry, or the serving certificate's renewal.
func (a *Authority) NextChange(certPEM []byte, now time.Time, p Policy) time.Time {
	var times []time.Time
	if n := len(a.cas); n > 0 {
		times = append(times, renewAt(a.cas[n-1].cert), a.cas[0].cert.NotAfter)
		for _, ca := range a.cas {
			times = append(times, publishedAt(ca.cert, p))
		}
	}
	if certs, err := parseCerts(certPEM); err == nil && len(certs) > 0 {
		times = append(times, renewAt(certs[0]))
	}
	times = slices.DeleteFunc(times, func(t time.Time) bool { return !t.After(now) })
	if len(times) == 0 {
		return time.Time{}
	}
	return slices.MinFunc(times, time.Time.Compare)
}

func parseLeaf(certPEM, keyPEM []byte) (*x509.Certificate, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("its certificate is unreadable: %w", err)
	}
	if len(certs) == 0 {
		return nil, errors.New("there is no certificate")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("there is no private key")
	}
	key, err := parseKey(block)
	if err != nil {
		return nil, fmt.Errorf("its key is unreadable: %w", err)
	}
	if !publicKeysEqual(certs[0].PublicKey, key.Public()) {
		return nil, errors.New("its key does not belong to its certificate")
	}
	return certs[0], nil
}

func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE", len(out)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
}

func parseKey(block *pem.Block) (crypto.Signer, error) {
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("PEM block is a %q, not a PRIVATE KEY (PKCS #8)", block.Type)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// SignerPEM returns the CA that signs now (see Issue) and its key, PEM: what an external
// issuer (cert-manager's CA Issuer) signs the sidecars' serving certificates with.
func (a *Authority) SignerPEM(now time.Time, p Policy) (certPEM, keyPEM []byte, err error) {
	ca, err := a.signer(now, p)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// SignedBySigner reports whether the first certificate of certPEM is signed by the CA that
// signs now; false when it is missing or unreadable.
func (a *Authority) SignedBySigner(certPEM []byte, now time.Time, p Policy) bool {
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) == 0 {
		return false
	}
	ca, err := a.signer(now, p)
	return err == nil && certs[0].CheckSignatureFrom(ca.cert) == nil
}
