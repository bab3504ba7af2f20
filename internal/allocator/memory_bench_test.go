package allocator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// planChildEnv makes the test binary a child process that plans one fleet and prints
// planChildReport as JSON: the kernel's peak resident memory of a process (its rusage) is the
// only one that counts CP-SAT's native memory, and it covers one plan only in a process that
// made nothing else. Its value is "fleet tenants nodes memoryLimitBytes", fleet being
// "random" (benchSnapshot), "operator" (operatorFleetSnapshot) or "operator-change"
// (operatorChangeSnapshot).
const planChildEnv = "ALLOCATOR_PLAN_CHILD"

type planChildReport struct {
	Seconds   float64  `json:"seconds"`
	Hits      float64  `json:"hits"`
	StrictMet int      `json:"strictMet"`
	Strict    int      `json:"strict"`
	Status    string   `json:"status"`
	Fallback  string   `json:"fallback"`
	Notes     []string `json:"notes"`
	MaxRSSKiB int64    `json:"maxRSSKiB"`
	// Sampled every 10 ms: the most memory Go held (mapped, not released to the OS), and the
	// most resident memory outside it (C++, chiefly CP-SAT's, and the code).
	MaxGoBytes, MaxOutsideGoBytes int64
	// RSSAfterBytes is the resident memory once the plan is made: what the process keeps.
	RSSAfterBytes int64
}

// sampleMemory samples the process's resident memory and Go's share of it every 10 ms into
// rep until stop is closed.
func sampleMemory(rep *planChildReport, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		metrics.Read(samples)
		goBytes := int64(samples[0].Value.Uint64() - samples[1].Value.Uint64())
		rep.MaxGoBytes = max(rep.MaxGoBytes, goBytes)
		if rss, err := cpsat.ResidentBytes(); err == nil {
			rep.MaxOutsideGoBytes = max(rep.MaxOutsideGoBytes, rss-goBytes)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// memoryBenchOptions are the operator's: its default solverTimeLimit and one worker.
func memoryBenchOptions(limit int64) Options {
	return Options{TimeLimit: 10 * time.Second, Workers: 1, MemoryLimit: limit}
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(planChildEnv); spec != "" {
		os.Exit(runPlanChild(spec))
	}
	os.Exit(m.Run())
}

func runPlanChild(spec string) int {
	var fleet string
	var tenants, nodes int
	var limit int64
	if _, err := fmt.Sscanf(spec, "%s %d %d %d", &fleet, &tenants, &nodes, &limit); err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", planChildEnv, spec, err)
		return 2
	}
	s := benchSnapshot(tenants, nodes)
	opts := memoryBenchOptions(limit)
	switch fleet {
	case "operator":
		s = operatorFleetSnapshot(tenants, nodes)
	case "operator-change":
		var err error
		if s, err = operatorChangeSnapshot(tenants, nodes); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// The operator's default churn cap: 25% of the fleet's memory.
		opts.MaxChurnBytes = int64(nodes) * 4 * gib / 4
	}
	var rep planChildReport
	stopSampling, sampled := make(chan struct{}), make(chan struct{})
	go sampleMemory(&rep, stopSampling, sampled)
	start := time.Now()
	plan, err := Plan(context.Background(), s, opts)
	elapsed := time.Since(start)
	close(stopSampling)
	<-sampled
	rep.RSSAfterBytes, _ = cpsat.ResidentBytes()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rep.Seconds, rep.Hits = elapsed.Seconds(), plan.Summary.ExpectedHitsPerSecond
	rep.StrictMet, rep.Strict = plan.Summary.StrictMet, plan.Summary.StrictTenants
	rep.Status, rep.Fallback, rep.Notes, rep.MaxRSSKiB = plan.Solver.Status, plan.Solver.Fallback, plan.Notes, ru.Maxrss
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// operatorFleetSnapshot is the fleet of the operator's scale benchmark (test/scale) as its
// allocation loop sees it at the cold start: nodes of 4 GiB, 1 GB/s and 200k ops/s; strict
// tenants with a 64 MiB minimum and a hit-ratio objective of 0.7 or 0.8, no spread limit, each
// measured on one home node at 20 to 80 requests/s with the benchmark's miss-ratio curve, and
// no plan in force.
func operatorFleetSnapshot(tenants, nodes int) *planning.Snapshot {
	s := &planning.Snapshot{APIVersion: planning.APIVersion, Kind: planning.KindSnapshot, Cluster: "operator"}
	for j := range nodes {
		s.Nodes = append(s.Nodes, planning.Node{Name: fmt.Sprintf("node-%03d", j), MemoryBytes: 4 * gib, BandwidthBytesPerSecond: 1_000_000_000, OpsPerSecond: 200_000})
	}
	for i := range tenants {
		rate := float64(20 + 10*(i%7))
		s.Tenants = append(s.Tenants, planning.Tenant{
			ID: fmt.Sprintf("ns-%03d/tenant-%04d", i%(tenants/10+1), i), Class: planning.ClassStrict, Priority: 5,
			Objective:      &planning.Objective{HitRatio: ptr([]float64{0.7, 0.8}[i%2])},
			Memory:         planning.Memory{MinBytes: 64 * mib},
			Spread:         planning.Spread{MinNodes: 1},
			Rates:          []planning.NodeRate{{Node: s.Nodes[i%nodes].Name, RequestsPerSecond: rate, BytesPerSecond: 10000}},
			Observed:       planning.Observation{HitRatio: ptr(0.5 + 0.05*float64(i%8)), HitLatencySeconds: 0.0002, MissLatencySeconds: 0.002},
			MissRatioCurve: []planning.MissRatioPoint{{SizeBytes: 32 * mib, MissRatio: 0.6}, {SizeBytes: 128 * mib, MissRatio: 0.25}, {SizeBytes: 512 * mib, MissRatio: 0.1}},
		})
	}
	return s
}

// operatorChangeSnapshot is the operator fleet after the benchmark's 10% change: the greedy
// plan of operatorFleetSnapshot in force, and every tenth tenant raised to a 96 MiB minimum
// and a 0.85 hit-ratio objective.
func operatorChangeSnapshot(tenants, nodes int) (*planning.Snapshot, error) {
	s := operatorFleetSnapshot(tenants, nodes)
	plan, err := Plan(context.Background(), s, Options{DisableSolver: true})
	if err != nil {
		return nil, err
	}
	planned := make(map[string][]planning.Partition, len(plan.Tenants))
	for _, tp := range plan.Tenants {
		planned[tp.ID] = tp.Partitions
	}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		for _, p := range planned[t.ID] {
			t.Current.Partitions = append(t.Current.Partitions, planning.CurrentPartition{Node: p.Node, MemoryBytes: p.MemoryBytes})
		}
		if i%10 == 0 {
			t.Memory.MinBytes, t.Objective.HitRatio = 96*mib, ptr(0.85)
		}
	}
	return s, nil
}

// planInChild plans one fleet in a fresh process of this test binary.
func planInChild(tb testing.TB, fleet string, tenants, nodes int, limit int64) planChildReport {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", planChildEnv, fleet, tenants, nodes, limit))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("planning the %s fleet %dx%d with a memory limit of %d in a child: %v: %s", fleet, tenants, nodes, limit, err, stderr.Bytes())
	}
	var rep planChildReport
	if err := json.Unmarshal(out, &rep); err != nil {
		tb.Fatalf("child output %q: %v", out, err)
	}
	return rep
}

// BenchmarkSolverMemoryLimit plans 2,000 tenants x 200 nodes with the operator's solver
// settings (10 s, one worker) in child processes, for three fleets (the operator scale
// benchmark's at its cold start and after its 10% change, and the allocator benchmarks' random
// one): without a memory limit, then with
// BENCH_MEMORY_LIMIT_MIB (default 512) as the limit. It reports each one's peak resident
// memory (the kernel's, C++ included), time, expected hits and strict objectives met, and the
// limited run's ratios to the unlimited one's.
func BenchmarkSolverMemoryLimit(b *testing.B) {
	needSolver(b)
	limitMiB := int64(512)
	if v := os.Getenv("BENCH_MEMORY_LIMIT_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("BENCH_MEMORY_LIMIT_MIB=%q: want a positive number of MiB", v)
		}
		limitMiB = n
	}
	const tenants, nodes = 2000, 200
	for _, fleet := range []string{"operator", "operator-change", "random"} {
		b.Run(fleet, func(b *testing.B) {
			for range b.N {
				free := planInChild(b, fleet, tenants, nodes, 0)
				capped := planInChild(b, fleet, tenants, nodes, limitMiB<<20)
				for _, r := range []struct {
					name string
					rep  planChildReport
				}{{"no limit", free}, {fmt.Sprintf("limit %d MiB", limitMiB), capped}} {
					b.Logf("%s %dx%d, %s: peak RSS %d MiB (sampled peaks: Go %d MiB, outside Go %d MiB; after the plan %d MiB), %.1f s, %.0f hits/s, strict met %d/%d, solver %s, fallback %q, notes %q",
						fleet, tenants, nodes, r.name, r.rep.MaxRSSKiB>>10, r.rep.MaxGoBytes>>20, r.rep.MaxOutsideGoBytes>>20, r.rep.RSSAfterBytes>>20, r.rep.Seconds, r.rep.Hits, r.rep.StrictMet, r.rep.Strict, r.rep.Status, r.rep.Fallback, r.rep.Notes)
				}
				b.ReportMetric(float64(free.MaxRSSKiB>>10), "free-rss-MiB")
				b.ReportMetric(float64(capped.MaxRSSKiB>>10), "capped-rss-MiB")
				b.ReportMetric(float64(capped.MaxRSSKiB)/float64(free.MaxRSSKiB), "rss-capped/free")
				b.ReportMetric(capped.Hits/free.Hits, "hits-capped/free")
				b.ReportMetric(float64(capped.StrictMet-free.StrictMet), "strict-met-capped-free")
				b.ReportMetric(capped.Seconds/free.Seconds, "time-capped/free")
			}
		})
	}
}
