package proxy

import (
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestInfoIsFiltered asks a real engine's INFO through the proxy: the engine's internals are
// gone, what a tenant needs remains, in the string type the engine answers each RESP version
// with.
func TestInfoIsFiltered(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{})
	for _, tc := range []struct {
		proto    string
		wantType resp.Type
	}{{"2", resp.TypeBulkString}, {"3", resp.TypeVerbatim}} {
		c := dialRESP(t, "tcp", n.addr)
		if got := c.do("HELLO", tc.proto, "AUTH", acct.id, acct.password); isError(got) {
			t.Fatalf("HELLO %s AUTH: %q", tc.proto, got)
		}
		if got := c.do("SET", "k", "v"); got != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		for _, args := range [][]string{{"INFO"}, {"INFO", "everything"}, {"INFO", "server", "memory", "keyspace"}} {
			v := value(t, c.do(args...))
			if v.Type != tc.wantType {
				t.Fatalf("RESP%s %v: type %s, want %s", tc.proto, args, v.Type, tc.wantType)
			}
			text := string(v.Str)
			for _, gone := range []string{"executable:", "config_file:", "process_id:", "run_id:", "tcp_port:", "os:", "# Persistence", "# Replication", "# CPU", "# Commandstats"} {
				if strings.Contains(text, gone) {
					t.Errorf("RESP%s %v shows %q:\n%s", tc.proto, args, gone, text)
				}
			}
			for _, kept := range []string{"redis_version:", "used_memory:", "maxmemory:", "# Keyspace\r\ndb0:keys=1,"} {
				if !strings.Contains(text, kept) {
					t.Errorf("RESP%s %v lacks %q:\n%s", tc.proto, args, kept, text)
				}
			}
			if len(args) == 1 || args[1] == "everything" {
				for _, kept := range []string{"connected_clients:", "keyspace_hits:", "keyspace_misses:"} {
					if !strings.Contains(text, kept) {
						t.Errorf("RESP%s %v lacks %q:\n%s", tc.proto, args, kept, text)
					}
				}
			}
		}
		if got := c.do("INFO", "persistence"); got != "$0\r\n\r\n" && got != "=4\r\ntxt:\r\n" {
			t.Errorf("RESP%s INFO persistence: %q, want an empty string", tc.proto, got)
		}
		// Inside a transaction INFO's reply would come back in EXEC's, unfiltered.
		c.do("MULTI")
		if got := c.do("INFO"); !isError(got) {
			t.Errorf("RESP%s INFO inside MULTI: %q, want an error", tc.proto, got)
		}
		c.do("DISCARD")
	}
}

// FuzzFilterInfo holds that the filter never crashes and keeps only listed sections.
func FuzzFilterInfo(f *testing.F) {
	f.Add([]byte("# Server\r\nredis_version:7.0.15\r\nexecutable:/x\r\n\r\n# Keyspace\r\ndb0:keys=1\r\n"))
	f.Add([]byte("# CPU\r\nused_cpu_sys:1\r\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		out := string(filterInfo(text))
		for line := range strings.SplitSeq(out, "\r\n") {
			header, ok := strings.CutPrefix(line, "# ")
			if !ok {
				continue
			}
			listed := false
			for _, s := range tenantInfo {
				listed = listed || strings.EqualFold(s.name, header)
			}
			if !listed {
				t.Fatalf("section %q kept from %q", header, text)
			}
		}
	})
}
