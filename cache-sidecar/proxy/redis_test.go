package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// compareMode says how a proxied reply must match the engine's.
type compareMode uint8

const (
	exact compareMode = iota
	// sameType: the reply varies between engine processes (clocks, process IDs, random order);
	// only its type must match.
	sameType
	// unorderedScan: a SCAN reply whose keys may come in any order.
	unorderedScan
)

type commandCase struct {
	args []string
	mode compareMode
}

func cmd(args ...string) commandCase { return commandCase{args: args, mode: exact} }

// redisCommandCases runs every command the proxy forwards, in an order that gives each one data
// to work on. Sets hold integers (intsets keep them sorted) and random picks draw from
// one-element collections, so replies are deterministic.
var redisCommandCases = []commandCase{
	// Strings.
	cmd("SET", "s1", "hello"), cmd("GET", "s1"), cmd("GET", "missing"), cmd("SET", "s2", "v", "NX"),
	cmd("SETNX", "s3", "x"), cmd("SETEX", "s4", "1000", "v"), cmd("PSETEX", "s5", "1000000", "v"),
	cmd("GETSET", "s1", "world"), cmd("GETEX", "s1", "PERSIST"), cmd("APPEND", "s1", "!!"),
	cmd("STRLEN", "s1"), cmd("GETRANGE", "s1", "0", "2"), cmd("SUBSTR", "s1", "1", "3"),
	cmd("SETRANGE", "s1", "1", "EE"), cmd("SET", "n", "10"), cmd("INCR", "n"), cmd("DECR", "n"),
	cmd("INCRBY", "n", "5"), cmd("DECRBY", "n", "3"), cmd("INCRBYFLOAT", "n", "1.5"),
	cmd("MSET", "m1", "ab", "m2", "b"), cmd("MGET", "m1", "m2", "missing"), cmd("MSETNX", "m3", "c", "m4", "d"),
	cmd("SETBIT", "bits", "7", "1"), cmd("GETBIT", "bits", "7"), cmd("BITCOUNT", "bits"),
	cmd("BITPOS", "bits", "1"), cmd("BITFIELD", "bf", "INCRBY", "u8", "0", "10"),
	cmd("BITFIELD_RO", "bf", "GET", "u8", "0"), cmd("BITOP", "OR", "bitdest", "bits", "bf"),
	cmd("LCS", "m1", "m2"), cmd("GETDEL", "s2"), cmd("GETDEL", "s2"),
	// Keys.
	cmd("EXISTS", "s1", "m1", "missing"), cmd("TOUCH", "s1", "m1"), cmd("EXPIRE", "s1", "1000"),
	cmd("PEXPIRE", "s1", "1000000"), cmd("EXPIREAT", "s1", "4102444800"),
	cmd("PEXPIREAT", "s1", "4102444800000"), cmd("EXPIRETIME", "s1"), cmd("PEXPIRETIME", "s1"),
	{args: []string{"TTL", "s1"}, mode: sameType}, {args: []string{"PTTL", "s1"}, mode: sameType},
	cmd("PERSIST", "s1"), cmd("TYPE", "s1"), cmd("TYPE", "missing"), cmd("RENAME", "m3", "m5"),
	cmd("RENAMENX", "m4", "m5"),
	// Hashes.
	cmd("HSET", "h", "f1", "v1", "f2", "v2"), cmd("HSETNX", "h", "f3", "v3"), cmd("HMSET", "h", "f4", "v4"),
	cmd("HGET", "h", "f1"), cmd("HGET", "h", "nope"), cmd("HMGET", "h", "f1", "nope"), cmd("HGETALL", "h"),
	cmd("HGETALL", "missing"), cmd("HDEL", "h", "f4"), cmd("HEXISTS", "h", "f1"), cmd("HINCRBY", "h", "cnt", "2"),
	cmd("HINCRBYFLOAT", "h", "flt", "2.5"), cmd("HKEYS", "h"), cmd("HVALS", "h"), cmd("HLEN", "h"),
	cmd("HSTRLEN", "h", "f1"), cmd("HSET", "h1", "only", "x"), cmd("HRANDFIELD", "h1"), cmd("HSCAN", "h", "0"),
	// Lists.
	cmd("RPUSH", "l", "a", "b", "c", "b"), cmd("LPUSH", "l", "z"), cmd("LPUSHX", "l", "y"), cmd("RPUSHX", "l", "x"),
	cmd("LPOP", "l"), cmd("RPOP", "l"), cmd("LRANGE", "l", "0", "-1"), cmd("LLEN", "l"), cmd("LINDEX", "l", "1"),
	cmd("LSET", "l", "0", "A"), cmd("LREM", "l", "1", "b"), cmd("LTRIM", "l", "0", "10"),
	cmd("LINSERT", "l", "BEFORE", "c", "B"), cmd("LPOS", "l", "c"), cmd("RPOPLPUSH", "l", "l2"),
	cmd("LMOVE", "l", "l2", "LEFT", "RIGHT"), cmd("LMPOP", "2", "l", "l2", "LEFT"), cmd("LRANGE", "missing", "0", "-1"),
	// Blocking pops, on data and timing out (on the client's own engine connection).
	cmd("RPUSH", "bl", "a", "b", "c", "d"), cmd("BLPOP", "bl", "0.01"), cmd("BRPOP", "none", "bl", "0.01"),
	cmd("BRPOPLPUSH", "bl", "bl2", "0.01"), cmd("BLMOVE", "bl2", "bl", "LEFT", "RIGHT", "0.01"),
	cmd("BLMPOP", "0.01", "2", "none", "bl", "LEFT"), cmd("BLPOP", "none", "0.01"),
	// Sets.
	cmd("SADD", "set", "1", "2", "3"), cmd("SADD", "set2", "2", "3", "4"), cmd("SREM", "set", "3"),
	cmd("SMEMBERS", "set"), cmd("SISMEMBER", "set", "1"), cmd("SMISMEMBER", "set", "1", "9"), cmd("SCARD", "set"),
	cmd("SADD", "one", "7"), cmd("SPOP", "one"), cmd("SADD", "one", "7"), cmd("SRANDMEMBER", "one"),
	cmd("SSCAN", "set", "0"), cmd("SINTER", "set", "set2"), cmd("SUNION", "set", "set2"), cmd("SDIFF", "set", "set2"),
	cmd("SINTERSTORE", "si", "set", "set2"), cmd("SUNIONSTORE", "su", "set", "set2"),
	cmd("SDIFFSTORE", "sd", "set", "set2"), cmd("SINTERCARD", "2", "set", "set2"), cmd("SMOVE", "set", "set2", "1"),
	// Sorted sets.
	cmd("ZADD", "z", "1", "a", "2", "b", "3", "c"), cmd("ZADD", "z2", "1", "a", "5", "d"), cmd("ZREM", "z", "c"),
	cmd("ZSCORE", "z", "a"), cmd("ZMSCORE", "z", "a", "nope"), cmd("ZINCRBY", "z", "2", "a"), cmd("ZCARD", "z"),
	cmd("ZCOUNT", "z", "0", "10"), cmd("ZLEXCOUNT", "z", "-", "+"), cmd("ZRANGE", "z", "0", "-1", "WITHSCORES"),
	cmd("ZREVRANGE", "z", "0", "-1"), cmd("ZRANGEBYSCORE", "z", "0", "10"), cmd("ZREVRANGEBYSCORE", "z", "10", "0"),
	cmd("ZRANGEBYLEX", "z", "-", "+"), cmd("ZREVRANGEBYLEX", "z", "+", "-"), cmd("ZRANK", "z", "a"),
	cmd("ZREVRANK", "z", "a"), cmd("ZRANGESTORE", "zr", "z", "0", "-1"), cmd("ZUNIONSTORE", "zu", "2", "z", "z2"),
	cmd("ZINTERSTORE", "zi", "2", "z", "z2"), cmd("ZDIFFSTORE", "zd", "2", "z", "z2"), cmd("ZUNION", "2", "z", "z2"),
	cmd("ZINTER", "2", "z", "z2"), cmd("ZDIFF", "2", "z", "z2"), cmd("ZINTERCARD", "2", "z", "z2"),
	cmd("ZSCAN", "z", "0"), cmd("ZADD", "z1", "1", "only"), cmd("ZRANDMEMBER", "z1"), cmd("ZPOPMIN", "z"),
	cmd("ZPOPMAX", "z"), cmd("ZMPOP", "2", "z", "z2", "MIN"), cmd("ZADD", "z3", "1", "a", "2", "b", "3", "c"),
	cmd("ZREMRANGEBYRANK", "z3", "0", "0"), cmd("ZREMRANGEBYSCORE", "z3", "2", "2"),
	cmd("ZREMRANGEBYLEX", "z3", "-", "+"),
	cmd("ZADD", "bz", "1", "a", "2", "b", "3", "c"), cmd("BZPOPMIN", "bz", "0.01"), cmd("BZPOPMAX", "none", "bz", "0.01"),
	cmd("BZMPOP", "0.01", "1", "bz", "MIN"), cmd("BZPOPMIN", "none", "0.01"),
	// WATCH and scripts with declared keys.
	cmd("WATCH", "s1", "n"), cmd("UNWATCH"), cmd("UNWATCH"),
	cmd("EVAL", "return redis.call('GET', KEYS[1])", "1", "s1"), cmd("EVAL_RO", "return #KEYS", "2", "s1", "n"),
	cmd("SCRIPT", "LOAD", "return 1"), cmd("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "s1"),
	cmd("EVALSHA_RO", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "s1"),
	// HyperLogLog and geo.
	cmd("PFADD", "hll", "a", "b"), cmd("PFADD", "hll2", "c"), cmd("PFCOUNT", "hll", "hll2"),
	cmd("PFMERGE", "hll3", "hll", "hll2"),
	cmd("GEOADD", "geo", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"),
	cmd("GEODIST", "geo", "Palermo", "Catania"), cmd("GEOHASH", "geo", "Palermo"), cmd("GEOPOS", "geo", "Palermo"),
	cmd("GEOSEARCH", "geo", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC"),
	cmd("GEOSEARCHSTORE", "geo2", "geo", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"),
	cmd("GEORADIUS_RO", "geo", "15", "37", "200", "km", "ASC"),
	cmd("GEORADIUSBYMEMBER_RO", "geo", "Palermo", "200", "km", "ASC"),
	// Multi-key deletes and keyless commands.
	cmd("DEL", "s3", "s4", "missing"), cmd("UNLINK", "s5"), cmd("DBSIZE"),
	{args: []string{"SCAN", "0", "COUNT", "1000"}, mode: unorderedScan},
	{args: []string{"TIME"}, mode: sameType}, {args: []string{"INFO", "server"}, mode: sameType},
	cmd("COMMAND", "COUNT"), cmd("COMMAND", "INFO", "get"),
	// Connection commands the proxy answers as redis does.
	cmd("PING"), cmd("PING", "hi"), cmd("ECHO", "x"), cmd("SELECT", "0"), cmd("CLIENT", "GETNAME"),
	cmd("CLIENT", "SETNAME", "me"), cmd("CLIENT", "GETNAME"),
	// Errors the proxy and the engine word alike.
	cmd("GET"), cmd("NOSUCHCOMMAND", "x"), cmd("LPUSH", "s1", "x"), cmd("MSET", "a", "1", "b"),
	cmd("INCR", "s1"), cmd("SELECT", "x"),
}

// TestRedisCommandsMatchEngine sends every forwarded command through the proxy and directly to
// a second engine that sees the same commands, in RESP2 and RESP3, and compares the replies.
func TestRedisCommandsMatchEngine(t *testing.T) {
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			acct := newAccount(t, "team-a/cache")
			n, _ := singleNode(t, Redis, acct, Options{})
			proxied := dialRESP(t, "tcp", n.addr)
			direct := dialRESP(t, "unix", startEngine(t, Redis))
			if got := proxied.do("HELLO", proto, "AUTH", acct.id, acct.password); isError(got) {
				t.Fatalf("HELLO %s AUTH: %q", proto, got)
			}
			if got := direct.do("HELLO", proto); isError(got) {
				t.Fatalf("engine HELLO %s: %q", proto, got)
			}
			for _, c := range redisCommandCases {
				want, got := direct.do(c.args...), proxied.do(c.args...)
				if !repliesMatch(t, c.mode, want, got) {
					t.Errorf("%s:\n  engine: %q\n  proxy:  %q", strings.Join(c.args, " "), want, got)
				}
			}
		})
	}
}

func repliesMatch(t *testing.T, mode compareMode, want, got string) bool {
	switch mode {
	case sameType:
		return want[0] == got[0]
	case unorderedScan:
		w, g := value(t, want), value(t, got)
		if len(w.Elems) != 2 || len(g.Elems) != 2 || string(w.Elems[0].Str) != string(g.Elems[0].Str) {
			return false
		}
		return slices.Equal(sortedStrings(w.Elems[1].Elems), sortedStrings(g.Elems[1].Elems))
	default:
		return want == got
	}
}

func sortedStrings(vs []resp.Value) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v.Str)
	}
	slices.Sort(out)
	return out
}

// TestRedisCommandCasesCoverTable fails when the codec's table gains a forwarded command that
// TestRedisCommandsMatchEngine does not exercise.
func TestRedisCommandCasesCoverTable(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range redisCommandCases {
		covered[strings.ToLower(c.args[0])] = true
	}
	for _, spec := range resp.Commands() {
		switch spec.Handling {
		case protocol.HandleRoute, protocol.HandleSplit, protocol.HandleAnyEngine, protocol.HandleAllEngines:
			if !covered[spec.Name] {
				t.Errorf("command %s (%s) has no case in redisCommandCases", spec.Name, spec.Handling)
			}
		}
	}
}

func TestRedisTenantsAreIsolated(t *testing.T) {
	a, b := newAccount(t, "team-a/cache"), newAccount(t, "team-b/cache")
	n := startNode(t, "node-a", Options{Protocol: Redis})
	n.update(t,
		Tenant{ID: a.id, CredentialHash: a.hash, LocalEngine: startEngine(t, Redis), Routes: []Route{n.route(1)}},
		Tenant{ID: b.id, CredentialHash: b.hash, LocalEngine: startEngine(t, Redis), Routes: []Route{n.route(1)}},
	)
	ca, cb := loginRESP(t, n, a), loginRESP(t, n, b)
	for i := range 50 {
		key := "shared:" + strconv.Itoa(i)
		ca.do("SET", key, "from-a")
		cb.do("SET", key, "from-b")
	}
	for i := range 50 {
		key := "shared:" + strconv.Itoa(i)
		if got := ca.do("GET", key); got != "$6\r\nfrom-a\r\n" {
			t.Fatalf("tenant a reads %s = %q", key, got)
		}
		if got := cb.do("GET", key); got != "$6\r\nfrom-b\r\n" {
			t.Fatalf("tenant b reads %s = %q", key, got)
		}
	}
	if got := ca.do("DBSIZE"); got != ":50\r\n" {
		t.Fatalf("tenant a DBSIZE = %q", got)
	}
	// Authenticating again as the other tenant switches the connection to its data.
	if got := ca.do("AUTH", b.id, b.password); got != "+OK\r\n" {
		t.Fatalf("re-AUTH as b: %q", got)
	}
	if got := ca.do("GET", "shared:0"); got != "$6\r\nfrom-b\r\n" {
		t.Fatalf("after re-AUTH as b, GET = %q", got)
	}
}

func TestRedisAuthentication(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	other := newAccount(t, "team-b/cache")
	n, _ := singleNode(t, Redis, acct, Options{MaxAuthFailures: 3})
	const noAuth = "-NOAUTH Authentication required.\r\n"
	const wrongPass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"

	t.Run("unauthenticated commands are refused", func(t *testing.T) {
		c := dialRESP(t, "tcp", n.addr)
		for _, args := range [][]string{{"GET", "k"}, {"SET", "k", "v"}, {"PING"}, {"HELLO", "3"}, {"DBSIZE"}, {"NOSUCH"}} {
			if got := c.do(args...); got != noAuth {
				t.Errorf("%v before AUTH: %q, want %q", args, got, noAuth)
			}
		}
		if got := c.do("QUIT"); got != "+OK\r\n" {
			t.Errorf("QUIT: %q", got)
		}
		expectClosed(t, c.nc, c.br)
	})
	t.Run("wrong credentials are rejected", func(t *testing.T) {
		c := dialRESP(t, "tcp", n.addr)
		for _, args := range [][]string{
			{"AUTH", acct.id, acct.password + "x"},
			{"AUTH", other.id, other.password}, // not a tenant of this proxy
		} {
			if got := c.do(args...); got != wrongPass {
				t.Errorf("%v: %q, want %q", args[:2], got, wrongPass)
			}
		}
		if got := c.do("GET", "k"); got != noAuth {
			t.Errorf("GET after failed AUTH: %q", got)
		}
		// The third failure closes the connection.
		if got := c.do("AUTH", acct.password); got != wrongPass {
			t.Errorf("AUTH <password>: %q", got)
		}
		expectClosed(t, c.nc, c.br)
	})
	t.Run("HELLO AUTH selects RESP3", func(t *testing.T) {
		c := dialRESP(t, "tcp", n.addr)
		if got := c.do("HELLO", "3", "AUTH", acct.id, "wrong"); got != wrongPass {
			t.Fatalf("HELLO with a wrong password: %q", got)
		}
		hello := value(t, c.do("HELLO", "3", "AUTH", acct.id, acct.password, "SETNAME", "app"))
		if hello.Type != resp.TypeMap || len(hello.Elems) != 14 || string(hello.Elems[5].Raw) != ":3\r\n" {
			t.Fatalf("HELLO 3 reply: %+v", hello)
		}
		if got := c.do("GET", "nothing"); got != "_\r\n" {
			t.Fatalf("RESP3 GET of a missing key: %q, want the RESP3 null", got)
		}
		if got := c.do("CLIENT", "GETNAME"); got != "$3\r\napp\r\n" {
			t.Fatalf("CLIENT GETNAME: %q", got)
		}
		if got := c.do("HELLO", "2"); value(t, got).Type != resp.TypeArray {
			t.Fatalf("HELLO 2 reply: %q", got)
		}
		if got := c.do("GET", "nothing"); got != "$-1\r\n" {
			t.Fatalf("RESP2 GET of a missing key: %q", got)
		}
		if got := c.do("RESET"); got != "+RESET\r\n" {
			t.Fatalf("RESET: %q", got)
		}
		if got := c.do("GET", "nothing"); got != noAuth {
			t.Fatalf("GET after RESET: %q", got)
		}
	})
}

// TestRedisPipelineKeepsOrder sends 1000 commands in one write and checks every reply comes
// back in order.
func TestRedisPipelineKeepsOrder(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{})
	c := loginRESP(t, n, acct)
	const count = 1000
	var batch []byte
	for i := range count {
		key := "p" + strconv.Itoa(i)
		if i%2 == 0 {
			batch = resp.AppendCommandStrings(batch, "SET", key, strconv.Itoa(i))
		} else {
			batch = resp.AppendCommandStrings(batch, "GET", "p"+strconv.Itoa(i-1))
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.write(batch)
	}()
	for i := range count {
		got := c.read()
		want := "+OK\r\n"
		if i%2 == 1 {
			v := strconv.Itoa(i - 1)
			want = fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		}
		if got != want {
			t.Fatalf("reply %d: %q, want %q", i, got, want)
		}
	}
	<-done
}

// TestRedisMalformedInput checks that bad bytes get a protocol error and a closed connection,
// while other clients keep being served.
func TestRedisMalformedInput(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{})
	healthy := loginRESP(t, n, acct)
	for _, input := range []string{
		"*1\r\n$abc\r\n",
		"*2\r\n$3\r\nGET\r\nx\r\n",
		"*1\r\n$3\r\nGETxx",
		"\"unbalanced\r\n",
		"*-5\r\n*999999999999\r\n",
	} {
		c := loginRESP(t, n, acct)
		c.write([]byte(input))
		got, err := c.readErr()
		if err != nil || !strings.HasPrefix(got, "-ERR Protocol error: ") {
			t.Errorf("%q: reply %q, %v; want a protocol error", input, got, err)
		}
		expectClosed(t, c.nc, c.br)
		if got := healthy.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("another client after %q: %q", input, got)
		}
	}
}

func TestRedisRefusedCommands(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{})
	c := loginRESP(t, n, acct)
	for _, args := range [][]string{
		{"FLUSHALL"}, {"CONFIG", "GET", "maxmemory"}, {"KEYS", "*"}, {"EVAL", "return 1", "0"},
		{"FCALL", "f", "1", "k"}, {"SCRIPT", "FLUSH"}, {"WAIT", "0", "0"}, {"SUBSCRIBE", "c"}, {"SELECT", "1"},
	} {
		if got := c.do(args...); !isError(got) {
			t.Errorf("%v was not refused: %q", args, got)
		}
	}
	// The connection still works after refusals.
	if got := c.do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET after refusals: %q", got)
	}
}
