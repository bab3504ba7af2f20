package proxy

import (
	"strings"
	"testing"
)

// TestUnterminatedLongRequestLine: a logged-in client that sends a request line over the 64 KiB
// line limit without its line end (a 70 KB inline command; a memcached command line) gets a
// protocol error as soon as the limit is passed, not after the line ends, and is closed;
// another connection of the tenant is served meanwhile, and nothing reached the engine.
func TestUnterminatedLongRequestLine(t *testing.T) {
	long := strings.Repeat("x", 70_000)
	t.Run("redis inline", func(t *testing.T) {
		acct := newAccount(t, "team-a/app")
		n, engine := singleNode(t, Redis, acct, Options{})
		c, other := loginRESP(t, n, acct), loginRESP(t, n, acct)
		c.write([]byte("SET k " + long))
		if got := c.read(); !strings.Contains(got, "too big inline request") {
			t.Errorf("reply %q, want a protocol error about the inline request", got)
		}
		expectClosed(t, c.nc, c.br)
		if got := other.do("SET", "j", "1"); got != "+OK\r\n" {
			t.Errorf("another connection's SET: %q", got)
		}
		if got := dialRESP(t, "unix", engine).do("EXISTS", "k"); got != ":0\r\n" {
			t.Errorf("k on the engine: EXISTS %q", got)
		}
	})
	t.Run("memcached", func(t *testing.T) {
		acct := newAccount(t, "team-a/app")
		n, _ := singleNode(t, Memcached, acct, Options{})
		c, other := loginMC(t, n, acct), loginMC(t, n, acct)
		c.write("get " + long)
		if got := c.line(); !strings.Contains(got, "line too long") {
			t.Errorf("reply %q, want a client error about the line", got)
		}
		expectClosed(t, c.nc, c.br)
		other.set("j", "1")
		if got := other.get("j"); got["j"] != "1" {
			t.Errorf("another connection's get: %v", got)
		}
	})
}
