package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestUnreachablePeerRoutedAround: node b's sidecar is gone without announcing a restart
// (Close: its peer address refuses connections) while its engine keeps its values, and a
// client of node a, with peer failover on (the default), reads and writes keys that b owns.
// Node a ejects b at the first refused dial and routes b's keys to a, the tenant's other node,
// from that request on: reads miss there at first, writes and deletions are served there, and
// nothing fails. cacheqos_sidecar_peer_unreachable_total counts the keys routed around b
// (outcome "rerouted") and no miss or error. Once b listens again, node a's probe reaches it
// and, before b's keys are routed to it again, deletes from b and from a the keys written or
// deleted meanwhile: b's old values of them are never read, while b's other keys are read
// from b again. Past the bound on the keys it can undo, a write for b's keys gets the error
// naming b, and reads still go to a.
func TestUnreachablePeerRoutedAround(t *testing.T) {
	redis := func(args ...string) string { return string(resp.AppendCommandStrings(nil, args...)) }
	bulk := func(v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }
	// memcached values start "v-", as mcClient.response reads them.
	mcValue := func(k, v string) string { return fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\n", k, len(v), v) }
	type step struct{ request, want string }
	tests := []struct {
		name     string
		protocol Protocol
		// whileOut runs while b is ejected: b's keys onB[0] (written) and onB[1] (deleted)
		// change, onB[2] is only read; onB[4] is written in a transaction (redis) or created
		// by an mg (memcached).
		whileOut func(onA, onB []string) []step
		// after reads each key once b is back: onB[0] and onB[1] miss, onB[2] has b's value.
		after func(onB []string) []step
		// full is a write of b's key onB[3] once a can undo no more, and the start of its error.
		full func(onB []string) step
		// changed are the indexes in onB of the keys whileOut changes.
		changed []int
	}{
		{
			name: "redis", protocol: Redis,
			whileOut: func(onA, onB []string) []step {
				return []step{
					{redis("GET", onB[0]), "$-1\r\n"},
					{redis("SET", onB[0], "new"), "+OK\r\n"},
					{redis("GET", onB[0]), bulk("new")},
					{redis("DEL", onB[1], onA[0]), ":1\r\n"},
					{redis("MGET", onA[1], onB[0], onB[2]), "*3\r\n" + bulk("v-"+onA[1]) + bulk("new") + "$-1\r\n"},
					{redis("MULTI"), "+OK\r\n"},
					{redis("SET", onB[4], "tx"), "+QUEUED\r\n"},
					{redis("EXEC"), "*1\r\n+OK\r\n"},
					{redis("GET", onB[4]), bulk("tx")},
				}
			},
			after: func(onB []string) []step {
				return []step{
					{redis("GET", onB[0]), "$-1\r\n"},
					{redis("GET", onB[1]), "$-1\r\n"},
					{redis("GET", onB[2]), bulk("v-" + onB[2])},
				}
			},
			full:    func(onB []string) step { return step{redis("SET", onB[3], "x"), "-ERR cacheqos: node node-b: "} },
			changed: []int{0, 1, 4},
		},
		{
			name: "memcached", protocol: Memcached,
			whileOut: func(onA, onB []string) []step {
				return []step{
					{"get " + onB[0] + "\r\n", "END\r\n"},
					{"set " + onB[0] + " 0 0 5\r\nv-new\r\n", "STORED\r\n"},
					{"get " + onB[0] + "\r\n", mcValue(onB[0], "v-new") + "END\r\n"},
					{"delete " + onB[1] + "\r\n", "NOT_FOUND\r\n"},
					{"mg " + onB[4] + " N30\r\n", "HD W\r\n"}, // creates the item: a change
					{"get " + onA[1] + " " + onB[0] + " " + onB[2] + "\r\n", mcValue(onA[1], "v-"+onA[1]) + mcValue(onB[0], "v-new") + "END\r\n"},
				}
			},
			after: func(onB []string) []step {
				return []step{
					{"get " + onB[0] + "\r\n", "END\r\n"},
					{"get " + onB[1] + "\r\n", "END\r\n"},
					{"get " + onB[2] + "\r\n", mcValue(onB[2], "v-"+onB[2]) + "END\r\n"},
				}
			},
			full: func(onB []string) step {
				return step{"set " + onB[3] + " 0 0 3\r\nv-x\r\n", "SERVER_ERROR cacheqos: node node-b: "}
			},
			changed: []int{0, 1, 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Protocol: tt.protocol}
			c := startClusterWith(t, opts, 1, 1)
			onA, onB := keysOn(t, c, tt.protocol, c.engineA, 2), keysOnB(t, c, tt.protocol, 5)
			exchange := exchangeVia(t, c.a, c.acct, tt.protocol)
			run := func(when string, steps []step) {
				t.Helper()
				for _, s := range steps {
					sent := time.Now()
					got, took := exchange(s.request), time.Since(sent)
					if got != s.want {
						t.Errorf("%s: %q: %q, want %q", when, s.request, got, s.want)
					}
					if took > dialRetryDelay/2 {
						t.Errorf("%s: %q took %v, want an answer at once", when, s.request, took)
					}
				}
			}
			if err := c.b.p.Close(); err != nil {
				t.Fatal(err)
			}
			awaitNoPeerLink(t, c.a.p)

			run("b out", tt.whileOut(onA, onB))
			if !c.a.p.ejections.ejected("node-b") {
				t.Errorf("node a has not ejected node b")
			}
			if !engineHolds(t, tt.protocol, c.engineA, onB[0]) {
				t.Errorf("node a's engine lacks %s, written while b was out", onB[0])
			}
			families := scrape(t, c.a)
			if writes := gaugeOf(t, families, "cacheqos_sidecar_ejected_peer_writes", "node-b"); writes != float64(len(tt.changed)) {
				t.Errorf("cacheqos_sidecar_ejected_peer_writes{peer=node-b} = %v, want %d: the keys changed", writes, len(tt.changed))
			}
			series := tenantSeries(families, c.acct.id)
			for outcome, want := range map[string]bool{"rerouted": true, "miss": false, "error": false} {
				name := "cacheqos_sidecar_peer_unreachable_total{outcome=" + outcome + ",peer=node-b}"
				if got := series[name]; got > 0 != want {
					t.Errorf("%s = %v, want %s", name, got, map[bool]string{true: "some", false: "none"}[want])
				}
			}

			// Past the bound, a write for b's keys fails; a read still goes to a.
			c.a.p.ejections.mu.Lock()
			limit := c.a.p.ejections.limit
			c.a.p.ejections.limit = c.a.p.ejections.bytes
			c.a.p.ejections.mu.Unlock()
			full := tt.full(onB)
			if got := exchange(full.request); !strings.HasPrefix(got, full.want) || !strings.Contains(got, "undo") {
				t.Errorf("%q with no room to undo it: %q, want an error starting %q", full.request, got, full.want)
			}
			run("b out, no room", tt.whileOut(onA, onB)[2:3])
			c.a.p.ejections.mu.Lock()
			c.a.p.ejections.limit = limit
			c.a.p.ejections.mu.Unlock()

			c.b = startNodeOn(t, c.b.id, opts, listenOn(t, c.b.addr), listenOn(t, c.b.peerAddr))
			c.setWeights(t, c.weightA, c.weightB)
			back := time.Now()
			deadline := back.Add(5 * ejectProbeInterval)
			for c.a.p.ejections.ejected("node-b") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if c.a.p.ejections.ejected("node-b") {
				t.Fatalf("node b still ejected %v after it listens again", 5*ejectProbeInterval)
			}
			t.Logf("node b readmitted %v after it listens again", time.Since(back).Round(time.Millisecond))
			if writes := gaugeOf(t, scrape(t, c.a), "cacheqos_sidecar_ejected_peer_writes", "node-b"); writes >= 0 {
				t.Errorf("cacheqos_sidecar_ejected_peer_writes{peer=node-b} = %v once b is readmitted, want no series", writes)
			}
			for _, i := range tt.changed {
				key := onB[i]
				for engine, socket := range map[string]string{"a": c.engineA, "b": c.engB} {
					if engineHolds(t, tt.protocol, socket, key) {
						t.Errorf("node %s's engine holds %s after b was readmitted, want it deleted: written or deleted while b was out", engine, key)
					}
				}
			}
			run("b back", tt.after(onB))
		})
	}
}

// TestUnreachableOnlyNodeAnswered: with peer failover on, a tenant whose keys all live on node
// b (node a holds no share) has nowhere else to go when b is gone unannounced: node a answers
// a GET of b's key as a miss and a SET with the error naming b, at once, as without failover.
func TestUnreachableOnlyNodeAnswered(t *testing.T) {
	c := startClusterWith(t, Options{Protocol: Redis}, 0, 1)
	client := loginRESP(t, c.a, c.acct)
	if got := client.do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET with b up: %q", got)
	}
	if err := c.b.p.Close(); err != nil {
		t.Fatal(err)
	}
	awaitNoPeerLink(t, c.a.p)
	for _, step := range []struct{ args, want []string }{
		{[]string{"GET", "k"}, []string{"$-1\r\n"}},
		{[]string{"SET", "k", "w"}, []string{"-ERR cacheqos: node node-b: ", "connection refused"}},
		{[]string{"GET", "k"}, []string{"$-1\r\n"}},
	} {
		sent := time.Now()
		got, took := client.do(step.args...), time.Since(sent)
		if !strings.HasPrefix(got, step.want[0]) || len(step.want) > 1 && !strings.Contains(got, step.want[1]) || took > dialRetryDelay/2 {
			t.Errorf("%v with the only node gone: %q after %v, want %q at once", step.args, got, took, step.want)
		}
	}
	if engineHolds(t, Redis, c.engineA, "k") {
		t.Errorf("node a's engine, with no share of the tenant's keys, holds k")
	}
}

// gaugeOf returns the value of family's gauge whose peer label is peer; -1 without one.
func gaugeOf(t *testing.T, families map[string]*dto.MetricFamily, family, peer string) float64 {
	t.Helper()
	f := families[family]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == "peer" && l.GetValue() == peer {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// exchangeVia logs in to node n as acct and returns a function that sends one raw request and
// reads its whole reply (memcached values must start "v-", as mcClient.response reads them).
func exchangeVia(t *testing.T, n *testNode, acct account, protocol Protocol) func(request string) string {
	t.Helper()
	if protocol == Redis {
		client := loginRESP(t, n, acct)
		return func(request string) string {
			client.write([]byte(request))
			return client.read()
		}
	}
	client := loginMC(t, n, acct)
	return func(request string) string {
		client.write(request)
		return client.response()
	}
}

// TestEjectedPeerStaysOutUntilPurged: node b comes back, but the keys written elsewhere while
// it was out cannot all be deleted yet (node a's own engine, which took the write, is out of
// reach: its socket moved). Node a keeps b ejected, keeping the write to undo, and probes
// again; once the deletion succeeds, b is readmitted and the key is gone from both engines.
func TestEjectedPeerStaysOutUntilPurged(t *testing.T) {
	c := startClusterWith(t, Options{Protocol: Redis}, 1, 1)
	key := keysOnB(t, c, Redis, 1)[0]
	if err := c.b.p.Close(); err != nil {
		t.Fatal(err)
	}
	awaitNoPeerLink(t, c.a.p)
	client := loginRESP(t, c.a, c.acct)
	if got := client.do("SET", key, "new"); got != "+OK\r\n" {
		t.Fatalf("SET of b's key with b out: %q", got)
	}
	c.a.update(t, c.tenant(t.TempDir()+"/moved.sock"))
	c.b = startNodeOn(t, c.b.id, Options{Protocol: Redis}, listenOn(t, c.b.addr), listenOn(t, c.b.peerAddr))
	c.b.update(t, c.tenant(c.engB))
	time.Sleep(2*ejectProbeInterval + ejectProbeInterval/2)
	if !c.a.p.ejections.ejected("node-b") {
		t.Fatalf("node b readmitted though the key written on a meanwhile could not be deleted there")
	}
	if writes := gaugeOf(t, scrape(t, c.a), "cacheqos_sidecar_ejected_peer_writes", "node-b"); writes != 1 {
		t.Errorf("cacheqos_sidecar_ejected_peer_writes{peer=node-b} = %v after the failed deletion, want 1: kept to undo", writes)
	}
	c.a.update(t, c.tenant(c.engineA))
	deadline := time.Now().Add(5 * ejectProbeInterval)
	for c.a.p.ejections.ejected("node-b") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.a.p.ejections.ejected("node-b") {
		t.Fatalf("node b still ejected %v after the deletion could succeed", 5*ejectProbeInterval)
	}
	for engine, socket := range map[string]string{"a": c.engineA, "b": c.engB} {
		if engineHolds(t, Redis, socket, key) {
			t.Errorf("node %s's engine holds %s after b was readmitted, want it deleted", engine, key)
		}
	}
}

// TestNestedEjectionLeavesNoStaleCopy: a tenant on three nodes, its key k owned by b, with c
// next in k's rendezvous order and a last. Node a's client writes k while b is out (c takes
// it), then again while c is out too (a takes it). When c comes back it is readmitted without
// its older copy of k: a read of k, routed to c while b is still out, misses rather than find
// the first value. When b comes back, k is gone from every engine: each copy written
// elsewhere is deleted, once per node that took one.
func TestNestedEjectionLeavesNoStaleCopy(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	ids := []string{"node-a", "node-b", "node-c"}
	engines, nodes := map[string]string{}, map[string]*testNode{}
	for _, id := range ids {
		engines[id], nodes[id] = startEngine(t, Redis), startNode(t, id, Options{Protocol: Redis})
	}
	var routes []Route
	for _, id := range ids {
		routes = append(routes, nodes[id].route(1))
	}
	configure := func(id string) {
		nodes[id].update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engines[id], Routes: routes})
	}
	for _, id := range ids {
		configure(id)
	}
	rt, err := newRoutes(routes, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	index := func(id string) int { return slices.IndexFunc(rt.nodes, func(n routeNode) bool { return n.id == id }) }
	key := ""
	for i := 0; key == ""; i++ {
		k := "key:" + strconv.Itoa(i)
		h, _ := keyHashes([]byte(k))
		owner, _ := rt.owner(h)
		next, _ := rt.table.PickHashExcept(h, func(n int) bool { return n == owner })
		if owner == index("node-b") && next == index("node-c") {
			key = k
		}
	}
	restart := func(id string) {
		n := nodes[id]
		nodes[id] = startNodeOn(t, id, Options{Protocol: Redis}, listenOn(t, n.addr), listenOn(t, n.peerAddr))
		configure(id)
	}
	awaitReadmitted := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(5 * ejectProbeInterval); nodes["node-a"].p.ejections.ejected(id); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still ejected %v after it listens again", id, 5*ejectProbeInterval)
			}
		}
	}
	client := loginRESP(t, nodes["node-a"], acct)
	for _, step := range []struct {
		stop  string
		value string
		on    string // the engine that takes the write
	}{{"node-b", "first", "node-c"}, {"node-c", "second", "node-a"}} {
		if err := nodes[step.stop].p.Close(); err != nil {
			t.Fatal(err)
		}
		awaitNoPeerLink(t, nodes["node-a"].p)
		if got := client.do("SET", key, step.value); got != "+OK\r\n" {
			t.Fatalf("SET %s %s with %s out: %q", key, step.value, step.stop, got)
		}
		if !engineHolds(t, Redis, engines[step.on], key) {
			t.Fatalf("SET %s with %s out: not on %s, the next node in the key's order", key, step.stop, step.on)
		}
	}
	restart("node-c")
	awaitReadmitted("node-c")
	if got := client.do("GET", key); got != "$-1\r\n" {
		t.Errorf("GET %s once c is readmitted and b still out: %q, want a miss, not c's older copy", key, got)
	}
	restart("node-b")
	awaitReadmitted("node-b")
	for _, id := range ids {
		if engineHolds(t, Redis, engines[id], key) {
			t.Errorf("%s's engine holds %s once b is readmitted, want every copy written elsewhere deleted", id, key)
		}
	}
}
