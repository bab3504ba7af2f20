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
	for _, args := range [][]string{{"CONFIG", "SET", "maxmemory", "1"}, {"FLUSHALL"}, {"SELECT", "1"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "1000"}, {"SHUTDOWN"}} {
		_, err := link.do(args...)
		var reply *redisError
		if !errors.As(err, &reply) || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("link user %v: %v, want NOPERM", args, err)
		}
	}
	mustReconcile(t, m, PartitionSpec{Tenant: spec.Tenant, MemoryBytes: 32 * mib, EvictionPolicy: LFU})
	if got := mustStatus(t, m, spec.Tenant).Applied; got.MemoryBytes != 32*mib || got.EvictionPolicy != LFU {
		t.Fatalf("the manager's CONFIG SET: applied %+v", got)
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
