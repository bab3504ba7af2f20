package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestUpdateKeepsConnectionsAndClosesRemovedTenants(t *testing.T) {
	a, b := newAccount(t, "team-a/cache"), newAccount(t, "team-b/cache")
	engineA, engineB := startEngine(t, Redis), startEngine(t, Redis)
	n := startNode(t, "node-a", Options{Protocol: Redis, ThrottleMaxWait: 50 * time.Millisecond})
	tenantA := Tenant{ID: a.id, CredentialHash: a.hash, LocalEngine: engineA, Routes: []Route{n.route(1)}}
	tenantB := Tenant{ID: b.id, CredentialHash: b.hash, LocalEngine: engineB, Routes: []Route{n.route(1)}}
	n.update(t, tenantA, tenantB)
	ca, cb := loginRESP(t, n, a), loginRESP(t, n, b)
	ca.do("SET", "k", "a")
	cb.do("SET", "k", "b")

	// A limit change applies to the open connection's next requests.
	tenantA.OpsPerSecond = 1
	n.update(t, tenantA, tenantB)
	replies := pipeline(ca, [][]string{{"GET", "k"}, {"GET", "k"}})
	if replies[0] != "$1\r\na\r\n" || !strings.Contains(replies[1], "throttled") {
		t.Fatalf("after lowering the ops limit: %q", replies)
	}

	// Removing tenant b closes its connection; tenant a's stays up.
	n.update(t, tenantA)
	expectClosed(t, cb.nc, cb.br)
	if got := dialRESP(t, "tcp", n.addr).do("AUTH", b.id, b.password); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("AUTH as the removed tenant: %q", got)
	}
	time.Sleep(time.Second) // refill tenant a's ops bucket
	if got := ca.do("GET", "k"); got != "$1\r\na\r\n" {
		t.Fatalf("tenant a after the update: %q", got)
	}

	// A new credential hash applies to new logins; an invalid configuration changes nothing.
	rotated := newAccount(t, a.id)
	tenantA.CredentialHash = rotated.hash
	n.update(t, tenantA)
	if got := dialRESP(t, "tcp", n.addr).do("AUTH", a.id, a.password); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("AUTH with the old password: %q", got)
	}
	loginRESP(t, n, rotated)
	bad := tenantA
	bad.CredentialHash = "plaintext"
	if err := n.p.Update(Config{NodeID: n.id, PeerToken: testPeerToken, Tenants: []Tenant{bad}}); err == nil {
		t.Fatal("Update accepted an invalid credential hash")
	}
	loginRESP(t, n, rotated)
}

func TestConfigValidate(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	good := func() Config {
		return Config{NodeID: "n1", PeerToken: "token", Tenants: []Tenant{{
			ID: acct.id, CredentialHash: acct.hash, LocalEngine: "/run/engine.sock",
			Routes: []Route{{Node: "n1", Weight: 1}, {Node: "n2", Weight: 2, PeerAddress: "10.0.0.2:7000"}},
		}}}
	}
	if err := (&Config{NodeID: "n1"}).Validate(); err != nil {
		t.Fatalf("empty tenant table: %v", err)
	}
	if c := good(); c.Validate() != nil {
		t.Fatalf("good config: %v", c.Validate())
	}
	cases := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no node ID", func(c *Config) { c.NodeID = "" }, "node ID is empty"},
		{"no peer token", func(c *Config) { c.PeerToken = "" }, "peer token is empty"},
		{"token with a space", func(c *Config) { c.PeerToken = "a b" }, "space"},
		{"duplicate tenant", func(c *Config) { c.Tenants = append(c.Tenants, c.Tenants[0]) }, "listed twice"},
		{"bad tenant ID", func(c *Config) { c.Tenants[0].ID = "no-namespace" }, "not <namespace>/<name>"},
		{"bad hash", func(c *Config) { c.Tenants[0].CredentialHash = "x" }, "credential hash"},
		{"negative rate", func(c *Config) { c.Tenants[0].BytesPerSecond = -1 }, "bytes per second"},
		{"negative weight", func(c *Config) { c.Tenants[0].Routes[1].Weight = -1 }, "weight -1"},
		{"duplicate node", func(c *Config) { c.Tenants[0].Routes[1].Node = "n1" }, "routed twice"},
		{"local route without engine", func(c *Config) { c.Tenants[0].LocalEngine = "" }, "no local engine"},
		{"remote route without address", func(c *Config) { c.Tenants[0].Routes[1].PeerAddress = "" }, "no peer address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, opts := range []Options{
		{},
		{Protocol: "http"},
		{Protocol: Redis, ThrottleMaxWait: time.Minute},
		{Protocol: Redis, MRCCurvePoints: 2},
		{Protocol: Redis, MRCSampleRate: 2},
		{Protocol: Redis, MRCMaxTrackedKeys: 10},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) succeeded", opts)
		}
	}
}

func TestKeyHashesUseHashTags(t *testing.T) {
	r1, f1 := keyHashes([]byte("{user1}.cart"))
	r2, f2 := keyHashes([]byte("{user1}.profile"))
	if r1 != r2 || f1 == f2 {
		t.Fatalf("hash-tagged keys: routing %x %x (want equal), full %x %x (want different)", r1, r2, f1, f2)
	}
	for _, key := range []string{"plain", "{}empty", "open{only", "}{"} {
		if r, f := keyHashes([]byte(key)); r != f {
			t.Errorf("%q routes by a tag it does not have", key)
		}
	}
}

func TestParseEvictionLine(t *testing.T) {
	cases := []struct {
		line string
		key  string
		size int64
		ok   bool
	}{
		{"ts=1.2 gid=2 type=eviction key=k0 fetch=no ttl=-1 la=0 clsid=27 size=30000", "k0", 30000, true},
		{"ts=1.2 gid=2 type=eviction key=a%3Ab%20c fetch=no size=5", "a:b c", 5, true},
		{"ts=1.2 gid=2 type=item_get key=k0 size=5", "", 0, false},
		{"ts=1.2 type=eviction key=%zz size=5", "", 0, false},
		{"ts=1.2 type=eviction size=5", "", 0, false},
		{"[skipped: 3]", "", 0, false},
	}
	for _, tc := range cases {
		key, size, ok := parseEvictionLine([]byte(tc.line))
		if ok != tc.ok || ok && (string(key) != tc.key || size != tc.size) {
			t.Errorf("%q: %q %d %v, want %q %d %v", tc.line, key, size, ok, tc.key, tc.size, tc.ok)
		}
	}
}

func TestMessagePayload(t *testing.T) {
	cases := []struct {
		raw     string
		payload string
		ok      bool
	}{
		{"*3\r\n$7\r\nmessage\r\n$22\r\n" + evictedChannel + "\r\n$2\r\nk0\r\n", "k0", true},
		{"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$6\r\na\r\nb c\r\n", "a\r\nb c", true},
		{"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$0\r\n\r\n", "", true},
		{"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n", "", false},
		{"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$5\r\nk0\r\n", "", false}, // shorter than told
		{"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nk0\r\nmore", "", false},
		{"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$2\r\nk0\r\n", "", false},
		{"*3\r\n$7\r\nmessage\r\n$x\r\nc\r\n$2\r\nk0\r\n", "", false},
	}
	for _, tc := range cases {
		payload, ok := messagePayload([]byte(tc.raw))
		if ok != tc.ok || ok && string(payload) != tc.payload {
			t.Errorf("%q: %q %v, want %q %v", tc.raw, payload, ok, tc.payload, tc.ok)
		}
	}
}

func TestPeerHandshakeIsAuthenticated(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{})
	for _, tc := range []struct{ line, want string }{
		{"CQPEER 1 wrong-token " + acct.id, "ERR wrong peer token"},
		{"CQPEER 2 " + testPeerToken + " " + acct.id, "ERR unsupported peer protocol version"},
		{"CQPEER 1 " + testPeerToken + " team-x/none", "ERR unknown tenant"},
		{"GET k", "ERR expected CQPEER"},
	} {
		c := dialRESP(t, "tcp", n.peerAddr)
		c.write([]byte(tc.line + "\r\n"))
		line, err := c.br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.line, line, err, tc.want)
		}
		expectClosed(t, c.nc, c.br)
	}
	c := dialRESP(t, "tcp", n.peerAddr)
	c.write(appendPeerHello(nil, testPeerToken, acct.id))
	if line, err := c.br.ReadString('\n'); err != nil || line != "OK\r\n" {
		t.Fatalf("handshake: %q, %v", line, err)
	}
	if got := c.do("SET", "k", "via-peer"); got != "+OK\r\n" {
		t.Fatalf("SET on a peer connection: %q", got)
	}
	if got := loginRESP(t, n, acct).do("GET", "k"); got != "$8\r\nvia-peer\r\n" {
		t.Fatalf("GET by a client: %q", got)
	}
}

// TestConnectionOutlivesWriteTimeout: a client that keeps reading its replies keeps its
// connection past the client write timeout, whichever path writes them (the writer, which
// renews the deadline, or a link's reader writing without blocking, which once found the
// deadline set by an earlier reply expired and closed the connection).
func TestConnectionOutlivesWriteTimeout(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{ClientWriteTimeout: 200 * time.Millisecond})
	c := loginRESP(t, n, acct) // the proxy's own AUTH reply sets the write deadline
	for i := range 12 {
		if got := c.do("SET", "k", "v"); got != "+OK\r\n" {
			t.Fatalf("request %d, %v after the first: %q", i, time.Duration(i)*50*time.Millisecond, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCurveSurvivesResize: resizing the local partition, or moving it to another engine,
// keeps the curve the tenant's reads built; removing the partition drops it.
func TestCurveSurvivesResize(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, engine := singleNode(t, Redis, acct, Options{MRCSampleRate: 1})
	c := loginRESP(t, n, acct)
	var cmds [][]string
	for i := range 200 {
		cmds = append(cmds, []string{"SET", "k" + strconv.Itoa(i), "value"}, []string{"GET", "k" + strconv.Itoa(i)})
	}
	pipeline(c, cmds)
	sampled := func() float64 {
		ps := (*n.p.tenants.Load())[acct.id].part.Load()
		if ps == nil {
			return -1
		}
		return ps.curves.Tracker().Snapshot().SampledAccesses
	}
	if got := sampled(); got != 200 {
		t.Fatalf("%v sampled reads before the resize, want 200", got)
	}
	tenant := Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, LocalPartitionBytes: 64 << 20, Routes: []Route{n.route(1)}}
	n.update(t, tenant)
	if got := sampled(); got != 200 {
		t.Errorf("%v sampled reads after a resize, want the 200 from before", got)
	}
	tenant.LocalEngine = startEngine(t, Redis)
	n.update(t, tenant)
	if got := sampled(); got != 200 {
		t.Errorf("%v sampled reads after moving to another engine, want the 200 from before", got)
	}
	tenant.LocalEngine, tenant.Routes = "", nil
	n.update(t, tenant)
	if got := sampled(); got != -1 {
		t.Errorf("the curve outlived its partition (%v sampled reads)", got)
	}
}
