package curve

import (
	"math"
	"testing"
)

func TestMerge(t *testing.T) {
	local := []Point{{SizeBytes: 100, HitRatio: 0.2}, {SizeBytes: 200, HitRatio: 0.5}, {SizeBytes: 400, HitRatio: 0.8}}
	tests := []struct {
		name  string
		nodes []NodeCurve
		want  []Point
	}{
		{"one node: its own curve", []NodeCurve{{Points: local, RequestsPerSecond: 10}}, local},
		// Two nodes with half the keys each: a local size s is a total size of 2s.
		{"two equal nodes", []NodeCurve{{Points: local, RequestsPerSecond: 5}, {Points: local, RequestsPerSecond: 5}},
			[]Point{{SizeBytes: 200, HitRatio: 0.2}, {SizeBytes: 400, HitRatio: 0.5}, {SizeBytes: 800, HitRatio: 0.8}}},
		{"no traffic measured: equal shares", []NodeCurve{{Points: local}, {Points: local}},
			[]Point{{SizeBytes: 200, HitRatio: 0.2}, {SizeBytes: 400, HitRatio: 0.5}, {SizeBytes: 800, HitRatio: 0.8}}},
		{"a node without a curve is left out", []NodeCurve{{Points: local, RequestsPerSecond: 10}, {RequestsPerSecond: 10}}, local},
		{"nothing to merge", []NodeCurve{{RequestsPerSecond: 3}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(tt.nodes, 1e12, 64)
			if len(got) != len(tt.want) {
				t.Fatalf("Merge = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].SizeBytes != tt.want[i].SizeBytes || math.Abs(got[i].HitRatio-tt.want[i].HitRatio) > 1e-9 {
					t.Errorf("point %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
	if got := Merge([]NodeCurve{{Points: local, RequestsPerSecond: 1}}, 250, 64); len(got) != 2 {
		t.Errorf("a 250-byte bound kept %v", got)
	}
	if got := Merge([]NodeCurve{{Points: local, RequestsPerSecond: 1}}, 1e12, 1); len(got) != 1 {
		t.Errorf("a one-point bound kept %v", got)
	}
}
