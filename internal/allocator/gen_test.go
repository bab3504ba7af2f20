package allocator

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

const (
	gib = int64(1) << 30
	mib = int64(1) << 20
)

func ptr[T any](v T) *T { return &v }

// genConfig shapes a random snapshot.
type genConfig struct {
	tenants, nodes int
	// oversubscription is the sum of the tenants' working sets over the total memory.
	oversubscription float64
	// strictShare is the fraction of strict tenants.
	strictShare float64
	// cliffShare is the fraction of tenants whose curve is a cliff.
	cliffShare float64
	// maxSpread bounds spread.maxNodes (drawn in 1..maxSpread).
	maxSpread int
	// restricted makes some tenants allowed on a subset of nodes only.
	restricted bool
}

// randomSnapshot builds a plausible fleet: heterogeneous nodes, tenants with concave or cliff
// miss-ratio curves, observed hit ratios near the curve, request rates spread over orders of
// magnitude, and a current plan from an earlier interval.
func randomSnapshot(rng *rand.Rand, cfg genConfig) *planning.Snapshot {
	s := &planning.Snapshot{APIVersion: planning.APIVersion, Kind: planning.KindSnapshot, Cluster: "random"}
	var total int64
	for j := range cfg.nodes {
		mem := (16 + rng.Int64N(49)) * gib
		total += mem
		s.Nodes = append(s.Nodes, planning.Node{
			Name: fmt.Sprintf("node-%03d", j), MemoryBytes: mem,
			BandwidthBytesPerSecond: 1_250_000_000, OpsPerSecond: 100_000 + rng.Int64N(100_000),
		})
	}
	workingSet := float64(total) * cfg.oversubscription / float64(cfg.tenants)
	free := make([]int64, cfg.nodes)
	for j, n := range s.Nodes {
		free[j] = n.MemoryBytes
	}
	var totalOps float64
	for _, n := range s.Nodes {
		totalOps += float64(n.OpsPerSecond)
	}
	for k := range cfg.tenants {
		t := planning.Tenant{ID: fmt.Sprintf("team-%d/cache-%d", k%17, k)}
		ws := workingSet * math.Exp(rng.NormFloat64()*0.8)
		top := 0.5 + 0.45*rng.Float64()
		cliff := rng.Float64() < cfg.cliffShare
		for i := range 12 {
			size := ws * math.Pow(2, float64(i-8))
			var h float64
			if cliff {
				if size >= ws*0.5 {
					h = top
				} else {
					h = top * 0.05 * size / (ws * 0.5)
				}
			} else {
				h = top * (1 - math.Exp(-3*size/ws))
			}
			t.MissRatioCurve = append(t.MissRatioCurve, planning.MissRatioPoint{SizeBytes: max(1, int64(size)), MissRatio: 1 - h})
		}
		rate := totalOps * 0.25 / float64(cfg.tenants) * math.Exp(rng.NormFloat64()*0.7)
		bytesPerReq := 200 + 4000*rng.Float64()
		if rng.Float64() < cfg.strictShare {
			t.Class = planning.ClassStrict
			t.Priority = int32(rng.IntN(10))
			t.Objective = &planning.Objective{HitRatio: ptr(math.Round(top*(0.5+0.45*rng.Float64())*100) / 100)}
		}
		if rng.Float64() < 0.3 {
			t.Memory.MinBytes = int64(ws * 0.05)
		}
		if rng.Float64() < 0.3 {
			t.Memory.MaxBytes = int64(ws * 2)
		}
		spread := 1
		if cfg.maxSpread > 1 {
			spread = 1 + rng.IntN(cfg.maxSpread)
		}
		t.Spread = planning.Spread{MinNodes: 1, MaxNodes: int32(spread)}
		if cfg.restricted && rng.Float64() < 0.2 {
			for j := range cfg.nodes {
				if rng.Float64() < 0.5 || len(t.AllowedNodes) == 0 && j == cfg.nodes-1 {
					t.AllowedNodes = append(t.AllowedNodes, s.Nodes[j].Name)
				}
			}
		}
		// A current plan: the tenant on one or two nodes with some memory.
		current := int64(ws * 0.3 * rng.Float64())
		first := rng.IntN(cfg.nodes)
		nodes := []int{first}
		if spread > 1 && cfg.nodes > 1 {
			nodes = append(nodes, (first+1+rng.IntN(cfg.nodes-1))%cfg.nodes)
		}
		if len(t.AllowedNodes) > 0 {
			nodes = nodes[:0]
			for j, n := range s.Nodes {
				if n.Name == t.AllowedNodes[0] {
					nodes = append(nodes, j)
				}
			}
		}
		var placed int64
		for _, j := range nodes {
			share := min(current/int64(len(nodes)), free[j])
			free[j] -= share
			placed += share
			if share > 0 {
				t.Current.Partitions = append(t.Current.Partitions, planning.CurrentPartition{Node: s.Nodes[j].Name, MemoryBytes: share})
			}
			t.Rates = append(t.Rates, planning.NodeRate{Node: s.Nodes[j].Name, RequestsPerSecond: rate / float64(len(nodes)), BytesPerSecond: rate * bytesPerReq / float64(len(nodes))})
		}
		if placed > 0 {
			obs := math.Max(0, math.Min(1, top*(1-math.Exp(-3*float64(placed)/ws))*(0.9+0.1*rng.Float64())))
			if cliff {
				obs = 0.02
			}
			t.Observed = planning.Observation{HitRatio: ptr(obs), HitLatencySeconds: 0.0002, MissLatencySeconds: 0.002 + 0.01*rng.Float64()}
		}
		s.Tenants = append(s.Tenants, t)
	}
	return s
}
