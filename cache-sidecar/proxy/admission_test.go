package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestPreAuthRequestLimits: before login a client may send only small requests (16 KiB by
// default, at most 10 redis arguments), like redis-server before AUTH; a declared length over
// the limit is refused from its header, before any of it is buffered. After login the full
// limits apply. Checked on the engine: nothing refused was stored.
func TestPreAuthRequestLimits(t *testing.T) {
	big := strings.Repeat("x", DefaultPreAuthMaxRequestBytes+1)
	t.Run("redis", func(t *testing.T) {
		acct := newAccount(t, "team-a/app")
		n, engine := singleNode(t, Redis, acct, Options{})
		direct := dialRESP(t, "unix", engine)
		for _, tc := range []struct {
			name, request, wantErr string
		}{
			{"unfinished 60 MiB argument", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$62914560\r\nabc", "bulk"},
			{"argument over the limit", string(resp.AppendCommandStrings(nil, "SET", "k", big)), "bulk"},
			{"too many arguments", string(resp.AppendCommandStrings(nil, "MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f")), "multibulk"},
			{"inline line over the limit", "SET k " + big + "\r\n", "inline"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := dialRESP(t, "tcp", n.addr)
				c.write([]byte(tc.request))
				got := c.read()
				if !isError(got) || !strings.Contains(strings.ToLower(got), tc.wantErr) {
					t.Errorf("reply %q, want a protocol error about the %s length", got, tc.wantErr)
				}
				expectClosed(t, c.nc, c.br)
			})
		}
		if got := direct.do("EXISTS", "k"); got != ":0\r\n" {
			t.Errorf("k on the engine after refused requests: %q", got)
		}
		// HELLO with AUTH and SETNAME (7 arguments) passes; after login, large values do too.
		c := dialRESP(t, "tcp", n.addr)
		if got := c.do("HELLO", "2", "AUTH", acct.id, acct.password, "SETNAME", "app"); isError(got) {
			t.Fatalf("HELLO AUTH SETNAME: %q", got)
		}
		if got := c.do("SET", "k", big); got != "+OK\r\n" {
			t.Fatalf("SET of %d bytes after login: %q", len(big), got)
		}
		if got := direct.do("STRLEN", "k"); got != fmt.Sprintf(":%d\r\n", len(big)) {
			t.Errorf("k on the engine: STRLEN %q", got)
		}
	})
	t.Run("memcached", func(t *testing.T) {
		acct := newAccount(t, "team-a/app")
		n, engine := singleNode(t, Memcached, acct, Options{})
		c := dialMC(t, "tcp", n.addr)
		// A login set carrying a block over the limit is read and dropped, not buffered.
		c.write(fmt.Sprintf("set auth 0 0 %d\r\n%s\r\n", len(big), big))
		if got := c.line(); got != "SERVER_ERROR object too large for cache" {
			t.Fatalf("oversized login set: %q", got)
		}
		c = loginMC(t, n, acct)
		c.set("k", big)
		if got := dialMC(t, "unix", engine).get("k"); got["k"] != big {
			t.Errorf("k on the engine: %d bytes, want %d", len(got["k"]), len(big))
		}
	})
}

// TestLoginAndIdleTimeouts: a client that does not log in within the login timeout is closed,
// whatever it sends; a logged-in one stays past it, and is closed once it sends nothing for the
// idle timeout; RESET restarts the login clock.
func TestLoginAndIdleTimeouts(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	const login, idle = 300 * time.Millisecond, 600 * time.Millisecond
	n, _ := singleNode(t, Redis, acct, Options{LoginTimeout: login, IdleTimeout: idle})

	silent := dialRESP(t, "tcp", n.addr)
	halfSent := dialRESP(t, "tcp", n.addr)
	halfSent.write([]byte("*3\r\n$4\r\nAUTH\r\n$8\r\nteam-a/a"))
	chatty := dialRESP(t, "tcp", n.addr)
	for range 4 { // unauthenticated requests do not extend the login deadline
		if got := chatty.do("PING"); !strings.HasPrefix(got, "-NOAUTH") {
			t.Fatalf("PING before login: %q", got)
		}
		time.Sleep(login / 8)
	}
	began := time.Now()
	for name, c := range map[string]*respClient{"silent": silent, "half-sent": halfSent, "chatty": chatty} {
		expectClosed(t, c.nc, c.br)
		if waited := time.Since(began); waited > 3*login {
			t.Errorf("%s unauthenticated client closed after %v more, want about %v after connecting", name, waited, login)
		}
	}

	c := loginRESP(t, n, acct)
	for range 4 { // requests within the idle timeout keep it open past the login timeout
		time.Sleep(idle / 3)
		if got := c.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING while active: %q", got)
		}
	}
	began = time.Now()
	expectClosed(t, c.nc, c.br)
	if waited := time.Since(began); waited < idle/2 || waited > 3*idle {
		t.Errorf("idle client closed after %v, want about %v", waited, idle)
	}

	c = loginRESP(t, n, acct)
	if got := c.do("RESET"); got != "+RESET\r\n" {
		t.Fatalf("RESET: %q", got)
	}
	began = time.Now()
	expectClosed(t, c.nc, c.br)
	if waited := time.Since(began); waited > 3*login {
		t.Errorf("client logged out by RESET closed after %v, want about %v", waited, login)
	}
}

// TestClientConnectionCap: at the cap one more client is answered an error and closed, counted
// in cacheqos_sidecar_connections_rejected_total; once a client leaves, a new one is served.
func TestClientConnectionCap(t *testing.T) {
	for _, proto := range []Protocol{Redis, Memcached} {
		t.Run(string(proto), func(t *testing.T) {
			acct := newAccount(t, "team-a/app")
			n, _ := singleNode(t, proto, acct, Options{MaxClientConnections: 3})
			var open []net.Conn
			for range 3 {
				nc, err := net.Dial("tcp", n.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				open = append(open, nc)
			}
			wantRefusal := map[Protocol]string{Redis: "-ERR max number of clients reached\r\n", Memcached: "SERVER_ERROR too many open connections\r\n"}[proto]
			// The cap counts connections once they are accepted: wait for the three.
			waitFor(t, "three connections accepted", func() bool { return n.p.clientConns.Load() == 3 })
			extra, err := net.Dial("tcp", n.addr)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(extra)
			extra.SetReadDeadline(time.Now().Add(testIOTimeout))
			if got, _ := br.ReadString('\n'); got != wantRefusal {
				t.Errorf("connection over the cap: %q, want %q", got, wantRefusal)
			}
			expectClosed(t, extra, br)
			if got := proxyCounter(t, n, "cacheqos_sidecar_connections_rejected_total"); got != 1 {
				t.Errorf("connections_rejected_total %v, want 1", got)
			}
			open[0].Close()
			waitFor(t, "a connection to end", func() bool { return n.p.clientConns.Load() == 2 })
			if proto == Redis {
				if got := loginRESP(t, n, acct).do("PING"); got != "+PONG\r\n" {
					t.Errorf("PING below the cap again: %q", got)
				}
			} else {
				loginMC(t, n, acct).set("k", "v")
			}
		})
	}
}

// TestAuthBackoffPerSource: after AuthBackoffFailures failed logins in a row from one address,
// its logins are refused unchecked (even a right password) until the backoff ends, counted in
// cacheqos_sidecar_auth_backoff_refusals_total; another source (the unix socket) is not held
// back; the backoff doubles with each failure after it.
func TestAuthBackoffPerSource(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	const backoff = 400 * time.Millisecond
	n, _ := singleNode(t, Redis, acct, Options{MaxAuthFailures: 100, AuthBackoffFailures: 3, AuthBackoff: backoff, AuthBackoffMax: 10 * backoff})
	c := dialRESP(t, "tcp", n.addr)
	for i := range 3 {
		if got := c.do("AUTH", acct.id, "wrong"); !strings.HasPrefix(got, "-WRONGPASS") {
			t.Fatalf("wrong AUTH %d: %q", i, got)
		}
	}
	began := time.Now()
	if got := c.do("AUTH", acct.id, acct.password); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("right AUTH while the source backs off: %q, want it refused", got)
	}
	if got := proxyCounter(t, n, "cacheqos_sidecar_auth_backoff_refusals_total"); got != 1 {
		t.Errorf("auth_backoff_refusals_total %v, want 1", got)
	}
	if got := dialRESP(t, "unix", n.socketPath).do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
		t.Errorf("AUTH from another source during the backoff: %q", got)
	}
	time.Sleep(backoff - time.Since(began) + 50*time.Millisecond)
	// One more failure after the backoff doubles it: a right password 1.2 backoffs later is
	// still refused, and accepted after 2.
	if got := c.do("AUTH", acct.id, "wrong"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("wrong AUTH after the backoff: %q", got)
	}
	began = time.Now()
	time.Sleep(backoff * 6 / 5)
	if got := c.do("AUTH", acct.id, acct.password); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("right AUTH within the doubled backoff: %q, want it refused", got)
	}
	time.Sleep(2*backoff - time.Since(began) + 50*time.Millisecond)
	if got := c.do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
		t.Fatalf("right AUTH after the doubled backoff: %q", got)
	}
	if got := proxyCounter(t, n, "cacheqos_sidecar_auth_backoff_refusals_total"); got != 2 {
		t.Errorf("auth_backoff_refusals_total %v, want 2", got)
	}
}

// proxyCounter reads a proxy-wide counter from /metrics.
func proxyCounter(t *testing.T, n *testNode, name string) float64 {
	t.Helper()
	f := scrape(t, n)[name]
	if f == nil || len(f.Metric) != 1 {
		t.Fatalf("%s: %v", name, f)
	}
	return f.Metric[0].GetCounter().GetValue()
}
