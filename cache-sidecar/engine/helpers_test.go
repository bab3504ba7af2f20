package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Test fixtures: managers on real engines in t.TempDir(), and small pipelined workload
// clients written on the package's own connection and codec helpers.

var bothEngines = []Engine{Redis, Memcached}

// testConfig is a Config on a fresh root with timings short enough for tests.
func testConfig(t testing.TB, engine Engine) Config {
	t.Helper()
	root := t.TempDir()
	if os.Geteuid() == 0 {
		// memcached runs as nobody, who must reach the root: t.TempDir's parent is 0700.
		for _, dir := range []string{filepath.Dir(root), root} {
			if err := os.Chmod(dir, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return Config{
		Engine:         engine,
		Root:           root,
		StopTimeout:    3 * time.Second,
		BackoffInitial: 100 * time.Millisecond,
		BackoffMax:     2 * time.Second,
		PollInterval:   50 * time.Millisecond,
	}
}

// startManager starts a manager and, when the test ends, stops every engine under its root.
func startManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := NewManager(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Reconcile(context.Background(), nil); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("removing every partition: %v", err)
		}
		m.Close()
		killEngines(t, cfg.Root)
	})
	return m
}

// killEngines is the safety net for engines a failed test left behind: it SIGKILLs every
// engine recorded under root.
func killEngines(t *testing.T, root string) {
	pidfiles, _ := filepath.Glob(filepath.Join(root, "*", "pid"))
	for _, pidfile := range pidfiles {
		pid, err := readPidfile(pidfile)
		sock := filepath.Join(filepath.Dir(pidfile), "sock")
		if err == nil && (cmdlineMatches(pid, "redis-server", sock) || cmdlineMatches(pid, "memcached", sock)) {
			t.Logf("killing engine %d left behind in %s", pid, filepath.Dir(pidfile))
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func mustReconcile(t *testing.T, m *Manager, specs ...PartitionSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.Reconcile(ctx, specs); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

func mustStatus(t *testing.T, m *Manager, tenant string) Status {
	t.Helper()
	st, ok := m.Status(tenant)
	if !ok {
		t.Fatalf("no partition %q", tenant)
	}
	return st
}

func mustStats(t *testing.T, m *Manager, tenant string) Stats {
	t.Helper()
	st, err := m.Stats(context.Background(), tenant)
	if err != nil {
		t.Fatalf("Stats(%q): %v", tenant, err)
	}
	return st
}

func mustSocket(t *testing.T, m *Manager, tenant string) string {
	t.Helper()
	network, addr, ok := m.Endpoint(tenant)
	if !ok || network != "unix" {
		t.Fatalf("Endpoint(%q) = %q %q %v", tenant, network, addr, ok)
	}
	return addr
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stateRecorder collects OnStateChange notifications.
type stateRecorder struct {
	mu   sync.Mutex
	seen []Status
}

func (r *stateRecorder) record(s Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, s)
}

func (r *stateRecorder) of(tenant string) []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Status
	for _, s := range r.seen {
		if s.Tenant == tenant {
			out = append(out, s)
		}
	}
	return out
}

func keyName(prefix string, i int) string { return prefix + ":" + strconv.Itoa(i) }

// workload writes and reads keys on one engine through its socket, pipelined.
type workload interface {
	set(prefix string, from, to, valueSize int)
	// read fetches keys (making them recently used) and returns how many were present.
	read(prefix string, from, to int) int
}

func newWorkload(t *testing.T, engine Engine, socket string) workload {
	t.Helper()
	c, err := dialEngine(context.Background(), socket)
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { c.Close() })
	if engine == Redis {
		return redisWorkload{t, c}
	}
	return memcachedWorkload{t, c}
}

const pipelineBatch = 1000

type redisWorkload struct {
	t *testing.T
	c *engineConn
}

func (w redisWorkload) pipeline(from, to int, command func(i int) []string, reply func(respValue)) {
	w.t.Helper()
	for start := from; start < to; start += pipelineBatch {
		end := min(start+pipelineBatch, to)
		var buf []byte
		for i := start; i < end; i++ {
			buf = appendRESPCommand(buf, command(i)...)
		}
		if _, err := w.c.conn.Write(buf); err != nil {
			w.t.Fatal(err)
		}
		for range end - start {
			v, err := readRESP(w.c.r)
			if err != nil {
				w.t.Fatal(err)
			}
			reply(v)
		}
	}
}

func (w redisWorkload) set(prefix string, from, to, valueSize int) {
	w.t.Helper()
	value := string(make([]byte, valueSize))
	w.pipeline(from, to, func(i int) []string { return []string{"SET", keyName(prefix, i), value} }, func(respValue) {})
}

func (w redisWorkload) read(prefix string, from, to int) int {
	w.t.Helper()
	hits := 0
	w.pipeline(from, to, func(i int) []string { return []string{"GET", keyName(prefix, i)} }, func(v respValue) {
		if !v.null {
			hits++
		}
	})
	return hits
}

type memcachedWorkload struct {
	t *testing.T
	c *engineConn
}

func (w memcachedWorkload) set(prefix string, from, to, valueSize int) {
	w.t.Helper()
	value := make([]byte, valueSize)
	for start := from; start < to; start += pipelineBatch {
		var buf []byte
		for i := start; i < min(start+pipelineBatch, to); i++ {
			buf = fmt.Appendf(buf, "set %s 0 0 %d noreply\r\n%s\r\n", keyName(prefix, i), valueSize, value)
		}
		buf = append(buf, "mn\r\n"...)
		if _, err := w.c.conn.Write(buf); err != nil {
			w.t.Fatal(err)
		}
		if line, err := readLine(w.c.r); err != nil || string(line) != "MN" {
			w.t.Fatalf("after sets: %q, %v", line, err)
		}
	}
}

func (w memcachedWorkload) read(prefix string, from, to int) int {
	w.t.Helper()
	hits := 0
	for start := from; start < to; start += pipelineBatch {
		var buf []byte
		for i := start; i < min(start+pipelineBatch, to); i++ {
			buf = fmt.Appendf(buf, "get %s\r\n", keyName(prefix, i))
		}
		buf = append(buf, "mn\r\n"...)
		if _, err := w.c.conn.Write(buf); err != nil {
			w.t.Fatal(err)
		}
		for {
			line, err := readLine(w.c.r)
			if err != nil {
				w.t.Fatal(err)
			}
			if string(line) == "MN" {
				break
			}
			var key string
			var flags, size int
			if _, err := fmt.Sscanf(string(line), "VALUE %s %d %d", &key, &flags, &size); err == nil {
				hits++
				if _, err := w.c.r.Discard(size + 2); err != nil {
					w.t.Fatal(err)
				}
			}
		}
	}
	return hits
}
