package engine

import (
	"testing"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// TestReadStatsCalibrationFigures: what the proxy calibrates its curves with, read from real
// engines: redis' baseline (startup memory and clients) within its used memory, memcached's
// slab settings (its defaults here).
func TestReadStatsCalibrationFigures(t *testing.T) {
	redis, err := ReadStats(t.Context(), Redis, enginetest.StartRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	if redis.BaselineBytes <= 0 || redis.BaselineBytes > redis.UsedBytes || redis.Slabs != nil {
		t.Errorf("redis: baseline %d of %d used, slabs %+v", redis.BaselineBytes, redis.UsedBytes, redis.Slabs)
	}
	memcached, err := ReadStats(t.Context(), Memcached, enginetest.StartMemcached(t))
	if err != nil {
		t.Fatal(err)
	}
	if memcached.Slabs == nil || *memcached.Slabs != mrc.DefaultMemcachedSettings || memcached.BaselineBytes != 0 {
		t.Errorf("memcached: slabs %+v, baseline %d", memcached.Slabs, memcached.BaselineBytes)
	}
	if _, err := ReadStats(t.Context(), "valkey", "/nonexistent"); err == nil {
		t.Error("an unknown engine was read")
	}
}

// FuzzSlabSettings: any `stats settings` values give settings or an error, never a panic, and
// settings that parse make a model or a clear error.
func FuzzSlabSettings(f *testing.F) {
	f.Add("48", "1.25", "524288", "1048576", "yes")
	f.Add("0", "1", "1", "1", "no")
	f.Fuzz(func(t *testing.T, chunk, factor, chunkMax, itemMax, cas string) {
		s, err := slabSettings(map[string]string{"chunk_size": chunk, "growth_factor": factor,
			"slab_chunk_max": chunkMax, "item_size_max": itemMax, "cas_enabled": cas})
		if err != nil {
			return
		}
		if m, err := mrc.NewMemcachedModel(*s); err == nil && m.ObjectBytes(10, 100) <= 0 {
			t.Errorf("settings %+v size an object at %d bytes", s, m.ObjectBytes(10, 100))
		}
	})
}
