package sim

import (
	"fmt"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// ExactCurve returns the exact LRU curve of accesses requests of spec (object size = key
// length + value size; a run counts what the engine allocates, about 1.2 times that in
// redis for 100-1000-byte values), warmed by warmup requests that are not counted: the
// ground truth for designing scenarios and for checking sampled curves.
func ExactCurve(spec workload.Spec, seed uint64, warmup, accesses int, sizes []int64) (mrc.Curve, error) {
	if warmup < 0 || accesses < 1 {
		return mrc.Curve{}, fmt.Errorf("sim: want warmup >= 0 and accesses >= 1, got %d and %d", warmup, accesses)
	}
	gen, err := workload.New(spec, seed)
	if err != nil {
		return mrc.Curve{}, err
	}
	warm, err := mrc.NewExactLRU(sizes)
	if err != nil {
		return mrc.Curve{}, err
	}
	// The exact stack cannot forget counts, so the warmup runs through the same stack and the
	// counted part is the difference of two curves' hit counts.
	for range warmup {
		a := gen.Next()
		warm.Access(a.Key, int64(len(a.Key))+a.Size)
	}
	before := warm.Curve()
	for range accesses {
		a := gen.Next()
		warm.Access(a.Key, int64(len(a.Key))+a.Size)
	}
	after := warm.Curve()
	out := mrc.Curve{Sizes: after.Sizes, HitRatio: make([]float64, len(after.Sizes)), SampleRate: 1, Accesses: float64(accesses)}
	total := after.Accesses
	for i := range after.Sizes {
		hitsAfter := after.HitRatio[i] * total
		hitsBefore := before.HitRatio[i] * before.Accesses
		out.HitRatio[i] = (hitsAfter - hitsBefore) / float64(accesses)
	}
	return out, nil
}
