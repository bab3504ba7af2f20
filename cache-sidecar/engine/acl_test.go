package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRedisLinkUser starts a redis partition with the manager: its link password is the
// engine directory's alone (0600) and shows on no command line; the link user logs in with it
// and runs caching commands but not the engine's administration, which the manager's default
// user still runs.
func TestRedisLinkUser(t *testing.T) {
	m := startManager(t, testConfig(t, Redis))
	spec := PartitionSpec{Tenant: "t/acl", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
	mustReconcile(t, m, spec)
	sock := mustSocket(t, m, spec.Tenant)
	password, err := RedisLinkPassword(sock)
	if err != nil || password == "" {
		t.Fatalf("link password %q, %v", password, err)
	}
	info, err := os.Stat(filepath.Join(filepath.Dir(sock), linkPasswordFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v, %v; want mode 0600", info, err)
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(mustStatus(t, m, spec.Tenant).PID), "cmdline"))
	if err != nil || strings.Contains(string(cmdline), password) {
		t.Fatalf("engine command line %q (%v) carries the password", cmdline, err)
	}

	link, err := dialRedis(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	if err := link.doOK("AUTH", RedisLinkUser, "wrong"); err == nil {
		t.Fatal("AUTH with a wrong password succeeded")
	}
	if err := link.doOK("AUTH", RedisLinkUser, password); err != nil {
		t.Fatal(err)
	}
	if err := link.doOK("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	checkLinkUserRefused(t, link)
	mustReconcile(t, m, PartitionSpec{Tenant: spec.Tenant, MemoryBytes: 32 * mib, EvictionPolicy: LFU})
	if got := mustStatus(t, m, spec.Tenant).Applied; got.MemoryBytes != 32*mib || got.EvictionPolicy != LFU {
		t.Fatalf("the manager's CONFIG SET: applied %+v", got)
	}
}

// checkLinkUserRefused fails the test unless link, logged in as RedisLinkUser, is refused the
// engine's administration and INFO (which the proxy runs as the default user and filters).
func checkLinkUserRefused(t *testing.T, link redisClient) {
	t.Helper()
	for _, args := range [][]string{{"CONFIG", "SET", "maxmemory", "1"}, {"FLUSHALL"}, {"SELECT", "1"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "1000"}, {"SHUTDOWN"}, {"INFO"}, {"INFO", "server"}} {
		_, err := link.do(args...)
		var reply *redisError
		if !errors.As(err, &reply) || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("link user %v: %v, want NOPERM", args, err)
		}
	}
}

// TestAdoptedRedisGetsTheLinkUser adopts a running redis as an older sidecar left it: without
// the link user (an engine from before it existed) or with an older rule that let it run INFO
// and FLUSHALL. The new manager restricts it without a relaunch: the engine keeps its pid and
// data, its directory gets a password, the link user logs in with it and is refused what
// today's rule refuses, while the manager's default user still runs everything.
func TestAdoptedRedisGetsTheLinkUser(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older func(t *testing.T, admin redisClient, dir string)
	}{
		{"no link user", func(t *testing.T, admin redisClient, dir string) {
			if _, err := admin.do("ACL", "DELUSER", RedisLinkUser); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{linkPasswordFile, RedisACLFile} {
				if err := os.Remove(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"an older rule", func(t *testing.T, admin redisClient, dir string) {
			if err := admin.doOK("ACL", "SETUSER", RedisLinkUser, "+info", "+flushall"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, Redis)
			first, err := NewManager(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killEngines(t, cfg.Root) })
			spec := PartitionSpec{Tenant: "t/old", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			mustReconcile(t, first, spec)
			sock := mustSocket(t, first, spec.Tenant)
			pid := mustStatus(t, first, spec.Tenant).PID
			first.Close()
			admin, err := dialRedis(context.Background(), sock)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if err := admin.doOK("SET", "kept", "v"); err != nil {
				t.Fatal(err)
			}
			tc.older(t, admin, filepath.Dir(sock))

			second := startManager(t, cfg)
			if st := mustStatus(t, second, spec.Tenant); st.State != Running || st.PID != pid {
				t.Fatalf("adopted: %+v, want the running engine (pid %d)", st, pid)
			}
			password, err := RedisLinkPassword(sock)
			if err != nil || password == "" {
				t.Fatalf("link password after adoption: %q, %v", password, err)
			}
			link, err := dialRedis(context.Background(), sock)
			if err != nil {
				t.Fatal(err)
			}
			defer link.Close()
			if err := link.doOK("AUTH", RedisLinkUser, password); err != nil {
				t.Fatal(err)
			}
			if v, err := link.do("GET", "kept"); err != nil || v.str != "v" {
				t.Fatalf("link user GET kept: %s, %v", v.describe(), err)
			}
			checkLinkUserRefused(t, link)
			if _, err := admin.info("server"); err != nil {
				t.Fatalf("the default user's INFO: %v", err)
			}
		})
	}
}

// TestRedisACLKeepsItsPassword writes a directory's ACL twice, as two launches of its engine
// do: the password stays, and the ACL file names it only by its hash.
func TestRedisACLKeepsItsPassword(t *testing.T) {
	dir := t.TempDir()
	first, err := WriteRedisACL(dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := WriteRedisACL(dir)
	if err != nil || second != first {
		t.Fatalf("second launch's password %q (%v), want the first's %q", second, err, first)
	}
	acl, err := os.ReadFile(filepath.Join(dir, RedisACLFile))
	if err != nil || strings.Contains(string(acl), first) {
		t.Fatalf("ACL file %q (%v) carries the password", acl, err)
	}
}
