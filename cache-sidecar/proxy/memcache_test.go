package proxy

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
)

// memcacheCommandCases are requests (data blocks included) sent through the proxy and directly
// to an engine. Every request ends with "mn", so each case's response ends at "MN" whether or
// not the request itself is answered (noreply, quiet).
var memcacheCommandCases = []string{
	"set k1 5 0 5\r\nhello\r\n", "get k1\r\n", "get missing\r\n", "gets k1\r\n",
	"add k1 0 0 1\r\nx\r\n", "add k2 0 0 2\r\nv2\r\n", "replace k2 0 0 3\r\nnew\r\n",
	"replace nokey 0 0 1\r\nx\r\n", "append k1 0 0 3\r\n!!!\r\n", "prepend k1 0 0 2\r\n>>\r\n",
	"get k1 k2 missing k1\r\n", "gets k1 k2\r\n", "cas k1 0 0 3 999999\r\nbad\r\n",
	"set n 0 0 2\r\n10\r\n", "incr n 5\r\n", "decr n 3\r\n", "incr missing 1\r\n",
	"incr k1 1\r\n", "touch k1 1000\r\n", "touch missing 10\r\n", "gat 1000 k1 k2\r\n",
	"gats 1000 k1\r\n", "delete k2\r\n", "delete k2\r\n", "delete k1 noreply\r\n",
	"set q 0 0 1 noreply\r\nq\r\n", "get q\r\n",
	"ms mk 2 T0 F3\r\nhi\r\n", "mg mk v f t k\r\n", "mg nothing v\r\n", "mg nothing v q\r\n",
	"mg mk s v q\r\n", "ma mcount N0 J13 v\r\n", "ma mcount v\r\n", "md mk q\r\n", "md mk\r\n",
	"mg bWs= b v k\r\n", "ms bWs= 1 b\r\nx\r\n", "mg bWs= b v\r\n", "me missing\r\n", "mn\r\n",
	"version\r\n", "bogus command\r\n", "get\r\n", "set k 0 0 notanumber\r\n",
	"set big 0 0 3\r\nabcdef\r\n",
}

// TestMemcacheCommandsMatchEngine sends every case through the proxy and directly to a second
// engine and compares the responses byte for byte.
func TestMemcacheCommandsMatchEngine(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Memcached, acct, Options{})
	proxied := loginMC(t, n, acct)
	direct := dialMC(t, "unix", startEngine(t, Memcached))
	for _, c := range memcacheCommandCases {
		want, got := exchange(direct, c), exchange(proxied, c)
		if want != got {
			t.Errorf("%q:\n  engine: %q\n  proxy:  %q", c, want, got)
		}
	}
}

// exchange sends a request followed by mn and returns everything before the MN.
func exchange(c *mcClient, request string) string {
	c.t.Helper()
	c.write(request + "mn\r\n")
	var out strings.Builder
	for {
		c.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
		line, err := protocol.AppendLine(c.br, nil, 1<<20)
		if err != nil {
			c.t.Fatalf("after %q: %v (so far %q)", request, err, out.String())
		}
		if string(line) == "MN\r\n" {
			return out.String()
		}
		out.Write(line)
	}
}

// TestMemcacheCommandCasesCoverTable fails when a forwarded command has no case.
func TestMemcacheCommandCasesCoverTable(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range memcacheCommandCases {
		covered[strings.Fields(c)[0]] = true
	}
	for cmd := memcache.CmdGet; cmd.Spec().Name != "unknown"; cmd++ {
		switch cmd.Spec().Handling {
		case protocol.HandleRoute, protocol.HandleSplit, protocol.HandleAnyEngine:
			if !covered[cmd.String()] {
				t.Errorf("command %s has no case in memcacheCommandCases", cmd)
			}
		}
	}
}

func TestMemcacheAuthenticationAndIsolation(t *testing.T) {
	a, b := newAccount(t, "team-a/cache"), newAccount(t, "team-b/cache")
	n := startNode(t, "node-a", Options{Protocol: Memcached, MaxAuthFailures: 2})
	n.update(t,
		Tenant{ID: a.id, CredentialHash: a.hash, LocalEngine: startEngine(t, Memcached), Routes: []Route{n.route(1)}},
		Tenant{ID: b.id, CredentialHash: b.hash, LocalEngine: startEngine(t, Memcached), Routes: []Route{n.route(1)}},
	)
	t.Run("unauthenticated", func(t *testing.T) {
		c := dialMC(t, "tcp", n.addr)
		for _, req := range []string{"get k\r\n", "delete k\r\n", "mg k v\r\n", "version\r\n"} {
			c.write(req)
			if got := c.line(); got != "CLIENT_ERROR unauthenticated" {
				t.Errorf("%q before auth: %q", req, got)
			}
		}
		creds := a.id + " wrong"
		c.write(fmt.Sprintf("set x 0 0 %d\r\n%s\r\n", len(creds), creds))
		if got := c.line(); got != "CLIENT_ERROR authentication failure" {
			t.Errorf("wrong password: %q", got)
		}
		c.write("set x 0 0 7\r\nnospace\r\n")
		if got := c.line(); got != "CLIENT_ERROR authentication failure" {
			t.Errorf("malformed credentials: %q", got)
		}
		expectClosed(t, c.nc, c.br)
	})
	t.Run("isolation", func(t *testing.T) {
		ca, cb := loginMC(t, n, a), loginMC(t, n, b)
		for i := range 30 {
			key := "k" + strconv.Itoa(i)
			ca.set(key, "from-a")
			cb.set(key, "from-b")
		}
		for i := range 30 {
			key := "k" + strconv.Itoa(i)
			if got := ca.get(key)[key]; got != "from-a" {
				t.Fatalf("tenant a reads %s = %q", key, got)
			}
			if got := cb.get(key)[key]; got != "from-b" {
				t.Fatalf("tenant b reads %s = %q", key, got)
			}
		}
	})
}

func TestMemcachePipelineAndMalformedInput(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Memcached, acct, Options{})
	c := loginMC(t, n, acct)
	var batch strings.Builder
	const count = 1000
	for i := range count {
		v := strconv.Itoa(i)
		fmt.Fprintf(&batch, "set p%d 0 0 %d\r\n%s\r\nget p%d\r\n", i, len(v), v, i)
	}
	go c.write(batch.String())
	for i := range count {
		v := strconv.Itoa(i)
		want := []string{"STORED", fmt.Sprintf("VALUE p%d 0 %d", i, len(v)), v, "END"}
		for _, w := range want {
			if got := c.line(); got != w {
				t.Fatalf("request %d: %q, want %q", i, got, w)
			}
		}
	}
	// A data block length beyond any item ends the connection after a client error.
	bad := loginMC(t, n, acct)
	bad.write("set k 0 0 99999999999\r\n")
	if got := bad.line(); !strings.HasPrefix(got, "CLIENT_ERROR") {
		t.Fatalf("huge data block: %q", got)
	}
	if rest, _ := io.ReadAll(bad.br); len(rest) != 0 {
		t.Fatalf("after the fatal error: %q", rest)
	}
	c.set("still", "served")
}
