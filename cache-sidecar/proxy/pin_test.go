package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchSeesOtherClients runs optimistic locking with two clients through node A of a
// two-node tenant, on hash-tagged keys of either node (node B's through the peer link): a
// watched key changed by the other client between WATCH and EXEC makes EXEC answer a null
// array and apply nothing; unchanged, the transaction commits. Keys on two nodes cannot be
// watched together.
func TestWatchSeesOtherClients(t *testing.T) {
	cl := startCluster(t, Redis, 1, 1)
	a, b := loginRESP(t, cl.a, cl.acct), loginRESP(t, cl.a, cl.acct)
	onB := 0
	for tag := range 8 {
		bal, log := fmt.Sprintf("{acct%d}:balance", tag), fmt.Sprintf("{acct%d}:log", tag)
		if got := a.do("SET", bal, "10"); got != "+OK\r\n" {
			t.Fatal(got)
		}
		// Another client changes the balance while a watches it.
		if got := a.do("WATCH", bal, log); got != "+OK\r\n" {
			t.Fatalf("WATCH: %q", got)
		}
		if got := a.do("GET", bal); got != "$2\r\n10\r\n" {
			t.Fatalf("GET after WATCH: %q", got)
		}
		if got := b.do("INCRBY", bal, "5"); got != ":15\r\n" {
			t.Fatalf("the other client's INCRBY: %q", got)
		}
		replies := pipeline(a, [][]string{{"MULTI"}, {"SET", bal, "9"}, {"RPUSH", log, "-1"}, {"EXEC"}})
		if replies[3] != "*-1\r\n" {
			t.Fatalf("tag %d: EXEC after another client's write: %q, want a null array (all %q)", tag, replies[3], replies)
		}
		if got := b.do("MGET", bal, log); got != "*2\r\n$2\r\n15\r\n$-1\r\n" {
			t.Fatalf("tag %d: after the aborted transaction: %q, want the other client's 15 and no log", tag, got)
		}
		// Nobody else writes: it commits.
		replies = pipeline(a, [][]string{{"WATCH", bal}, {"GET", bal}, {"MULTI"}, {"SET", bal, "14"}, {"RPUSH", log, "-1"}, {"EXEC"}})
		if want := "*2\r\n+OK\r\n:1\r\n"; replies[5] != want {
			t.Fatalf("tag %d: EXEC without interference: %q, want %q", tag, replies[5], want)
		}
		held := enginesHold(t, []string{cl.engineA, cl.engB}, []string{bal, log})
		if held[1][0] {
			onB++
		}
		if held[0][0] == held[1][0] || held[0][1] != held[0][0] {
			t.Fatalf("tag %d: keys held by engines %v, want both on one", tag, held)
		}
	}
	if onB == 0 || onB == 8 {
		t.Fatalf("%d of 8 tags on node B: the test covers one node only", onB)
	}
	// RESET drops the watches.
	bal := "{acct0}:balance"
	replies := pipeline(a, [][]string{{"WATCH", bal}, {"RESET"}, {"AUTH", cl.acct.id, cl.acct.password}})
	if replies[1] != "+RESET\r\n" || replies[2] != "+OK\r\n" {
		t.Fatalf("RESET and AUTH: %q", replies)
	}
	b.do("SET", bal, "1")
	if got := pipeline(a, [][]string{{"MULTI"}, {"SET", bal, "2"}, {"EXEC"}}); got[2] != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC after RESET dropped the watch: %q", got)
	}
	// A transaction after WATCH keeps to the watched keys' node.
	for i := range 64 {
		x, y := fmt.Sprintf("w%d", i), fmt.Sprintf("v%d", i)
		replies := pipeline(a, [][]string{{"WATCH", x}, {"MULTI"}, {"SET", y, "1"}, {"EXEC"}, {"EXISTS", y}})
		if !strings.HasPrefix(replies[2], "-CROSSSLOT") {
			continue
		}
		if replies[3] != "-"+replyExecAbort+"\r\n" || replies[4] != ":0\r\n" {
			t.Fatalf("transaction on another node than its WATCH: %q", replies)
		}
		return
	}
	t.Fatal("no key landed on another node than its watched key")
}

// TestBlockingPops blocks clients on lists through the proxy, on a real redis-server, with the
// proxy's engine timeout at 300ms: a pop that times out answers what the engine answers (a
// null), even when its timeout is longer than the proxy's engine timeout; one without a
// timeout waits until another client pushes; while clients block, the same tenant's other
// connections and another tenant keep being served; and keys on two nodes are refused.
func TestBlockingPops(t *testing.T) {
	acct, other := newAccount(t, "team-a/app"), newAccount(t, "team-b/app")
	engine, otherEngine := startEngine(t, Redis), startEngine(t, Redis)
	n := startNode(t, "node-a", Options{Protocol: Redis, BackendTimeout: 300 * time.Millisecond, ThrottleMaxWait: 100 * time.Millisecond})
	n.update(t,
		Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}},
		Tenant{ID: other.id, CredentialHash: other.hash, LocalEngine: otherEngine, Routes: []Route{n.route(1)}})
	direct := dialRESP(t, "unix", engine)

	t.Run("timeouts answer as the engine does", func(t *testing.T) {
		c := loginRESP(t, n, acct)
		for _, cmd := range [][]string{
			{"BLPOP", "K", "0.1"},
			{"BRPOP", "K", "K2", "0.1"},
			{"BLMOVE", "K", "K2", "LEFT", "RIGHT", "0.1"},
			{"BRPOPLPUSH", "K", "K2", "0.1"},
			{"BZPOPMIN", "K", "0.1"},
			{"BLMPOP", "0.1", "1", "K", "LEFT"},
			{"BLPOP", "K", "notanumber"},
			{"BLPOP", "K", "-1"},
		} {
			key := "empty-" + cmd[0]
			start := time.Now()
			got := c.do(withKey([][]string{cmd}, key)[0]...)
			took := time.Since(start)
			if want := direct.do(withKey([][]string{cmd}, key+"-ref")[0]...); got != want {
				t.Errorf("%v: %q, the engine answers %q", cmd, got, want)
			}
			if took > 2*time.Second {
				t.Errorf("%v took %v", cmd, took)
			}
		}
		// Longer than the proxy's engine timeout (300ms): not cut by it.
		start := time.Now()
		if got := c.do("BLPOP", "long", "1"); got != "*-1\r\n" {
			t.Errorf("BLPOP with a 1s timeout: %q, want a null array", got)
		}
		if took := time.Since(start); took < 900*time.Millisecond {
			t.Errorf("BLPOP with a 1s timeout answered after %v", took)
		}
	})

	t.Run("others are served while clients block", func(t *testing.T) {
		const blockers = 4
		var blocked []*respClient
		for i := range blockers {
			c := loginRESP(t, n, acct)
			// No timeout: only a push ends the block, long after the engine timeout.
			c.send("BLPOP", fmt.Sprintf("{jobs}:q%d", i), "0")
			blocked = append(blocked, c)
		}
		mover := loginRESP(t, n, acct)
		mover.send("BLMOVE", "{jobs}:src", "{jobs}:dst", "RIGHT", "LEFT", "0")
		same, otherTenant := loginRESP(t, n, acct), loginRESP(t, n, other)
		otherTenant.do("SET", "x", "1")
		var latencies []time.Duration
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			for _, cl := range []*respClient{same, otherTenant} {
				start := time.Now()
				if got := cl.do("GET", "x"); got == "" || got[0] == '-' {
					t.Fatalf("GET while others block: %q", got)
				}
				latencies = append(latencies, time.Since(start))
			}
		}
		slices.Sort(latencies)
		p99 := latencies[len(latencies)*99/100]
		t.Logf("while %d clients block: %d GETs of the same and another tenant in 1s, p99 %v", blockers+1, len(latencies), p99)
		if p99 > 100*time.Millisecond {
			t.Errorf("p99 %v while clients block", p99)
		}
		for i, c := range blocked {
			if got := same.do("RPUSH", fmt.Sprintf("{jobs}:q%d", i), "job"); got != ":1\r\n" && got != ":0\r\n" {
				t.Fatalf("RPUSH: %q", got)
			}
			q := fmt.Sprintf("{jobs}:q%d", i)
			if got, want := c.read(), fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$3\r\njob\r\n", len(q), q); got != want {
				t.Errorf("blocked BLPOP: %q, want %q", got, want)
			}
			// The connection goes on, back on the shared link.
			if got := c.do("LLEN", fmt.Sprintf("{jobs}:q%d", i)); got != ":0\r\n" {
				t.Errorf("LLEN after the pop: %q", got)
			}
		}
		same.do("RPUSH", "{jobs}:src", "a", "b")
		if got := mover.read(); got != "$1\r\nb\r\n" {
			t.Errorf("blocked BLMOVE: %q", got)
		}
		if got := mover.do("LRANGE", "{jobs}:dst", "0", "-1"); got != "*1\r\n$1\r\nb\r\n" {
			t.Errorf("after BLMOVE: %q", got)
		}
	})

	t.Run("a blocked client is not idle", func(t *testing.T) {
		idle := startNode(t, "node-a", Options{Protocol: Redis, IdleTimeout: 200 * time.Millisecond,
			BackendTimeout: 300 * time.Millisecond, ThrottleMaxWait: 100 * time.Millisecond})
		idle.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{idle.route(1)}})
		c := loginRESP(t, idle, acct)
		start := time.Now()
		if got := c.do("BLPOP", "idle-queue", "0.6"); got != "*-1\r\n" {
			t.Errorf("BLPOP past the idle timeout: %q", got)
		}
		// Idle from the block's latest end (0.6s, plus the engine timeout): then closed.
		_, err := c.readErr()
		var ne net.Error
		if took := time.Since(start); err == nil || errors.As(err, &ne) && ne.Timeout() || took > 3*time.Second {
			t.Errorf("after the block, an idle client: %v after %v, want closed", err, took)
		}
	})

	t.Run("shutdown ends a block without a timeout", func(t *testing.T) {
		closing := startNode(t, "node-a", Options{Protocol: Redis})
		closing.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{closing.route(1)}})
		c := loginRESP(t, closing, acct)
		c.send("BLPOP", "shutdown-queue", "0")
		waitFor(t, "the engine to block a client", func() bool { return engineInfoField(t, direct, "blocked_clients") == "1" })
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := closing.p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown with a client blocked: %v, want the deadline exceeded", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Shutdown took %v", took)
		}
		waitFor(t, "the engine to forget the block", func() bool { return engineInfoField(t, direct, "blocked_clients") == "0" })
	})

	t.Run("a client gone while blocked frees its engine connection", func(t *testing.T) {
		before := engineInfoInt(t, direct, "connected_clients")
		c := loginRESP(t, n, acct)
		c.send("BLPOP", "never", "0")
		waitFor(t, "the engine to block a client", func() bool { return engineInfoField(t, direct, "blocked_clients") == "1" })
		c.nc.Close()
		waitFor(t, "the engine connection to close", func() bool {
			return engineInfoField(t, direct, "blocked_clients") == "0" && engineInfoInt(t, direct, "connected_clients") < before+1
		})
	})
}

// TestBlockingPopsAcrossNodes blocks through node A on keys of node B (through the peer link)
// and refuses keys on two nodes.
func TestBlockingPopsAcrossNodes(t *testing.T) {
	cl := startCluster(t, Redis, 1, 1)
	c, pusher := loginRESP(t, cl.a, cl.acct), loginRESP(t, cl.a, cl.acct)
	onB := 0
	for tag := range 8 {
		q := fmt.Sprintf("{queue%d}:jobs", tag)
		c.send("BLPOP", q, "0")
		time.Sleep(20 * time.Millisecond)
		pusher.do("RPUSH", q, "job")
		if got, want := c.read(), fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$3\r\njob\r\n", len(q), q); got != want {
			t.Fatalf("BLPOP %s: %q, want %q", q, got, want)
		}
		pusher.do("SET", q+":seen", "1")
		if enginesHold(t, []string{cl.engineA, cl.engB}, []string{q + ":seen"})[1][0] {
			onB++
		}
	}
	if onB == 0 || onB == 8 {
		t.Fatalf("%d of 8 tags on node B: the test covers one node only", onB)
	}
	for i := range 64 {
		if got := c.do("BLPOP", fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i), "0.01"); strings.HasPrefix(got, "-CROSSSLOT") {
			return
		}
	}
	t.Fatal("no pair of keys refused across nodes")
}

// engineInfoField reads one field of a section of the engine's INFO (clients by default).
func engineInfoField(t *testing.T, direct *respClient, field string, section ...string) string {
	t.Helper()
	name := "clients"
	if len(section) > 0 {
		name = section[0]
	}
	info := direct.do("INFO", name)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO has no %s: %q", field, info)
	return ""
}

func engineInfoInt(t *testing.T, direct *respClient, field string, section ...string) int {
	t.Helper()
	n, err := strconv.Atoi(engineInfoField(t, direct, field, section...))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRedisPyWatchScriptsAndBlocking runs redis-py's WATCH (pipeline(transaction=True) with
// watch, and transaction()), register_script, eval and blocking pops against node A of a
// two-node tenant (testdata/redispy_watch_scripts.py).
func TestRedisPyWatchScriptsAndBlocking(t *testing.T) {
	cl := startCluster(t, Redis, 1, 1)
	runRedisPy(t, "testdata/redispy_watch_scripts.py", cl.a, cl.acct)
}

// FuzzWatchAndScriptFraming sends random sequences of MULTI, EXEC, DISCARD, WATCH, UNWATCH,
// INCR, GET, EVAL and EVALSHA, pipelined, through the proxy and, on another key, to the engine
// itself: every reply must be the engine's and so must the key's value, and the connection
// never drops. Outside a transaction some EVALs take their key count from the fuzzer's bytes,
// so the proxy's parsing of it must agree with redis' (a count redis reads as 0 gets the
// proxy's refusal instead: scripts must declare their keys).
func FuzzWatchAndScriptFraming(f *testing.F) {
	acct, n, engine := fuzzNode(f, "\x03\x05\x00\x05\x01", "\x03\x00\x07\x08\x01\x06", "\x09\x01\x09-1\x09+1\x0901", "\x03\x00\x03\x02\x04\x01")
	loader := dialRESP(f, "unix", engine)
	sha := strings.Split(loader.do("SCRIPT", "LOAD", incrScript), "\r\n")[1]
	countKeys := "return #KEYS"
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops, ok := fuzzOps(ops)
		if !ok {
			return
		}
		key := fmt.Sprintf("fuzz-watch-%d", run.Add(1))
		var commands [][]string
		inMulti := false
		for i := 0; i < len(ops); i++ {
			var cmd []string
			switch op := ops[i] % 10; {
			case op == 0:
				cmd, inMulti = []string{"MULTI"}, true
			case op == 1:
				cmd, inMulti = []string{"EXEC"}, false
			case op == 2:
				cmd, inMulti = []string{"DISCARD"}, false
			case op == 3:
				cmd = []string{"WATCH", "K"}
			case op == 4:
				cmd = []string{"UNWATCH"}
			case op == 5:
				cmd = []string{"INCR", "K"}
			case op == 6:
				cmd = []string{"GET", "K"}
			case op == 7 || op == 9 && inMulti:
				cmd = []string{"EVAL", incrScript, "1", "K"}
			case op == 8:
				cmd = []string{"EVALSHA", sha, "1", "K"}
			default:
				// The key count is the next byte or two, as they are.
				end := min(i+3, len(ops))
				cmd = []string{"EVAL", countKeys, string(ops[i+1 : end]), "K"}
				i = end - 1
			}
			commands = append(commands, cmd)
		}
		got, want := proxyAndEngine(t, n, engine, acct, commands, withKeyArg, key)
		for i, cmd := range commands {
			if cmd[0] == "EVAL" && cmd[1] == countKeys && want[i] == ":0\r\n" {
				if !strings.Contains(got[i], "must declare the keys") {
					t.Fatalf("ops %x: reply %d to %q: %q, want the refusal of a script without keys", ops, i, cmd, got[i])
				}
				continue
			}
			if got[i] != want[i] {
				t.Fatalf("ops %x: reply %d to %q: %q, the engine answers %q", ops, i, cmd, got[i], want[i])
			}
		}
	})
}

// withKeyArg puts key in the arguments that are K (not in scripts, which may say KEYS).
func withKeyArg(commands [][]string, key string) [][]string {
	out := make([][]string, len(commands))
	for i, args := range commands {
		out[i] = slices.Clone(args)
		if j := slices.Index(args, "K"); j > 0 {
			out[i][j] = key
		}
	}
	return out
}

// TestWatchLostLinkAborts kills the engine connections (the pinned link among them) between
// WATCH and EXEC: the watches are gone with it, so EXEC answers a null array and applies
// nothing, as for a changed key; then the connection works again.
func TestWatchLostLinkAborts(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	n, engine := singleNode(t, Redis, acct, Options{})
	c, direct := loginRESP(t, n, acct), dialRESP(t, "unix", engine)
	for _, between := range [][]string{{"GET", "k"}, {"UNWATCH"}, nil} {
		if got := c.do("WATCH", "k"); got != "+OK\r\n" {
			t.Fatalf("WATCH: %q", got)
		}
		if got := direct.do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); got[0] != ':' {
			t.Fatalf("CLIENT KILL: %q", got)
		}
		time.Sleep(50 * time.Millisecond) // the link's reader sees the close
		if between != nil {
			c.do(between...)
		}
		replies := pipeline(c, [][]string{{"MULTI"}, {"SET", "k", "applied"}, {"EXEC"}})
		want := "*-1\r\n"
		if between != nil && between[0] == "UNWATCH" {
			want = "*1\r\n+OK\r\n" // nothing watched any more: it commits
		}
		if replies[2] != want {
			t.Fatalf("EXEC after the pinned link was lost (%v between): %q, want %q", between, replies[2], want)
		}
		if got := direct.do("GET", "k"); want == "*-1\r\n" && got != "$-1\r\n" {
			t.Fatalf("after the aborted EXEC: %q", got)
		}
		direct.do("DEL", "k")
	}
	if got := c.do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET afterwards: %q", got)
	}
}
