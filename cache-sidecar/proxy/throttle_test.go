package proxy

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// partitionBytes reads a tenant's bytes in and out of its local partition.
func partitionBytes(n *testNode, id string) uint64 {
	t := n.p.lookupTenant([]byte(id))
	return t.stats.bytesIn.Load() + t.stats.bytesOut.Load()
}

// TestThrottleHoldsTenantToItsLimit loads a limited and an unlimited tenant at once: the
// limited one moves its limit's bytes per second within 10%, the other is not held back.
func TestThrottleHoldsTenantToItsLimit(t *testing.T) {
	const limit = 2e6 // bytes per second
	slow, fast := newAccount(t, "team-slow/cache"), newAccount(t, "team-fast/cache")
	n := startNode(t, "node-a", Options{Protocol: Redis, MaxValueBytes: 64 << 10})
	n.update(t,
		Tenant{ID: slow.id, CredentialHash: slow.hash, LocalEngine: startEngine(t, Redis), Routes: []Route{n.route(1)}, BytesPerSecond: limit},
		Tenant{ID: fast.id, CredentialHash: fast.hash, LocalEngine: startEngine(t, Redis), Routes: []Route{n.route(1)}},
	)
	value := strings.Repeat("v", 1024)
	const warmup, window = 500 * time.Millisecond, 2 * time.Second
	stop := time.Now().Add(warmup + window + 200*time.Millisecond)
	errs := make(map[string][]string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	load := func(acct account, batch int) {
		defer wg.Done()
		c := loginRESP(t, n, acct)
		var cmds []byte
		for i := range batch {
			cmds = resp.AppendCommandStrings(cmds, "SET", "k"+string(rune('a'+i%26)), value)
		}
		for time.Now().Before(stop) {
			c.write(cmds)
			for range batch {
				if reply, err := c.readErr(); err != nil || reply != "+OK\r\n" {
					mu.Lock()
					errs[acct.id] = append(errs[acct.id], reply)
					mu.Unlock()
					return
				}
			}
		}
	}
	wg.Add(2)
	go load(slow, 32)
	go load(fast, 1)
	time.Sleep(warmup)
	slow0, fast0, t0 := partitionBytes(n, slow.id), partitionBytes(n, fast.id), time.Now()
	time.Sleep(window)
	slow1, fast1, t1 := partitionBytes(n, slow.id), partitionBytes(n, fast.id), time.Now()
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("unexpected replies: %v", errs)
	}
	seconds := t1.Sub(t0).Seconds()
	slowRate, fastRate := float64(slow1-slow0)/seconds, float64(fast1-fast0)/seconds
	t.Logf("limited tenant: %.0f bytes/s (limit %.0f); unlimited tenant: %.0f bytes/s", slowRate, limit, fastRate)
	if math.Abs(slowRate-limit)/limit > 0.10 {
		t.Errorf("limited tenant moved %.0f bytes/s, want %.0f ± 10%%", slowRate, limit)
	}
	if fastRate < limit {
		t.Errorf("unlimited tenant moved only %.0f bytes/s, less than the other tenant's limit", fastRate)
	}
	if got := n.p.lookupTenant([]byte(fast.id)).limiter.Stats(); got.Throttled != 0 || got.Delayed != 0 {
		t.Errorf("unlimited tenant's limiter: %+v", got)
	}
	// Held back at its limit, the tenant's requests waited without being refused: they count as
	// throttled (the operator's Throttled condition reads this), not as refused.
	series := tenantSeries(scrape(t, n), slow.id)
	if series["cacheqos_sidecar_throttled_requests_total{}"] == 0 || series["cacheqos_sidecar_refused_requests_total{}"] != 0 {
		t.Errorf("limited tenant: throttled %v, refused %v; want some throttled and none refused",
			series["cacheqos_sidecar_throttled_requests_total{}"], series["cacheqos_sidecar_refused_requests_total{}"])
	}
}

// TestThrottleRefusesRequestsThatWouldWaitTooLong checks the explicit error once the wait
// bound is exceeded, for both protocols, and that the connection stays usable.
func TestThrottleRefusesRequestsThatWouldWaitTooLong(t *testing.T) {
	opts := Options{ThrottleMaxWait: 50 * time.Millisecond}
	t.Run("redis", func(t *testing.T) {
		acct := newAccount(t, "team-a/cache")
		engine := startEngine(t, Redis)
		opts.Protocol = Redis
		n := startNode(t, "node-a", opts)
		n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}, OpsPerSecond: 1})
		c := loginRESP(t, n, acct)
		replies := pipeline(c, [][]string{{"GET", "a"}, {"GET", "b"}, {"PING"}})
		want := []string{"$-1\r\n", "-ERR cacheqos: throttled: tenant over its operations limit\r\n", "+PONG\r\n"}
		for i := range want {
			if replies[i] != want[i] {
				t.Errorf("reply %d: %q, want %q", i, replies[i], want[i])
			}
		}
		if got := n.p.lookupTenant([]byte(acct.id)).limiter.Stats().Throttled; got != 1 {
			t.Errorf("throttled count %d, want 1", got)
		}
	})
	t.Run("memcached", func(t *testing.T) {
		acct := newAccount(t, "team-a/cache")
		engine := startEngine(t, Memcached)
		opts.Protocol = Memcached
		n := startNode(t, "node-a", opts)
		n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}, OpsPerSecond: 1})
		c := loginMC(t, n, acct)
		c.write("get a\r\nget b\r\nmn\r\n")
		for _, want := range []string{"END", "SERVER_ERROR throttled: tenant over its operations limit", "MN"} {
			if got := c.line(); got != want {
				t.Errorf("%q, want %q", got, want)
			}
		}
	})
}
