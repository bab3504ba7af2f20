package proxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

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
			if noted := a.p.links.restarting("node-b", time.Minute); noted != tt.announce {
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
