package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
)

// fileStamp identifies one version of a file: a Secret volume replaces its files by swapping
// a symlink, so a new version is a new file (another inode), and a file rewritten in place
// changes its size or modification time.
type fileStamp struct {
	info os.FileInfo
}

func (s fileStamp) same(info os.FileInfo) bool {
	return s.info != nil && os.SameFile(s.info, info) && s.info.ModTime().Equal(info.ModTime()) && s.info.Size() == info.Size()
}

// Reloader serves a certificate and key from files, reading them again when they change.
// Each TLS handshake checks the files (two stat calls), so a new connection gets the new
// certificate as soon as both files hold a matching pair; connections already open keep the
// session they negotiated. A pair that does not load (the key written before the certificate,
// say) leaves the previous certificate in use until the next handshake finds a good one.
type Reloader struct {
	certFile, keyFile string

	onProblem func(error)

	mu        sync.Mutex
	cert      *tls.Certificate
	certStamp fileStamp
	keyStamp  fileStamp
	lastErr   error
}

// NewReloader loads the pair once and fails when it does not load; onProblem (may be nil)
// hears about a later version that does not.
func NewReloader(certFile, keyFile string, onProblem func(error)) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, onProblem: onProblem}
	if err := r.refresh(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is a tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if err := r.refresh(); err != nil && r.onProblem != nil {
		r.onProblem(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

// GetClientCertificate is a tls.Config.GetClientCertificate.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.GetCertificate(nil)
}

// ServerConfig is a TLS 1.2+ server configuration serving the reloaded certificate.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}

// refresh reads the pair when either file changed since the last good load.
func (r *Reloader) refresh() error {
	certInfo, err := os.Stat(r.certFile)
	if err != nil {
		return r.failed(fmt.Errorf("TLS certificate: %w", err))
	}
	keyInfo, err := os.Stat(r.keyFile)
	if err != nil {
		return r.failed(fmt.Errorf("TLS key: %w", err))
	}
	r.mu.Lock()
	unchanged := r.certStamp.same(certInfo) && r.keyStamp.same(keyInfo)
	r.mu.Unlock()
	if unchanged {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return r.failed(fmt.Errorf("loading TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cert, r.certStamp, r.keyStamp, r.lastErr = &cert, fileStamp{certInfo}, fileStamp{keyInfo}, nil
	return nil
}

// failed returns err the first time it is seen in a row, nil after, so a broken pair is
// reported once rather than on every handshake.
func (r *Reloader) failed(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastErr != nil && r.lastErr.Error() == err.Error() {
		return nil
	}
	r.lastErr = err
	return err
}
