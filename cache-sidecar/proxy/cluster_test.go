package proxy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// cluster is two proxies acting as two nodes, each with its own engine for one tenant.
type cluster struct {
	acct             account
	a, b             *testNode
	engineA, engB    string
	weightA, weightB float64
}

func startCluster(t *testing.T, protocol Protocol, weightA, weightB float64) *cluster {
	t.Helper()
	return startClusterWith(t, Options{Protocol: protocol}, weightA, weightB)
}

// startClusterWith is startCluster with both nodes' options.
func startClusterWith(t *testing.T, opts Options, weightA, weightB float64) *cluster {
	t.Helper()
	c := &cluster{acct: newAccount(t, "team-a/cache")}
	c.engineA, c.engB = startEngine(t, opts.Protocol), startEngine(t, opts.Protocol)
	c.a = startNode(t, "node-a", opts)
	c.b = startNode(t, "node-b", opts)
	c.setWeights(t, weightA, weightB)
	return c
}

// setWeights gives both nodes the same routes with new weights.
func (c *cluster) setWeights(t *testing.T, weightA, weightB float64) {
	t.Helper()
	c.weightA, c.weightB = weightA, weightB
	c.a.update(t, c.tenant(c.engineA))
	c.b.update(t, c.tenant(c.engB))
}

// tenant is the tenant's configuration on the node of engine, with the cluster's weights.
func (c *cluster) tenant(engine string) Tenant {
	routes := []Route{c.a.route(c.weightA), c.b.route(c.weightB)}
	return Tenant{ID: c.acct.id, CredentialHash: c.acct.hash, LocalEngine: engine, Routes: routes}
}

// enginesHold returns, per engine, which of keys it holds (asked directly).
func enginesHold(t *testing.T, sockets []string, keys []string) [][]bool {
	out := make([][]bool, len(sockets))
	for i, sock := range sockets {
		c := dialRESP(t, "unix", sock)
		var batch []byte
		for _, k := range keys {
			batch = resp.AppendCommandStrings(batch, "EXISTS", k)
		}
		go c.write(batch)
		out[i] = make([]bool, len(keys))
		for j := range keys {
			out[i][j] = c.read() == ":1\r\n"
		}
	}
	return out
}

// pipeline sends commands in one write and returns the replies.
func pipeline(c *respClient, commands [][]string) []string {
	var batch []byte
	for _, args := range commands {
		batch = resp.AppendCommandStrings(batch, args...)
	}
	go c.write(batch)
	replies := make([]string, len(commands))
	for i := range commands {
		replies[i] = c.read()
	}
	return replies
}

func TestTwoNodesRedis(t *testing.T) {
	const keys = 4000
	c := startCluster(t, Redis, 1, 3)
	viaA, viaB := loginRESP(t, c.a, c.acct), loginRESP(t, c.b, c.acct)

	names := make([]string, keys)
	var sets [][]string
	for i := range names {
		names[i] = "key:" + strconv.Itoa(i)
		sets = append(sets, []string{"SET", names[i], "v" + strconv.Itoa(i)})
	}
	for i, reply := range pipeline(viaA, sets) {
		if reply != "+OK\r\n" {
			t.Fatalf("SET %s via node a: %q", names[i], reply)
		}
	}

	// The keys spread over the engines in proportion to the weights, each key on one engine.
	held := enginesHold(t, []string{c.engineA, c.engB}, names)
	onA := 0
	for i := range names {
		if held[0][i] == held[1][i] {
			t.Fatalf("key %s: on node a %v, on node b %v; want exactly one", names[i], held[0][i], held[1][i])
		}
		if held[0][i] {
			onA++
		}
	}
	t.Logf("node a holds %d of %d keys", onA, keys)
	if share := float64(onA) / keys; math.Abs(share-0.25) > 0.03 {
		t.Errorf("node a holds %.3f of the keys, want 0.25 ± 0.03 (weights 1:3)", share)
	}

	onNodeA, onNodeB := slices.Index(held[0], true), slices.Index(held[1], true)

	// Every key reads back through the other node.
	var gets [][]string
	for _, k := range names {
		gets = append(gets, []string{"GET", k})
	}
	for i, reply := range pipeline(viaB, gets) {
		want := "v" + strconv.Itoa(i)
		if reply != fmt.Sprintf("$%d\r\n%s\r\n", len(want), want) {
			t.Fatalf("GET %s via node b: %q", names[i], reply)
		}
	}

	t.Run("multi-key commands are split and merged", func(t *testing.T) {
		mget := []string{"MGET"}
		for i := range 20 {
			mget = append(mget, names[i])
		}
		mget = append(mget, "missing", names[0])
		for _, via := range []*respClient{viaA, viaB} {
			v := value(t, via.do(mget...))
			if len(v.Elems) != 22 {
				t.Fatalf("MGET: %d values", len(v.Elems))
			}
			for i := range 20 {
				if got := string(v.Elems[i].Str); got != "v"+strconv.Itoa(i) {
					t.Fatalf("MGET value %d = %q", i, got)
				}
			}
			if !v.Elems[20].Null || string(v.Elems[21].Str) != "v0" {
				t.Fatalf("MGET tail: %+v", v.Elems[20:])
			}
		}
		if got := viaA.do("EXISTS", names[0], names[1], names[2], names[3], "missing"); got != ":4\r\n" {
			t.Fatalf("EXISTS: %q", got)
		}
		if got := viaB.do("MSET", "x1", "1", "x2", "2", "x3", "3", "x4", "4"); got != "+OK\r\n" {
			t.Fatalf("MSET: %q", got)
		}
		if got := viaA.do("DEL", "x1", "x2", "x3", "x4", "missing"); got != ":4\r\n" {
			t.Fatalf("DEL: %q", got)
		}
		if got := viaA.do("DBSIZE"); got != ":"+strconv.Itoa(keys)+"\r\n" {
			t.Fatalf("DBSIZE: %q", got)
		}
		if got := viaA.do("MSETNX", "{tag}a", "1", "{tag}b", "2"); got != ":1\r\n" {
			t.Fatalf("MSETNX with a common hash tag: %q", got)
		}
		if got := viaA.do("RENAME", names[onNodeA], names[onNodeB]); !strings.HasPrefix(got, "-CROSSSLOT ") {
			t.Fatalf("RENAME across nodes: %q, want a CROSSSLOT error", got)
		}
		viaA.do("DEL", "{tag}a", "{tag}b")
	})

	t.Run("RESP3 across nodes", func(t *testing.T) {
		c3 := dialRESP(t, "tcp", c.a.addr)
		if got := c3.do("HELLO", "3", "AUTH", c.acct.id, c.acct.password); !strings.HasPrefix(got, "%7") {
			t.Fatalf("HELLO 3: %q", got)
		}
		want := "*3\r\n$2\r\nv0\r\n_\r\n$2\r\nv5\r\n"
		if got := c3.do("MGET", names[0], "missing", names[5]); got != want {
			t.Fatalf("RESP3 MGET across nodes: %q, want %q", got, want)
		}
		if got := c3.do("GET", "missing"); got != "_\r\n" {
			t.Fatalf("RESP3 GET of a missing key: %q", got)
		}
	})

	t.Run("SCAN visits every node", func(t *testing.T) {
		seen := map[string]int{}
		cursor := "0"
		for range 10000 {
			v := value(t, viaB.do("SCAN", cursor, "COUNT", "500"))
			for _, k := range v.Elems[1].Elems {
				seen[string(k.Str)]++
			}
			cursor = string(v.Elems[0].Str)
			if cursor == "0" {
				break
			}
		}
		if cursor != "0" {
			t.Fatal("SCAN did not finish")
		}
		for _, k := range names[1:] {
			if seen[k] != 1 {
				t.Fatalf("SCAN returned %s %d times", k, seen[k])
			}
		}
	})

	t.Run("a weight change moves only the keys it must", func(t *testing.T) {
		// Node a's share grows from 1/4 to 1/2: a third of node b's keys move to a, none the
		// other way. Moved keys are misses until written again.
		c.setWeights(t, 1, 1)
		replies := pipeline(viaB, gets)
		moved := 0
		for i, reply := range replies {
			hit := reply != "$-1\r\n"
			switch {
			case held[0][i] && !hit:
				t.Fatalf("key %s stayed on node a but misses: it moved away from a", names[i])
			case held[1][i] && !hit:
				moved++
			}
		}
		onB := keys - onA
		t.Logf("%d of node b's %d keys moved", moved, onB)
		if share := float64(moved) / float64(onB); math.Abs(share-1.0/3) > 0.04 {
			t.Errorf("%.3f of node b's keys moved, want 1/3 ± 0.04", share)
		}
	})
}

func TestTwoNodesMemcached(t *testing.T) {
	c := startCluster(t, Memcached, 1, 1)
	viaA, viaB := loginMC(t, c.a, c.acct), loginMC(t, c.b, c.acct)
	var keys []string
	for i := range 200 {
		k := "mk" + strconv.Itoa(i)
		keys = append(keys, k)
		viaA.set(k, "v"+strconv.Itoa(i))
	}
	got := viaB.get(append(slices.Clone(keys), "missing")...)
	if len(got) != len(keys) {
		t.Fatalf("multi-key get via node b: %d values, want %d", len(got), len(keys))
	}
	for i, k := range keys {
		if got[k] != "v"+strconv.Itoa(i) {
			t.Fatalf("%s = %q", k, got[k])
		}
	}
	// Values come back in key order, as memcached returns them.
	viaB.write("get " + keys[5] + " " + keys[3] + " " + keys[150] + "\r\n")
	for _, want := range []string{"VALUE mk5 0 2", "v5", "VALUE mk3 0 2", "v3", "VALUE mk150 0 4", "v150", "END"} {
		if line := viaB.line(); line != want {
			t.Fatalf("split get: %q, want %q", line, want)
		}
	}
	// Requests that may get no reply (noreply, meta quiet) cross nodes framed by the sentinel.
	for _, k := range keys[:20] {
		viaA.write("set " + k + " 0 0 1 noreply\r\nz\r\nmg " + k + "-missing v q\r\n")
	}
	viaA.write("mn\r\n")
	if line := viaA.line(); line != "MN" {
		t.Fatalf("after quiet requests: %q, want only MN", line)
	}
	if got := viaB.get(keys[:20]...); len(got) != 20 || got[keys[13]] != "z" {
		t.Fatalf("noreply sets across nodes: %v", got)
	}
	viaB.write("delete " + keys[7] + "\r\n")
	if line := viaB.line(); line != "DELETED" {
		t.Fatalf("delete via node b: %q", line)
	}
	if v := viaA.get(keys[7]); len(v) != 0 {
		t.Fatalf("deleted key still read via node a: %v", v)
	}
}
