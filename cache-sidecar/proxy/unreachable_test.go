package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestUnreachablePeerReadsMiss: node b's sidecar is gone without announcing a restart (Close,
// as when it is killed or its node lost: its peer address refuses connections) while its
// engine keeps its data, and a client of node a, with peer failover off (as for a tenant with
// no other node), reads and writes keys that b owns. Node a does
// not wait for b: the first plain read is answered at once as a miss, well within the peer
// retry window (the default 5 s). Then too, plain reads of b's keys (redis GET and MGET, b's
// parts of an MGET across nodes, also beside a value of a's streamed to the client; memcached
// get, gets and mg that only reads) are answered at once as misses, and nothing is written
// anywhere; writes and reads that write (SET, GETDEL, DEL across nodes; set, mg that creates
// the item) get the error naming node b at once. cacheqos_sidecar_peer_unreachable_total
// counts both. When b is back, its keys are read from it again.
func TestUnreachablePeerReadsMiss(t *testing.T) {
	type step struct {
		request string
		want    string // the exact reply; for a failure its start, naming node b
		failure bool
	}
	redis := func(args ...string) string { return string(resp.AppendCommandStrings(nil, args...)) }
	bulk := func(v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }
	const redisFailure, mcFailure = "-ERR cacheqos: node node-b: ", "SERVER_ERROR cacheqos: node node-b: "
	// big is the value of onA[2]: beyond a link's read buffer, a's part of a read across both
	// nodes is streamed (splitstream.go).
	big := "v-" + strings.Repeat("x", 100<<10)
	tests := []struct {
		name     string
		protocol Protocol
		// held is a plain read of b's key and its answer, a miss; back the same read's
		// answer once b is back (b's keys hold "v-" and their name).
		held  func(onA, onB []string) (request, miss, back string)
		steps func(onA, onB []string) []step
	}{
		{
			name: "redis", protocol: Redis,
			held: func(_, onB []string) (string, string, string) {
				return redis("GET", onB[0]), "$-1\r\n", bulk("v-" + onB[0])
			},
			steps: func(onA, onB []string) []step {
				return []step{
					{request: redis("GET", onB[1]), want: "$-1\r\n"},
					{request: redis("MGET", onB[0], onB[1]), want: "*2\r\n$-1\r\n$-1\r\n"},
					{request: redis("MGET", onA[0], onB[0], onA[1]), want: "*3\r\n" + bulk("v-"+onA[0]) + "$-1\r\n" + bulk("v-"+onA[1])},
					{request: redis("MGET", onA[2], onB[0]), want: "*2\r\n" + bulk(big) + "$-1\r\n"},
					{request: redis("SET", onB[0], "lost"), want: redisFailure, failure: true},
					{request: redis("GETDEL", onB[0]), want: redisFailure, failure: true},
					{request: redis("DEL", onA[0], onB[0]), want: redisFailure, failure: true},
					{request: redis("GET", onA[0]), want: bulk("v-" + onA[0])},
				}
			},
		},
		{
			name: "memcached", protocol: Memcached,
			held: func(_, onB []string) (string, string, string) {
				return "get " + onB[0] + "\r\n", "END\r\n", fmt.Sprintf("VALUE %s 0 %d\r\nv-%[1]s\r\nEND\r\n", onB[0], len("v-"+onB[0]))
			},
			steps: func(onA, onB []string) []step {
				valueA := fmt.Sprintf("VALUE %s 0 %d\r\nv-%[1]s\r\n", onA[0], len("v-"+onA[0]))
				return []step{
					{request: "gets " + onB[1] + "\r\n", want: "END\r\n"},
					{request: "get " + onB[0] + " " + onB[1] + "\r\n", want: "END\r\n"},
					{request: "get " + onB[0] + " " + onA[0] + "\r\n", want: valueA + "END\r\n"},
					{request: "get " + onA[2] + " " + onB[0] + "\r\n", want: fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\nEND\r\n", onA[2], len(big), big)},
					{request: "mg " + onB[0] + " v f Oab k\r\n", want: "EN Oab k" + onB[0] + "\r\n"},
					{request: "mg " + onB[0] + " v q\r\nmn\r\n", want: "MN\r\n"},
					{request: "mg " + onB[0] + " v N30\r\n", want: mcFailure, failure: true},
					{request: "set " + onB[0] + " 0 0 4\r\nlost\r\n", want: mcFailure, failure: true},
					{request: "get " + onA[0] + "\r\n", want: valueA + "END\r\n"},
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Protocol: tt.protocol, DisablePeerFailover: true}
			c := startClusterWith(t, opts, 1, 1)
			onA, onB := keysOn(t, c, tt.protocol, c.engineA, 3), keysOnB(t, c, tt.protocol, 2)
			if tt.protocol == Redis {
				dialRESP(t, "unix", c.engineA).do("SET", onA[2], big)
			} else {
				dialMC(t, "unix", c.engineA).set(onA[2], big)
			}
			exchange := exchangeVia(t, c.a, c.acct, tt.protocol)
			if err := c.b.p.Close(); err != nil {
				t.Fatal(err)
			}
			awaitNoPeerLink(t, c.a.p)

			request, miss, back := tt.held(onA, onB)
			sent := time.Now()
			got, took := exchange(request), time.Since(sent)
			t.Logf("%q with node b gone: %q after %v (window %v)", request, got, took.Round(time.Microsecond), DefaultPeerRetryWindow)
			if got != miss || took > dialRetryDelay/2 {
				t.Errorf("%q with b gone unannounced: %q after %v, want %q at once, not after the %v window", request, got, took, miss, DefaultPeerRetryWindow)
			}
			want := map[string]float64{"miss": 1}
			for _, s := range tt.steps(onA, onB) {
				sent := time.Now()
				got, took := exchange(s.request), time.Since(sent)
				switch {
				case s.failure && (!strings.HasPrefix(got, s.want) || !strings.Contains(got, "connection refused")):
					t.Errorf("%q: %q, want an error starting %q, saying connection refused", s.request, got, s.want)
				case !s.failure && got != s.want:
					t.Errorf("%q: %q, want %q", s.request, got, s.want)
				}
				if took > dialRetryDelay/2 {
					t.Errorf("%q took %v, want an answer at once", s.request, took)
				}
				if strings.Contains(s.request, onB[0]) || strings.Contains(s.request, onB[1]) {
					want[map[bool]string{true: "error", false: "miss"}[s.failure]]++
				}
			}
			series := tenantSeries(scrape(t, c.a), c.acct.id)
			if len(series) > seriesBudget+1+3 {
				t.Errorf("%d series for the tenant, more than the documented %d + 1 peer + 3 for it unreachable", len(series), seriesBudget)
			}
			for _, outcome := range []string{"miss", "error"} {
				name := "cacheqos_sidecar_peer_unreachable_total{outcome=" + outcome + ",peer=node-b}"
				if series[name] != want[outcome] {
					t.Errorf("%s = %v, want %v", name, series[name], want[outcome])
				}
			}
			for _, key := range onB {
				if engineHolds(t, tt.protocol, c.engineA, key) {
					t.Errorf("node a's engine holds %s, owned by unreachable node b", key)
				}
			}

			c.b = startNodeOn(t, c.b.id, opts, listenOn(t, c.b.addr), listenOn(t, c.b.peerAddr))
			c.setWeights(t, c.weightA, c.weightB)
			time.Sleep(dialRetryDelay) // the last failed dial's answer stands this long
			if got := exchange(request); got != back {
				t.Errorf("%q once node b is back: %q, want %q", request, got, back)
			}
		})
	}
}

// TestLostReplyAnsweredAsMiss: which link failures answer the requests they lose as misses. A
// peer link whose connection closed (EOF, reset, broken pipe, closed) fails as an unreachable
// peer, with the words clients saw before; a plain read it loses is a miss, another request
// gets the error, and both count for the peer. The local partition's link, a timeout and any
// other failure give the error to every request, counted nowhere.
func TestLostReplyAnsweredAsMiss(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	brokenPipe := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name   string
		err    error
		local  bool
		want   string // the failure's words
		misses bool   // a plain read it loses is a miss
	}{
		{name: "peer EOF", err: io.EOF, want: "node node-b: connection closed", misses: true},
		{name: "peer EOF within a reply", err: io.ErrUnexpectedEOF, want: "node node-b: connection closed", misses: true},
		{name: "peer reset", err: reset, want: "node node-b: connection closed", misses: true},
		{name: "peer broken pipe", err: brokenPipe, want: "node node-b: connection closed", misses: true},
		{name: "peer link closed", err: net.ErrClosed, want: "node node-b: connection closed", misses: true},
		{name: "peer timeout", err: timeout, want: "node node-b: timed out"},
		{name: "peer unexpected reply", err: errors.New("the engine sent a reply nobody asked for"), want: "node node-b: the engine sent a reply nobody asked for"},
		{name: "local EOF", err: io.EOF, local: true, want: "local partition: connection closed"},
		{name: "local reset", err: reset, local: true, want: "local partition: connection closed"},
		{name: "local timeout", err: timeout, local: true, want: "local partition: timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &link{node: "node-b", local: tt.local}
			failure := l.failure(tt.err)
			if failure.Error() != tt.want {
				t.Errorf("failure of %v: %q, want %q", tt.err, failure, tt.want)
			}
			tn := &tenant{}
			tn.stats.init()
			for _, plainRead := range []bool{true, false} {
				p := &pending{entry: entry{tenant: tn, missOnUnreachable: plainRead}, failure: failure}
				if got, want := p.failedAsMiss(), plainRead && tt.misses; got != want {
					t.Errorf("a request lost with %q (plain read %v) answered as a miss: %v, want %v", failure, plainRead, got, want)
				}
			}
			var counted uint64
			if tt.misses {
				counted = 1
			}
			peer := tn.stats.peer("node-b")
			if misses, errs := peer.unreachableMisses.Load(), peer.unreachableErrors.Load(); misses != counted || errs != counted {
				t.Errorf("counted %d misses and %d errors for node-b, want %d of each", misses, errs, counted)
			}
		})
	}
}

// TestProbeOfGonePeerHoldsNoRequest: node b's sidecar is gone without announcing a restart
// (Close), and then its peer address takes connections and never answers the handshake (a fake
// for a host that does not answer). Node a answers the first read of b's key at once (the
// connection refused), as a miss. A second later a read dials b again and waits for that dial,
// up to the dial timeout (2 s); a read sent meanwhile on another connection is not held
// behind it: it is a miss at once. The probing read is a miss when its dial times out,
// well before the peer retry window (5 s) would have ended.
func TestProbeOfGonePeerHoldsNoRequest(t *testing.T) {
	tests := []struct {
		name     string
		protocol Protocol
		get      func(key string) heldRequest
	}{
		{name: "redis", protocol: Redis, get: redisGet},
		{name: "memcached", protocol: Memcached, get: memcacheGet},
	}
	// atOnce bounds an answer that waits for nothing, with a margin for a loaded machine.
	const atOnce = dialRetryDelay / 2
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startClusterWith(t, Options{Protocol: tt.protocol}, 1, 1)
			get := tt.get(keysOnB(t, c, tt.protocol, 1)[0])
			if err := c.b.p.Close(); err != nil {
				t.Fatal(err)
			}
			awaitNoPeerLink(t, c.a.p)
			check := func(what string, sent time.Time, ch chan heldAnswer, within time.Duration) {
				t.Helper()
				a := <-ch
				took := a.at.Sub(sent)
				t.Logf("%s: %q %v after %v", what, a.line, a.err, took.Round(time.Microsecond))
				if a.err != nil || a.line != get.answer || took > within {
					t.Errorf("%s %q: %q (%v) after %v, want %q within %v", what, get.request, a.line, a.err, took, get.answer, within)
				}
			}
			sent := time.Now()
			check("the first read, b refusing connections", sent, sendOnNewConn(t, c.a, c.acct, tt.protocol, get), atOnce)

			silent := listenOn(t, c.b.peerAddr) // never accepted: the handshake gets no answer
			t.Cleanup(func() { silent.Close() })
			time.Sleep(dialRetryDelay)
			probing := time.Now()
			probe := sendOnNewConn(t, c.a, c.acct, tt.protocol, get)
			time.Sleep(100 * time.Millisecond)
			sent = time.Now()
			check("a read while another dials b", sent, sendOnNewConn(t, c.a, c.acct, tt.protocol, get), atOnce)
			check("the read that dials b", probing, probe, DefaultDialTimeout+atOnce)
		})
	}
}
