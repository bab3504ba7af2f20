package proxy

import (
	"bytes"
	"fmt"
	"net"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestLostClientMidPipelineStallsNoOne: a client pipelines far more reads of a large value than
// its pipeline holds, reads no reply and resets its connection once the proxy is stuck on it:
// its reader waits in push for pipeline room, its replies back up in the socket and exceed its
// reply bound. The proxy ends that connection, and another client of the tenant, whose requests
// share the engine link, keeps getting its replies. On the code before, whoever found the
// client gone closed its socket with outMu held, which waited for the reader's raw read, whose
// push waited for the writer, which waited for outMu: the connection never ended, and the
// link's reader, stuck in that close or waiting for the connection's reply room, stalled the
// tenant. The proxy is not closed when the test fails, as its Close would wait on the stuck
// goroutines.
func TestLostClientMidPipelineStallsNoOne(t *testing.T) {
	const (
		maxPipeline = 16
		valueSize   = 32 << 10 // below streamChunk: replies are buffered, not streamed
		lostReads   = 2000
		bound       = 5 * time.Second
	)
	big := strings.Repeat("x", valueSize)
	tests := []struct {
		protocol Protocol
		set      func(key, v string) string
		get      func(key string) string
		// login connects and authenticates; read reads one reply.
		login func(t *testing.T, n *testNode, acct account) (nc net.Conn, read func() (string, error))
		// hit is the reply to a read of key holding v, stored the reply to a write.
		hit    func(key, v string) string
		stored string
	}{
		{
			protocol: Redis,
			set:      func(key, v string) string { return string(resp.AppendCommandStrings(nil, "SET", key, v)) },
			get:      func(key string) string { return string(resp.AppendCommandStrings(nil, "GET", key)) },
			login: func(t *testing.T, n *testNode, acct account) (net.Conn, func() (string, error)) {
				c := loginRESP(t, n, acct)
				return c.nc, c.readErr
			},
			hit:    func(_, v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) },
			stored: "+OK\r\n",
		},
		{
			protocol: Memcached,
			set:      func(key, v string) string { return fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, len(v), v) },
			get:      func(key string) string { return "get " + key + "\r\n" },
			login: func(t *testing.T, n *testNode, acct account) (net.Conn, func() (string, error)) {
				c := loginMC(t, n, acct)
				return c.nc, c.responseErr
			},
			hit:    func(key, v string) string { return fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\nEND\r\n", key, len(v), v) },
			stored: "STORED\r\n",
		},
	}
	for _, tt := range tests {
		t.Run(string(tt.protocol), func(t *testing.T) {
			acct := newAccount(t, "team-a/cache")
			engine := startEngine(t, tt.protocol)
			p, err := New(Options{
				Protocol: tt.protocol, Registry: prometheus.NewRegistry(),
				MaxPipeline: maxPipeline, MaxConnectionReplyBytes: 8 * valueSize,
			})
			if err != nil {
				t.Fatal(err)
			}
			stuck := false
			t.Cleanup(func() {
				if !stuck {
					p.Close()
				}
			})
			l := listen(t)
			go func() { _ = p.Serve(l) }() // ends when the cleanup closes p (serveInBackground would wait for it first)
			n := &testNode{id: "node-a", p: p, addr: l.Addr().String()}
			n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{{Node: n.id, Weight: 1}}})

			other, readOther := tt.login(t, n, acct)
			for _, kv := range [][2]string{{"big", big}, {"small", "v-small"}} {
				other.SetWriteDeadline(time.Now().Add(testIOTimeout))
				if _, err := other.Write([]byte(tt.set(kv[0], kv[1]))); err != nil {
					t.Fatal(err)
				}
				if reply, err := readOther(); err != nil || reply != tt.stored {
					t.Fatalf("set %s: %q, %v", kv[0], reply, err)
				}
			}
			before := conns(p)

			lost, _ := tt.login(t, n, acct)
			go func() {
				// The write ends in an error once the proxy hangs up; only the stall matters.
				_ = lost.SetWriteDeadline(time.Now().Add(testIOTimeout))
				_, _ = lost.Write([]byte(strings.Repeat(tt.get("big"), lostReads)))
			}()
			var c *conn
			deadline := time.Now().Add(testIOTimeout)
			for c == nil || !stalled(c) {
				if time.Now().After(deadline) {
					t.Fatal("the lost client's connection never stalled on its pipeline")
				}
				time.Sleep(time.Millisecond)
				for cc := range conns(p) {
					if !before[cc] {
						c = cc
					}
				}
			}
			if err := lost.(*net.TCPConn).SetLinger(0); err != nil {
				t.Fatal(err)
			}
			lost.Close()

			// The other client's reads share the engine link with the lost client's.
			served := make(chan error, 1)
			go func() {
				for range 50 {
					other.SetWriteDeadline(time.Now().Add(testIOTimeout))
					if _, err := other.Write([]byte(tt.get("small"))); err != nil {
						served <- err
						return
					}
					reply, err := readOther()
					if err != nil {
						served <- fmt.Errorf("get small: %w", err)
						return
					}
					if reply != tt.hit("small", "v-small") {
						served <- fmt.Errorf("get small: %q", reply)
						return
					}
				}
				served <- nil
			}()
			timeout := time.After(bound)
			select {
			case err := <-served:
				if err != nil {
					t.Fatal(err)
				}
			case <-timeout:
				stuck = true
				t.Fatalf("the other client got no replies within %v after the lost client left; goroutines:\n%s", bound, goroutines())
			}
			for conns(p)[c] {
				select {
				case <-timeout:
					stuck = true
					t.Fatalf("the lost client's connection still runs %v after it left; goroutines:\n%s", bound, goroutines())
				case <-time.After(time.Millisecond):
				}
			}
		})
	}
}

// conns returns the client connections p serves.
func conns(p *Proxy) map[*conn]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[*conn]bool, len(p.conns))
	for c := range p.conns {
		out[c] = true
	}
	return out
}

// stalled reports whether c's reader waits for room in its pipeline while c's replies wait for
// the client to read.
func stalled(c *conn) bool {
	c.mu.Lock()
	waiting := c.readerWaiting
	c.mu.Unlock()
	return waiting && c.outBytes.Load() > 0
}

// goroutines is every goroutine's stack, grouped.
func goroutines() string {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return err.Error()
	}
	return b.String()
}
