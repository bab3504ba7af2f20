package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestListenerSurvivesFDExhaustion runs the process out of file descriptors (a lowered
// RLIMIT_NOFILE, restored afterwards) while a client connects: the accept fails with EMFILE,
// and once descriptors are free again the same listener accepts and serves the client.
func TestListenerSurvivesFDExhaustion(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	n, _ := singleNode(t, Redis, acct, Options{})
	// A first client opens the tenant's engine link, so serving the next one needs no new
	// descriptor but the accepted connection's.
	if got := loginRESP(t, n, acct).do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}

	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lowered := saved
	lowered.Cur = uint64(len(fds) + 32)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var fillers []*os.File
	freeFDs := func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
	}
	t.Cleanup(func() {
		freeFDs()
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	})
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, f)
	}
	// One descriptor for the client's socket; none is left for the proxy's accept.
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	nc, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatalf("dial with one descriptor free: %v", err)
	}
	defer nc.Close()
	c := newRESPClient(t, nc)
	c.send("AUTH", acct.id, acct.password)
	nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var ne net.Error
	if _, err := nc.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("with no descriptor free the client was answered (read error %v); the test did not exhaust descriptors", err)
	}

	freeFDs()
	if got := c.read(); got != "+OK\r\n" {
		t.Fatalf("AUTH once descriptors are free: %q", got)
	}
	if got := c.do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("GET once descriptors are free: %q", got)
	}
	if err := n.p.Healthy(); err != nil {
		t.Errorf("Healthy after the listener recovered: %v", err)
	}
	if err := n.p.Ready(t.Context()); err != nil {
		t.Errorf("Ready after the listener recovered: %v", err)
	}
}

// TestDeadListenerFailsHealthz closes a client or peer listener under the proxy: serving ends
// with the listener's error and /healthz fails, so the liveness probe restarts the pod; the
// proxy's own Shutdown and Close stop listeners without failing it.
func TestDeadListenerFailsHealthz(t *testing.T) {
	for _, peer := range []bool{false, true} {
		name := map[bool]string{false: "client", true: "peer"}[peer]
		t.Run(name, func(t *testing.T) {
			n := startNode(t, "node-a", Options{Protocol: Redis})
			if got := getHealthz(t, n); got != http.StatusOK {
				t.Fatalf("/healthz before: %d", got)
			}
			l := listen(t)
			serve := n.p.Serve
			if peer {
				serve = n.p.ServePeer
			}
			done := make(chan error, 1)
			go func() { done <- serve(l) }()
			// Wait until the listener is being served: a connection to it is accepted.
			probe, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			probe.Close()
			l.Close()
			select {
			case err := <-done:
				if errors.Is(err, ErrClosed) || err == nil {
					t.Fatalf("serving a listener closed under the proxy ended with %v, want the listener's error", err)
				}
			case <-time.After(testIOTimeout):
				t.Fatal("serving did not end after its listener closed")
			}
			if got := getHealthz(t, n); got != http.StatusServiceUnavailable {
				t.Errorf("/healthz after the %s listener died: %d, want 503", name, got)
			}
			if err := n.p.Healthy(); err == nil || !strings.Contains(err.Error(), name+" listener") {
				t.Errorf("Healthy: %v, want the dead %s listener named", err, name)
			}
		})
	}
	t.Run("shutdown", func(t *testing.T) {
		n := startNode(t, "node-a", Options{Protocol: Redis})
		if err := n.p.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := n.p.Healthy(); err != nil {
			t.Errorf("Healthy after Shutdown: %v", err)
		}
	})
}

func getHealthz(t *testing.T, n *testNode) int {
	t.Helper()
	res, err := http.Get(n.http.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
