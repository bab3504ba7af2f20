package allocation

import (
	"testing"
	"time"
)

func TestHoldForAdmission(t *testing.T) {
	const interval = 30 * time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type look struct {
		at       time.Duration
		awaiting int
		hold     bool
	}
	for _, tt := range []struct {
		name    string
		planned bool
		looks   []look
	}{
		{"nothing awaited", false, []look{{0, 0, false}, {time.Second, 0, false}}},
		{"no decision yet waits past an interval", false, []look{{0, 2000, true}, {31 * time.Second, 2000, true}, {4 * time.Minute, 2000, true}}},
		{"decisions under way", false, []look{{0, 2000, true}, {20 * time.Second, 1500, true}, {45 * time.Second, 900, true}, {70 * time.Second, 10, true}, {72 * time.Second, 0, false}}},
		{"decisions stopped for an interval", false, []look{{0, 50, true}, {10 * time.Second, 3, true}, {39 * time.Second, 3, true}, {40 * time.Second, 3, false}, {80 * time.Second, 3, false}}},
		{"at most ten intervals", false, []look{{0, 100, true}, {290 * time.Second, 99, true}, {299 * time.Second, 98, true}, {300 * time.Second, 97, false}}},
		{"a new wait after none was awaited", false, []look{{0, 5, true}, {10 * time.Second, 1, true}, {41 * time.Second, 1, false}, {50 * time.Second, 0, false}, {60 * time.Second, 3, true}, {95 * time.Second, 3, true}}},
		// One new tenant whose admission keeps failing holds a planned cluster one interval.
		{"a planned cluster waits at most an interval", true, []look{{0, 1, true}, {29 * time.Second, 1, true}, {30 * time.Second, 1, false}, {5 * time.Minute, 1, false}}},
		{"a planned cluster waits for a batch", true, []look{{0, 200, true}, {5 * time.Second, 120, true}, {12 * time.Second, 0, false}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var s clusterState
			for _, l := range tt.looks {
				if got := s.holdForAdmission(l.awaiting, tt.planned, interval, start.Add(l.at)); got != l.hold {
					t.Errorf("at %v with %d awaiting: hold %v, want %v", l.at, l.awaiting, got, l.hold)
				}
			}
		})
	}
}
