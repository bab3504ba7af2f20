package mrc

import (
	"math"
	"slices"
	"testing"
)

// TestPartitionSizes: a partition's grid follows its own size and its tenant's footprint, not
// a global range: from a sixteenth of the smaller (at least 64 KiB) to twice the larger, a
// third of the points within a factor 1.5 of the partition's size, and that size itself. A
// tenant of a few MiB gets its points where its curve rises, not from 16 MiB up.
func TestPartitionSizes(t *testing.T) {
	const mib = 1 << 20
	// snap is how far a grid size may sit from the value it was snapped from (2^(1/32)).
	snap := math.Exp2(1.0 / (2 * gridSteps))
	for _, tc := range []struct {
		name               string
		current, footprint int64
		n                  int
	}{
		{"a small tenant", 1 * mib, 3 * mib, 16},
		{"a partition larger than its tenant's footprint", 64 * mib, 5 * mib, 16},
		{"a large tenant", 2 << 30, 40 << 30, 16},
		{"the fewest points", 8 * mib, 8 * mib, 3},
		{"the most points", 100 * mib, 1 << 30, MaxCurveSizes},
		{"a tiny partition", 100 << 10, 200 << 10, 12},
		{"no footprint yet", 4 * mib, 0, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sizes, err := PartitionSizes(tc.current, tc.footprint, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(sizes) > tc.n || len(sizes) < tc.n*3/4 {
				t.Errorf("%d sizes, want at most %d and most of them: %v", len(sizes), tc.n, sizes)
			}
			if err := ValidateSizes(sizes); err != nil {
				t.Errorf("%v: %v", sizes, err)
			}
			if !slices.Contains(sizes, tc.current) {
				t.Errorf("%v lacks the partition's size %d", sizes, tc.current)
			}
			lo := max(min(tc.current, max(tc.footprint, 1))/16, 64<<10)
			hi := max(2*max(tc.current, tc.footprint), 2*lo)
			if first := float64(sizes[0]); first < float64(lo)/snap || first > float64(lo)*snap {
				t.Errorf("the grid starts at %d, want %d (a sixteenth of the smaller, at least 64 KiB)", sizes[0], lo)
			}
			if last := float64(sizes[len(sizes)-1]); last < float64(hi)/snap || last > float64(hi)*snap {
				t.Errorf("the grid ends at %d, want %d (twice the larger)", sizes[len(sizes)-1], hi)
			}
			near := 0
			for _, s := range sizes {
				if float64(s) >= float64(tc.current)/1.5/snap && float64(s) <= float64(tc.current)*1.5*snap {
					near++
				}
			}
			if near < tc.n/3 {
				t.Errorf("%d sizes within a factor 1.5 of %d, want at least %d: %v", near, tc.current, tc.n/3, sizes)
			}
		})
	}
	for _, bad := range []struct {
		current, footprint int64
		n                  int
	}{{0, mib, 16}, {-1, mib, 16}, {mib, mib, 2}, {mib, mib, MaxCurveSizes + 1}} {
		if got, err := PartitionSizes(bad.current, bad.footprint, bad.n); err == nil {
			t.Errorf("PartitionSizes(%d, %d, %d) = %v, want an error", bad.current, bad.footprint, bad.n, got)
		}
	}
}
