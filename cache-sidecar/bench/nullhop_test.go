package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestNullHopAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer nullHopProtocol
		in     string
		used   int
		reply  string
		err    string
	}{
		{"memcached set", answerMemcache, "set k 0 0 3\r\nabc\r\nget", 18, "STORED\r\n", ""},
		{"memcached get", answerMemcache, "get a b\r\n", 9, "END\r\n", ""},
		{"memcached set waits for its data", answerMemcache, "set k 0 0 3\r\nab", 0, "", ""},
		{"memcached line waits for CRLF", answerMemcache, "get k", 0, "", ""},
		{"memcached unknown", answerMemcache, "stats\r\n", 7, "ERROR\r\n", ""},
		{"memcached empty line", answerMemcache, "\r\n", 2, "ERROR\r\n", ""},
		{"memcached set without size", answerMemcache, "set k 0\r\n", 0, "", "without a size"},
		{"memcached bad size", answerMemcache, "set k 0 0 -1\r\n", 0, "", "bad size"},
		{"redis set", answerRESP, "*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n*1", 27, "+OK\r\n", ""},
		{"redis get", answerRESP, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", 20, "$-1\r\n", ""},
		{"redis ping", answerRESP, "*1\r\n$4\r\nPING\r\n", 14, "+PONG\r\n", ""},
		{"redis config get", answerRESP, "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$4\r\nsave\r\n", 35, "*0\r\n", ""},
		{"redis waits for the rest", answerRESP, "*2\r\n$3\r\nGET\r\n$1\r\n", 0, "", ""},
		{"redis waits for the bulk", answerRESP, "*2\r\n$3\r\nGET\r\n$5\r\nab", 0, "", ""},
		{"redis inline command", answerRESP, "PING\r\n", 0, "", "want '*'"},
		{"redis bad length", answerRESP, "*2\r\n$x\r\n", 0, "", "bad length"},
		{"redis negative count", answerRESP, "*-1\r\n", 0, "", "bad length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used, reply, err := tc.answer([]byte(tc.in), nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || used != tc.used || string(reply) != tc.reply {
				t.Fatalf("answer = %d, %q, %v; want %d, %q", used, reply, err, tc.used, tc.reply)
			}
		})
	}
}

// TestNullHopAllocatesNothing keeps the null hop a floor: framing and answering a request
// allocates nothing once the reply buffer has room.
func TestNullHopAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  nullHopProtocol
		request string
	}{
		{"memcached set", answerMemcache, "set key:1 0 0 3\r\nabc\r\n"},
		{"memcached get", answerMemcache, "get key:1\r\n"},
		{"redis set", answerRESP, "*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$3\r\nabc\r\n"},
		{"redis get", answerRESP, "*2\r\n$3\r\nget\r\n$5\r\nkey:1\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out := []byte(tc.request), make([]byte, 0, 64)
			allocs := testing.AllocsPerRun(100, func() {
				used, _, err := tc.answer(in, out[:0])
				if err != nil || used != len(in) {
					t.Fatalf("answer used %d of %d bytes: %v", used, len(in), err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per request, want 0", allocs)
			}
		})
	}
}

func FuzzNullHopAnswers(f *testing.F) {
	f.Add([]byte("set k 0 0 3\r\nabc\r\n"))
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	f.Add([]byte("*9\r\n$99999999999999999999\r\n"))
	f.Add([]byte("*1\r\n$9223372036854775807\r\n"))
	f.Add([]byte("set k 0 0 9223372036854775807\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, answer := range []nullHopProtocol{answerMemcache, answerRESP} {
			used, _, err := answer(data, nil)
			if used < 0 || used > len(data) || (err != nil && used != 0) {
				t.Fatalf("answer(%q) used %d of %d bytes, err %v", data, used, len(data), err)
			}
		}
	})
}

// TestNullHopServes runs the null hop as the benchmark does, as a process of its own, and
// drives it with pipelined and split requests of both protocols.
func TestNullHopServes(t *testing.T) {
	if os.Getenv("BENCH_NULL_HOP") != "" {
		args := strings.Fields(os.Getenv("BENCH_NULL_HOP"))
		if err := serveNullHop(args[0], args[1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for _, tc := range []struct{ protocol, send, want string }{
		{"memcached", "set a 0 0 2\r\nxy\r\nget a\r\nbogus\r\n", "STORED\r\nEND\r\nERROR\r\n"},
		{"redis", "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$2\r\nxy\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n", "+OK\r\n$-1\r\n"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			cmd := exec.Command(os.Args[0], "-test.run=^TestNullHopServes$")
			cmd.Env = append(os.Environ(), "BENCH_NULL_HOP="+tc.protocol+" "+addr)
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			var nc net.Conn
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if nc, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			// The requests arrive in two pieces, the first ending inside a request.
			half := len(tc.send) / 2
			for _, piece := range []string{tc.send[:half], tc.send[half:]} {
				if _, err := io.WriteString(nc, piece); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			got := make([]byte, len(tc.want))
			if _, err := io.ReadFull(bufio.NewReader(nc), got); err != nil || string(got) != tc.want {
				t.Fatalf("replies %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
