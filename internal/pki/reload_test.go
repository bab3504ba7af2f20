package pki

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// secretVolume writes files as the kubelet updates a mounted Secret: into a new directory,
// then one symlink swap, so readers see the old pair or the new one, never a mix.
type secretVolume struct {
	dir  string
	gens int
}

func (v *secretVolume) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.gens++
	gen := filepath.Join(v.dir, "..gen"+strings.Repeat("x", v.gens))
	if err := os.Mkdir(gen, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(gen, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// echoServer serves lines back over TLS from r until the test ends.
func echoServer(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, bundle []byte) *tls.Conn {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: names[0], MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func echo(t *testing.T, c *tls.Conn, line string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
}

// TestReloaderRotation replaces the served pair in a Secret-like volume: the connection
// opened before keeps working, a new one gets the new certificate; a broken pair leaves the
// last good one served and is reported once.
func TestReloaderRotation(t *testing.T) {
	now := time.Now()
	a := NewAuthority("x")
	mustRotate(t, a, now)
	first, firstKey, err := a.Issue(names, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	vol := &secretVolume{dir: t.TempDir()}
	vol.write(t, map[string][]byte{"tls.crt": first, "tls.key": firstKey})
	var problems []string
	var mu sync.Mutex
	r, err := NewReloader(filepath.Join(vol.dir, "tls.crt"), filepath.Join(vol.dir, "tls.key"), func(err error) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, err.Error())
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServer(t, r)
	before := dial(t, addr, a.Bundle())
	echo(t, before, "before")

	second, secondKey, err := a.Issue(names, now, testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	vol.write(t, map[string][]byte{"tls.crt": second, "tls.key": secondKey})
	after := dial(t, addr, a.Bundle())
	if got := after.ConnectionState().PeerCertificates[0].Raw; string(got) != string(pemDER(t, second)) {
		t.Fatal("a connection opened after the rotation got the old certificate")
	}
	echo(t, before, "still")
	echo(t, after, "after")

	vol.write(t, map[string][]byte{"tls.crt": first, "tls.key": secondKey})
	for range 2 {
		c := dial(t, addr, a.Bundle())
		if got := c.ConnectionState().PeerCertificates[0].Raw; string(got) != string(pemDER(t, second)) {
			t.Fatal("a mismatched pair replaced the last good certificate")
		}
	}
	mu.Lock()
	if len(problems) != 1 || !strings.Contains(problems[0], "private key does not match public key") {
		t.Fatalf("problems %q, want the mismatch once", problems)
	}
	mu.Unlock()
}

func TestNewReloaderFails(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil); err == nil || !strings.Contains(err.Error(), "TLS certificate") {
		t.Fatalf("error %v", err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("nonsense"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil); err == nil || !strings.Contains(err.Error(), "loading TLS certificate") {
		t.Fatalf("error %v", err)
	}
}

func pemDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) == 0 {
		t.Fatal(err)
	}
	return certs[0].Raw
}
