package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShutdownSavesPartitions stops a manager as the sidecar does on SIGTERM, with one engine
// it started and one it adopted from an earlier manager, and starts a new manager on the same
// root: partitions of both engines come back with every key, and resize live afterwards. Saved
// data is loaded once: a crash after the restore starts empty rather than bring back old
// values.
func TestShutdownSavesPartitions(t *testing.T) {
	const keys = 5000 // of 2000 bytes: 10 MB, more than the 8 MiB the restored partition shrinks to
	for _, tt := range []struct {
		engine Engine
		// kept is how many of each partition's keys the new manager's engines have.
		kept int
	}{
		{Redis, keys},
		{Memcached, keys},
	} {
		t.Run(string(tt.engine), func(t *testing.T) {
			cfg := testConfig(t, tt.engine)
			t.Cleanup(func() { killEngines(t, cfg.Root) })
			adopted := PartitionSpec{Tenant: "t/adopted", MemoryBytes: 32 * mib, EvictionPolicy: LRU}
			started := PartitionSpec{Tenant: "t/started", MemoryBytes: 32 * mib, EvictionPolicy: LRU}
			first, err := NewManager(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			mustReconcile(t, first, adopted)
			first.Close()
			second, err := NewManager(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			mustReconcile(t, second, adopted, started)
			pids := map[string]int{}
			for _, spec := range []PartitionSpec{adopted, started} {
				newWorkload(t, tt.engine, mustSocket(t, second, spec.Tenant)).set(spec.Tenant, 0, keys, 2000)
				pids[spec.Tenant] = mustStatus(t, second, spec.Tenant).PID
			}

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := second.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			for tenant, pid := range pids {
				if cmdlineMatches(pid, engineProcessName(tt.engine), pathsFor(cfg.Root, tenant).socket) {
					t.Fatalf("%s's engine %d still runs after Shutdown", tenant, pid)
				}
			}

			third := startManager(t, cfg)
			mustReconcile(t, third, adopted, started)
			for _, spec := range []PartitionSpec{adopted, started} {
				w := newWorkload(t, tt.engine, mustSocket(t, third, spec.Tenant))
				if hits := w.read(spec.Tenant, 0, keys); hits != tt.kept {
					t.Errorf("%s after the restart: %d of %d keys, want %d", spec.Tenant, hits, keys, tt.kept)
				}
				for _, saved := range []string{pathsFor(cfg.Root, spec.Tenant).saved, pathsFor(cfg.Root, spec.Tenant).savedItems} {
					if _, err := os.Stat(saved); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s's saved data %s is still there after it was loaded: %v", spec.Tenant, saved, err)
					}
				}
			}

			// The restored partition resizes live: down to 8 MiB, evicting, then up again.
			started.MemoryBytes = 8 * mib
			mustReconcile(t, third, adopted, started)
			st := mustStats(t, third, started.Tenant)
			if st.LimitBytes != 8*mib || st.UsedBytes > 8*mib || st.Items == 0 || st.Items >= keys {
				t.Fatalf("restored partition after shrinking to 8 MiB: %+v", st)
			}
			started.MemoryBytes = 64 * mib
			mustReconcile(t, third, adopted, started)
			if st := mustStats(t, third, started.Tenant); st.LimitBytes != 64*mib {
				t.Fatalf("restored partition after growing to 64 MiB: limit %d", st.LimitBytes)
			}

			// A crash after the restore starts empty: the snapshot was consumed.
			pid := mustStatus(t, third, adopted.Tenant).PID
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the crashed engine's restart", func() bool {
				st := mustStatus(t, third, adopted.Tenant)
				return st.State == Running && st.PID != pid
			})
			if hits := newWorkload(t, tt.engine, mustSocket(t, third, adopted.Tenant)).read(adopted.Tenant, 0, keys); hits != 0 {
				t.Fatalf("after a crash following the restore: %d keys, want none", hits)
			}
		})
	}
}

// TestUnreadableSnapshotIsDropped puts a file redis cannot load where a saved snapshot goes:
// the first start fails, the file is deleted, and the restart runs the partition empty.
func TestUnreadableSnapshotIsDropped(t *testing.T) {
	cfg := testConfig(t, Redis)
	spec := PartitionSpec{Tenant: "t/corrupt", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
	paths := pathsFor(cfg.Root, spec.Tenant)
	if err := os.MkdirAll(paths.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths.saved, []byte("REDIS9999 not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startManager(t, cfg)
	if err := m.Reconcile(context.Background(), []PartitionSpec{spec}); err == nil {
		t.Fatal("the first start loaded an unreadable snapshot")
	}
	waitFor(t, "the partition to run after the failed start", func() bool {
		return mustStatus(t, m, spec.Tenant).State == Running
	})
	if st := mustStats(t, m, spec.Tenant); st.Items != 0 || mustStatus(t, m, spec.Tenant).Restarts != 1 {
		t.Fatalf("after dropping the snapshot: %d items, status %+v", st.Items, mustStatus(t, m, spec.Tenant))
	}
	if _, err := os.Stat(paths.saved); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the unreadable snapshot is still there: %v", err)
	}
}

// TestMemcachedRestartableCacheCannotResize holds why memcached partitions are saved item by
// item rather than with memcached's own restartable cache: with it (-e, a memory file)
// memcached refuses to change cache_memlimit live, which every resize needs.
func TestMemcachedRestartableCacheCannotResize(t *testing.T) {
	cfg := testConfig(t, Memcached)
	spec := PartitionSpec{Tenant: "t/memfile", MemoryBytes: 64 * mib, EvictionPolicy: LRU} // a memory file needs at least 39 MiB
	paths := pathsFor(cfg.Root, spec.Tenant)
	drv := memcachedDriver{threads: 1, maxConnections: 16}
	if os.Geteuid() == 0 {
		drv.user = "nobody"
	}
	if err := os.MkdirAll(paths.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := drv.prepareDir(paths.dir); err != nil {
		t.Fatal(err)
	}
	binary, err := drv.binary()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := launch(binary, append(drv.args(spec, paths), "-e", paths.dir+"/memory"), paths.dir, paths.logfile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.stop(3*time.Second, 3*time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for drv.ping(ctx, paths.socket) != nil {
		select {
		case <-proc.exited:
			t.Fatalf("memcached with a memory file exited: %s", proc.reason)
		case <-ctx.Done():
			t.Fatalf("memcached with a memory file does not answer; last log line: %s", lastLogLine(paths.logfile))
		case <-time.After(pollEvery):
		}
	}
	c, err := dialMemcache(ctx, paths.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, limit := range []int64{128, 48} {
		if err := c.setMemoryLimit(limit); err == nil || !strings.Contains(err.Error(), "MEMLIMIT_ADJUST_FAILED") {
			t.Errorf("cache_memlimit %d with a memory file: %v, want MEMLIMIT_ADJUST_FAILED", limit, err)
		}
	}
}

// TestSnapshotLoadOutlastsStartTimeout restores a partition whose snapshot takes longer to load
// than StartTimeout: redis answers LOADING meanwhile, and the start waits for it.
func TestSnapshotLoadOutlastsStartTimeout(t *testing.T) {
	// 384 MiB of random values, which do not compress: about 1 s of loading on a quiet machine,
	// well past a start timeout long enough for a loaded machine to start redis at all.
	const keys, valueSize = 96 * 1024, 4096
	cfg := testConfig(t, Redis)
	spec := PartitionSpec{Tenant: "t/large", MemoryBytes: 512 * mib, EvictionPolicy: LRU}
	first := startManager(t, cfg)
	mustReconcile(t, first, spec)
	w := newWorkload(t, Redis, mustSocket(t, first, spec.Tenant)).(redisWorkload)
	value := make([]byte, valueSize)
	w.pipeline(0, keys, func(i int) []string {
		_, _ = rand.Read(value)
		return []string{"SET", keyName("k", i), string(value)}
	}, func(respValue) {})
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	cfg.StartTimeout = 250 * time.Millisecond
	second := startManager(t, cfg)
	began := time.Now()
	mustReconcile(t, second, spec)
	took := time.Since(began)
	if took < 2*cfg.StartTimeout {
		t.Fatalf("the snapshot loaded in %v, too fast to outlast StartTimeout %v: the test needs a larger one", took, cfg.StartTimeout)
	}
	if st := mustStats(t, second, spec.Tenant); st.Items != keys {
		t.Fatalf("after loading for %v: %d keys, want %d", took, st.Items, keys)
	}
	t.Logf("loaded %d MiB in %v (StartTimeout %v)", keys*valueSize>>20, took, cfg.StartTimeout)
}
