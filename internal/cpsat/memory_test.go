package cpsat

import (
	"context"
	"math/rand/v2"
	"runtime/metrics"
	"testing"
	"time"
)

// residentOutsideGo is the process's resident memory Go does not hold (C and C++ heaps and
// the code): Go's mapped memory not released to the system is taken off.
func residentOutsideGo(t *testing.T) int64 {
	t.Helper()
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	rss, err := ResidentBytes()
	if err != nil {
		t.Fatal(err)
	}
	return rss - int64(samples[0].Value.Uint64()-samples[1].Value.Uint64())
}

// TestSolveHandsBackItsHeap: the C++ heap a solve grows does not stay resident after it
// (glibc keeps freed memory for later allocations unless trimmed). Without the trim, the
// process kept 84 to 88% of such a growth (two sizes of this model).
func TestSolveHandsBackItsHeap(t *testing.T) {
	needSolver(t)
	const n = 300
	r := rand.New(rand.NewPCG(1, 2))
	cost := make([][]int64, n)
	for i := range cost {
		cost[i] = make([]int64, n)
		for j := range cost[i] {
			cost[i][j] = int64(r.IntN(1000))
		}
	}
	m, _ := assignment(cost)
	before := residentOutsideGo(t)
	peaks := make(chan int64)
	stop := make(chan struct{})
	go func() {
		var peak int64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				peaks <- peak
				return
			case <-tick.C:
				peak = max(peak, residentOutsideGo(t))
			}
		}
	}()
	if _, err := Solve(context.Background(), m, Params{Workers: 1, TimeLimit: time.Second}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	peak := <-peaks
	after := residentOutsideGo(t)
	grown, kept := peak-before, after-before
	t.Logf("resident outside Go: %d MiB before, %d MiB at the peak, %d MiB after", before>>20, peak>>20, after>>20)
	if grown < 64<<20 {
		t.Fatalf("the solve grew the C++ heap by %d MiB only: too little to tell", grown>>20)
	}
	if kept > grown/4 {
		t.Errorf("%d MiB of the solve's %d MiB stayed resident after it", kept>>20, grown>>20)
	}
}
