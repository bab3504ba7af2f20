package proxy

import (
	"fmt"
	"strings"
	"testing"
)

// incrScript increments its one key.
const incrScript = "return redis.call('INCR', KEYS[1])"

// TestScripts runs scripts through node A of a two-node tenant: EVAL and EVALSHA go to the node
// of their declared keys (node B's through the peer link), SCRIPT LOAD loads on every node, a
// bad key count gets redis' own error, no key count a refusal, keys on two nodes CROSSSLOT, and
// a script inside a transaction runs with it.
func TestScripts(t *testing.T) {
	cl := startCluster(t, Redis, 1, 1)
	c := loginRESP(t, cl.a, cl.acct)
	direct := dialRESP(t, "unix", cl.engineA)
	sha := c.do("SCRIPT", "LOAD", incrScript)
	if want := direct.do("SCRIPT", "LOAD", incrScript); sha != want {
		t.Fatalf("SCRIPT LOAD: %q, the engine answers %q", sha, want)
	}
	sha = strings.Split(sha, "\r\n")[1]
	onB := 0
	for tag := range 8 {
		key := fmt.Sprintf("{script%d}:n", tag)
		if got := c.do("EVAL", incrScript, "1", key); got != ":1\r\n" {
			t.Fatalf("EVAL on %s: %q", key, got)
		}
		if got := c.do("EVALSHA", sha, "1", key); got != ":2\r\n" {
			t.Fatalf("EVALSHA on %s: %q", key, got)
		}
		if got := c.do("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", key); got != "$1\r\n2\r\n" {
			t.Fatalf("EVAL_RO on %s: %q", key, got)
		}
		replies := pipeline(c, [][]string{{"MULTI"}, {"EVALSHA", sha, "1", key}, {"INCR", key}, {"EXEC"}})
		if replies[3] != "*2\r\n:3\r\n:4\r\n" {
			t.Fatalf("EVALSHA in a transaction on %s: %q", key, replies)
		}
		held := enginesHold(t, []string{cl.engineA, cl.engB}, []string{key})
		if held[0][0] == held[1][0] {
			t.Fatalf("%s held by engines %v, want one", key, held)
		}
		if held[1][0] {
			onB++
		}
	}
	if onB == 0 || onB == 8 {
		t.Fatalf("%d of 8 tags on node B: the test covers one node only", onB)
	}
	// redis' own errors for a bad key count, the proxy's for none.
	for _, numkeys := range []string{"-1", "x", "3"} {
		args := []string{"EVAL", incrScript, numkeys, "{s}:k"}
		if got, want := c.do(args...), direct.do(args...); got != want {
			t.Errorf("EVAL with numkeys %s: %q, the engine answers %q", numkeys, got, want)
		}
	}
	if got := c.do("EVAL", "return 1", "0"); !strings.Contains(got, "must declare the keys") {
		t.Errorf("EVAL without keys: %q", got)
	}
	if got := c.do("EVALSHA", strings.Repeat("0", 40), "1", "k"); !strings.HasPrefix(got, "-NOSCRIPT") {
		t.Errorf("EVALSHA of an unknown script: %q", got)
	}
	for i := range 64 {
		if got := c.do("EVAL", "return 1", "2", fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)); strings.HasPrefix(got, "-CROSSSLOT") {
			return
		}
	}
	t.Error("no script over two nodes refused")
}

// TestScriptsStayInTheirTenant shows how a script is kept to its tenant: each tenant
// partition has an engine of its own, so a script reaching for a key it did not declare finds
// only its own tenant's keys; inside it, the links' redis user runs only the commands the
// proxy forwards; on an engine that several tenants share, scripts are refused.
func TestScriptsStayInTheirTenant(t *testing.T) {
	a, b := newAccount(t, "team-a/app"), newAccount(t, "team-b/app")
	engineA, passwordA := restrictedRedis(t)
	engineB, passwordB := restrictedRedis(t)
	n := startNode(t, "node-a", Options{Protocol: Redis})
	n.update(t,
		Tenant{ID: a.id, CredentialHash: a.hash, LocalEngine: engineA, LocalEnginePassword: passwordA, Routes: []Route{n.route(1)}},
		Tenant{ID: b.id, CredentialHash: b.hash, LocalEngine: engineB, LocalEnginePassword: passwordB, Routes: []Route{n.route(1)}})
	ca, cb := loginRESP(t, n, a), loginRESP(t, n, b)
	if got := cb.do("SET", "secret", "b's"); got != "+OK\r\n" {
		t.Fatal(got)
	}
	peek := "return redis.call('GET', 'secret')"
	if got := ca.do("EVAL", peek, "1", "mine"); got != "$-1\r\n" {
		t.Fatalf("tenant a's script reading an undeclared key: %q, want nothing of tenant b", got)
	}
	if got := cb.do("EVAL", peek, "1", "mine"); got != "$3\r\nb's\r\n" {
		t.Fatalf("tenant b's own script: %q", got)
	}

	// Inside its engine a script runs as the links' user, which redis refuses every command the
	// proxy does not forward (MIGRATE would open a connection out of the engine).
	if got := ca.do("SET", "mine", "a's"); got != "+OK\r\n" {
		t.Fatal(got)
	}
	for _, tc := range []struct {
		refusal string
		calls   []string
	}{
		{"The user executing the script can't run this command", []string{"'MIGRATE', '127.0.0.1', '1', 'mine', '0', '1000'",
			"'FLUSHALL'", "'FLUSHDB'", "'SELECT', '1'", "'SWAPDB', '0', '1'", "'MOVE', 'mine', '1'", "'KEYS', '*'",
			"'OBJECT', 'FREQ', 'mine'", "'PUBLISH', 'c', 'm'", "'INFO'", "'INFO', 'server'"}},
		// Redis refuses these from every script, before its ACL.
		{"This Redis command is not allowed from script", []string{"'CONFIG', 'SET', 'maxmemory', '1'", "'SHUTDOWN'",
			"'DEBUG', 'SLEEP', '0'", "'ACL', 'WHOAMI'", "'CLIENT', 'LIST'", "'SCRIPT', 'FLUSH'", "'MONITOR'", "'SAVE'"}},
	} {
		for _, call := range tc.calls {
			if got := ca.do("EVAL", "return redis.call("+call+")", "1", "mine"); !strings.Contains(got, tc.refusal) {
				t.Errorf("script calling %s: %q, want %q", call, got, tc.refusal)
			}
		}
	}
	if got := ca.do("EVAL", "return redis.call('GET', KEYS[1])", "1", "mine"); got != "$3\r\na's\r\n" {
		t.Fatalf("script calling GET: %q", got)
	}
	// The tenant's own INFO still works, filtered: the proxy sends it as the engine's default
	// user, on a link of its own.
	for _, args := range [][]string{{"INFO"}, {"INFO", "server"}} {
		info := ca.do(args...)
		if !strings.Contains(info, "redis_version:") || strings.Contains(info, "executable:") || strings.Contains(info, "process_id:") {
			t.Errorf("tenant's %v on a restricted engine: %q, want the filtered INFO", args, info)
		}
	}
	if got := cb.do("GET", "secret"); got != "$3\r\nb's\r\n" {
		t.Fatalf("tenant b's key after tenant a's scripts: %q", got)
	}

	shared := startEngine(t, Redis)
	n.update(t,
		Tenant{ID: a.id, CredentialHash: a.hash, LocalEngine: shared, Routes: []Route{n.route(1)}},
		Tenant{ID: b.id, CredentialHash: b.hash, LocalEngine: shared, Routes: []Route{n.route(1)}})
	for _, cmd := range [][]string{
		{"EVAL", peek, "1", "mine"},
		{"EVALSHA", strings.Repeat("0", 40), "1", "mine"},
	} {
		if got := ca.do(cmd...); !strings.Contains(got, "engine holds other tenants' keys") {
			t.Errorf("%s on a shared engine: %q", cmd[0], got)
		}
		replies := pipeline(ca, [][]string{{"MULTI"}, cmd, {"EXEC"}})
		if !strings.Contains(replies[1], "engine holds other tenants' keys") || replies[2] != "-"+replyExecAbort+"\r\n" {
			t.Errorf("%s in a transaction on a shared engine: %q", cmd[0], replies)
		}
	}
}

// TestDistinctScriptsAreBounded sends a tenant's engine maxScriptsPerEngine distinct scripts
// (EVAL and SCRIPT LOAD), which run; a new one after them is refused, with nothing sent to the
// engine (its script cache stays at the bound), while the scripts sent before still run, by
// EVAL and EVALSHA.
func TestDistinctScriptsAreBounded(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	n, engine := singleNode(t, Redis, acct, Options{})
	c := loginRESP(t, n, acct)
	script := func(i int) string { return fmt.Sprintf("return %d + #KEYS", i) }
	commands := [][]string{{"SCRIPT", "LOAD", script(0)}}
	for i := 1; i < maxScriptsPerEngine; i++ {
		commands = append(commands, []string{"EVAL", script(i), "1", "k"})
	}
	for i, got := range pipeline(c, commands) {
		if got[0] == '-' {
			t.Fatalf("script %d of %d refused: %q", i, maxScriptsPerEngine, got)
		}
	}
	for _, cmd := range [][]string{
		{"EVAL", script(maxScriptsPerEngine), "1", "k"},
		{"EVAL_RO", script(maxScriptsPerEngine), "1", "k"},
		{"SCRIPT", "LOAD", script(maxScriptsPerEngine + 1)},
	} {
		if got := c.do(cmd...); got != "-"+replyTooManyScripts+"\r\n" {
			t.Errorf("%s of a new script past the bound: %q", cmd[0], got)
		}
	}
	if got := c.do("EVAL", script(7), "1", "k"); got != ":8\r\n" {
		t.Errorf("EVAL of a script sent before: %q", got)
	}
	sha := strings.Split(c.do("SCRIPT", "LOAD", script(0)), "\r\n")[1]
	if got := c.do("EVALSHA", sha, "1", "k"); got != ":1\r\n" {
		t.Errorf("EVALSHA of a script loaded before: %q", got)
	}
	direct := dialRESP(t, "unix", engine)
	if got := engineInfoInt(t, direct, "number_of_cached_scripts", "memory"); got != maxScriptsPerEngine {
		t.Errorf("the engine caches %d scripts, want %d", got, maxScriptsPerEngine)
	}

	// In bytes: a few large scripts fill the bound too (a comment pads them).
	other := newAccount(t, "team-b/app")
	n.update(t,
		Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}},
		Tenant{ID: other.id, CredentialHash: other.hash, LocalEngine: startEngine(t, Redis), Routes: []Route{n.route(1)}})
	c = loginRESP(t, n, other)
	padded := func(i int) string { return fmt.Sprintf("return %d --%s", i, strings.Repeat("x", 1<<20-64)) }
	for i := range maxScriptBytesPerEngine >> 20 {
		if got := c.do("EVAL", padded(i), "1", "k"); got[0] == '-' {
			t.Fatalf("large script %d refused: %q", i, got)
		}
	}
	if got := c.do("EVAL", padded(-1), "1", "k"); got != "-"+replyTooManyScripts+"\r\n" {
		t.Errorf("a large script past the bound in bytes: %q", got)
	}
}
