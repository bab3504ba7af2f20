package engine

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestShutdownSavesRedisPartitions stops a manager as the sidecar does on SIGTERM, with one
// engine it started and one it adopted from an earlier manager, and starts a new manager on
// the same root: redis partitions come back with every key, and resize live afterwards;
// memcached partitions come back empty. A snapshot is loaded once: a crash after the restore
// starts empty rather than bring back old values.
func TestShutdownSavesRedisPartitions(t *testing.T) {
	const keys = 5000 // of 2000 bytes: 10 MB, more than the 8 MiB the restored partition shrinks to
	for _, tt := range []struct {
		engine Engine
		// kept is how many of each partition's keys the new manager's engines have.
		kept int
	}{
		{Redis, keys},
		{Memcached, 0},
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
				if _, err := os.Stat(pathsFor(cfg.Root, spec.Tenant).saved); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s's snapshot is still there after it was loaded: %v", spec.Tenant, err)
				}
			}
			if tt.kept == 0 {
				return
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
