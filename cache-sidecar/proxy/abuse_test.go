package proxy

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestClientsThatNeverReadStayBounded is the abuse suite for reply memory (issue 18): clients of
// one tenant pipeline many requests for a large value and never read, against real engines,
// while another tenant on the same sidecar keeps working. Each probe checks that the reply
// bytes the sidecar holds (its exported gauge) stay within the documented bounds (values over
// streamChunk: one chunk per connection; smaller ones: Options.MaxConnectionReplyBytes per
// connection plus the reply read last, Options.MaxReplyBytesInFlight for the sidecar plus one
// reply per connection), that the heap's
// peak grows by at most four times what the bounds let it hold plus a reply per link (the link
// reader's buffer, and the garbage collector's slack: GOGC=100 lets the heap reach twice its
// live size, and replies read and dropped are garbage until it runs) plus 16 MiB, that the other tenant is served
// throughout (its p99 is logged), and that the heap returns within 20% of its earlier size once
// the clients are gone.
func TestClientsThatNeverReadStayBounded(t *testing.T) {
	cases := []struct {
		name     string
		proto    Protocol
		opts     Options
		valueLen int
		conns    int
		requests int // pipelined per connection, one read of the large value each
	}{
		// Values over streamChunk are streamed: one chunk per link is held.
		{name: "redis 100 GET of 2 MiB from 2 clients", proto: Redis, valueLen: 2 << 20, conns: 2, requests: 100},
		{name: "memcached 100 get of 1 MB from 3 clients", proto: Memcached, valueLen: 1000 * 1000, conns: 3, requests: 100},
		{
			name: "memcached 100 get of 1 MB from 4 clients on 4 links", proto: Memcached,
			opts:     Options{EngineLinks: 4},
			valueLen: 1000 * 1000, conns: 4, requests: 100,
		},
		// Smaller values are read whole: the reply bounds hold them.
		{name: "redis 400 GET of 60 KB from 2 clients", proto: Redis, valueLen: 60 * 1000, conns: 2, requests: 400},
		{name: "memcached 400 get of 60 KB from 3 clients", proto: Memcached, valueLen: 60 * 1000, conns: 3, requests: 400},
		{
			name: "memcached 400 get of 60 KB from 4 clients over an 8 MiB sidecar bound", proto: Memcached,
			// Four links, one per client, so that the clients do not wait behind each other.
			opts:     Options{MaxConnectionReplyBytes: 4 << 20, MaxReplyBytesInFlight: 8 << 20, EngineLinks: 4},
			valueLen: 60 * 1000, conns: 4, requests: 400,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			abuser, bystander := newAccount(t, "team-a/abuser"), newAccount(t, "team-b/bystander")
			opts := tc.opts
			opts.Protocol = tc.proto
			n := startNode(t, "node-a", opts)
			n.update(t,
				Tenant{ID: abuser.id, CredentialHash: abuser.hash, LocalEngine: startEngine(t, tc.proto), Routes: []Route{n.route(1)}},
				Tenant{ID: bystander.id, CredentialHash: bystander.hash, LocalEngine: startEngine(t, tc.proto), Routes: []Route{n.route(1)}})
			probe := newReadProbe(t, n, tc.proto, abuser, bystander, tc.valueLen)
			request := bytes.Repeat(probe.request, tc.requests)
			connBound, sidecarBound := n.p.opts.MaxConnectionReplyBytes, n.p.opts.MaxReplyBytesInFlight
			replyLen := int64(tc.valueLen + 64)
			holdBound := min(int64(tc.conns)*(connBound+replyLen), sidecarBound+int64(tc.conns)*replyLen)
			// Clients sharing an engine link get their replies in order: the link waits at the
			// first client's bound, and the others wait behind it.
			links := int64(min(tc.conns, n.p.opts.EngineLinks))
			reached := min(links*connBound, sidecarBound)
			if streamed := tc.valueLen >= streamChunk; streamed {
				// A link streaming to a client that does not read holds the chunk it writes
				// (and the other tenant's small replies pass through the gauge too).
				replyLen = streamChunk + maxStreamLine
				holdBound, reached = int64(tc.conns)*replyLen+1<<10, links*streamChunk
			}

			before := settledHeap()
			peak := sampleHeapPeak()
			clients := make([]net.Conn, tc.conns)
			for i := range clients {
				clients[i] = probe.dial()
				clients[i].SetWriteDeadline(time.Now().Add(testIOTimeout))
				if _, err := clients[i].Write(request); err != nil {
					t.Fatal(err)
				}
			}
			held := func() int64 { return n.p.stats.replyBytes.Load() }
			waitFor(t, "the clients to reach their bounds of replies", func() bool { return held() >= reached })
			var latencies []time.Duration
			var maxHeld int64
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				start := time.Now()
				probe.bystanderOp()
				latencies = append(latencies, time.Since(start))
				maxHeld = max(maxHeld, held())
			}
			gauge := scrape(t, n)["cacheqos_sidecar_reply_bytes_in_flight"].GetMetric()[0].GetGauge().GetValue()
			closedAt := time.Now()
			for _, c := range clients {
				c.Close()
			}
			waitFor(t, "the engine's replies for the closed clients to be read", func() bool {
				return held() == 0 && linksIdle(n.p, abuser.id)
			})
			drained := time.Since(closedAt)
			peakHeap := peak()
			after := settledHeap()

			slices.Sort(latencies)
			p99 := latencies[len(latencies)*99/100]
			t.Logf("held %.1f MiB at most (bound %.1f MiB, gauge %.1f MiB); heap %.1f MiB before, peak %.1f MiB, %.1f MiB after; other tenant: %d requests in 1s, p99 %v; unread replies drained in %v",
				mib(uint64(maxHeld)), mib(uint64(holdBound)), gauge/(1<<20), mib(before), mib(peakHeap), mib(after), len(latencies), p99, drained.Round(time.Millisecond))
			if maxHeld > holdBound {
				t.Errorf("the sidecar held %d reply bytes, bound %d", maxHeld, holdBound)
			}
			if gauge <= 0 || int64(gauge) > holdBound {
				t.Errorf("cacheqos_sidecar_reply_bytes_in_flight %v while the clients did not read, want (0, %d]", gauge, holdBound)
			}
			// The heap counts garbage the collector has not reached yet: 4x what is held let a
			// loaded machine peak over the bound (53.7 MiB against 51.8) while the held bytes
			// stayed within theirs.
			if heapBound := before + uint64(5*(holdBound+links*replyLen)) + 16<<20; peakHeap > heapBound {
				t.Errorf("heap peaked at %.1f MiB, bound %.1f MiB", mib(peakHeap), mib(heapBound))
			}
			if len(latencies) < 20 || p99 > 500*time.Millisecond {
				t.Errorf("the other tenant got %d replies in 1s, p99 %v: want at least 20 within 500ms", len(latencies), p99)
			}
			checkHeapReturned(t, before, after)
		})
	}
}

// readProbe is one protocol's side of the abuse suite: the large value stored for the abusing
// tenant, a request that reads it, and the other tenant's client.
type readProbe struct {
	request     []byte
	dial        func() net.Conn // an authenticated connection of the abusing tenant
	bystanderOp func()          // one small read by the other tenant, checked
}

func newReadProbe(t *testing.T, n *testNode, proto Protocol, abuser, bystander account, valueLen int) readProbe {
	value := strings.Repeat("v", valueLen)
	if proto == Redis {
		if got := loginRESP(t, n, abuser).do("SET", "big", value); got != "+OK\r\n" {
			t.Fatalf("SET big: %q", got)
		}
		b := loginRESP(t, n, bystander)
		if got := b.do("SET", "small", "s"); got != "+OK\r\n" {
			t.Fatalf("SET small: %q", got)
		}
		return readProbe{
			request: resp.AppendCommandStrings(nil, "GET", "big"),
			dial:    func() net.Conn { return loginRESP(t, n, abuser).nc },
			bystanderOp: func() {
				if got := b.do("GET", "small"); got != "$1\r\ns\r\n" {
					t.Fatalf("the other tenant's GET: %q", got)
				}
			},
		}
	}
	loginMC(t, n, abuser).set("big", value)
	b := loginMC(t, n, bystander)
	b.set("small", "s")
	return readProbe{
		request: []byte("get big\r\n"),
		dial:    func() net.Conn { return loginMC(t, n, abuser).nc },
		bystanderOp: func() {
			if got := b.get("small"); got["small"] != "s" {
				t.Fatalf("the other tenant's get: %v", got)
			}
		},
	}
}

// linksIdle reports whether every link of a tenant owes no reply.
func linksIdle(p *Proxy, tenant string) bool {
	s := p.links
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, slot := range s.slots {
		if key.tenant != tenant {
			continue
		}
		slot.mu.Lock()
		for _, l := range slot.links {
			if l == nil {
				continue
			}
			l.mu.Lock()
			due := l.due.len()
			l.mu.Unlock()
			if due > 0 {
				slot.mu.Unlock()
				return false
			}
		}
		slot.mu.Unlock()
	}
	return true
}

// TestConnectionMemoryBudget opens connections of one tenant that each read and write a value
// just under the streaming threshold (the largest a connection's buffers keep between
// requests) and stay open, against real engines, and checks that each costs the sidecar at
// most ConnectionMemoryBudget of heap and goroutine stacks.
func TestConnectionMemoryBudget(t *testing.T) {
	const conns = 300
	value := strings.Repeat("v", streamChunk-1<<10)
	for _, proto := range []Protocol{Redis, Memcached} {
		t.Run(string(proto), func(t *testing.T) {
			acct := newAccount(t, "team-a/app")
			n, _ := singleNode(t, proto, acct, Options{})
			use := func() io.Closer {
				if proto == Redis {
					c := loginRESP(t, n, acct)
					if got := c.do("SET", "v", value); got != "+OK\r\n" {
						t.Fatalf("SET: %q", got)
					}
					if got := c.do("GET", "v"); len(got) < len(value) {
						t.Fatalf("GET: %d bytes", len(got))
					}
					return c.nc
				}
				c := loginMC(t, n, acct)
				c.set("v", value)
				if got := c.get("v"); got["v"] != value {
					t.Fatal("get: wrong value")
				}
				return c.nc
			}
			use().Close() // the links and pools the connections share
			before := settledMemory()
			open := make([]io.Closer, conns)
			for i := range open {
				open[i] = use()
			}
			after := settledMemory()
			perConn := (int64(after) - int64(before)) / conns
			t.Logf("%d connections: heap and stacks %.1f MiB before, %.1f MiB after: %d KiB per connection (budget %d KiB)",
				conns, mib(before), mib(after), perConn>>10, ConnectionMemoryBudget>>10)
			if perConn > ConnectionMemoryBudget {
				t.Errorf("a connection costs %d bytes, budget %d", perConn, ConnectionMemoryBudget)
			}
			for _, c := range open {
				c.Close()
			}
		})
	}
}

// settledMemory is the heap and goroutine stacks in use once garbage is collected.
func settledMemory() uint64 {
	settledHeap()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
