package sim

import (
	"fmt"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// The engines whose memory accounting a scenario can simulate.
const (
	EngineRedis     = "redis"
	EngineMemcached = "memcached"
)

// The sidecar's defaults for every partition's curve: the keys its tracker remembers (the
// sampling rate falls as needed to stay within them) and the sizes it is reported at.
const (
	DefaultMRCMaxTrackedKeys = 8192
	DefaultMRCCurvePoints    = 16
)

// engineModel returns the byte model of the scenario's engine, as the sidecar starts with it
// (redis uncalibrated, memcached at its default slab settings). The simulated engine is the
// model itself, so there is nothing to calibrate.
func (s *Scenario) engineModel() (*mrc.EngineModel, error) {
	switch s.Engine {
	case EngineRedis, "":
		return mrc.NewRedisModel(), nil
	case EngineMemcached:
		return mrc.NewMemcachedModel(mrc.DefaultMemcachedSettings)
	}
	return nil, fmt.Errorf("sim: unknown engine %q (want %q or %q)", s.Engine, EngineRedis, EngineMemcached)
}

// objectBytes is what request a's object takes of a partition's limit in the engine.
func objectBytes(model *mrc.EngineModel, a workload.Access) int64 {
	return model.ObjectBytes(len(a.Key), int(a.Size))
}

// cacheCapacity is how many object bytes a cache whose engine limit is limit bytes holds.
func cacheCapacity(model *mrc.EngineModel, limit int64) int64 {
	return int64(model.Capacity(limit))
}

// newTracker returns a partition's curve tracker configured as the sidecar's: it is read at
// the partition's own grid (partition.curve), so its configured sizes are a placeholder.
func (s *Scenario) newTracker() (*mrc.Tracker, error) {
	return mrc.NewTracker(mrc.Config{
		Sizes:      []int64{1},
		SampleRate: s.sampleRate(),
		MaxBytes:   mrc.BudgetForKeys(DefaultMRCMaxTrackedKeys),
	})
}

// access serves one read of a cache-aside client (GET, then SET on a miss) from the
// partition and records it in the partition's curve as the proxy does: a hit's read carries
// the object's size; a miss's read does not (the engine does not have it), and the SET that
// follows brings it.
func (p *partition) access(key string, h uint64, size int64) (hit bool) {
	hit = p.cache.Access(key, size)
	if hit {
		p.tracker.ReadHash(h, size, true)
		return true
	}
	p.tracker.ReadHash(h, 0, false)
	p.tracker.WriteHash(h, size)
	return false
}

// curve reads the partition's curve as the sidecar exports it: at the grid that follows the
// partition's limit and its tenant's footprint (mrc.PartitionSizes), each size holding what
// the engine model says a partition of that limit holds.
func (p *partition) curve(model *mrc.EngineModel) (mrc.Curve, error) {
	limit := max(p.memory, 1)
	now := p.tracker.SnapshotAt([]int64{limit}, model.Capacity)
	grid, err := mrc.PartitionSizes(limit, int64(now.FootprintBytes)+model.Baseline(), DefaultMRCCurvePoints)
	if err != nil {
		return mrc.Curve{}, err
	}
	return p.tracker.SnapshotAt(grid, model.Capacity), nil
}
