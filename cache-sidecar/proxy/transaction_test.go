package proxy

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestRefusedTransactionAppliesNothing sends transactions as redis-py's pipeline() does
// (pipelined, MULTI ... EXEC) and checks on the engine itself that no command inside a refused
// transaction ran, that every reply in it is an error, and that commands after it run again.
func TestRefusedTransactionAppliesNothing(t *testing.T) {
	acct := newAccount(t, "team-a/app")
	n, engine := singleNode(t, Redis, acct, Options{})
	direct := dialRESP(t, "unix", engine)
	for _, tc := range []struct {
		name     string
		commands [][]string
		// want is each reply's prefix: "-" errors, ":" integers and so on.
		want   []string
		wantK  string // the key's value on the engine afterwards ("" absent)
		wantIn string // a reply that must contain this text, when set
	}{
		{
			name:     "multi incr exec",
			commands: [][]string{{"MULTI"}, {"INCR", "k"}, {"EXEC"}},
			want:     []string{"-", "-", "-EXECABORT"},
		},
		{
			name:     "several writes then discard",
			commands: [][]string{{"MULTI"}, {"SET", "k", "1"}, {"INCRBY", "k", "5"}, {"DEL", "k"}, {"DISCARD"}},
			want:     []string{"-", "-", "-", "-", "-"},
		},
		{
			name:     "commands after exec run",
			commands: [][]string{{"MULTI"}, {"INCR", "k"}, {"EXEC"}, {"INCR", "k"}},
			want:     []string{"-", "-", "-EXECABORT", ":1"},
			wantK:    "1",
		},
		{
			name:     "nested multi and unknown commands stay refused",
			commands: [][]string{{"MULTI"}, {"MULTI"}, {"NOSUCHCOMMAND"}, {"INCR", "k"}, {"EXEC"}, {"GET", "k"}},
			want:     []string{"-", "-", "-", "-", "-EXECABORT", "$-1"},
		},
		{
			name:     "reset ends the transaction and logs out",
			commands: [][]string{{"MULTI"}, {"INCR", "k"}, {"RESET"}, {"INCR", "k"}},
			want:     []string{"-", "-", "+RESET", "-NOAUTH"},
		},
		{
			name:     "exec and discard without multi are refused",
			commands: [][]string{{"EXEC"}, {"DISCARD"}, {"INCR", "k"}},
			want:     []string{"-", "-", ":1"},
			wantK:    "1",
		},
		{
			name:     "commands inside get a clear reason",
			commands: [][]string{{"MULTI"}, {"SET", "k", "v"}, {"EXEC"}},
			want:     []string{"-", "-", "-"},
			wantIn:   "follows a MULTI the proxy refused",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := direct.do("DEL", "k"); !strings.HasPrefix(got, ":") {
				t.Fatalf("DEL on the engine: %q", got)
			}
			c := loginRESP(t, n, acct)
			for _, args := range tc.commands {
				c.send(args...)
			}
			var replies []string
			for i := range tc.commands {
				got := c.read()
				replies = append(replies, got)
				if !strings.HasPrefix(got, tc.want[i]) {
					t.Errorf("reply to %v: %q, want %q...", tc.commands[i], got, tc.want[i])
				}
			}
			if tc.wantIn != "" && !strings.Contains(strings.Join(replies, ""), tc.wantIn) {
				t.Errorf("replies %q do not say %q", replies, tc.wantIn)
			}
			wantRaw := "$-1\r\n"
			if tc.wantK != "" {
				wantRaw = fmt.Sprintf("$%d\r\n%s\r\n", len(tc.wantK), tc.wantK)
			}
			if got := direct.do("GET", "k"); got != wantRaw {
				t.Errorf("k on the engine: %q, want %q", got, wantRaw)
			}
		})
	}
}

// FuzzTransactionFraming sends random sequences of MULTI, EXEC, DISCARD and INCRs, pipelined,
// and checks against a model of redis with refused transactions, on the engine itself: INCR
// outside a transaction applies once, INCR between MULTI and EXEC/DISCARD never, every reply
// in a transaction is an error, and the connection is never dropped.
func FuzzTransactionFraming(f *testing.F) {
	acct := newAccount(f, "team-a/app")
	n, engine := singleNode(f, Redis, acct, Options{})
	for _, seed := range []string{"\x00\x03\x01", "\x03\x00\x03\x03\x02\x03", "\x01\x02\x00\x00\x03\x01\x03", "\x00\x04\x03\x01\x03"} {
		f.Add([]byte(seed))
	}
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 256 {
			ops = ops[:256]
		}
		key := fmt.Sprintf("fuzz-tx-%d", run.Add(1))
		// Over a pipe, not TCP: thousands of runs a second would use up the loopback's ports.
		client, server := net.Pipe()
		defer client.Close()
		go n.p.runConn(n.p.newConn(server, nil, nil))
		c := newRESPClient(t, client)
		if got := c.do("AUTH", acct.id, acct.password); got != "+OK\r\n" {
			t.Fatalf("AUTH: %q", got)
		}
		var requests []byte
		type step struct {
			args []string
			inTx bool
		}
		steps := make([]step, 0, len(ops))
		inTx, applied := false, 0
		for _, op := range ops {
			var args []string
			switch op % 5 {
			case 0:
				args = []string{"MULTI"}
			case 1:
				args = []string{"EXEC"}
			case 2:
				args = []string{"DISCARD"}
			case 3:
				args = []string{"INCR", key}
			case 4:
				args = []string{"GET", key}
			}
			wasInTx := inTx
			switch {
			case args[0] == "MULTI":
				inTx = true
			case args[0] == "EXEC" || args[0] == "DISCARD":
				inTx = false
			case args[0] == "INCR" && !inTx:
				applied++
			}
			// MULTI is refused whether it opens a transaction or nests in one.
			steps = append(steps, step{args: args, inTx: wasInTx || args[0] == "MULTI"})
			requests = resp.AppendCommandStrings(requests, args...)
		}
		// A pipe holds no bytes: the requests go out while the replies are read.
		go func() {
			client.SetWriteDeadline(time.Now().Add(testIOTimeout))
			_, _ = client.Write(requests)
		}()
		count := 0
		for _, s := range steps {
			got := c.read()
			switch {
			case s.inTx || s.args[0] == "EXEC" || s.args[0] == "DISCARD":
				if !isError(got) {
					t.Fatalf("%v inside a refused transaction (ops %x) answered %q, want an error", s.args, ops, got)
				}
			case s.args[0] == "INCR":
				count++
				if want := fmt.Sprintf(":%d\r\n", count); got != want {
					t.Fatalf("INCR outside a transaction (ops %x): %q, want %q", ops, got, want)
				}
			}
		}
		want := "$-1\r\n"
		if applied > 0 {
			want = fmt.Sprintf("$%d\r\n%d\r\n", len(fmt.Sprint(applied)), applied)
		}
		if got := dialRESP(t, "unix", engine).do("GET", key); got != want {
			t.Fatalf("%s on the engine after ops %x: %q, want %q (INCRs inside a refused transaction ran?)", key, ops, got, want)
		}
	})
}
