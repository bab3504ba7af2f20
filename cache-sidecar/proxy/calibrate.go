package proxy

import (
	"context"
	"time"

	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/internal/mrc"
)

// engineKind is the engine behind the proxy's protocol.
func (p *Proxy) engineKind() engine.Engine {
	if p.opts.Protocol == Memcached {
		return engine.Memcached
	}
	return engine.Redis
}

// engineStatsTimeout bounds reading an engine's numbers, at scrape time or to calibrate.
const engineStatsTimeout = time.Second

// engineStats reads the numbers of a partition's engine.
func (p *Proxy) engineStats(ctx context.Context, ps *partitionState) (engine.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, engineStatsTimeout)
	defer cancel()
	return engine.ReadStats(ctx, p.engineKind(), ps.engine)
}

// calibrateEvery calibrates the partition's engine model every MRCCalibrationInterval until
// ctx ends or the engine cannot be read.
func (p *Proxy) calibrateEvery(ctx context.Context, _ *tenant, ps *partitionState) error {
	ticker := time.NewTicker(p.opts.MRCCalibrationInterval)
	defer ticker.Stop()
	for {
		stats, err := p.engineStats(ctx, ps)
		if err != nil {
			return err
		}
		if err := calibrate(ps.curves, stats); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// calibrate fits the engine model to the engine's own accounting: memcached's slab classes
// from its settings; redis' memory per key beyond its baseline against the modelled size of
// the objects an LRU cache of its key count holds now.
func calibrate(curves *mrc.Recorder, stats engine.Stats) error {
	model := curves.Model()
	if stats.Slabs != nil {
		if current := model.Slabs(); current != nil && *current == *stats.Slabs {
			return nil
		}
		next, err := mrc.NewMemcachedModel(*stats.Slabs)
		if err != nil {
			return err
		}
		curves.SetModel(next)
		return nil
	}
	mean, sampled := curves.Tracker().RecentMeanSize(stats.Items)
	if sampled < minCalibrationSample {
		return nil
	}
	if next, ok := model.Calibrate(stats.UsedBytes, stats.BaselineBytes, stats.Items, mean); ok {
		curves.SetModel(next)
	}
	return nil
}

// minCalibrationSample: the modelled mean of fewer sampled objects is too noisy to calibrate.
const minCalibrationSample = 32

// bytesPerObject is the engine's memory per stored object beyond its baseline (0 when empty).
func bytesPerObject(stats engine.Stats) float64 {
	if stats.Items <= 0 {
		return 0
	}
	return float64(stats.UsedBytes-stats.BaselineBytes) / float64(stats.Items)
}
