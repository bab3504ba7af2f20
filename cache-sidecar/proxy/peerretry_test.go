package proxy

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestForwardingWaitsForRestartingPeer: node b's sidecar shuts down as on SIGTERM (Shutdown)
// while its engine keeps its data, as a sidecar restarting in place does, and a client of
// node a reads a key that b holds. Within Options.PeerRetryWindow node a keeps redialing b and
// holds the request: when b listens again on its addresses the client gets the value, late
// by about the outage. When b stays down, the client gets the dial's error once the window
// is over, and the requests right after it fail at once.
func TestForwardingWaitsForRestartingPeer(t *testing.T) {
	tests := []struct {
		name   string
		window time.Duration
		down   time.Duration // how long b is down; 0: it stays down
	}{
		{name: "peer back within the window", window: 3 * time.Second, down: 800 * time.Millisecond},
		{name: "peer down beyond the window", window: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Protocol: Redis, PeerRetryWindow: tt.window}
			c := startClusterWith(t, opts, 1, 1)
			viaA := loginRESP(t, c.a, c.acct)
			key := keyOnB(t, c, viaA)

			if err := c.b.p.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The request below is to find no link open to b, as after a restart: one sent on
			// the link b closes under it fails with it (see docs/operations.md).
			awaitNoPeerLink(t, c.a.p)
			sent := time.Now()
			viaA.send("GET", key)
			if tt.down > 0 {
				time.Sleep(tt.down)
				b := startNodeOn(t, c.b.id, opts, listenOn(t, c.b.addr), listenOn(t, c.b.peerAddr))
				c.b = b
				c.setWeights(t, c.weightA, c.weigB)
			}
			got := viaA.read()
			took := time.Since(sent)
			t.Logf("GET %s via node a with node b down for %v (window %v): %q after %v", key, tt.down, tt.window, got, took.Round(time.Millisecond))
			if tt.down > 0 {
				if want := "$" + strconv.Itoa(len("v-"+key)) + "\r\nv-" + key + "\r\n"; got != want {
					t.Fatalf("GET %s while node b restarted: %q, want %q", key, got, want)
				}
				// b came back after tt.down: the request waited for it, and at most one redial
				// backoff (with a margin for a loaded machine) longer.
				if took < tt.down || took > tt.down+maxPeerRedial+time.Second {
					t.Errorf("GET %s answered after %v, want between %v and %v", key, took, tt.down, tt.down+maxPeerRedial+time.Second)
				}
				if got := viaA.do("SET", key, "after"); got != "+OK\r\n" {
					t.Errorf("SET %s after node b's restart: %q", key, got)
				}
				return
			}
			if !strings.HasPrefix(got, "-ERR cacheqos: node node-b: ") || !strings.Contains(got, "connection refused") {
				t.Fatalf("GET %s with node b down: %q, want an error naming node-b and the refused connection", key, got)
			}
			if took < tt.window || took > tt.window+time.Second {
				t.Errorf("GET %s failed after %v, want between the window %v and %v", key, took, tt.window, tt.window+time.Second)
			}
			sent = time.Now()
			if got := viaA.do("GET", key); !strings.Contains(got, "connection refused") {
				t.Errorf("GET %s again: %q, want the refused connection", key, got)
			}
			if took := time.Since(sent); took > dialRetryDelay/2 {
				t.Errorf("GET %s again took %v, want an answer at once once the window is over", key, took)
			}
		})
	}
}

// awaitNoPeerLink waits until p has no open link to a peer.
func awaitNoPeerLink(t *testing.T, p *Proxy) {
	t.Helper()
	for deadline := time.Now().Add(testIOTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !hasOpenPeerLink(p) {
			return
		}
	}
	t.Fatal("a link to a peer is still open")
}

func hasOpenPeerLink(p *Proxy) bool {
	p.links.mu.Lock()
	defer p.links.mu.Unlock()
	for key, slot := range p.links.slots {
		if !key.peer {
			continue
		}
		slot.mu.Lock()
		open := slices.ContainsFunc(slot.links, func(l *link) bool { return l != nil && l.usable() })
		slot.mu.Unlock()
		if open {
			return true
		}
	}
	return false
}

// keyOnB writes keys through c's client until one lands on node b's engine, and returns it.
func keyOnB(t *testing.T, c *cluster, client *respClient) string {
	t.Helper()
	for i := range 100 {
		key := "key:" + strconv.Itoa(i)
		if got := client.do("SET", key, "v-"+key); got != "+OK\r\n" {
			t.Fatalf("SET %s: %q", key, got)
		}
		if enginesHold(t, []string{c.engB}, []string{key})[0][0] {
			return key
		}
	}
	t.Fatal("none of 100 keys landed on node b")
	return ""
}
