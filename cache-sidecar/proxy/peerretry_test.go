package proxy

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestForwardingWaitsForRestartingPeer: node b's sidecar shuts down as on SIGTERM (Shutdown)
// while its engine keeps its data, as a sidecar restarting in place does, and a client of
// node a reads a key that b holds. Within Options.PeerRetryWindow node a keeps redialing b and
// holds the request: when b listens again on its addresses the client gets the value, late
// by about the outage. When b stays down, the client gets a miss once the window is over
// (see TestUnreachablePeerReadsMiss; peer failover is off here, which would route b's keys to
// a from then on), and the writes right after it fail at once with the
// dial's error. When b's peer address takes connections and never answers (a fake for a host
// that does not answer, which loopback cannot be), the window still ends the wait, though the
// dial timeout (2 s) is longer; after it, the request that redials b waits for its dial while
// the others fail at once.
func TestForwardingWaitsForRestartingPeer(t *testing.T) {
	tests := []struct {
		name    string
		window  time.Duration
		down    time.Duration // how long b is down; 0: it stays down
		silent  bool          // b's peer address takes connections and never answers
		failure string        // what the error says once the window is over
	}{
		{name: "peer back within the window", window: 3 * time.Second, down: 800 * time.Millisecond},
		{name: "peer down beyond the window", window: time.Second, failure: "connection refused"},
		{name: "peer silent beyond the window", window: time.Second, silent: true, failure: "i/o timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Protocol: Redis, PeerRetryWindow: tt.window, DisablePeerFailover: true}
			c := startClusterWith(t, opts, 1, 1)
			viaA := loginRESP(t, c.a, c.acct)
			key := keysOnB(t, c, Redis, 1)[0]

			if err := c.b.p.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The request below is to find no link open to b, as after a restart: one sent on
			// the link b closes under it is answered at once, as a miss
			// (TestRequestsLostWithPeerLinkMissOrFail).
			awaitNoPeerLink(t, c.a.p)
			if tt.silent {
				silent := listenOn(t, c.b.peerAddr) // never accepted: the handshake gets no answer
				t.Cleanup(func() { silent.Close() })
			}
			sent := time.Now()
			viaA.send("GET", key)
			if tt.down > 0 {
				time.Sleep(tt.down)
				b := startNodeOn(t, c.b.id, opts, listenOn(t, c.b.addr), listenOn(t, c.b.peerAddr))
				c.b = b
				c.setWeights(t, c.weightA, c.weightB)
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
			if got != "$-1\r\n" {
				t.Fatalf("GET %s with node b down: %q, want a miss", key, got)
			}
			if took < tt.window || took > tt.window+time.Second {
				t.Errorf("GET %s answered after %v, want between the window %v and %v", key, took, tt.window, tt.window+time.Second)
			}
			sent = time.Now()
			if got := viaA.do("SET", key, "lost"); !strings.HasPrefix(got, "-ERR cacheqos: node node-b: ") || !strings.Contains(got, tt.failure) {
				t.Errorf("SET %s after the window: %q, want an error naming node-b and %q", key, got, tt.failure)
			}
			if took := time.Since(sent); took > dialRetryDelay/2 {
				t.Errorf("SET %s after the window took %v, want an answer at once", key, took)
			}
			if !tt.silent {
				return
			}
			time.Sleep(dialRetryDelay)
			probing := time.Now()
			viaA.send("SET", key, "lost") // redials b, for up to the dial timeout
			time.Sleep(100 * time.Millisecond)
			sent = time.Now()
			if got := loginRESP(t, c.a, c.acct).do("SET", key, "lost"); !strings.Contains(got, tt.failure) {
				t.Errorf("SET %s on another connection while b is redialed: %q, want %q", key, got, tt.failure)
			}
			if took := time.Since(sent); took > dialRetryDelay/2 {
				t.Errorf("SET %s on another connection while b is redialed took %v, want an answer at once", key, took)
			}
			got = viaA.read()
			t.Logf("the SET that redialed b after the window: %q after %v", got, time.Since(probing).Round(time.Millisecond))
			if !strings.Contains(got, tt.failure) {
				t.Errorf("SET %s that redialed b: %q, want %q", key, got, tt.failure)
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

// TestHeldRequestsFollowNewRoutes: node b's sidecar stops, announcing its restart (Shutdown),
// and does not come back: its peer address refuses connections, or takes them and never
// answers (a fake for a host that does not answer: on loopback no connection attempt goes
// unanswered), while clients of node a read and write keys b held. Node a holds their
// requests within its peer retry window (10 s here), one dialing b and the other waiting for
// that dial. Then node a gets a plan without b, as after a node loss: Update returns at once,
// and the held requests are routed under the new routes right away: the read of a key b held
// is a miss answered by a's engine, the write is stored there.
func TestHeldRequestsFollowNewRoutes(t *testing.T) {
	tests := []struct {
		name     string
		protocol Protocol
		silent   bool
		get, set func(key string) heldRequest
	}{
		{name: "redis, peer refuses connections", protocol: Redis, get: redisGet, set: redisSet},
		{name: "redis, peer never answers", protocol: Redis, silent: true, get: redisGet, set: redisSet},
		{name: "memcached, peer refuses connections", protocol: Memcached, get: memcacheGet, set: memcacheSet},
	}
	// promptly bounds Update and the answers after it, with a margin for a loaded machine
	// (the window is 10 s, the dial timeout 2 s).
	const promptly = 200 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startClusterWith(t, Options{Protocol: tt.protocol, PeerRetryWindow: 10 * time.Second}, 1, 1)
			keys := keysOnB(t, c, tt.protocol, 2)
			if err := c.b.p.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			if tt.silent {
				// Never accepted: the kernel completes the connections, the handshake gets no answer.
				silent := listenOn(t, c.b.peerAddr)
				t.Cleanup(func() { silent.Close() })
			}
			awaitNoPeerLink(t, c.a.p)
			get, set := tt.get(keys[0]), tt.set(keys[1])
			gotGet := sendOnNewConn(t, c.a, c.acct, tt.protocol, get)
			time.Sleep(100 * time.Millisecond) // the read dials b: the write waits for that dial
			gotSet := sendOnNewConn(t, c.a, c.acct, tt.protocol, set)
			time.Sleep(400 * time.Millisecond)
			select {
			case a := <-gotGet:
				t.Fatalf("%q answered before the update: %q %v", get.request, a.line, a.err)
			case a := <-gotSet:
				t.Fatalf("%q answered before the update: %q %v", set.request, a.line, a.err)
			default:
			}

			updated := time.Now()
			c.a.update(t, Tenant{ID: c.acct.id, CredentialHash: c.acct.hash, LocalEngine: c.engineA, Routes: []Route{c.a.route(1)}})
			took := time.Since(updated)
			for _, held := range []struct {
				r  heldRequest
				ch chan heldAnswer
			}{{get, gotGet}, {set, gotSet}} {
				a := <-held.ch
				after := a.at.Sub(updated)
				t.Logf("%q answered %q %v after the update", held.r.request, a.line, after.Round(time.Microsecond))
				if a.err != nil || a.line != held.r.answer || after > promptly {
					t.Errorf("%q: %q (%v) %v after the update, want %q within %v", held.r.request, a.line, a.err, after, held.r.answer, promptly)
				}
			}
			t.Logf("Update took %v", took.Round(time.Microsecond))
			if took > promptly {
				t.Errorf("Update took %v while requests waited for node b, want at most %v", took, promptly)
			}
			if !engineHolds(t, tt.protocol, c.engineA, keys[1]) {
				t.Errorf("node a's engine does not hold %s, written after the update", keys[1])
			}
		})
	}
}

// heldRequest is a request's wire bytes and the first line of the answer it should get.
type heldRequest struct{ request, answer string }

// heldAnswer is the first line of a request's answer, or the error reading it, and when it came.
type heldAnswer struct {
	line string
	err  error
	at   time.Time
}

// sendOnNewConn sends a request on a new connection to n logged in as acct and returns where
// its answer's first line will come.
func sendOnNewConn(t *testing.T, n *testNode, acct account, proto Protocol, r heldRequest) chan heldAnswer {
	t.Helper()
	var nc net.Conn
	var br *bufio.Reader
	if proto == Redis {
		client := loginRESP(t, n, acct)
		nc, br = client.nc, client.br
	} else {
		client := loginMC(t, n, acct)
		nc, br = client.nc, client.br
	}
	if _, err := io.WriteString(nc, r.request); err != nil {
		t.Fatal(err)
	}
	ch := make(chan heldAnswer, 1)
	go func() {
		nc.SetReadDeadline(time.Now().Add(testIOTimeout))
		line, err := protocol.AppendLine(br, nil, 1024)
		ch <- heldAnswer{string(protocol.TrimEOL(line)), err, time.Now()}
	}()
	return ch
}

func redisGet(key string) heldRequest {
	return heldRequest{string(resp.AppendCommandStrings(nil, "GET", key)), "$-1"}
}

func redisSet(key string) heldRequest {
	return heldRequest{string(resp.AppendCommandStrings(nil, "SET", key, "after")), "+OK"}
}

func memcacheGet(key string) heldRequest { return heldRequest{"get " + key + "\r\n", "END"} }

func memcacheSet(key string) heldRequest {
	return heldRequest{"set " + key + " 0 0 5\r\nafter\r\n", "STORED"}
}

// keysOnB writes keys through node a until n of them landed on node b's engine, and returns
// those, each holding "v-" and its name.
func keysOnB(t *testing.T, c *cluster, proto Protocol, n int) []string {
	t.Helper()
	return keysOn(t, c, proto, c.engB, n)
}

// keysOn is keysOnB for the engine at socket.
func keysOn(t *testing.T, c *cluster, proto Protocol, socket string, n int) []string {
	t.Helper()
	var set func(key string)
	if proto == Redis {
		client := loginRESP(t, c.a, c.acct)
		set = func(key string) {
			if got := client.do("SET", key, "v-"+key); got != "+OK\r\n" {
				t.Fatalf("SET %s: %q", key, got)
			}
		}
	} else {
		client := loginMC(t, c.a, c.acct)
		set = func(key string) { client.set(key, "v-"+key) }
	}
	var onB []string
	for i := 0; i < 200 && len(onB) < n; i++ {
		key := "key:" + strconv.Itoa(i)
		set(key)
		if engineHolds(t, proto, socket, key) {
			onB = append(onB, key)
		}
	}
	if len(onB) < n {
		t.Fatalf("%d of 200 keys landed on %s, want %d", len(onB), socket, n)
	}
	return onB
}

// engineHolds asks an engine directly whether it holds key.
func engineHolds(t *testing.T, proto Protocol, socket, key string) bool {
	t.Helper()
	if proto == Redis {
		return enginesHold(t, []string{socket}, []string{key})[0][0]
	}
	_, ok := dialMC(t, "unix", socket).get(key)[key]
	return ok
}

// TestPeerLinkReadsRestartAnnouncement: node a forwards every key of a tenant to node b, here a
// fake peer that takes the link, reads the three requests a client pipelined (two reads and a
// write), sends the replies of the case and then, or instead, the announcement of a restart
// (peerRestarting), and reads on until node a closes the link. A reply whose value is the
// announcement's text is a reply like any other; the announcement after the replies, also
// with requests still due, makes node a note that node b is restarting and close the link:
// the reads b did not answer are misses, the write fails with "connection closed". A link that
// just closes (b killed) notes nothing.
func TestPeerLinkReadsRestartAnnouncement(t *testing.T) {
	const marker = "@CQPEER RESTARTING" // a value that reads as the announcement's text
	redis := func(args ...string) string { return string(resp.AppendCommandStrings(nil, args...)) }
	redisValue := "$18\r\n" + marker + "\r\n"
	mcValue := "VALUE k 0 18\r\n" + marker + "\r\nEND\r\n"
	const redisClosed, mcClosed = "-ERR cacheqos: node node-b: connection closed\r\n", "SERVER_ERROR cacheqos: node node-b: connection closed\r\n"
	tests := []struct {
		name     string
		protocol Protocol
		requests []string
		replies  string   // what the peer sends after reading the requests
		announce bool     // and then the announcement of a restart
		want     []string // the client's replies
	}{
		{
			name: "redis, announced with requests due", protocol: Redis,
			requests: []string{redis("GET", "k"), redis("GET", "k"), redis("SET", "k", "v")},
			replies:  redisValue, announce: true,
			want: []string{redisValue, "$-1\r\n", redisClosed},
		},
		{
			name: "redis, announced after every reply", protocol: Redis,
			requests: []string{redis("GET", "k"), redis("GET", "k"), redis("SET", "k", "v")},
			replies:  redisValue + redisValue + "+OK\r\n", announce: true,
			want: []string{redisValue, redisValue, "+OK\r\n"},
		},
		{
			name: "redis, closed without a word", protocol: Redis,
			requests: []string{redis("GET", "k"), redis("GET", "k"), redis("SET", "k", "v")},
			replies:  redisValue,
			want:     []string{redisValue, "$-1\r\n", redisClosed},
		},
		{
			name: "memcached, announced with requests due", protocol: Memcached,
			requests: []string{"get k\r\n", "get k\r\n", "set k 0 0 1\r\nv\r\n"},
			replies:  mcValue, announce: true,
			want: []string{mcValue, "END\r\n", mcClosed},
		},
		{
			name: "memcached, announced after every reply", protocol: Memcached,
			requests: []string{"get k\r\n", "get k\r\n", "set k 0 0 1\r\nv\r\n"},
			replies:  mcValue + mcValue + "STORED\r\n", announce: true,
			want: []string{mcValue, mcValue, "STORED\r\n"},
		},
		{
			name: "memcached, closed without a word", protocol: Memcached,
			requests: []string{"get k\r\n", "get k\r\n", "set k 0 0 1\r\nv\r\n"},
			replies:  mcValue,
			want:     []string{mcValue, "END\r\n", mcClosed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acct := newAccount(t, "team-a/cache")
			ln := listen(t)
			peerDone := make(chan error, 1)
			go func() { peerDone <- fakePeer(ln, tt.protocol, len(tt.requests), tt.replies, tt.announce) }()
			a := startNode(t, "node-a", Options{Protocol: tt.protocol})
			a.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash,
				Routes: []Route{{Node: "node-b", Weight: 1, PeerAddress: ln.Addr().String()}}})
			// read reads a reply as long as want.
			var read func(want string) string
			if tt.protocol == Redis {
				client := loginRESP(t, a, acct)
				client.write([]byte(strings.Join(tt.requests, "")))
				read = func(string) string { return client.read() }
			} else {
				client := loginMC(t, a, acct)
				client.write(strings.Join(tt.requests, ""))
				read = func(want string) string {
					client.nc.SetReadDeadline(time.Now().Add(testIOTimeout))
					got := make([]byte, len(want))
					n, _ := io.ReadFull(client.br, got)
					return string(got[:n])
				}
			}
			for i, want := range tt.want {
				if got := read(want); got != want {
					t.Errorf("reply %d: %q, want %q", i, got, want)
				}
			}
			if err := <-peerDone; err != nil {
				t.Fatalf("the fake peer: %v", err)
			}
			if _, noted := a.p.links.restarting("node-b"); noted != tt.announce {
				t.Errorf("node a noted a restart of node b: %v, want %v", noted, tt.announce)
			}
		})
	}
}

// fakePeer serves one peer link on ln as a peer sidecar would until it stops: it answers the
// handshake, reads n requests and writes replies. Then it closes the link at once, or, if it
// announces a restart, sends the announcement and closes the link once the sender has. It
// stops listening on its way out.
func fakePeer(ln net.Listener, proto Protocol, n int, replies string, announce bool) error {
	defer ln.Close()
	nc, err := ln.Accept()
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testIOTimeout))
	br := bufio.NewReader(nc)
	if _, err := protocol.AppendLine(br, nil, maxPeerLineLen); err != nil {
		return err
	}
	if _, err := io.WriteString(nc, peerOK+"\r\n"); err != nil {
		return err
	}
	commands, requests := resp.NewCommandReader(br, resp.Limits{}), memcache.NewRequestReader(br, memcache.RequestLimits{})
	for range n {
		if proto == Redis {
			_, err = commands.ReadCommand()
		} else {
			_, err = requests.ReadRequest()
		}
		if err != nil {
			return err
		}
	}
	if _, err := io.WriteString(nc, replies); err != nil || !announce {
		return err
	}
	if _, err := io.WriteString(nc, peerRestarting); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, br)
	return err
}

// TestRestartWaitedForOnlyWhenAnnounced: node b's sidecar stops while clients of node a read
// and write keys b holds (a GET and a SET, each on a new connection, sent together). When b
// stops gracefully (Shutdown) it announces its restart, also to a node a that has no link open
// to it (a restarted just before: b's Shutdown dials it), and a waits for b: both requests are
// served once b listens again on its addresses, also when b comes back later than the peer
// retry window after its announcement (the window counts from the first dial refused after
// it; the announcement stands for restartGrace), and when a dial of b was refused, and
// answered, before the announcement came. When b is killed (Close), also after a restart it
// came back from, a does not wait: with peer failover off, the GET is a miss and the SET fails
// at once (with it on, b's keys go to a: TestUnreachablePeerRoutedAround).
// cacheqos_sidecar_peer_unreachable_total counts just the requests answered without b.
func TestRestartWaitedForOnlyWhenAnnounced(t *testing.T) {
	tests := []struct {
		name     string
		protocol Protocol
		window   time.Duration // node a's peer retry window (0: the default)
		// freshA: node a restarts before b stops, so it has no link to b and b has none from it.
		freshA bool
		// restartedBefore: b restarted once before (announced, back, reached by a).
		restartedBefore bool
		announce        bool // b stops with Shutdown, else with Close
		// announcedLate: b stops with Close, node a's dial is refused (a read answered as a
		// miss), and then the announcement comes, as it may when a dial comes before it.
		announcedLate bool
		quiet         time.Duration // from b's stop to the requests
		down          time.Duration // from b's stop to b listening again (announced restarts)
	}{
		{name: "redis, node a without a link to b", protocol: Redis, freshA: true, announce: true, down: 800 * time.Millisecond},
		{name: "memcached, node a without a link to b", protocol: Memcached, freshA: true, announce: true, down: 800 * time.Millisecond},
		{name: "redis, b back later than the window after its announcement", protocol: Redis, window: 2 * time.Second,
			announce: true, quiet: 3 * time.Second, down: 3800 * time.Millisecond},
		{name: "redis, a dial refused before the announcement came", protocol: Redis, announcedLate: true, down: 800 * time.Millisecond},
		{name: "redis, b killed", protocol: Redis},
		{name: "memcached, b killed", protocol: Memcached},
		{name: "redis, b killed after a restart it came back from", protocol: Redis, restartedBefore: true},
	}
	// atOnce bounds an answer that waits for nothing, with a margin for a loaded machine.
	const atOnce = 200 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Protocol: tt.protocol, PeerRetryWindow: tt.window, DisablePeerFailover: !tt.announce && !tt.announcedLate}
			c := startClusterWith(t, opts, 1, 1)
			keys := keysOnB(t, c, tt.protocol, 2)
			get, set := redisGet(keys[0]), redisSet(keys[1])
			if tt.protocol == Memcached {
				get, set = memcacheGet(keys[0]), memcacheSet(keys[1])
			}
			served := get
			served.answer = "$" + strconv.Itoa(len("v-"+keys[0]))
			if tt.protocol == Memcached {
				served.answer = "VALUE " + keys[0] + " 0 " + strconv.Itoa(len("v-"+keys[0]))
			}
			restart := func(n **testNode) {
				*n = startNodeOn(t, (*n).id, opts, listenOn(t, (*n).addr), listenOn(t, (*n).peerAddr))
				c.setWeights(t, c.weightA, c.weightB)
			}
			if tt.restartedBefore {
				if err := c.b.p.Shutdown(t.Context()); err != nil {
					t.Fatal(err)
				}
				restart(&c.b)
				if a := <-sendOnNewConn(t, c.a, c.acct, tt.protocol, served); a.line != served.answer {
					t.Fatalf("%q once b was back: %q %v, want %q", served.request, a.line, a.err, served.answer)
				}
			}
			if tt.freshA {
				if err := c.a.p.Close(); err != nil {
					t.Fatal(err)
				}
				restart(&c.a)
			}
			stopped := time.Now()
			stop := c.b.p.Close
			if tt.announce {
				stop = func() error { return c.b.p.Shutdown(t.Context()) }
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			awaitNoPeerLink(t, c.a.p)
			want := map[string]float64{}
			if tt.announcedLate {
				if a := <-sendOnNewConn(t, c.a, c.acct, tt.protocol, get); a.line != get.answer {
					t.Fatalf("%q with b stopped, not yet announced: %q %v, want %q", get.request, a.line, a.err, get.answer)
				}
				// With failover on, b is ejected at the refused dial, so the read went to a (a
				// miss there too), until the announcement readmits b.
				want["rerouted"] = 1
				announce := dialRESP(t, "tcp", c.a.peerAddr)
				announce.write(appendRestartHello(nil, testPeerToken, c.b.id))
				if line, err := announce.br.ReadString('\n'); line != peerOK+"\r\n" {
					t.Fatalf("the announcement: %q %v", line, err)
				}
			}
			time.Sleep(tt.quiet - time.Since(stopped))
			sent := time.Now()
			gotGet, gotSet := sendOnNewConn(t, c.a, c.acct, tt.protocol, get), sendOnNewConn(t, c.a, c.acct, tt.protocol, set)
			if tt.announce || tt.announcedLate {
				time.Sleep(tt.down - time.Since(stopped))
				restart(&c.b)
				back := time.Now()
				for _, r := range []struct {
					r  heldRequest
					ch chan heldAnswer
				}{{served, gotGet}, {set, gotSet}} {
					a := <-r.ch
					t.Logf("%q sent %v after b stopped: %q %v after b was back", r.r.request, sent.Sub(stopped).Round(time.Millisecond), a.line, a.at.Sub(back).Round(time.Millisecond))
					if a.err != nil || a.line != r.r.answer || a.at.Sub(back) > maxPeerRedial+time.Second {
						t.Errorf("%q: %q (%v) %v after b was back, want %q within %v", r.r.request, a.line, a.err, a.at.Sub(back), r.r.answer, maxPeerRedial+time.Second)
					}
				}
				if !engineHolds(t, tt.protocol, c.engB, keys[1]) {
					t.Errorf("node b's engine does not hold %s, written while b restarted", keys[1])
				}
			} else {
				want = map[string]float64{"miss": 1, "error": 1}
				for _, r := range []struct {
					r    heldRequest
					ch   chan heldAnswer
					want string
				}{{get, gotGet, get.answer}, {set, gotSet, "cacheqos: node node-b: "}} {
					a := <-r.ch
					t.Logf("%q with b killed: %q after %v", r.r.request, a.line, a.at.Sub(sent).Round(time.Microsecond))
					if a.err != nil || !strings.Contains(a.line, r.want) || a.at.Sub(sent) > atOnce {
						t.Errorf("%q with b killed: %q (%v) after %v, want %q within %v", r.r.request, a.line, a.err, a.at.Sub(sent), r.want, atOnce)
					}
				}
			}
			series := tenantSeries(scrape(t, c.a), c.acct.id)
			for _, outcome := range []string{"miss", "error", "rerouted"} {
				name := "cacheqos_sidecar_peer_unreachable_total{outcome=" + outcome + ",peer=node-b}"
				if series[name] != want[outcome] {
					t.Errorf("%s = %v, want %v", name, series[name], want[outcome])
				}
			}
		})
	}
}

// TestRestartAnnouncementNeedsAPeer: the announcement of a restart on the peer handshake
// (appendRestartHello) is noted only from a peer with the peer token, for a node this node's
// routes lead to; any other line of the kind is refused with an ERR line and the connection
// closes, and nothing is noted.
func TestRestartAnnouncementNeedsAPeer(t *testing.T) {
	tests := []struct {
		name, line string
		node       string // the node the line names
		want       string // the peer listener's answer
	}{
		{name: "the announcement", line: string(appendRestartHello(nil, testPeerToken, "node-b")), node: "node-b", want: "OK"},
		{name: "wrong token", line: string(appendRestartHello(nil, "guessed", "node-b")), node: "node-b", want: "ERR wrong peer token"},
		{name: "no token", line: "CQPEER 1 RESTARTING node-b\r\n", node: "node-b", want: "ERR wrong peer token"},
		{name: "a node no route leads to", line: string(appendRestartHello(nil, testPeerToken, "node-c")), node: "node-c",
			want: `ERR node "node-c" announced a restart, but no route of this node leads there`},
		{name: "this node", line: string(appendRestartHello(nil, testPeerToken, "node-a")), node: "node-a",
			want: `ERR node "node-a" announced a restart, but no route of this node leads there`},
		{name: "another version", line: "CQPEER 2 " + testPeerToken + " RESTARTING node-b\r\n", node: "node-b",
			want: `ERR unsupported peer protocol version "2", want 1`},
		{name: "a field more", line: "CQPEER 1 " + testPeerToken + " RESTARTING node-b now\r\n", node: "node-b",
			want: "ERR expected CQPEER <version> <token> <tenant> or CQPEER <version> <token> RESTARTING <node>"},
		{name: "the line a link reads", line: peerRestarting, node: "node-b",
			want: "ERR expected CQPEER <version> <token> <tenant> or CQPEER <version> <token> RESTARTING <node>"},
	}
	engine := startEngine(t, Redis)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acct := newAccount(t, "team-a/cache")
			a := startNode(t, "node-a", Options{Protocol: Redis})
			a.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine,
				Routes: []Route{a.route(1), {Node: "node-b", Weight: 1, PeerAddress: "127.0.0.1:1"}}})
			c := dialRESP(t, "tcp", a.peerAddr)
			c.write([]byte(tt.line))
			if line, err := c.br.ReadString('\n'); err != nil || line != tt.want+"\r\n" {
				t.Errorf("%q: %q (%v), want %q", tt.line, line, err, tt.want)
			}
			expectClosed(t, c.nc, c.br)
			if _, noted := a.p.links.restarting(tt.node); noted != (tt.want == "OK") {
				t.Errorf("%q: node a noted a restart of %s: %v, want %v", tt.line, tt.node, noted, tt.want == "OK")
			}
		})
	}
}

// TestRestartAnnouncementExpires: node b announced its restart and never came back (its pod
// deleted, its node lost after). Within restartGrace node a's requests for b's keys wait for
// it; once the announcement is older than that it is forgotten, and a answers them at once as
// for any unreachable node (peer failover off here: a GET as a miss).
func TestRestartAnnouncementExpires(t *testing.T) {
	c := startClusterWith(t, Options{Protocol: Redis, PeerRetryWindow: 10 * time.Second, DisablePeerFailover: true}, 1, 1)
	key := keysOnB(t, c, Redis, 1)[0]
	if err := c.b.p.Close(); err != nil {
		t.Fatal(err)
	}
	awaitNoPeerLink(t, c.a.p)
	announce := dialRESP(t, "tcp", c.a.peerAddr)
	announce.write(appendRestartHello(nil, testPeerToken, c.b.id))
	if line, err := announce.br.ReadString('\n'); line != peerOK+"\r\n" {
		t.Fatalf("the announcement: %q %v", line, err)
	}
	if _, ok := c.a.p.links.restarting(c.b.id); !ok {
		t.Fatalf("node a did not note b's announcement")
	}
	c.a.p.links.restartsMu.Lock()
	c.a.p.links.restarts[c.b.id] = time.Now().Add(-restartGrace)
	c.a.p.links.restartsMu.Unlock()
	client := loginRESP(t, c.a, c.acct)
	sent := time.Now()
	got, took := client.do("GET", key), time.Since(sent)
	if got != "$-1\r\n" || took > dialRetryDelay/2 {
		t.Errorf("GET of b's key %v after b's announcement: %q after %v, want a miss at once, not held for the 10 s window", restartGrace, got, took)
	}
	if _, ok := c.a.p.links.restarting(c.b.id); ok {
		t.Errorf("node a still holds b's announcement older than %v", restartGrace)
	}
}
