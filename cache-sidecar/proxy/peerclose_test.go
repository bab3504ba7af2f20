package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestRequestsLostWithPeerLinkMissOrFail: node b's sidecar restarts in place (Shutdown, then a
// new proxy on its addresses, within node a's peer retry window) while a client of node a
// pipelines reads and writes of b's keys: a GET (memcached get) of a key on b, an MGET (get)
// of a key on a and one on b, and a SET (set) of a new key. Shutdown stops reading the peer
// link, so the requests node a had written on it and b had not read yet get no reply, and b
// closes the link after the replies it owes. The reads among them are answered as misses (b's
// key of the MGET as a nil among a's value), the writes with the error naming node b: b may
// or may not have run them. Every other request is answered by b, before or after its
// restart. cacheqos_sidecar_peer_unreachable_total counts the lost requests; every key whose
// SET was answered OK reads back. Node b's partition is throttled until the restart, so that
// b reads the link slower than node a writes it: b has requests left unread whenever it stops.
func TestRequestsLostWithPeerLinkMissOrFail(t *testing.T) {
	type outcome uint8
	const (
		served outcome = iota
		missed
		failed
	)
	// round is the requests of round i, and the outcome each possible reply means.
	type round func(i int) (requests []string, answers []map[string]outcome)
	redis := func(args ...string) string { return string(resp.AppendCommandStrings(nil, args...)) }
	bulk := func(v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }
	mcValue := func(key, v string) string { return fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\n", key, len(v), v) }
	tests := []struct {
		name     string
		protocol Protocol
		rounds   func(onA, onB []string) round
		// readBack is the request reading key and its reply when the key holds "v-" and its name.
		readBack func(key string) (request, reply string)
	}{
		{
			name: "redis", protocol: Redis,
			rounds: func(onA, onB []string) round {
				return func(i int) ([]string, []map[string]outcome) {
					a, b, w := onA[i%len(onA)], onB[i%len(onB)], fmt.Sprintf("w:%d", i)
					return []string{redis("GET", b), redis("MGET", a, b), redis("SET", w, "v-"+w)},
						[]map[string]outcome{
							{bulk("v-" + b): served, "$-1\r\n": missed},
							{"*2\r\n" + bulk("v-"+a) + bulk("v-"+b): served, "*2\r\n" + bulk("v-"+a) + "$-1\r\n": missed},
							{"+OK\r\n": served, "-ERR cacheqos: node node-b: connection closed\r\n": failed},
						}
				}
			},
			readBack: func(key string) (string, string) { return redis("GET", key), bulk("v-" + key) },
		},
		{
			name: "memcached", protocol: Memcached,
			rounds: func(onA, onB []string) round {
				return func(i int) ([]string, []map[string]outcome) {
					a, b, w := onA[i%len(onA)], onB[i%len(onB)], fmt.Sprintf("w:%d", i)
					return []string{"get " + b + "\r\n", "get " + a + " " + b + "\r\n", fmt.Sprintf("set %s 0 0 %d\r\nv-%[1]s\r\n", w, len("v-"+w))},
						[]map[string]outcome{
							{mcValue(b, "v-"+b) + "END\r\n": served, "END\r\n": missed},
							{mcValue(a, "v-"+a) + mcValue(b, "v-"+b) + "END\r\n": served, mcValue(a, "v-"+a) + "END\r\n": missed},
							{"STORED\r\n": served, "SERVER_ERROR cacheqos: node node-b: connection closed\r\n": failed},
						}
				}
			},
			readBack: func(key string) (string, string) {
				return "get " + key + "\r\n", mcValue(key, "v-"+key) + "END\r\n"
			},
		},
	}
	// rounds of requests, b shut down once the client has read replies of shutdownAt of them,
	// after b's burst of tokens (opsPerSecond over the 100 ms burst window).
	const rounds, shutdownAt, opsPerSecond = 3000, 1000, 5000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Protocol: tt.protocol, PeerRetryWindow: 5 * time.Second}
			c := startClusterWith(t, opts, 1, 1)
			onA, onB := keysOn(t, c, tt.protocol, c.engineA, 4), keysOnB(t, c, tt.protocol, 4)
			throttled := c.tenant(c.engB)
			throttled.OpsPerSecond = opsPerSecond
			c.b.update(t, throttled)
			var send func(batch string)
			var read func() (string, error)
			if tt.protocol == Redis {
				client := loginRESP(t, c.a, c.acct)
				send, read = func(batch string) { client.write([]byte(batch)) }, client.readErr
			} else {
				client := loginMC(t, c.a, c.acct)
				send, read = client.write, client.responseErr
			}
			// replies reads n replies in the background, as they come (node b restarts
			// meanwhile), and closes marked once it has read mark of them.
			replies := func(n, mark int) (out <-chan string, failure <-chan error, marked <-chan struct{}) {
				all, failed, reached := make(chan string, n), make(chan error, 1), make(chan struct{})
				go func() {
					for i := range n {
						if i == mark {
							close(reached)
						}
						reply, err := read()
						if err != nil {
							failed <- err
							return
						}
						all <- reply
					}
				}()
				return all, failed, reached
			}
			next := func(out <-chan string, failure <-chan error) string {
				select {
				case reply := <-out:
					return reply
				case err := <-failure:
					t.Fatalf("read reply: %v", err)
					return ""
				}
			}

			round := tt.rounds(onA, onB)
			var batch strings.Builder
			for i := range rounds {
				requests, _ := round(i)
				for _, r := range requests {
					batch.WriteString(r)
				}
			}
			go send(batch.String())
			out, failure, marked := replies(3*rounds, 3*shutdownAt)
			select {
			case <-marked:
			case err := <-failure:
				t.Fatalf("read reply: %v", err)
			}
			if err := c.b.p.Shutdown(t.Context()); err != nil {
				t.Fatalf("Shutdown of node b: %v", err)
			}
			c.b = startNodeOn(t, c.b.id, opts, listenOn(t, c.b.addr), listenOn(t, c.b.peerAddr))
			c.setWeights(t, c.weightA, c.weightB)
			counts := map[outcome]int{}
			var stored []string
			for i := range rounds {
				requests, answers := round(i)
				for n, request := range requests {
					got := next(out, failure)
					o, ok := answers[n][got]
					if !ok {
						t.Fatalf("round %d, %q: %q, want a value, a miss or for a write the error naming node b", i, request, got)
					}
					counts[o]++
					if n == 2 && o == served {
						stored = append(stored, fmt.Sprintf("w:%d", i))
					}
				}
			}
			t.Logf("%d requests: %d served, %d lost reads answered as misses, %d lost writes failed",
				3*rounds, counts[served], counts[missed], counts[failed])
			if counts[missed] == 0 || counts[failed] == 0 {
				t.Fatalf("node b's shutdown lost %d reads and %d writes, want some of each: the test did not show the race", counts[missed], counts[failed])
			}

			series := tenantSeries(scrape(t, c.a), c.acct.id)
			for o, outcome := range map[outcome]string{missed: "miss", failed: "error"} {
				name := "cacheqos_sidecar_peer_unreachable_total{outcome=" + outcome + ",peer=node-b}"
				if series[name] != float64(counts[o]) {
					t.Errorf("%s = %v, want the %d requests answered so", name, series[name], counts[o])
				}
			}
			batch.Reset()
			for _, key := range stored {
				request, _ := tt.readBack(key)
				batch.WriteString(request)
			}
			go send(batch.String())
			out, failure, _ = replies(len(stored), 0)
			for _, key := range stored {
				if _, want := tt.readBack(key); next(out, failure) != want {
					t.Fatalf("%s, whose write was answered OK, does not read back as %q", key, want)
				}
			}
		})
	}
}
