package main

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/sidecarmem"
)

// connectionHolder is a python client that opens n connections to the sidecar, each logging
// in and writing and reading back a value of 63 KiB (so every buffer has grown as far as a
// streamed reply grows it), prints "ready" and holds them until its input closes. It runs in
// its own process so that only the sidecar's memory is measured.
const connectionHolder = `import socket, ssl, sys
host, port, n, cafile, user, password = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
ctx = ssl.create_default_context(cafile=cafile) if cafile else None
def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
def reply(f):
    line = f.readline()
    if line.startswith(b"$"):
        f.read(int(line[1:]) + 2)
    elif not line.startswith(b"+"):
        raise SystemExit("unexpected reply %r" % line)
value = b"v" * (63 << 10)
held = []
for i in range(n):
    s = socket.create_connection((host, port))
    if ctx:
        s = ctx.wrap_socket(s, server_hostname=host)
    f = s.makefile("rb")
    s.sendall(command("AUTH", user, password) + command("SET", "v", value) + command("GET", "v"))
    for _ in range(3):
        reply(f)
    held.append((s, f))
print("ready", flush=True)
sys.stdin.read()
`

// settledMemory is the sidecar process' heap and goroutine stacks once garbage is collected.
func settledMemory() uint64 {
	var ms runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	time.Sleep(100 * time.Millisecond) // let every connection's goroutines reach their wait
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// holdConnections runs connectionHolder against s until it holds n connections, and returns a
// function that makes it close them.
func holdConnections(t *testing.T, s *tlsSidecar, n int, withTLS bool) (release func()) {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.addr)
	cafile := ""
	if withTLS {
		cafile = s.caFile
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, "python3", "-c", connectionHolder, host, port, strconv.Itoa(n), cafile, s.tenant, s.password)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	release = func() {
		stdin.Close()
		_ = cmd.Wait()
		cancel()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		release()
		t.Fatalf("the client holding %d connections: %q, %v\n%s", n, line, err, stderr.String())
	}
	return release
}

// TestConnectionMemoryWithTLS measures what one open client connection costs the sidecar with
// and without TLS, in one run, and checks each against the per-connection budget the operator
// sizes the sidecar's memory with (sidecarmem.ConnectionBudget, plus
// sidecarmem.TLSConnectionOverhead with TLS).
func TestConnectionMemoryWithTLS(t *testing.T) {
	const conns = 200
	perConn := map[bool]int64{}
	for _, withTLS := range []bool{false, true} {
		budget := int64(sidecarmem.ConnectionBudget)
		if withTLS {
			budget += sidecarmem.TLSConnectionOverhead
		}
		s := startSidecar(t, "redis", withTLS)
		holdConnections(t, s, 1, withTLS)() // the links and pools connections share
		before := settledMemory()
		release := holdConnections(t, s, conns, withTLS)
		after := settledMemory()
		release()
		perConn[withTLS] = (int64(after) - int64(before)) / conns
		t.Logf("TLS %v: %d connections: heap and stacks %.1f MiB before, %.1f MiB after: %d KiB per connection (budget %d KiB)",
			withTLS, conns, float64(before)/(1<<20), float64(after)/(1<<20), perConn[withTLS]>>10, budget>>10)
		if perConn[withTLS] > budget {
			t.Errorf("TLS %v: a connection costs %d bytes, budget %d", withTLS, perConn[withTLS], budget)
		}
	}
	t.Logf("TLS adds %d KiB per connection (%.2fx)", (perConn[true]-perConn[false])>>10, float64(perConn[true])/float64(perConn[false]))
}
