package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// TestListenerSurvivesFDExhaustion runs the process out of file descriptors (a lowered
// RLIMIT_NOFILE, restored afterwards) while a client connects: the accept fails with EMFILE
// (seen in the proxy's log), and once descriptors are free again the same listener accepts and
// serves the client.
func TestListenerSurvivesFDExhaustion(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	var log enginetest.LockedBuffer
	n, _ := singleNode(t, Redis, acct, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	// A first client opens the tenant's engine link, so serving the next one needs no new
	// descriptor but the accepted connection's.
	if got := loginRESP(t, n, acct).do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	})
	// Descriptors other goroutines close meanwhile (earlier tests' cleanups) may let an accept
	// through before it fails; then the client is served at once and the test tries again.
	for attempt := 1; ; attempt++ {
		c, fillers := connectWithoutFreeFDs(t, n.addr, &saved)
		c.send("AUTH", acct.id, acct.password)
		failed := eventually(2*time.Second, func() bool { return strings.Contains(log.String(), "too many open files") })
		for _, f := range fillers {
			f.Close()
		}
		if got := c.read(); got != "+OK\r\n" {
			t.Fatalf("AUTH once descriptors are free: %q", got)
		}
		if got := c.do("GET", "k"); got != "$1\r\nv\r\n" {
			t.Fatalf("GET once descriptors are free: %q", got)
		}
		c.nc.Close()
		if failed {
			break
		}
		if attempt == 5 {
			t.Fatal("no accept failed with EMFILE in 5 attempts; the test did not exhaust descriptors")
		}
	}
	if err := n.p.Healthy(); err != nil {
		t.Errorf("Healthy after the listener recovered: %v", err)
	}
	if err := n.p.Ready(t.Context()); err != nil {
		t.Errorf("Ready after the listener recovered: %v", err)
	}
}

// connectWithoutFreeFDs lowers the process's descriptor limit (the caller restores it), fills
// it with open files and connects a client to addr with the last free descriptor, so the
// proxy's accept finds none until the files close.
func connectWithoutFreeFDs(t *testing.T, addr string, saved *syscall.Rlimit) (*respClient, []*os.File) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lowered := *saved
	lowered.Cur = uint64(len(fds) + 32)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var fillers []*os.File
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
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial with one descriptor free: %v", err)
	}
	return newRESPClient(t, nc), fillers
}

// eventually reports whether cond holds within timeout.
func eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
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
	_, _ = io.Copy(io.Discard, res.Body) // only the status matters
	return res.StatusCode
}
