package sim

import (
	"fmt"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// partitionOf returns a fresh partition of limit bytes of a one-node scenario on engineName,
// created as a plan creates it.
func partitionOf(t *testing.T, engineName, cache string, limit int64) (*engine, *partition) {
	t.Helper()
	sc := oneTenant(1, 64*mib, "uniform:keys=1000,value=100", cache)
	sc.Engine = engineName
	e, err := newEngine(sc, allocator.PolicyEqual, 1)
	if err != nil {
		t.Fatal(err)
	}
	ts := e.tenants[0]
	if err := e.applyPartition(ts, 0, planning.Partition{Node: sc.Nodes[0].Name, MemoryBytes: limit}); err != nil {
		t.Fatal(err)
	}
	return e, ts.parts[0]
}

// TestPartitionHoldsWhatTheEngineHolds fills a partition with more objects than fit and
// checks it holds as many as the engine would: the per-object bytes are worked out by hand
// from redis' allocations (dict entry, key sds, robj, value sds, each rounded up to its
// jemalloc class) and memcached's default slab classes (item header, key, NUL, value, CRLF
// and CAS, rounded up to the chunk of its class).
func TestPartitionHoldsWhatTheEngineHolds(t *testing.T) {
	const limit = 1 << 20
	tests := []struct {
		engine     string
		value      int
		perObject  int64
		derivation string
	}{
		{EngineRedis, 20, 112, "32 entry + 32 key + 48 embstr (16 robj + 3 + 20 + 1)"},
		{EngineRedis, 100, 192, "32 entry + 32 key + 16 robj + 112 (3 + 100 + 1)"},
		{EngineRedis, 1000, 1104, "32 entry + 32 key + 16 robj + 1024 (5 + 1000 + 1)"},
		{EngineMemcached, 100, 192, "chunk of 192 for 48 + 17 + 102 + 8 = 175"},
		{EngineMemcached, 1000, 1184, "chunk of 1184 for 48 + 17 + 1002 + 8 = 1075"},
	}
	for _, tc := range tests {
		for _, cache := range []string{CacheLRU, CacheSampledLRU} {
			t.Run(fmt.Sprintf("%s value %d %s", tc.engine, tc.value, cache), func(t *testing.T) {
				e, p := partitionOf(t, tc.engine, cache, limit)
				keys := make([]string, 2*limit/tc.perObject)
				for i := range keys {
					keys[i] = fmt.Sprintf("key-%012d", i) // 16 bytes
					a := accessOf(keys[i], tc.value)
					p.access(a, keyhash.Sum64String(a.Key), objectBytes(e.model, a))
				}
				want := limit / tc.perObject
				if got := p.cache.Bytes() / tc.perObject; got != want || p.cache.Bytes()%tc.perObject != 0 {
					t.Errorf("holds %d bytes (%d objects of %d: %s), want %d objects", p.cache.Bytes(), got, tc.perObject, tc.derivation, want)
				}
				if cache != CacheLRU {
					return
				}
				// Exact LRU holds the most recent objects: count them from the newest down.
				held := int64(0)
				for i := len(keys) - 1; i >= 0; i-- {
					a := accessOf(keys[i], tc.value)
					if !p.cache.Access(a.Key, objectBytes(e.model, a)) {
						break
					}
					held++
				}
				if held != want {
					t.Errorf("the %d most recent objects are held, want %d (%s each)", held, want, tc.derivation)
				}
			})
		}
	}
}

// TestPartitionRecordsAsTheProxy feeds one access sequence to a simulated partition and, as
// the proxy records a look-aside client's requests through its own mrc.Recorder (a GET's
// reply: a hit with its value, or a miss; then the miss's SET with its value), to a recorder
// beside an LRU cache of the same limit: the curves read at the partition's grid must be the
// same.
func TestPartitionRecordsAsTheProxy(t *testing.T) {
	const limit = 2 * mib
	for _, engine := range []string{EngineRedis, EngineMemcached} {
		t.Run(engine, func(t *testing.T) {
			e, p := partitionOf(t, engine, CacheLRU, limit)
			cache, err := mrc.NewLRUCache(limit, nil)
			if err != nil {
				t.Fatal(err)
			}
			proxy, err := e.sc.newRecorder(e.model)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range requests(t, "zipf:keys=40000,skew=0.9,value=100-1000", 200000) {
				size, h := objectBytes(e.model, a), keyhash.Sum64String(a.Key)
				p.access(a, h, size)
				if cache.Access(a.Key, size) {
					proxy.Read(h, true, len(a.Key), int(a.Size))
				} else {
					proxy.Read(h, false, len(a.Key), mrc.UnknownValue)
					proxy.Write(h, len(a.Key), int(a.Size))
				}
			}
			got, err := p.curve()
			if err != nil {
				t.Fatal(err)
			}
			want := proxy.Tracker().SnapshotAt(got.Sizes, e.model.Capacity)
			if fmt.Sprint(got.HitRatio) != fmt.Sprint(want.HitRatio) || got.AchievedHitRatio != want.AchievedHitRatio {
				t.Errorf("simulated partition's curve %v (achieved %v), the proxy's recording gives %v (achieved %v)",
					got.HitRatio, got.AchievedHitRatio, want.HitRatio, want.AchievedHitRatio)
			}
			if len(got.Sizes) < DefaultMRCCurvePoints-2 || got.SampleRate > DefaultMRCSampleRate {
				t.Errorf("curve at %d sizes with sampling rate %v, want about %d sizes and at most %v", len(got.Sizes), got.SampleRate, DefaultMRCCurvePoints, DefaultMRCSampleRate)
			}
		})
	}
}

// TestCurveOutlivesResize checks that a resized partition keeps its curve, as the sidecar's.
func TestCurveOutlivesResize(t *testing.T) {
	e, p := partitionOf(t, EngineRedis, CacheLRU, mib)
	for _, a := range requests(t, "zipf:keys=20000,skew=0.9,value=100-1000", 20000) {
		p.access(a, keyhash.Sum64String(a.Key), objectBytes(e.model, a))
	}
	before, _ := p.curve()
	ts := e.tenants[0]
	if err := e.applyPartition(ts, 0, planning.Partition{Node: e.sc.Nodes[0].Name, MemoryBytes: 3 * mib}); err != nil {
		t.Fatal(err)
	}
	after, _ := ts.parts[0].curve()
	if ts.parts[0] != p || after.Requests != before.Requests || after.Requests == 0 {
		t.Errorf("after a resize the curve counts %d reads, before it %d", after.Requests, before.Requests)
	}
}

func accessOf(key string, value int) workload.Access {
	return workload.Access{Key: key, Size: int64(value)}
}

// TestScenarioFileKeepsTheEngine checks the engine survives the scenario file round trip.
func TestScenarioFileKeepsTheEngine(t *testing.T) {
	sc := oneTenant(1, mib, "uniform:keys=1000,value=100", CacheLRU)
	sc.Engine = EngineMemcached
	data, err := MarshalScenario(sc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseScenario(data, "")
	if err != nil {
		t.Fatal(err)
	}
	if back.Engine != EngineMemcached {
		t.Errorf("engine after a round trip through the file: %q, want %q", back.Engine, EngineMemcached)
	}
}
