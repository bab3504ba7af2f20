package loadgen

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// TestCacheWarmsUp runs a Zipf tenant against a cold redis-server (over TCP) and memcached
// (over a unix socket): the hit ratio rises as misses fill the cache, and the load generator's
// hit and miss counts are exactly the engine's own.
func TestCacheWarmsUp(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{EngineRedis, EngineMemcached} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			var address string
			var engineCounts func() (hits, misses uint64)
			if engine == EngineRedis {
				addr, sock := startRedisTCP(t)
				address = addr
				engineCounts = func() (uint64, uint64) {
					info := redisInfo(t, sock, "stats")
					return statUint(t, info, "keyspace_hits"), statUint(t, info, "keyspace_misses")
				}
			} else {
				sock := enginetest.StartMemcached(t)
				address = unixPrefix + sock
				engineCounts = func() (uint64, uint64) {
					stats := memcachedStats(t, sock)
					return statUint(t, stats, "get_hits"), statUint(t, stats, "get_misses")
				}
			}
			const tenant = "test/zipf"
			res, rows, metrics := runLoad(t, context.Background(), Config{
				Interval: dur(300 * time.Millisecond),
				Duration: dur(2400 * time.Millisecond),
				Tenants: []TenantConfig{{
					Name: tenant, Engine: engine, Address: address,
					Workload: "zipf:keys=20000,skew=0.9,value=50-500", Rate: 4000, Connections: 2,
				}},
			})
			got := res.Tenants[0]
			hits, misses := engineCounts()
			if got.Hits != hits || got.Misses != misses {
				t.Errorf("load generator counted %d hits and %d misses, the engine %d and %d", got.Hits, got.Misses, hits, misses)
			}
			if errs := got.AuthErrors + got.ConnectErrors + got.ReplyErrors + got.IOErrors; errs != 0 || got.Throttled != 0 {
				t.Errorf("%d errors (last %q), %d throttled", errs, got.LastError, got.Throttled)
			}
			// The misses answered after the end of the run (at most one per request in flight) get no fill.
			if got.Gets != got.Hits+got.Misses || got.Sets > got.Misses || got.Misses-got.Sets > 2*DefaultInflight || got.Ops != got.Gets {
				t.Errorf("ops %d, gets %d, sets %d, hits %d, misses %d: every access is a GET, every miss a fill", got.Ops, got.Gets, got.Sets, got.Hits, got.Misses)
			}

			rows = tenantRows(rows, tenant)
			if len(rows) < 6 {
				t.Fatalf("%d CSV rows for 8 intervals", len(rows))
			}
			first, last := floatColumn(t, rows[0], "hit_ratio"), floatColumn(t, rows[len(rows)-2], "hit_ratio")
			if last < first+0.1 {
				t.Errorf("hit ratio went from %.3f to %.3f: the cache did not warm up", first, last)
			}
			if sum := sumColumn(t, rows, "ops"); sum != got.Ops {
				t.Errorf("CSV rows add up to %d ops, the run counted %d", sum, got.Ops)
			}
			if sum := sumColumn(t, rows, "hits"); sum != got.Hits {
				t.Errorf("CSV rows add up to %d hits, the run counted %d", sum, got.Hits)
			}
			for _, r := range rows {
				if r["p50_ms"] == "" || floatColumn(t, r, "p50_ms") > floatColumn(t, r, "p99_ms") || r["target_rate"] != "4000" {
					t.Errorf("row %v", r)
				}
			}

			label := fmt.Sprintf("{tenant=%q}", tenant)
			for name, want := range map[string]uint64{
				"cacheqos_loadgen_operations_total" + label:                                                    got.Ops,
				"cacheqos_loadgen_hits_total" + label:                                                          got.Hits,
				"cacheqos_loadgen_misses_total" + label:                                                        got.Misses,
				"cacheqos_loadgen_throttled_total" + label:                                                     0,
				fmt.Sprintf("cacheqos_loadgen_requests_total{op=%q,tenant=%q}", "get", tenant):                 got.Gets,
				fmt.Sprintf("cacheqos_loadgen_requests_total{op=%q,tenant=%q}", "set", tenant):                 got.Sets,
				fmt.Sprintf("cacheqos_loadgen_request_duration_seconds_count{op=%q,tenant=%q}", "get", tenant): got.Gets,
				fmt.Sprintf("cacheqos_loadgen_errors_total{kind=%q,tenant=%q}", "auth", tenant):                0,
				fmt.Sprintf("cacheqos_loadgen_errors_total{kind=%q,tenant=%q}", "io", tenant):                  0,
				"cacheqos_loadgen_target_rate" + label:                                                         4000,
				"cacheqos_loadgen_connections" + label:                                                         0,
			} {
				if v, ok := metrics[name]; !ok || v != float64(want) {
					t.Errorf("%s = %v (present %v), want %d", name, v, ok, want)
				}
			}
		})
	}
}

// TestRatePacing counts the accesses of paced tenants over a few seconds: each gets its target
// rate within 10%, whatever its connections and in-flight bound.
func TestRatePacing(t *testing.T) {
	t.Parallel()
	_, sock := startRedisTCP(t)
	const seconds = 3
	tenants := []TenantConfig{
		{Name: "test/steady", Rate: 1500, Connections: 3, Inflight: 4},
		{Name: "test/slow", Rate: 200, Connections: 1, Inflight: 2},
		{Name: "test/odd", Rate: 777, Connections: 2},
	}
	for i := range tenants {
		tenants[i].Engine, tenants[i].Address = EngineRedis, unixPrefix+sock
		tenants[i].Workload = "uniform:keys=1000,value=100"
	}
	res, rows, _ := runLoad(t, context.Background(), Config{Interval: dur(time.Second), Duration: dur(seconds * time.Second), Tenants: tenants})
	for i, tc := range tenants {
		got := res.Tenants[i]
		want := tc.Rate * seconds
		if !within(float64(got.Ops), want, 0.10) {
			t.Errorf("%s: %d accesses in %ds, want %.0f ± 10%%", tc.Name, got.Ops, seconds, want)
		}
		if len(tenantRows(rows, tc.Name)) < seconds {
			t.Errorf("%s: %d CSV rows for %d intervals", tc.Name, len(tenantRows(rows, tc.Name)), seconds)
		}
	}
}

// TestWriteFraction checks the share of write SETs, and that every request the load
// generator counts reached the engine (INFO commandstats).
func TestWriteFraction(t *testing.T) {
	t.Parallel()
	_, sock := startRedisTCP(t)
	res, _, _ := runLoad(t, context.Background(), Config{Duration: dur(1500 * time.Millisecond), Tenants: []TenantConfig{{
		Name: "test/writes", Engine: EngineRedis, Address: unixPrefix + sock, Rate: 4000, WriteFraction: 0.3,
		Workload: "uniform:keys=2000,value=10-2000/log",
	}}})
	got := res.Tenants[0]
	if gets := redisCalls(t, sock, "get"); gets != got.Gets {
		t.Errorf("redis served %d GETs, the load generator counted %d", gets, got.Gets)
	}
	if sets := redisCalls(t, sock, "set"); sets != got.Sets {
		t.Errorf("redis served %d SETs, the load generator counted %d", sets, got.Sets)
	}
	writes := got.Ops - got.Gets
	if got.Sets != writes+got.Misses {
		t.Errorf("%d SETs, want %d writes + %d fills", got.Sets, writes, got.Misses)
	}
	if share := float64(writes) / float64(got.Ops); share < 0.25 || share > 0.35 {
		t.Errorf("writes are %.3f of %d accesses, want 0.3", share, got.Ops)
	}
}

// TestStartStop runs a tenant only from 1 s to 2 s of a 3 s run: before and after, its CSV
// rows show no load and no connection.
func TestStartStop(t *testing.T) {
	t.Parallel()
	_, sock := startRedisTCP(t)
	const late = "test/noisy"
	res, rows, _ := runLoad(t, context.Background(), Config{
		Interval: dur(500 * time.Millisecond), Duration: dur(3 * time.Second),
		Tenants: []TenantConfig{
			{Name: "test/steady", Engine: EngineRedis, Address: unixPrefix + sock, Rate: 500, Workload: "zipf:keys=100,skew=1"},
			{Name: late, Engine: EngineRedis, Address: unixPrefix + sock, Rate: 2000, Workload: "scan:keys=1000",
				Start: dur(time.Second), Stop: dur(2 * time.Second)},
		},
	})
	if got := res.Tenants[1].Ops; !within(float64(got), 2000, 0.15) {
		t.Errorf("the late tenant ran %d accesses in its second, want about 2000", got)
	}
	for _, r := range tenantRows(rows, late) {
		elapsed := floatColumn(t, r, "elapsed_seconds")
		idle := elapsed < 1 || elapsed > 2.5
		if idle && (r["ops"] != "0" || r["connections"] != "0") {
			t.Errorf("at %.1fs the late tenant shows load: %v", elapsed, r)
		}
		if elapsed > 1.2 && elapsed < 1.9 && r["ops"] == "0" {
			t.Errorf("at %.1fs the late tenant shows no load: %v", elapsed, r)
		}
	}
}

// TestReconnect kills the load generator's connections mid-run (CLIENT KILL): the requests
// lost with them are io errors, and the connections come back.
func TestReconnect(t *testing.T) {
	t.Parallel()
	_, sock := startRedisTCP(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Second)
		redisCommand(t, sock, "CLIENT", "KILL", "TYPE", "normal")
	}()
	res, rows, _ := runLoad(t, ctx, Config{Interval: dur(500 * time.Millisecond), Duration: dur(3 * time.Second), Tenants: []TenantConfig{{
		Name: "test/victim", Engine: EngineRedis, Address: unixPrefix + sock, Rate: 2000, Connections: 2,
		Workload: "uniform:keys=1000",
	}}})
	wg.Wait()
	got := res.Tenants[0]
	if got.IOErrors == 0 || !strings.HasPrefix(got.LastError, "io: ") {
		t.Errorf("%d io errors, last error %q; want the killed connections' requests", got.IOErrors, got.LastError)
	}
	if !within(float64(got.Ops), 6000, 0.15) {
		t.Errorf("%d accesses in 3 s at 2000/s: the connections did not come back", got.Ops)
	}
	if last := rows[len(rows)-2]; last["connections"] != "2" || last["ops"] == "0" {
		t.Errorf("after the kill: %v", last)
	}
}

// TestTimeout blocks redis (DEBUG SLEEP) for longer than the request timeout: requests time out
// as io errors, and the load resumes once the engine answers again.
func TestTimeout(t *testing.T) {
	t.Parallel()
	_, sock := startRedisTCP(t, "--enable-debug-command", "yes")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(500 * time.Millisecond)
		redisCommand(t, sock, "DEBUG", "SLEEP", "1")
	}()
	res, rows, _ := runLoad(t, context.Background(), Config{
		Interval: dur(500 * time.Millisecond), Duration: dur(2500 * time.Millisecond), Timeout: dur(300 * time.Millisecond),
		Tenants: []TenantConfig{{Name: "test/patient", Engine: EngineRedis, Address: unixPrefix + sock, Rate: 1000, Workload: "uniform:keys=100"}},
	})
	wg.Wait()
	got := res.Tenants[0]
	if got.IOErrors == 0 {
		t.Errorf("no io errors while redis slept; last error %q", got.LastError)
	}
	if last := rows[len(rows)-2]; last["ops"] == "0" {
		t.Errorf("no load after redis woke up: %v", last)
	}
}

// TestUnreachable points a tenant at a port nobody listens on and at a missing unix socket:
// connect errors are counted and reported, and the run ends normally.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	res, rows, _ := runLoad(t, context.Background(), Config{Duration: dur(700 * time.Millisecond), Tenants: []TenantConfig{
		{Name: "test/tcp", Engine: EngineRedis, Address: net.JoinHostPort("127.0.0.1", freePort(t)), Workload: "scan:keys=10"},
		{Name: "test/unix", Engine: EngineMemcached, Address: unixPrefix + t.TempDir() + "/absent.sock", Workload: "scan:keys=10"},
	}})
	for i, got := range res.Tenants {
		if got.ConnectErrors == 0 || got.Ops != 0 || !strings.Contains(got.LastError, "connect: ") {
			t.Errorf("tenant %d: %+v", i, got)
		}
	}
	if len(rows) != 2 || rows[0]["connect_errors"] == "0" || rows[0]["last_error"] == "" || rows[0]["hit_ratio"] != "" || rows[0]["p50_ms"] != "" {
		t.Errorf("CSV rows %v", rows)
	}
}
