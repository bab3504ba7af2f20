package proxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestRequestsArrivingInPieces: requests that reach the proxy in pieces (a line, an argument
// or a data block cut, a second request in part behind a whole one, empty commands before
// one, a request larger than the read buffer, a burst of requests that fills it) get the
// replies they get whole, in order, on one connection each.
func TestRequestsArrivingInPieces(t *testing.T) {
	big := strings.Repeat("b", 40_000)
	for _, tc := range []struct {
		protocol Protocol
		steps    []struct{ pieces, reply []string }
	}{
		{Redis, []struct{ pieces, reply []string }{
			{[]string{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv", "1\r\n"}, []string{"+OK\r\n"}},
			{[]string{"*2\r\n$3\r\nGE", "T\r\n$1\r\nk\r\n"}, []string{"$2\r\nv1\r\n"}},
			{[]string{"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI", "NG\r\n"}, []string{"+PONG\r\n", "+PONG\r\n"}},
			{[]string{"*0\r\n", " \r\n", "*1\r\n$4\r\nPING\r\n"}, []string{"+PONG\r\n"}},
			{[]string{"PI", "NG\r\n"}, []string{"+PONG\r\n"}},
			{[]string{"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$40000\r\n" + big[:10_000], big[10_000:], "\r\n"}, []string{"+OK\r\n"}},
			{[]string{"*2\r\n$6\r\nSTRLEN\r\n$3\r\nbig\r\n"}, []string{":40000\r\n"}},
			{[]string{strings.Repeat("*1\r\n$4\r\nPING\r\n", 2000)}, []string{strings.Repeat("+PONG\r\n", 2000)}},
		}},
		{Memcached, []struct{ pieces, reply []string }{
			{[]string{"set k 0 0 2\r\nv", "1\r\n"}, []string{"STORED\r\n"}},
			{[]string{"get", " k\r\n"}, []string{"VALUE k 0 2\r\nv1\r\nEND\r\n"}},
			{[]string{"set k 0 0 2\r\n", "v2\r\nget k\r\n"}, []string{"STORED\r\n", "VALUE k 0 2\r\nv2\r\nEND\r\n"}},
			{[]string{"set big 0 0 40000\r\n" + big[:10_000], big[10_000:], "\r\n"}, []string{"STORED\r\n"}},
			{[]string{strings.Repeat("mn\r\n", 5000)}, []string{strings.Repeat("MN\r\n", 5000)}},
		}},
	} {
		t.Run(string(tc.protocol), func(t *testing.T) {
			acct := newAccount(t, "team-a/app")
			n, _ := singleNode(t, tc.protocol, acct, Options{})
			var nc net.Conn
			var br *bufio.Reader
			if tc.protocol == Redis {
				c := loginRESP(t, n, acct)
				nc, br = c.nc, c.br
			} else {
				c := loginMC(t, n, acct)
				nc, br = c.nc, c.br
			}
			for _, step := range tc.steps {
				for i, piece := range step.pieces {
					if i > 0 {
						time.Sleep(20 * time.Millisecond) // so that the proxy reads the pieces apart
					}
					nc.SetWriteDeadline(time.Now().Add(testIOTimeout))
					if _, err := io.WriteString(nc, piece); err != nil {
						t.Fatal(err)
					}
				}
				want := strings.Join(step.reply, "")
				got := make([]byte, len(want))
				nc.SetReadDeadline(time.Now().Add(testIOTimeout))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
					t.Fatalf("sent %.60q in %d pieces: got %.80q (%v), want %.80q", strings.Join(step.pieces, ""), len(step.pieces), got, err, want)
				}
			}
		})
	}
}
