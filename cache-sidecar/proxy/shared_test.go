package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// engineClients returns how many client connections a redis engine has, asked directly (the
// asking connection included).
func engineClients(t *testing.T, engine string) int {
	t.Helper()
	info := value(t, dialRESP(t, "unix", engine).do("INFO", "clients"))
	for _, line := range strings.Split(string(info.Str), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("connected_clients %q", v)
			}
			return n
		}
	}
	t.Fatalf("INFO clients has no connected_clients: %q", info.Str)
	return 0
}

// TestSharedLinkKeepsEachClientsOrder runs many client connections, RESP2 and RESP3, each
// pipelining its own writes and reads in several bursts, over the tenant's shared engine link:
// every client gets its own replies, in its own order and protocol version, and the engine
// sees one connection per RESP version instead of one per client.
func TestSharedLinkKeepsEachClientsOrder(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, engine := singleNode(t, Redis, acct, Options{})
	const clients, bursts, perBurst = 16, 5, 100
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := loginRESP(t, n, acct)
		proto := "2"
		if i%2 == 1 {
			proto = "3"
			if got := c.do("HELLO", "3"); isError(got) {
				t.Fatalf("HELLO 3: %q", got)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- clientBursts(c, i, proto, bursts, perBurst)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// The eviction watcher, one link per RESP version, and the connection asking.
	if got := engineClients(t, engine); got > 4 {
		t.Errorf("the engine has %d client connections for %d proxy clients; want the links shared", got, clients)
	}
}

// clientBursts sends bursts of SET, GET, GET-of-a-missing-key triples on keys of its own and
// checks every reply. It reports rather than fails, as it runs on its own goroutine.
func clientBursts(c *respClient, client int, proto string, bursts, perBurst int) error {
	null := "$-1\r\n"
	if proto == "3" {
		null = "_\r\n"
	}
	for b := range bursts {
		var batch []byte
		var want []string
		for i := range perBurst {
			key := fmt.Sprintf("c%d:b%d:%d", client, b, i)
			val := strconv.Itoa(client*1_000_000 + b*1000 + i)
			batch = resp.AppendCommandStrings(batch, "SET", key, val)
			batch = resp.AppendCommandStrings(batch, "GET", key)
			batch = resp.AppendCommandStrings(batch, "GET", key+":missing")
			want = append(want, "+OK\r\n", fmt.Sprintf("$%d\r\n%s\r\n", len(val), val), null)
		}
		c.nc.SetWriteDeadline(time.Now().Add(testIOTimeout))
		if _, err := c.nc.Write(batch); err != nil {
			return fmt.Errorf("client %d: write: %w", client, err)
		}
		for i, w := range want {
			got, err := c.readErr()
			if err != nil {
				return fmt.Errorf("client %d burst %d reply %d: %w", client, b, i, err)
			}
			if got != w {
				return fmt.Errorf("client %d burst %d reply %d: %q, want %q", client, b, i, got, w)
			}
		}
	}
	return nil
}

// TestSharedLinkMemcachedQuietRequests interleaves clients whose requests may get no response
// (noreply, meta quiet) with clients reading values, over one shared link: the sentinel keeps
// every client's responses framed and its own.
func TestSharedLinkMemcachedQuietRequests(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Memcached, acct, Options{})
	const clients, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := loginMC(t, n, acct)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- memcacheRounds(c, i, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// memcacheRounds writes keys quietly and reads them back in pipelined rounds.
func memcacheRounds(c *mcClient, client, rounds int) error {
	for r := range rounds {
		key := fmt.Sprintf("c%d:r%d", client, r)
		val := strconv.Itoa(client*1000 + r)
		var batch strings.Builder
		fmt.Fprintf(&batch, "set %s 0 0 %d noreply\r\n%s\r\n", key, len(val), val)
		fmt.Fprintf(&batch, "mg %s:missing v q\r\n", key)
		fmt.Fprintf(&batch, "get %s\r\nmg %s v\r\nmn\r\n", key, key)
		c.nc.SetWriteDeadline(time.Now().Add(testIOTimeout))
		if _, err := c.nc.Write([]byte(batch.String())); err != nil {
			return fmt.Errorf("client %d: write: %w", client, err)
		}
		want := []string{fmt.Sprintf("VALUE %s 0 %d", key, len(val)), val, "END", fmt.Sprintf("VA %d", len(val)), val, "MN"}
		for i, w := range want {
			c.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
			line, err := c.br.ReadString('\n')
			if err != nil {
				return fmt.Errorf("client %d round %d line %d: %w", client, r, i, err)
			}
			if got := strings.TrimSuffix(line, "\r\n"); got != w {
				return fmt.Errorf("client %d round %d line %d: %q, want %q", client, r, i, got, w)
			}
		}
	}
	return nil
}

// TestLinkFailureIsAnsweredAndRecovered kills the proxy's engine connection while a client
// has a deep pipeline in flight: every request is answered, in order, either by the engine or
// with an error naming the lost connection, and later requests go to a new link.
func TestLinkFailureIsAnsweredAndRecovered(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, engine := singleNode(t, Redis, acct, Options{})
	c := loginRESP(t, n, acct)
	if got := c.do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	const count = 20000
	var batch []byte
	for range count {
		batch = resp.AppendCommandStrings(batch, "GET", "k")
	}
	go c.write(batch)
	admin := dialRESP(t, "unix", engine)
	lost := 0
	for i := range count {
		if i == 100 {
			// Normal clients only: the eviction watcher is a pub/sub client.
			if got := admin.do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); isError(got) {
				t.Fatalf("CLIENT KILL: %q", got)
			}
		}
		switch got := c.read(); got {
		case "$1\r\nv\r\n":
		case "-ERR cacheqos: local partition: connection closed\r\n":
			lost++
		default:
			t.Fatalf("reply %d: %q", i, got)
		}
	}
	t.Logf("%d of %d requests lost with the link", lost, count)
	if got := c.do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("GET after the link failed: %q", got)
	}
}

// TestUpdateMovesTenantToNewEngine changes a tenant's local engine while its client stays
// connected: the next requests reach the new engine and the old one loses the proxy's
// connections.
func TestUpdateMovesTenantToNewEngine(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, oldEngine := singleNode(t, Redis, acct, Options{})
	c := loginRESP(t, n, acct)
	if got := c.do("SET", "k", "old"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	newEngine := startEngine(t, Redis)
	if got := dialRESP(t, "unix", newEngine).do("SET", "k", "new"); got != "+OK\r\n" {
		t.Fatalf("SET on the new engine: %q", got)
	}
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: newEngine, Routes: []Route{n.route(1)}})
	if got := c.do("GET", "k"); got != "$3\r\nnew\r\n" {
		t.Fatalf("GET after the move: %q", got)
	}
	waitFor(t, "the old engine to lose the proxy's link and watcher", func() bool { return engineClients(t, oldEngine) == 1 })
}

// TestPeerLinksAreShared sends requests from many clients of one node that are served by the
// other: the serving node sees one peer connection for the tenant.
func TestPeerLinksAreShared(t *testing.T) {
	c := startCluster(t, Redis, 0, 1) // every key lives on node b
	var wg sync.WaitGroup
	for i := range 8 {
		via := loginRESP(t, c.a, c.acct)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				key := fmt.Sprintf("c%d:%d", i, j)
				if got := via.do("SET", key, "v"); got != "+OK\r\n" {
					t.Errorf("SET %s via node a: %q", key, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	t0 := c.b.p.lookupTenant([]byte(c.acct.id))
	t0.mu.Lock()
	peers := len(t0.conns)
	t0.mu.Unlock()
	if peers != 1 {
		t.Errorf("node b has %d connections of the tenant (all from node a's proxy), want 1 shared peer link", peers)
	}
}

// TestShutdownFinishesRequestsInFlight shuts the proxy down while a client's pipelined
// requests wait for the tenant's tokens: every request the proxy had read is answered before
// the connection closes, new connections are refused, and Shutdown returns once done. With a
// deadline too short, Shutdown closes what is left and says so.
func TestShutdownFinishesRequestsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		wantErr error
	}{
		{"finishes", 10 * time.Second, nil},
		{"deadline", 50 * time.Millisecond, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acct := newAccount(t, "team-a/cache")
			engine := startEngine(t, Redis)
			n := startNode(t, "node-a", Options{Protocol: Redis})
			// 100 ops/s with a burst of 10: 40 requests take about 0.3s to get their tokens.
			n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}, OpsPerSecond: 100})
			c := loginRESP(t, n, acct)
			const count = 40
			var batch []byte
			for i := range count {
				batch = resp.AppendCommandStrings(batch, "SET", "k"+strconv.Itoa(i), "v")
			}
			c.write(batch)
			if got := c.read(); got != "+OK\r\n" {
				t.Fatalf("first reply: %q", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			shutdown := make(chan error, 1)
			go func() { shutdown <- n.p.Shutdown(ctx) }()
			replies := 1
			for ; replies < count; replies++ {
				got, err := c.readErr()
				if err != nil {
					break
				}
				if got != "+OK\r\n" {
					t.Fatalf("reply %d: %q", replies, got)
				}
			}
			if err := <-shutdown; !errors.Is(err, tc.wantErr) {
				t.Fatalf("Shutdown = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && replies != count {
				t.Fatalf("%d replies before the connection closed, want all %d", replies, count)
			}
			if tc.wantErr != nil && replies == count {
				t.Fatalf("all %d replies arrived within a %v deadline; the test needs slower requests", count, tc.timeout)
			}
			expectClosed(t, c.nc, c.br)
			if nc, err := net.DialTimeout("tcp", n.addr, time.Second); err == nil {
				nc.Close()
				t.Fatal("a new connection was accepted after Shutdown")
			}
		})
	}
}
