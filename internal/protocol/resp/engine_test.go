package resp

import (
	"bufio"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// engineClient speaks to a real redis with this package's writers and readers only.
type engineClient struct {
	t    *testing.T
	conn net.Conn
	w    *bufio.Writer
	r    *ReplyReader
}

func dialRedis(t *testing.T, sock string) *engineClient {
	conn := enginetest.Dial(t, sock)
	return &engineClient{t: t, conn: conn, w: bufio.NewWriter(conn), r: NewReplyReader(bufio.NewReader(conn), ReplyLimits{})}
}

func (c *engineClient) send(args ...string) {
	c.t.Helper()
	if _, err := c.w.Write(AppendCommandStrings(nil, args...)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *engineClient) read() Value {
	c.t.Helper()
	if err := c.w.Flush(); err != nil {
		c.t.Fatal(err)
	}
	reply, err := c.r.ReadReply()
	if err != nil {
		c.t.Fatalf("ReadReply: %v", err)
	}
	v, err := reply.Decode()
	if err != nil {
		c.t.Fatalf("Decode(%q): %v", reply.Raw(), err)
	}
	if v.Type != reply.Type() && len(v.Attrs) == 0 {
		c.t.Fatalf("Reply.Type %v but decoded %v", reply.Type(), v.Type)
	}
	return v
}

func (c *engineClient) do(args ...string) Value {
	c.t.Helper()
	c.send(args...)
	return c.read()
}

// The command table must agree with a real redis 7 about every command it names: arity, the
// flags the proxy tracks and legacy key positions; and it must name every command redis has.
func TestEngineCommandTableMatchesRedis(t *testing.T) {
	c := dialRedis(t, enginetest.StartRedis(t))
	all := c.do("COMMAND")
	server := map[string]Value{}
	for _, info := range all.Elems {
		server[string(info.Elems[0].Str)] = info
	}
	for name := range server {
		if Lookup([]byte(name)) == nil {
			t.Errorf("redis has %q, the table does not", name)
		}
	}
	for _, spec := range Commands() {
		info, ok := server[spec.Name]
		if !ok {
			t.Errorf("table has %q, redis does not", spec.Name)
			continue
		}
		if spec.Handling == protocol.HandleRefuse {
			continue
		}
		compareSpec(t, spec, info)
		if spec.Subcommands == nil {
			continue
		}
		serverSubs := map[string]Value{}
		for _, sub := range info.Elems[9].Elems {
			serverSubs[string(sub.Elems[0].Str)] = sub
		}
		for _, sub := range spec.Subcommands {
			if subInfo, ok := serverSubs[sub.Name]; ok {
				compareSpec(t, sub, subInfo)
			} else if sub.Name != "client|setinfo" { // added in redis 7.2
				t.Errorf("table has %q, redis does not", sub.Name)
			}
		}
	}
}

func compareSpec(t *testing.T, spec *CommandSpec, info Value) {
	t.Helper()
	var flags Flags
	for _, f := range info.Elems[2].Elems {
		flags |= ParseFlag(string(f.Str))
	}
	want := KeySpec{First: int(info.Elems[3].Int), Last: int(info.Elems[4].Int), Step: int(info.Elems[5].Int)}
	got := spec.Keys
	got.NumKeysAt = 0
	if got.First == 0 {
		got = KeySpec{}
	}
	if int(info.Elems[1].Int) != spec.Arity || flags != spec.Flags || got != want {
		t.Errorf("%s: table (arity %d, flags %v, keys %+v), redis (arity %d, flags %v, keys %+v)",
			spec.Name, spec.Arity, spec.Flags, got, info.Elems[1].Int, flags, want)
	}
	if (flags&FlagMovableKeys != 0) != (spec.Keys.NumKeysAt > 0) {
		t.Errorf("%s: movable keys but no NumKeysAt, or the reverse", spec.Name)
	}
}

// Every example runs against a real redis in RESP2 and RESP3: requests encoded by AppendCommand,
// replies framed by ReplyReader with the expected types, and key positions confirmed by redis'
// own COMMAND GETKEYS.
func TestEngineRunsEveryExample(t *testing.T) {
	sock := enginetest.StartRedis(t)
	for _, proto := range []Proto{RESP2, RESP3} {
		t.Run("RESP"+string(rune('0'+proto)), func(t *testing.T) {
			c := dialRedis(t, sock)
			if proto == RESP3 {
				if v := c.do("HELLO", "3"); v.Type != TypeMap {
					t.Fatalf("HELLO 3 answered %v", v.Type)
				}
			}
			for _, line := range exampleSetup {
				if v := c.do(strings.Fields(line)...); v.IsError() {
					t.Fatalf("%s: %s", line, v.Str)
				}
			}
			for _, ex := range commandExamples {
				want := ex.resp2
				if proto == RESP3 && ex.resp3 != 0 {
					want = ex.resp3
				}
				v := c.do(strings.Fields(ex.line)...)
				if want != 0 && v.Type != want {
					t.Errorf("%s: reply %v %q, want %v", ex.line, v.Type, v.Raw, want)
				}
				if want != TypeError && v.IsError() && want != 0 {
					t.Errorf("%s: %s", ex.line, v.Str)
				}
			}
		})
	}
	t.Run("GETKEYS", func(t *testing.T) {
		c := dialRedis(t, sock)
		for _, ex := range commandExamples {
			if len(ex.keys) == 0 {
				continue
			}
			v := c.do(append([]string{"COMMAND", "GETKEYS"}, strings.Fields(ex.line)...)...)
			var got []string
			for _, k := range v.Elems {
				got = append(got, string(k.Str))
			}
			if !slices.Equal(got, ex.keys) {
				t.Errorf("%s: redis says keys %q, the example %q", ex.line, got, ex.keys)
			}
		}
	})
}

// The errors the proxy makes up for unknown commands and wrong arity read exactly like redis'.
func TestEngineErrorTextsMatchRedis(t *testing.T) {
	c := dialRedis(t, enginetest.StartRedis(t))
	for _, line := range []string{
		"NOSUCHCMD a b", "nosuchcmd", "xyz " + strings.Repeat("long ", 40),
		"GET", "GET a b", "SET k", "HSET h f", "CLIENT", "CLIENT SETNAME", "ZUNION",
	} {
		args := strings.Fields(line)
		redisErr := c.do(args...)
		_, ourErr := Classify(commandExample{line: line}.args())
		if !redisErr.IsError() || ourErr == nil || string(redisErr.Str) != ourErr.Error() {
			t.Errorf("%s: redis %q, proxy %v", line, redisErr.Str, ourErr)
		}
	}
	if v := c.do("HELLO", "4"); string(v.Str) != "NOPROTO unsupported protocol version" {
		t.Errorf("HELLO 4: %q", v.Str)
	}
	_, err := ParseHello(commandExample{line: "HELLO 3 FOO"}.args())
	if v := c.do("HELLO", "3", "FOO"); string(v.Str) != err.Error() {
		t.Errorf("HELLO 3 FOO: redis %q, proxy %q", v.Str, err)
	}
}

// Commands parsed by CommandReader (inline and RESP, pipelined, fed a byte at a time) and
// forwarded as Raw get one well-framed reply each from a real redis.
func TestEngineForwardsRawCommands(t *testing.T) {
	c := dialRedis(t, enginetest.StartRedis(t))
	pipeline := "SET k \"a b\"\r\n" +
		string(AppendCommandStrings(nil, "GET", "k")) +
		"*2\r\n$4\r\nINCR\r\n$3\r\nctr\r\n" +
		"PING\n" +
		string(AppendCommandStrings(nil, "MGET", "k", "nokey", "ctr")) +
		"ECHO '\\''\r\n"
	want := []string{"+OK\r\n", "$3\r\na b\r\n", ":1\r\n", "+PONG\r\n", "*3\r\n$3\r\na b\r\n$-1\r\n$1\r\n1\r\n", "$1\r\n'\r\n"}
	for how, br := range readers(pipeline) {
		t.Run(how, func(t *testing.T) {
			r := NewCommandReader(br, Limits{})
			for range want {
				cmd, err := r.ReadCommand()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.w.Write(cmd.Raw()); err != nil {
					t.Fatal(err)
				}
			}
			c.w.Flush()
			for i, w := range want {
				reply, err := c.r.ReadReply()
				if err != nil || string(reply.Raw()) != w {
					t.Fatalf("reply %d = %q, %v; want %q", i, reply.Raw(), err, w)
				}
			}
			c.do("DEL", "ctr")
		})
	}
}

// DEBUG PROTOCOL makes redis emit each RESP3 type, attributes and pushes included: the reader
// frames all of them exactly as the server wrote them.
func TestEngineRESP3TypesFromRedis(t *testing.T) {
	c := dialRedis(t, enginetest.StartRedis(t, "--enable-debug-command", "yes"))
	c.do("HELLO", "3")
	tests := []struct {
		kind string
		typ  Type
	}{
		{"string", TypeBulkString}, {"integer", TypeInteger}, {"double", TypeDouble},
		{"bignum", TypeBigNumber}, {"null", TypeNull}, {"array", TypeArray}, {"set", TypeSet},
		{"map", TypeMap}, {"verbatim", TypeVerbatim}, {"true", TypeBoolean}, {"false", TypeBoolean},
		{"attrib", TypeBulkString},
	}
	for _, tt := range tests {
		v := c.do("DEBUG", "PROTOCOL", tt.kind)
		if v.Type != tt.typ {
			t.Errorf("DEBUG PROTOCOL %s: %v %q", tt.kind, v.Type, v.Raw)
		}
		if tt.kind == "attrib" && len(v.Attrs) != 2 {
			t.Errorf("DEBUG PROTOCOL attrib: attributes %q", v.Raw)
		}
	}
	// "push" sends a push and then the command's own reply.
	c.send("DEBUG", "PROTOCOL", "push")
	if v := c.read(); v.Type != TypePush {
		t.Errorf("first reply %v, want push", v.Type)
	}
	if v := c.read(); v.IsError() {
		t.Errorf("reply after the push: %q", v.Raw)
	}
}

// Client-side caching invalidations arrive as RESP3 pushes between replies; ReadReply returns
// them as their own replies so the proxy can tell them from the answer it waits for.
func TestEngineInvalidationPushIsSeparateReply(t *testing.T) {
	sock := enginetest.StartRedis(t)
	c := dialRedis(t, sock)
	c.do("HELLO", "3")
	if v := c.do("CLIENT", "TRACKING", "ON"); string(v.Str) != "OK" {
		t.Fatalf("CLIENT TRACKING ON: %q", v.Raw)
	}
	c.do("GET", "tracked")
	other := dialRedis(t, sock)
	other.do("SET", "tracked", "1")
	c.send("PING")
	push := c.read()
	if push.Type != TypePush || string(push.Elems[0].Str) != "invalidate" {
		t.Fatalf("want an invalidate push, got %q", push.Raw)
	}
	if pong := c.read(); string(pong.Str) != "PONG" {
		t.Fatalf("want PONG after the push, got %q", pong.Raw)
	}
}
