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

// newRecorder returns a partition's curve recorder configured as the sidecar's, counting
// sizes with model: it is read at the partition's own grid (partition.curve), so its
// configured sizes are a placeholder.
func (s *Scenario) newRecorder(model *mrc.EngineModel) (*mrc.Recorder, error) {
	return mrc.NewRecorder(mrc.Config{
		Sizes:      []int64{1},
		SampleRate: s.sampleRate(),
		MaxBytes:   mrc.BudgetForKeys(DefaultMRCMaxTrackedKeys),
	}, model)
}

// access serves one read of a cache-aside client (GET, then SET on a miss) of a's object,
// which takes stored bytes in the engine, from the partition, and records both requests in
// the partition's curve as the sidecar records them.
func (p *partition) access(a workload.Access, h uint64, stored int64) (hit bool) {
	hit = p.cache.Access(a.Key, stored)
	if hit {
		p.recorder.Read(h, true, len(a.Key), int(a.Size))
		return true
	}
	p.recorder.Read(h, false, len(a.Key), mrc.UnknownValue)
	p.recorder.Write(h, len(a.Key), int(a.Size))
	return false
}

// curve reads the partition's curve as the sidecar exports it: at the grid that follows the
// partition's limit and its tenant's footprint (mrc.PartitionSizes), each size holding what
// the engine model says a partition of that limit holds.
func (p *partition) curve() (mrc.Curve, error) {
	model := p.recorder.Model()
	limit := max(p.memory, 1)
	now := p.recorder.Tracker().SnapshotAt([]int64{limit}, model.Capacity)
	grid, err := mrc.PartitionSizes(limit, int64(now.FootprintBytes)+model.Baseline(), DefaultMRCCurvePoints)
	if err != nil {
		return mrc.Curve{}, err
	}
	return p.recorder.Tracker().SnapshotAt(grid, model.Capacity), nil
}
