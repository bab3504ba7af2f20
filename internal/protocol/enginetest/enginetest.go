// Package enginetest starts real redis-server and memcached processes for the protocol codecs'
// tests: each on a unix socket in a fresh temporary directory, stopped by PID when the test ends.
// The engines are part of the project's toolchain (make bootstrap installs them), so a missing
// engine fails the test instead of skipping it.
package enginetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long an engine may take to accept connections.
const startTimeout = 10 * time.Second

// StartRedis starts redis-server without persistence, listening only on a unix socket, and
// returns the socket path. extra arguments are appended to the command line.
func StartRedis(tb testing.TB, extra ...string) string {
	tb.Helper()
	dir := socketDir(tb)
	sock := filepath.Join(dir, "redis.sock")
	args := append([]string{
		"--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", dir,
	}, extra...)
	start(tb, "redis-server", args, sock)
	return sock
}

// StartMemcached starts memcached listening only on a unix socket and returns the socket path.
// As root it runs as nobody, since memcached refuses to run as root.
func StartMemcached(tb testing.TB, extra ...string) string {
	tb.Helper()
	dir := socketDir(tb)
	sock := filepath.Join(dir, "memcached.sock")
	args := []string{"-s", sock}
	if os.Geteuid() == 0 {
		// nobody must be able to create the socket in the directory.
		if err := os.Chmod(dir, 0o777); err != nil {
			tb.Fatal(err)
		}
		args = append(args, "-u", "nobody")
	}
	start(tb, "memcached", append(args, extra...), sock)
	return sock
}

// Dial connects to a unix socket and closes the connection when the test ends.
func Dial(tb testing.TB, sock string) net.Conn {
	tb.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		tb.Fatalf("dial %s: %v", sock, err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// socketDir makes a short-named directory: unix socket paths are limited to about 100 bytes,
// which t.TempDir's long names can exceed.
func socketDir(tb testing.TB) string {
	dir, err := os.MkdirTemp("", "cqeng")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// LockedBuffer collects a process's output while it runs; tests read it meanwhile.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// LogRecord returns the first line of a JSON log (log/slog's JSON handler) whose message is
// msg, decoded.
func (b *LockedBuffer) LogRecord(msg string) (map[string]any, bool) {
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			return rec, true
		}
	}
	return nil, false
}

func start(tb testing.TB, name string, args []string, sock string) {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("%s not found on PATH (%v): run `make bootstrap`", name, err)
	}
	var out LockedBuffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(startTimeout)
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return
		}
		select {
		case <-exited:
			tb.Fatalf("%s exited before accepting connections:\n%s", name, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s (pid %s) did not accept connections on %s within %v:\n%s",
				name, strconv.Itoa(cmd.Process.Pid), sock, startTimeout, out.String())
		}
	}
}

// KillEnginesUnder is the safety net for engines a failed test left behind: it SIGKILLs every
// engine whose pidfile is under root (<root>/<partition>/pid) and whose command line names
// root (a recycled pid is someone else's process).
func KillEnginesUnder(tb testing.TB, root string) {
	pidfiles, _ := filepath.Glob(filepath.Join(root, "*", "pid"))
	for _, pidfile := range pidfiles {
		data, err := os.ReadFile(pidfile)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			continue
		}
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), root) {
			tb.Logf("killing engine %d left behind in %s", pid, filepath.Dir(pidfile))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
