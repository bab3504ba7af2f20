package mrc

import (
	"testing"
)

// TestTrackerSHARDSRegime: on key spaces of a million keys and more, sampling at 1% within the
// default 1 MiB budget (fixed-size SHARDS: the rate drops below 1% as the budget fills) keeps
// the curve within an MAE of 0.01 of the exact LRU curve, as the SHARDS paper reports. On
// small key spaces the sample holds few keys and the error grows; the test logs by how much.
func TestTrackerSHARDSRegime(t *testing.T) {
	if testing.Short() {
		t.Skip("exact LRU over millions of accesses")
	}
	tests := []struct {
		name     string
		keys     int
		accesses int
		skew     float64
		sizes    func() func(int) int64
		maxMAE   float64 // 0: only logged
		wantKeys int     // distinct keys the trace must touch (0: not checked)
	}{
		{name: "zipf 0.8, 2M keys, variable sizes", keys: 2000000, accesses: 4000000, skew: 0.8, maxMAE: 0.01, wantKeys: 1000000},
		{name: "zipf 0.7, 2M keys, variable sizes", keys: 2000000, accesses: 4000000, skew: 0.7, maxMAE: 0.01, wantKeys: 1000000},
		{name: "zipf 0.9, 100k keys", keys: 100000, accesses: 1000000, skew: 0.9},
		{name: "zipf 0.9, 10k keys", keys: 10000, accesses: 500000, skew: 0.9},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTraceBuilder(uint64(100+i), tt.keys, spreadSizes)
			next := b.zipf(0, tt.keys, tt.skew)
			var total int64
			for _, s := range b.sizes {
				total += s
			}
			sizes, err := GeometricSizes(total/1000, total, 32)
			if err != nil {
				t.Fatal(err)
			}
			exact, err := NewExactLRU(sizes)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := NewTracker(Config{Sizes: sizes, SampleRate: 0.01, MaxBytes: DefaultMaxBytes})
			if err != nil {
				t.Fatal(err)
			}
			for range tt.accesses {
				a := b.at(next())
				exact.Access(a.key, a.size)
				tr.AccessHash(a.hash, a.size)
			}
			want, got := exact.Curve(), tr.Snapshot()
			mae := meanAbsError(got.HitRatio, want.HitRatio)
			t.Logf("SHARDS %s: %d distinct keys, final rate %.4f, %d keys tracked, MAE %.4f", tt.name, want.TrackedKeys, got.SampleRate, got.TrackedKeys, mae)
			if want.TrackedKeys < tt.wantKeys {
				t.Errorf("the trace touched %d keys, want at least %d", want.TrackedKeys, tt.wantKeys)
			}
			if tt.maxMAE > 0 && mae > tt.maxMAE {
				t.Errorf("MAE %.4f > %.2f", mae, tt.maxMAE)
			}
		})
	}
}
