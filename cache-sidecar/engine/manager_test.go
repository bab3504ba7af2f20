package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const mib = 1 << 20

func TestPartitionsServeAndReportStats(t *testing.T) {
	for _, engine := range bothEngines {
		t.Run(string(engine), func(t *testing.T) {
			m := startManager(t, testConfig(t, engine))
			a := PartitionSpec{Tenant: "team-a/orders", MemoryBytes: 32 * mib, EvictionPolicy: LRU}
			b := PartitionSpec{Tenant: "team-b/cart", MemoryBytes: 16*mib + 12345, EvictionPolicy: LRU}
			mustReconcile(t, m, a, b)

			sockA, sockB := mustSocket(t, m, a.Tenant), mustSocket(t, m, b.Tenant)
			if sockA == sockB || !strings.Contains(sockA, "team-a_orders-") {
				t.Fatalf("sockets %s and %s", sockA, sockB)
			}
			if info, err := os.Stat(sockA); err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o700 {
				t.Fatalf("socket %s: %v, %v (want a 0700 socket)", sockA, info.Mode(), err)
			}
			for _, name := range []string{"pid", "engine.log", "partition.json"} {
				if _, err := os.Stat(filepath.Join(filepath.Dir(sockA), name)); err != nil {
					t.Errorf("state file: %v", err)
				}
			}
			wa := newWorkload(t, engine, sockA)
			wa.set("k", 0, 1000, 100)
			if hits := wa.read("k", 0, 1000); hits != 1000 {
				t.Fatalf("read back %d of 1000 keys", hits)
			}
			if hits := newWorkload(t, engine, sockB).read("k", 0, 10); hits != 0 {
				t.Fatalf("partition b sees %d of a's keys", hits)
			}

			stA, stB := mustStats(t, m, a.Tenant), mustStats(t, m, b.Tenant)
			stDesc := mustStatus(t, m, a.Tenant)
			if stA.PID != stDesc.PID || stA.PID == stB.PID || stA.PID == 0 {
				t.Fatalf("PIDs: stats %d/%d, status %d", stA.PID, stB.PID, stDesc.PID)
			}
			wantLimitB := b.MemoryBytes
			if engine == Memcached {
				wantLimitB = 16 * mib // whole MiB
			}
			if stA.LimitBytes != a.MemoryBytes || stB.LimitBytes != wantLimitB {
				t.Errorf("limits %d, %d; want %d, %d", stA.LimitBytes, stB.LimitBytes, a.MemoryBytes, wantLimitB)
			}
			if stA.Items != 1000 || stB.Items != 0 {
				t.Errorf("items %d, %d; want 1000, 0", stA.Items, stB.Items)
			}
			if stA.Hits != 1000 || stB.Misses != 10 {
				t.Errorf("hits %d (want 1000), b's misses %d (want 10)", stA.Hits, stB.Misses)
			}
			if stA.DataBytes < 1000*100 || stA.UsedBytes < stA.DataBytes || stA.UsedBytes > stA.LimitBytes || stA.RSSBytes <= 0 {
				t.Errorf("implausible memory numbers %+v", stA)
			}
			if stA.Engine != engine || stA.Tenant != a.Tenant {
				t.Errorf("stats identify %s/%s", stA.Engine, stA.Tenant)
			}
			list := m.List()
			if len(list) != 2 || list[0].Tenant != a.Tenant || list[0].State != Running || list[0].Applied != a {
				t.Errorf("List() = %+v", list)
			}
		})
	}
}

func TestReconcileIsIdempotent(t *testing.T) {
	m := startManager(t, testConfig(t, Redis))
	specs := []PartitionSpec{{"t/a", 16 * mib, LRU}, {"t/b", 16 * mib, LFU}}
	mustReconcile(t, m, specs...)
	before := m.List()
	mustReconcile(t, m, specs...)
	after := m.List()
	for i := range before {
		if before[i].PID != after[i].PID || after[i].Restarts != 0 || after[i].State != Running {
			t.Errorf("second Reconcile changed %+v into %+v", before[i], after[i])
		}
	}
}

func TestGrowKeepsEveryKey(t *testing.T) {
	for _, engine := range bothEngines {
		t.Run(string(engine), func(t *testing.T) {
			m := startManager(t, testConfig(t, engine))
			spec := PartitionSpec{Tenant: "t/grow", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			mustReconcile(t, m, spec)
			w := newWorkload(t, engine, mustSocket(t, m, spec.Tenant))
			const n = 20000 // about 8 MiB of 300-byte values
			w.set("k", 0, n, 300)
			pid := mustStatus(t, m, spec.Tenant).PID

			spec.MemoryBytes = 48 * mib
			mustReconcile(t, m, spec)

			if hits := w.read("k", 0, n); hits != n {
				t.Fatalf("after growing, %d of %d keys remain", hits, n)
			}
			st := mustStats(t, m, spec.Tenant)
			if st.LimitBytes != 48*mib || st.PID != pid || st.Evictions != 0 {
				t.Fatalf("after growing: limit %d, pid %d (was %d), evictions %d", st.LimitBytes, st.PID, pid, st.Evictions)
			}
			// The new room is usable: as many keys again fit without evictions.
			w.set("more", 0, n, 300)
			if st := mustStats(t, m, spec.Tenant); st.Evictions != 0 || st.Items != 2*n {
				t.Fatalf("after writing into the grown partition: %d items, %d evictions", st.Items, st.Evictions)
			}
		})
	}
}

func TestShrinkEvictsDownToTheNewSize(t *testing.T) {
	tests := []struct {
		engine  Engine
		written int // 900-byte values written into 64 MiB; the engine keeps what fits
		hot     [2]int
	}{
		// Redis tracks access time in whole seconds: the hot reads come a second after the
		// writes so that they stand out.
		{Redis, 55000, [2]int{1000, 3000}},
		// memcached already evicted the oldest writes while filling 64 MiB.
		{Memcached, 80000, [2]int{60000, 62000}},
	}
	for _, tt := range tests {
		t.Run(string(tt.engine), func(t *testing.T) {
			m := startManager(t, testConfig(t, tt.engine))
			spec := PartitionSpec{Tenant: "t/shrink", MemoryBytes: 64 * mib, EvictionPolicy: LRU}
			mustReconcile(t, m, spec)
			w := newWorkload(t, tt.engine, mustSocket(t, m, spec.Tenant))
			w.set("k", 0, tt.written, 900)
			before := mustStats(t, m, spec.Tenant)
			if tt.engine == Redis {
				time.Sleep(1200 * time.Millisecond)
			}
			if tt.engine == Memcached {
				requireMemcachedCanShrink(t, mustSocket(t, m, spec.Tenant))
			}
			hotCount := tt.hot[1] - tt.hot[0]
			if hits := w.read("k", tt.hot[0], tt.hot[1]); hits != hotCount {
				t.Fatalf("hot keys present before the shrink: %d of %d", hits, hotCount)
			}

			spec.MemoryBytes = 16 * mib
			start := time.Now()
			mustReconcile(t, m, spec)
			took := time.Since(start)
			after := mustStats(t, m, spec.Tenant)
			t.Logf("%s 64->16 MiB in %s: items %d -> %d, used %d -> %d, data %d -> %d, RSS %d -> %d",
				tt.engine, took.Round(time.Millisecond), before.Items, after.Items, before.UsedBytes, after.UsedBytes,
				before.DataBytes, after.DataBytes, before.RSSBytes, after.RSSBytes)
			if after.PID != before.PID {
				t.Fatalf("engine restarted (pid %d -> %d) instead of shrinking live", before.PID, after.PID)
			}
			if after.LimitBytes != 16*mib || after.UsedBytes > 16*mib || after.DataBytes > 16*mib {
				t.Fatalf("after shrinking to 16 MiB: limit %d, used %d, data %d", after.LimitBytes, after.UsedBytes, after.DataBytes)
			}
			if after.Items < before.Items/8 {
				t.Fatalf("shrink kept only %d of %d items, far fewer than fit", after.Items, before.Items)
			}
			hotSurvivors := w.read("k", tt.hot[0], tt.hot[1])
			overall := float64(after.Items) / float64(before.Items)
			t.Logf("hot keys surviving: %d of %d; all keys: %.0f%%", hotSurvivors, hotCount, 100*overall)
			if float64(hotSurvivors) < 0.95*float64(hotCount) {
				t.Fatalf("only %d of %d hot keys survived (all keys: %.0f%%)", hotSurvivors, hotCount, 100*overall)
			}

			// It stays down: writing as much again keeps the engine within the new limit.
			w.set("again", 0, tt.written, 900)
			if st := mustStats(t, m, spec.Tenant); st.UsedBytes > 16*mib || st.DataBytes > 16*mib {
				t.Fatalf("after more writes: used %d, data %d above 16 MiB", st.UsedBytes, st.DataBytes)
			}
		})
	}
}

// requireMemcachedCanShrink checks that memcached runs, by default, what shrinking needs.
func requireMemcachedCanShrink(t *testing.T, socket string) {
	t.Helper()
	c, err := dialMemcache(context.Background(), socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	settings, err := c.stats("settings")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lru_crawler", "dump_enabled", "slab_reassign", "lru_segmented"} {
		if settings[name] != "yes" {
			t.Errorf("memcached setting %s = %q, want yes", name, settings[name])
		}
	}
}

func TestEvictionPolicySwitchesLive(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		m := startManager(t, testConfig(t, Redis))
		spec := PartitionSpec{Tenant: "t/policy", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
		mustReconcile(t, m, spec)
		sock := mustSocket(t, m, spec.Tenant)
		pid := mustStatus(t, m, spec.Tenant).PID
		c, err := dialRedis(context.Background(), sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.doOK("SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
		for _, policy := range []EvictionPolicy{LFU, LRU, LFU} {
			spec.EvictionPolicy = policy
			mustReconcile(t, m, spec)
			got, err := c.configGet("maxmemory-policy")
			if err != nil || got != "allkeys-"+string(policy) {
				t.Fatalf("maxmemory-policy = %q, %v; want allkeys-%s", got, err, policy)
			}
			// OBJECT FREQ answers only under an LFU policy: proof the engine really switched.
			_, err = c.do("OBJECT", "FREQ", "k")
			var re *redisError
			if isLFU := err == nil; isLFU != (policy == LFU) || (err != nil && !errors.As(err, &re)) {
				t.Fatalf("policy %s: OBJECT FREQ error %v", policy, err)
			}
			if st := mustStatus(t, m, spec.Tenant); st.PID != pid || st.Applied.EvictionPolicy != policy {
				t.Fatalf("status after switching to %s: %+v", policy, st)
			}
		}
	})
	t.Run("memcached rejects lfu", func(t *testing.T) {
		m := startManager(t, testConfig(t, Memcached))
		spec := PartitionSpec{Tenant: "t/policy", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
		mustReconcile(t, m, spec)
		spec.EvictionPolicy = LFU
		err := m.Reconcile(context.Background(), []PartitionSpec{spec})
		if !errors.Is(err, ErrUnsupportedPolicy) || !strings.Contains(err.Error(), `partition "t/policy"`) {
			t.Fatalf("Reconcile with lfu on memcached: %v", err)
		}
		if st := mustStatus(t, m, spec.Tenant); st.State != Running || st.Applied.EvictionPolicy != LRU {
			t.Fatalf("the partition changed after a rejected spec: %+v", st)
		}
	})
}

func TestCrashedEngineRestartsWithBackoff(t *testing.T) {
	for _, engine := range bothEngines {
		t.Run(string(engine), func(t *testing.T) {
			var rec stateRecorder
			cfg := testConfig(t, engine)
			cfg.OnStateChange = rec.record
			m := startManager(t, cfg)
			spec := PartitionSpec{Tenant: "t/crash", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			mustReconcile(t, m, spec)
			newWorkload(t, engine, mustSocket(t, m, spec.Tenant)).set("k", 0, 100, 10)

			pid := mustStatus(t, m, spec.Tenant).PID
			for restart := 1; restart <= 2; restart++ {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "a restarted engine", func() bool {
					st := mustStatus(t, m, spec.Tenant)
					return st.State == Running && st.PID != pid
				})
				st := mustStatus(t, m, spec.Tenant)
				if st.Restarts != restart {
					t.Fatalf("restarts = %d, want %d", st.Restarts, restart)
				}
				pid = st.PID
			}

			var failed []string
			sawFailedThenRunning := false
			for _, s := range rec.of(spec.Tenant) {
				switch {
				case s.State == Failed:
					failed = append(failed, s.Message)
					if s.PID != 0 {
						t.Errorf("a failed partition reports pid %d", s.PID)
					}
				case s.State == Running && len(failed) > 0:
					sawFailedThenRunning = true
				}
			}
			if len(failed) != 2 || !sawFailedThenRunning {
				t.Fatalf("state changes: failed %q, running after: %v", failed, sawFailedThenRunning)
			}
			// Consecutive crashes back off longer: 100ms, then 200ms.
			for _, want := range []string{"signal: killed", "restarting in 100ms"} {
				if !strings.Contains(failed[0], want) {
					t.Errorf("first failure message %q lacks %q", failed[0], want)
				}
			}
			if !strings.Contains(failed[1], "restarting in 200ms") {
				t.Errorf("second failure message %q does not back off to 200ms", failed[1])
			}
			// Cache content is soft state: the restarted engine is empty but serves.
			st := mustStats(t, m, spec.Tenant)
			if st.Items != 0 || st.LimitBytes != 16*mib {
				t.Fatalf("restarted engine: %+v", st)
			}
			w := newWorkload(t, engine, mustSocket(t, m, spec.Tenant))
			w.set("k", 0, 10, 10)
			if w.read("k", 0, 10) != 10 {
				t.Fatal("restarted engine does not serve")
			}
		})
	}
}

func TestRemoveDrainsStopsDeletes(t *testing.T) {
	for _, engine := range bothEngines {
		t.Run(string(engine), func(t *testing.T) {
			cfg := testConfig(t, engine)
			var m *Manager
			var drained []string
			cfg.Drain = func(ctx context.Context, tenant string) error {
				// The proxy is told while the partition is Draining and no longer routable.
				if st, _ := m.Status(tenant); st.State != Draining {
					t.Errorf("drain hook saw state %s", st.State)
				}
				if _, _, ok := m.Endpoint(tenant); ok {
					t.Error("Endpoint offers a draining partition")
				}
				drained = append(drained, tenant)
				return nil
			}
			m = startManager(t, cfg)
			keep := PartitionSpec{Tenant: "t/keep", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			gone := PartitionSpec{Tenant: "t/gone", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			mustReconcile(t, m, keep, gone)
			st := mustStatus(t, m, gone.Tenant)
			dir := filepath.Dir(st.Address)

			mustReconcile(t, m, keep)

			if len(drained) != 1 || drained[0] != gone.Tenant {
				t.Fatalf("drained %v", drained)
			}
			if _, ok := m.Status(gone.Tenant); ok {
				t.Fatal("removed partition still listed")
			}
			if cmdlineMatches(st.PID, engineProcessName(engine), st.Address) {
				t.Fatalf("engine %d still running", st.PID)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("state dir %s: %v", dir, err)
			}
			if got := mustStatus(t, m, keep.Tenant); got.State != Running {
				t.Fatalf("kept partition: %+v", got)
			}
		})
	}
}

func engineProcessName(e Engine) string {
	if e == Redis {
		return "redis-server"
	}
	return "memcached"
}

func TestNewManagerAdoptsRunningEngines(t *testing.T) {
	for _, engine := range bothEngines {
		t.Run(string(engine), func(t *testing.T) {
			cfg := testConfig(t, engine)
			first, err := NewManager(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killEngines(t, cfg.Root) })
			a := PartitionSpec{Tenant: "t/a", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			b := PartitionSpec{Tenant: "t/b", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			dead := PartitionSpec{Tenant: "t/dead", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
			mustReconcile(t, first, a, b, dead)
			newWorkload(t, engine, mustSocket(t, first, a.Tenant)).set("k", 0, 5000, 100)
			pidA, pidB := mustStatus(t, first, a.Tenant).PID, mustStatus(t, first, b.Tenant).PID
			deadStatus := mustStatus(t, first, dead.Tenant)

			// The sidecar goes away; one engine dies while no manager watches.
			first.Close()
			if err := syscall.Kill(deadStatus.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the killed engine to be gone", func() bool {
				return !cmdlineMatches(deadStatus.PID, engineProcessName(engine), deadStatus.Address)
			})

			second := startManager(t, cfg)
			for tenant, pid := range map[string]int{a.Tenant: pidA, b.Tenant: pidB} {
				if st := mustStatus(t, second, tenant); st.State != Running || st.PID != pid || st.Applied.MemoryBytes != 16*mib {
					t.Fatalf("adopted %s: %+v (want pid %d)", tenant, st, pid)
				}
			}
			if _, ok := second.Status(dead.Tenant); ok {
				t.Fatal("adopted a dead engine")
			}
			deadDir := filepath.Dir(deadStatus.Address)
			for _, stale := range []string{deadStatus.Address, filepath.Join(deadDir, "pid")} {
				if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("stale %s left: %v", stale, err)
				}
			}

			// Reconcile the adopted set: a grows live, b goes, dead is gone for good.
			a.MemoryBytes = 32 * mib
			mustReconcile(t, second, a)
			st := mustStats(t, second, a.Tenant)
			if st.PID != pidA || st.LimitBytes != 32*mib || st.Items != 5000 {
				t.Fatalf("adopted a after growing: %+v", st)
			}
			if hits := newWorkload(t, engine, mustSocket(t, second, a.Tenant)).read("k", 0, 5000); hits != 5000 {
				t.Fatalf("adopted engine lost keys: %d of 5000", hits)
			}
			if cmdlineMatches(pidB, engineProcessName(engine), pathsFor(cfg.Root, b.Tenant).socket) {
				t.Fatal("b's adopted engine still runs")
			}
			if _, err := os.Stat(deadDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("dead partition's directory: %v", err)
			}

			// An adopted engine is not our child: its crash is noticed by polling and it restarts.
			if err := syscall.Kill(pidA, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the adopted engine's restart", func() bool {
				st := mustStatus(t, second, a.Tenant)
				return st.State == Running && st.PID != pidA && st.Restarts == 1
			})
			if st := mustStats(t, second, a.Tenant); st.LimitBytes != 32*mib {
				t.Fatalf("restarted with limit %d, want the reconciled 32 MiB", st.LimitBytes)
			}
		})
	}
}

func TestReconcileRejectsBadInputs(t *testing.T) {
	good := PartitionSpec{Tenant: "t/good", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
	tests := []struct {
		name    string
		engine  Engine
		bad     []PartitionSpec
		wantErr error
		wantMsg string
	}{
		{"zero memory", Redis, []PartitionSpec{{"t/bad", 0, LRU}}, ErrInvalidSpec, "must be positive"},
		{"negative memory", Memcached, []PartitionSpec{{"t/bad", -mib, LRU}}, ErrInvalidSpec, "must be positive"},
		{"below redis minimum", Redis, []PartitionSpec{{"t/bad", 2 * mib, LRU}}, ErrInvalidSpec, "below redis's minimum"},
		{"below memcached minimum", Memcached, []PartitionSpec{{"t/bad", 4 * mib, LRU}}, ErrInvalidSpec, "below memcached's minimum"},
		{"unknown policy", Redis, []PartitionSpec{{"t/bad", 16 * mib, "random"}}, ErrInvalidSpec, `unknown eviction policy "random"`},
		{"lfu on memcached", Memcached, []PartitionSpec{{"t/bad", 16 * mib, LFU}}, ErrUnsupportedPolicy, "segmented LRU"},
		{"duplicate tenant", Redis, []PartitionSpec{{"t/bad", 16 * mib, LRU}, {"t/bad", 32 * mib, LRU}}, ErrDuplicateTenant, "2 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := startManager(t, testConfig(t, tt.engine))
			err := m.Reconcile(context.Background(), append([]PartitionSpec{good}, tt.bad...))
			var pe *PartitionError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &pe) || pe.Tenant != "t/bad" ||
				!strings.Contains(err.Error(), `partition "t/bad"`) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Reconcile = %v; want %v naming t/bad and saying %q", err, tt.wantErr, tt.wantMsg)
			}
			if strings.Count(err.Error(), "t/bad") != 1 {
				t.Errorf("error reports t/bad more than once: %v", err)
			}
			if _, ok := m.Status("t/bad"); ok {
				t.Error("a partition was created for a bad spec")
			}
			if st := mustStatus(t, m, good.Tenant); st.State != Running {
				t.Errorf("the good partition is %s", st.State)
			}
		})
	}

	t.Run("bad spec keeps old", func(t *testing.T) {
		m := startManager(t, testConfig(t, Redis))
		mustReconcile(t, m, good)
		pid := mustStatus(t, m, good.Tenant).PID
		bad := good
		bad.MemoryBytes = -1
		if err := m.Reconcile(context.Background(), []PartitionSpec{bad}); !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("Reconcile = %v", err)
		}
		if st := mustStatus(t, m, good.Tenant); st.State != Running || st.PID != pid || st.Applied != good {
			t.Fatalf("after a bad spec: %+v", st)
		}
	})

	t.Run("no binary", func(t *testing.T) {
		cfg := testConfig(t, Memcached)
		cfg.BinaryPath = filepath.Join(t.TempDir(), "memcached")
		m := startManager(t, cfg)
		err := m.Reconcile(context.Background(), []PartitionSpec{good})
		if !errors.Is(err, ErrBinaryNotFound) || !strings.Contains(err.Error(), `partition "t/good"`) {
			t.Fatalf("Reconcile = %v; want ErrBinaryNotFound naming t/good", err)
		}
		if st := mustStatus(t, m, good.Tenant); st.State != Failed || !strings.Contains(st.Message, "not found") {
			t.Fatalf("status %+v", st)
		}
		if _, _, ok := m.Endpoint(good.Tenant); ok {
			t.Fatal("Endpoint offers a failed partition")
		}
	})

	t.Run("manager config", func(t *testing.T) {
		long := filepath.Join(t.TempDir(), strings.Repeat("x", maxRootLength))
		for name, cfg := range map[string]Config{
			"unknown engine": {Engine: "valkey", Root: t.TempDir()},
			"no root":        {Engine: Redis},
			"root too long":  {Engine: Redis, Root: long},
		} {
			if _, err := NewManager(context.Background(), cfg); err == nil {
				t.Errorf("%s: NewManager accepted %+v", name, cfg)
			}
		}
	})
}

func TestMemcachedUserMustReachTheRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("memcached drops to another user only when the manager runs as root")
	}
	cfg := testConfig(t, Memcached)
	cfg.Root = filepath.Join(t.TempDir(), "private", "root")
	if err := os.MkdirAll(cfg.Root, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(cfg.Root), 0o700); err != nil {
		t.Fatal(err)
	}
	m := startManager(t, cfg)
	err := m.Reconcile(context.Background(), []PartitionSpec{{"t/a", 16 * mib, LRU}})
	if err == nil || !strings.Contains(err.Error(), "cannot enter") || !strings.Contains(err.Error(), "private") {
		t.Fatalf("Reconcile = %v; want an error naming the unreachable directory", err)
	}
}

func TestStatsOfUnknownPartition(t *testing.T) {
	m := startManager(t, testConfig(t, Redis))
	if _, err := m.Stats(context.Background(), "t/none"); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("Stats = %v", err)
	}
	m.Close()
	if err := m.Reconcile(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reconcile after Close = %v", err)
	}
}

func TestEngineChangeReplacesAdoptedPartitions(t *testing.T) {
	cfg := testConfig(t, Redis)
	first, err := NewManager(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killEngines(t, cfg.Root) })
	spec := PartitionSpec{Tenant: "t/a", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
	mustReconcile(t, first, spec)
	old := mustStatus(t, first, spec.Tenant)
	first.Close()

	// The node's engine becomes memcached: the adopted redis partition is replaced.
	cfg.Engine = Memcached
	second := startManager(t, cfg)
	if st := mustStatus(t, second, spec.Tenant); st.Engine != Redis || st.PID != old.PID {
		t.Fatalf("adopted: %+v", st)
	}
	mustReconcile(t, second, spec)
	st := mustStats(t, second, spec.Tenant)
	if st.Engine != Memcached || st.LimitBytes != 16*mib {
		t.Fatalf("after the engine change: %+v", st)
	}
	if cmdlineMatches(old.PID, "redis-server", old.Address) {
		t.Fatal("the redis engine still runs")
	}
}

func TestMemcachedShrinkAcrossSlabClasses(t *testing.T) {
	m := startManager(t, testConfig(t, Memcached))
	spec := PartitionSpec{Tenant: "t/mixed", MemoryBytes: 64 * mib, EvictionPolicy: LRU}
	mustReconcile(t, m, spec)
	w := newWorkload(t, Memcached, mustSocket(t, m, spec.Tenant))
	// Four value sizes, so four slab classes share the pages.
	for i, size := range []int{100, 600, 3000, 12000} {
		w.set("s"+string(rune('a'+i)), 0, 16*mib/(size+60), size)
	}
	before := mustStats(t, m, spec.Tenant)
	if hits := w.read("sb", 0, 500); hits != 500 {
		t.Fatalf("hot keys before the shrink: %d of 500", hits)
	}
	spec.MemoryBytes = 12 * mib
	mustReconcile(t, m, spec)
	after := mustStats(t, m, spec.Tenant)
	t.Logf("items %d -> %d, used %d -> %d, data %d -> %d", before.Items, after.Items, before.UsedBytes, after.UsedBytes, before.DataBytes, after.DataBytes)
	if after.UsedBytes > 12*mib || after.DataBytes > 12*mib || after.PID != before.PID {
		t.Fatalf("after shrinking to 12 MiB: %+v", after)
	}
	if hits := w.read("sb", 0, 500); hits != 500 {
		t.Fatalf("hot keys after the shrink: %d of 500", hits)
	}
}
