package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestLongReplyIsNotCutByTheBackendTimeout reads, through a proxy whose backend timeout is
// 300ms, a reply that keeps arriving for about a second, followed by a small request of the same
// tenant on the same link: the timeout bounds an engine's silence, not a reply, so both are
// answered (issue 18: one large reply failed every request in flight with "local partition:
// timed out"). The engine is a fake memcached that sends its value in chunks 10ms apart: a
// real engine sends a reply as fast as the proxy reads it, and the proxy's own pauses while
// it reads a large one are what made the timeout cut it, too irregular to test with.
func TestLongReplyIsNotCutByTheBackendTimeout(t *testing.T) {
	const chunks, chunkLen, timeout = 100, 10 << 10, 300 * time.Millisecond
	engine := dribblingMemcached(t, chunks, chunkLen, 10*time.Millisecond)
	acct := newAccount(t, "team-a/app")
	n := startNode(t, "node-a", Options{Protocol: Memcached, BackendTimeout: timeout, ThrottleMaxWait: 10 * time.Millisecond})
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}})
	c := loginMC(t, n, acct)
	start := time.Now()
	c.write("get big\r\nget small\r\n")
	if line := c.line(); line != fmt.Sprintf("VALUE big 0 %d", chunks*chunkLen) {
		t.Fatalf("the long reply: %q", line)
	}
	if _, err := c.br.Discard(chunks*chunkLen + 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"END", "VALUE small 0 1", "s", "END"} {
		if line := c.line(); line != want {
			t.Fatalf("after the long reply: %q, want %q", line, want)
		}
	}
	t.Logf("the long reply and the request behind it took %v (backend timeout %v)", time.Since(start), timeout)
}

// dribblingMemcached serves memcached "get" on a unix socket: "big" is a value of
// chunks*chunkLen bytes sent one chunk per pause, any other key is "s". Other commands (the
// proxy's eviction watcher) get no answer.
func dribblingMemcached(t *testing.T, chunks, chunkLen int, pause time.Duration) string {
	path := t.TempDir() + "/memcached.sock"
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go serveDribbling(nc, chunks, chunkLen, pause)
		}
	}()
	return path
}

func serveDribbling(nc net.Conn, chunks, chunkLen int, pause time.Duration) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	chunk := []byte(strings.Repeat("v", chunkLen))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		key, isGet := strings.CutPrefix(strings.TrimSpace(line), "get ")
		switch {
		case !isGet:
			continue
		case key != "big":
			_, err = nc.Write([]byte("VALUE " + key + " 0 1\r\ns\r\nEND\r\n"))
		default:
			_, err = fmt.Fprintf(nc, "VALUE big 0 %d\r\n", chunks*chunkLen)
			for i := 0; i < chunks && err == nil; i++ {
				time.Sleep(pause)
				_, err = nc.Write(chunk)
			}
			if err == nil {
				_, err = nc.Write([]byte("\r\nEND\r\n"))
			}
		}
		if err != nil {
			return
		}
	}
}
