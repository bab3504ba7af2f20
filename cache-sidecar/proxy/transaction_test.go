package proxy

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestTransactionsMatchRedis sends transactions as redis-py's pipeline() does (pipelined,
// MULTI ... EXEC), with and without WATCH, through the proxy and the same commands, on another key, to the engine
// itself: every reply must be the engine's, and so must the key's value afterwards.
func TestTransactionsMatchRedis(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	n, engine := singleNode(t, Redis, acct, Options{})
	direct := dialRESP(t, "unix", engine)
	for i, commands := range [][][]string{
		{{"MULTI"}, {"INCR", "K"}, {"INCR", "K"}, {"GET", "K"}, {"EXEC"}},
		{{"MULTI"}, {"SET", "K", "1"}, {"INCRBY", "K", "5"}, {"DEL", "K"}, {"DISCARD"}, {"GET", "K"}},
		{{"MULTI"}, {"INCR", "K"}, {"EXEC"}, {"INCR", "K"}},
		{{"MULTI"}, {"MULTI"}, {"INCR", "K"}, {"EXEC"}},
		{{"MULTI"}, {"NOSUCHCOMMAND"}, {"INCR", "K"}, {"EXEC"}, {"GET", "K"}},
		{{"MULTI"}, {"GET"}, {"INCR", "K"}, {"EXEC"}, {"GET", "K"}},
		{{"MULTI"}, {"SET", "K", "a"}, {"INCR", "K"}, {"EXEC"}, {"GET", "K"}},
		{{"EXEC"}, {"DISCARD"}, {"INCR", "K"}},
		{{"MULTI"}, {"EXEC"}},
		{{"MULTI"}, {"SET", "K", "v"}, {"MGET", "K", "K"}, {"EXPIRE", "K", "100"}, {"EXEC"}},
		// WATCH: a transaction after a change of a watched key, even by the same client,
		// answers a null array.
		{{"WATCH", "K"}, {"MULTI"}, {"INCR", "K"}, {"EXEC"}},
		{{"WATCH", "K"}, {"SET", "K", "1"}, {"MULTI"}, {"INCR", "K"}, {"EXEC"}, {"GET", "K"}},
		{{"WATCH", "K"}, {"UNWATCH"}, {"SET", "K", "2"}, {"MULTI"}, {"INCR", "K"}, {"EXEC"}},
		{{"WATCH", "K"}, {"MULTI"}, {"WATCH", "K"}, {"INCR", "K"}, {"EXEC"}},
		{{"WATCH", "K"}, {"SET", "K", "1"}, {"MULTI"}, {"EXEC"}},
		{{"WATCH", "K"}, {"SET", "K", "1"}, {"MULTI"}, {"DISCARD"}, {"MULTI"}, {"INCR", "K"}, {"EXEC"}},
		{{"WATCH", "K"}, {"SET", "K", "1"}, {"MULTI"}, {"NOSUCHCOMMAND"}, {"EXEC"}, {"MULTI"}, {"INCR", "K"}, {"EXEC"}},
		{{"WATCH", "K"}, {"MULTI"}, {"UNWATCH"}, {"INCR", "K"}, {"EXEC"}},
		{{"UNWATCH"}, {"WATCH", "K", "K"}, {"GET", "K"}, {"MULTI"}, {"GET", "K"}, {"EXEC"}, {"SET", "K", "3"}, {"MULTI"}, {"GET", "K"}, {"EXEC"}},
		{{"WATCH", "K"}, {"EXEC"}, {"DISCARD"}, {"SET", "K", "v"}, {"MULTI"}, {"GET", "K"}, {"EXEC"}},
		{{"MULTI"}, {"BLPOP", "K", "0"}, {"BRPOPLPUSH", "K", "K", "0"}, {"EXEC"}},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			key, ref := fmt.Sprintf("tx-%d", i), fmt.Sprintf("tx-%d-ref", i)
			c := loginRESP(t, n, acct)
			got := pipeline(c, withKey(commands, key))
			want := pipeline(direct, withKey(commands, ref))
			for j := range commands {
				if got[j] != want[j] {
					t.Errorf("reply to %v: %q, the engine answers %q", commands[j], got[j], want[j])
				}
			}
			if got, want := direct.do("GET", key), direct.do("GET", ref); got != want {
				t.Errorf("%s on the engine: %q, want %q", key, got, want)
			}
		})
	}
}

// withKey puts key where the commands say K.
func withKey(commands [][]string, key string) [][]string {
	out := make([][]string, len(commands))
	for i, args := range commands {
		out[i] = make([]string, len(args))
		for j, a := range args {
			out[i][j] = strings.ReplaceAll(a, "K", key)
		}
	}
	return out
}

// TestTransactionsAcrossNodes runs transactions through node A of a two-node tenant: keys
// sharing a hash tag run atomically on the node that holds the tag (node B's for some tags,
// so the transaction goes through the peer link), keys across nodes are refused with CROSSSLOT
// while queueing and EXEC then runs nothing, and so is WATCH of keys on two nodes.
func TestTransactionsAcrossNodes(t *testing.T) {
	cl := startCluster(t, Redis, 1, 1)
	c := loginRESP(t, cl.a, cl.acct)
	viaPeer := 0
	for tag := range 8 {
		a, b := fmt.Sprintf("{user%d}:a", tag), fmt.Sprintf("{user%d}:b", tag)
		replies := pipeline(c, [][]string{{"MULTI"}, {"SET", a, "1"}, {"INCR", a}, {"SET", b, "x"}, {"EXEC"}})
		if want := "*3\r\n+OK\r\n:2\r\n+OK\r\n"; replies[4] != want {
			t.Fatalf("tag %d: EXEC %q, want %q (all replies %q)", tag, replies[4], want, replies)
		}
		held := enginesHold(t, []string{cl.engineA, cl.engB}, []string{a, b})
		if held[0][0] != held[0][1] || held[1][0] != held[1][1] || held[0][0] == held[1][0] {
			t.Fatalf("tag %d: keys held by engines %v, want both on one", tag, held)
		}
		if held[1][0] {
			viaPeer++
		}
	}
	if viaPeer == 0 || viaPeer == 8 {
		t.Fatalf("%d of 8 tags on node B: the test covers one node only", viaPeer)
	}
	// Keys without a common tag: some pair lands on two nodes.
	for i := range 64 {
		a, b := fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i)
		replies := pipeline(c, [][]string{{"MULTI"}, {"SET", a, "1"}, {"SET", b, "1"}, {"EXEC"}})
		if !strings.HasPrefix(replies[2], "-CROSSSLOT") {
			continue
		}
		if replies[3] != "-"+replyExecAbort+"\r\n" {
			t.Fatalf("EXEC after CROSSSLOT: %q", replies[3])
		}
		if got := c.do("EXISTS", a, b); got != ":0\r\n" {
			t.Fatalf("after a refused transaction, EXISTS %s %s: %q, want none", a, b, got)
		}
		if got := c.do("WATCH", a, b); !strings.HasPrefix(got, "-CROSSSLOT") {
			t.Fatalf("WATCH of keys on two nodes: %q", got)
		}
		return
	}
	t.Fatal("no pair of keys landed on two nodes")
}

// FuzzTransactionFraming sends random sequences of MULTI, EXEC, DISCARD, INCR and GET,
// pipelined, through the proxy, and the same sequence on another key to the engine itself:
// every reply must be the engine's (queueing, EXEC's results, errors for EXEC or DISCARD
// without MULTI and for nested MULTI), the key's value too, and the connection never drops.
func FuzzTransactionFraming(f *testing.F) {
	acct, n, engine := fuzzNode(f, "\x00\x03\x01", "\x03\x00\x03\x03\x02\x03", "\x01\x02\x00\x00\x03\x01\x03", "\x00\x04\x03\x01\x03")
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops, ok := fuzzOps(ops)
		if !ok {
			return
		}
		key := fmt.Sprintf("fuzz-tx-%d", run.Add(1))
		var commands [][]string
		for _, op := range ops {
			commands = append(commands, [][]string{{"MULTI"}, {"EXEC"}, {"DISCARD"}, {"INCR", "K"}, {"GET", "K"}}[op%5])
		}
		got, want := proxyAndEngine(t, n, engine, acct, commands, withKey, key)
		for i := range commands {
			if got[i] != want[i] {
				t.Fatalf("ops %x: reply %d to %v: %q, the engine answers %q", ops, i, commands[i], got[i], want[i])
			}
		}
	})
}

// TestRedisPyPipeline runs redis-py's default pipeline() (a MULTI/EXEC transaction) against
// node A of a two-node tenant (testdata/redispy_transactions.py): on hash-tagged keys it
// commits whole, on keys across nodes it fails and applies nothing.
func TestRedisPyPipeline(t *testing.T) {
	cl := startCluster(t, Redis, 1, 1)
	runRedisPy(t, "testdata/redispy_transactions.py", cl.a, cl.acct)
}

// runRedisPy runs a redis-py script of testdata against node n as acct; the script prints one
// line per check and exits 1 on any failure. redis-py is part of the test environment
// (hack/bootstrap.sh python installs it): without it the test fails rather than skips, since a
// skip would hide a machine that no longer checks what the sidecar does for redis-py.
func runRedisPy(t *testing.T, script string, n *testNode, acct account, args ...string) {
	t.Helper()
	if out, err := exec.Command("python3", "-c", "import redis").CombinedOutput(); err != nil {
		t.Fatalf("redis-py is not installed (hack/bootstrap.sh python installs it): %v\n%s", err, out)
	}
	host, port, err := net.SplitHostPort(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("python3", append([]string{script, host, port, acct.id, acct.password}, args...)...).CombinedOutput()
	t.Logf("redis-py:\n%s", out)
	if err != nil {
		t.Fatalf("redis-py checks failed: %v", err)
	}
}

// proxyAndEngine runs commands, pipelined, through n as acct on key and on the engine itself
// on key+"-ref" (withKeyIn puts the key in), checks that both leave the key with the same
// value, and returns both replies. The proxy is reached over a pipe, not TCP: thousands of
// fuzz runs a second would use up the loopback's ports.
func proxyAndEngine(t *testing.T, n *testNode, engine string, acct account, commands [][]string,
	withKeyIn func([][]string, string) [][]string, key string) (got, want []string) {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	go n.p.runConn(n.p.newConn(server, nil, nil))
	c := newRESPClient(t, client)
	if got := c.do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
		t.Fatalf("AUTH: %q", got)
	}
	var requests []byte
	for _, args := range withKeyIn(commands, key) {
		requests = resp.AppendCommandStrings(requests, args...)
	}
	// A pipe holds no bytes: the requests go out while the replies are read.
	go func() {
		client.SetWriteDeadline(time.Now().Add(testIOTimeout))
		_, _ = client.Write(requests)
	}()
	got = make([]string, len(commands))
	for i := range commands {
		got[i] = c.read()
	}
	direct := dialRESP(t, "unix", engine)
	want = pipeline(direct, withKeyIn(commands, key+"-ref"))
	if after, ref := direct.do("GET", key), direct.do("GET", key+"-ref"); after != ref {
		t.Fatalf("%s on the engine: %q, want %q", key, after, ref)
	}
	return got, want
}

// fuzzNode starts a proxy and engine for a fuzz target of command sequences, and adds the
// seeds to its corpus.
func fuzzNode(f *testing.F, seeds ...string) (account, *testNode, string) {
	acct := newAccount(f, "team-a/app")
	n, engine := singleNode(f, Redis, acct, Options{})
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	return acct, n, engine
}

// fuzzOps keeps at most 256 bytes of a fuzz input, one command each; false for an empty input
// (its pipeline would write nothing, which fails).
func fuzzOps(ops []byte) ([]byte, bool) {
	return ops[:min(len(ops), 256)], len(ops) > 0
}
