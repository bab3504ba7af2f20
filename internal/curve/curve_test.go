package curve

import (
	"math"
	"math/rand/v2"
	"testing"
)

func mustFit(t testing.TB, pts []Point) *Curve {
	t.Helper()
	c, err := Fit(pts)
	if err != nil {
		t.Fatalf("Fit(%v): %v", pts, err)
	}
	return c
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestFitInterpolatesAndIsFlatBeyond(t *testing.T) {
	c := mustFit(t, []Point{{100, 0.5}, {200, 0.7}, {400, 0.8}})
	cases := []struct {
		size int64
		want float64
	}{
		{0, 0}, {-5, 0}, {50, 0.25}, {100, 0.5}, {150, 0.6}, {300, 0.75}, {400, 0.8}, {10_000, 0.8},
	}
	for _, tc := range cases {
		if got := c.At(tc.size); !near(got, tc.want, 1e-12) {
			t.Errorf("At(%d) = %v, want %v", tc.size, got, tc.want)
		}
	}
	if h, s := c.Max(); h != 0.8 || s != 400 {
		t.Errorf("Max() = %v at %d, want 0.8 at 400", h, s)
	}
}

func TestFitIsMonotoneOnNoisySamples(t *testing.T) {
	// Non-monotone samples are pooled: more memory never predicts fewer hits.
	c := mustFit(t, []Point{{100, 0.6}, {200, 0.5}, {300, 0.7}, {400, 0.65}, {500, 0.9}})
	prev := -1.0
	for s := int64(0); s <= 600; s += 10 {
		h := c.At(s)
		if h < prev {
			t.Fatalf("At(%d) = %v < At(%d) = %v", s, h, s-10, prev)
		}
		prev = h
	}
	// Pooled values: (0.6+0.5)/2 at 100 and 200, (0.7+0.65)/2 at 300 and 400.
	if got := c.At(200); !near(got, 0.55, 1e-12) {
		t.Errorf("At(200) = %v, want 0.55", got)
	}
	if got := c.At(400); !near(got, 0.675, 1e-12) {
		t.Errorf("At(400) = %v, want 0.675", got)
	}
}

func TestFitRepeatedSizesKeepTheLast(t *testing.T) {
	// Soft-QoS: a new hit rate at a size already in the table replaces the old one; repeated
	// sizes must neither crash nor divide by zero (Maxperf's Neville hole).
	c := mustFit(t, []Point{{100, 0.2}, {100, 0.4}, {100, 0.4}, {200, 0.6}, {100, 0.5}})
	if got := c.At(100); got != 0.5 {
		t.Errorf("At(100) = %v, want the last sample 0.5", got)
	}
	single := mustFit(t, []Point{{100, 0.3}, {100, 0.3}})
	if got := single.At(50); !near(got, 0.15, 1e-12) {
		t.Errorf("single-size curve At(50) = %v, want 0.15", got)
	}
}

func TestFitRejectsBadPoints(t *testing.T) {
	cases := map[string][]Point{
		"empty":         nil,
		"negative size": {{-1, 0.5}},
		"ratio above 1": {{10, 1.5}},
		"negative":      {{10, -0.1}},
		"NaN":           {{10, math.NaN()}},
	}
	for name, pts := range cases {
		if _, err := Fit(pts); err == nil {
			t.Errorf("%s: Fit succeeded, want an error", name)
		}
	}
}

func TestFitZeroSizePointIsAnchored(t *testing.T) {
	c := mustFit(t, []Point{{0, 0.4}, {100, 0.8}})
	if got := c.At(0); got != 0 {
		t.Errorf("At(0) = %v, want 0", got)
	}
	if got := c.At(50); !near(got, 0.4, 1e-12) {
		t.Errorf("At(50) = %v, want 0.4 (line from the (0,0) anchor)", got)
	}
}

func TestMinSize(t *testing.T) {
	c := mustFit(t, []Point{{100, 0.5}, {200, 0.7}, {400, 0.8}})
	cases := []struct {
		target float64
		want   int64
		ok     bool
	}{
		{0, 0, true}, {-1, 0, true}, {0.25, 50, true}, {0.5, 100, true}, {0.6, 150, true},
		{0.8, 400, true}, {0.80001, 0, false}, {1, 0, false},
	}
	for _, tc := range cases {
		got, ok := c.MinSize(tc.target)
		if got != tc.want || ok != tc.ok {
			t.Errorf("MinSize(%v) = %d, %v; want %d, %v", tc.target, got, ok, tc.want, tc.ok)
		}
		if ok && c.At(got) < tc.target-1e-12 {
			t.Errorf("MinSize(%v) = %d but At(%d) = %v", tc.target, got, got, c.At(got))
		}
	}
}

func TestMinSizeIsStableUnderNoise(t *testing.T) {
	// Noisy non-monotone samples of hr = 0.9(1 - e^{-C/1000}) still give a minimum size close to
	// the true one (Maxperf hole: "noisy non-monotone samples give a stable minimum size").
	truth := func(s float64) float64 { return 0.9 * (1 - math.Exp(-s/1000)) }
	trueMin := -1000 * math.Log(1-0.6/0.9)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		var pts []Point
		for s := 100; s <= 5000; s += 100 {
			pts = append(pts, Point{SizeBytes: int64(s), HitRatio: math.Max(0, truth(float64(s))+0.03*(rng.Float64()*2-1))})
		}
		got, ok := mustFit(t, pts).MinSize(0.6)
		if !ok || math.Abs(float64(got)-trueMin)/trueMin > 0.15 {
			t.Errorf("trial %d: MinSize(0.6) = %d, %v; true minimum %.0f", trial, got, ok, trueMin)
		}
	}
}

func TestCorrectedRescalesSize(t *testing.T) {
	// The MRC says 0.6 at 200 bytes but the engine only got 0.5 there (per-key overhead): the
	// curve reaches 0.5 at 100 bytes, so the engine behaves as if it had half the memory.
	c := mustFit(t, []Point{{100, 0.5}, {200, 0.6}, {400, 0.8}})
	got := c.Corrected(Point{SizeBytes: 200, HitRatio: 0.5})
	if h := got.At(200); !near(h, 0.5, 1e-9) {
		t.Errorf("corrected At(200) = %v, want the observed 0.5", h)
	}
	if h := got.At(800); !near(h, 0.8, 1e-9) {
		t.Errorf("corrected At(800) = %v, want 0.8 (size axis doubled)", h)
	}
	if h := got.At(400); !near(h, 0.6, 1e-9) {
		t.Errorf("corrected At(400) = %v, want 0.6", h)
	}
}

func TestCorrectedLiftsWhenObservedAboveCurve(t *testing.T) {
	c := mustFit(t, []Point{{100, 0.4}, {200, 0.5}})
	got := c.Corrected(Point{SizeBytes: 100, HitRatio: 0.7})
	if h := got.At(100); !near(h, 0.7, 1e-9) {
		t.Errorf("At(100) = %v, want 0.7", h)
	}
	if h := got.At(200); !near(h, 0.8, 1e-9) {
		t.Errorf("At(200) = %v, want 0.8 (lifted by 0.3)", h)
	}
	if h := got.At(50); !near(h, 0.35, 1e-9) {
		t.Errorf("At(50) = %v, want 0.2 + 0.3*0.5 = 0.35", h)
	}
}

// TestCorrectedIsNotClamped: the correction rescales the size axis by as much as the
// observation needs, either way, so the corrected curve predicts what was observed.
func TestCorrectedIsNotClamped(t *testing.T) {
	c := mustFit(t, []Point{{100, 0.1}, {10_000, 0.9}})
	for _, tc := range []struct {
		name     string
		observed Point
		at       int64   // a size whose corrected ratio is checked
		want     float64 // the ratio the curve had at at*f
	}{
		{"100x less memory needed", Point{SizeBytes: 100, HitRatio: 0.9}, 100, 0.9},
		{"100x more memory needed", Point{SizeBytes: 10_000, HitRatio: 0.1}, 1_000_000, 0.9},
		{"5x more memory needed", Point{SizeBytes: 500, HitRatio: 0.1}, 50_000, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Corrected(tc.observed)
			if h := got.At(tc.observed.SizeBytes); !near(h, tc.observed.HitRatio, 1e-9) {
				t.Errorf("At(%d) = %v, want the observed %v", tc.observed.SizeBytes, h, tc.observed.HitRatio)
			}
			if h := got.At(tc.at); !near(h, tc.want, 1e-9) {
				t.Errorf("At(%d) = %v, want %v", tc.at, h, tc.want)
			}
		})
	}
	if same := c.Corrected(Point{SizeBytes: 0, HitRatio: 0.5}); same != c {
		t.Error("a zero observed size changed the curve")
	}
}

func TestCorrectedStaysMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		var pts []Point
		for range 1 + rng.IntN(8) {
			pts = append(pts, Point{SizeBytes: 1 + rng.Int64N(1000), HitRatio: rng.Float64()})
		}
		c := mustFit(t, pts).Corrected(Point{SizeBytes: 1 + rng.Int64N(1000), HitRatio: rng.Float64()})
		assertMonotone(t, c)
	}
}

func assertMonotone(t *testing.T, c *Curve) {
	t.Helper()
	pts := c.Points()
	if pts[0] != (Point{}) {
		t.Fatalf("curve does not start at (0,0): %v", pts)
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].SizeBytes <= pts[i-1].SizeBytes || pts[i].HitRatio < pts[i-1].HitRatio || pts[i].HitRatio > 1 {
			t.Fatalf("curve is not monotone in [0,1]: %v", pts)
		}
	}
}

func TestUpperHullOfCliff(t *testing.T) {
	// A cliff: nothing until 75 bytes, then 0.95. The hull is the straight line to the cliff top.
	c := mustFit(t, []Point{{74, 0}, {75, 0.95}})
	hull := c.UpperHull(0, 100)
	want := []Point{{0, 0}, {75, 0.95}, {100, 0.95}}
	if len(hull) != len(want) {
		t.Fatalf("UpperHull = %v, want %v", hull, want)
	}
	for i := range want {
		if hull[i].SizeBytes != want[i].SizeBytes || !near(hull[i].HitRatio, want[i].HitRatio, 1e-12) {
			t.Fatalf("UpperHull = %v, want %v", hull, want)
		}
	}
}

func TestFlat(t *testing.T) {
	if got := Flat(0.3).At(5); got != 0.3 {
		t.Errorf("Flat(0.3).At(5) = %v", got)
	}
	if got := Flat(0).At(5); got != 0 {
		t.Errorf("Flat(0).At(5) = %v", got)
	}
}

func TestTableOverwritesAndCaps(t *testing.T) {
	tab := NewTable(3)
	tab.Record(Point{10, 0.1})
	tab.Record(Point{20, 0.2})
	tab.Record(Point{10, 0.15}) // same size: replaces, becomes the most recent
	if tab.Len() != 2 {
		t.Fatalf("Len = %d, want 2", tab.Len())
	}
	tab.Record(Point{30, 0.3})
	tab.Record(Point{40, 0.4}) // over capacity: forgets size 20, the least recent
	got := tab.Points()
	want := []Point{{10, 0.15}, {30, 0.3}, {40, 0.4}}
	if len(got) != len(want) {
		t.Fatalf("Points = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Points = %v, want %v", got, want)
		}
	}
	if m := tab.MaxRecorded(); m != 0.4 {
		t.Errorf("MaxRecorded = %v, want 0.4", m)
	}
	if NewTable(0).capacity != DefaultTableCapacity {
		t.Error("NewTable(0) does not use the default capacity")
	}
}

func FuzzFit(f *testing.F) {
	f.Add(int64(100), 0.5, int64(200), 0.4, int64(100), 0.9, int64(150))
	f.Add(int64(0), 0.0, int64(0), 1.0, int64(-1), 0.5, int64(0))
	f.Add(int64(1<<60), 1.0, int64(1), 0.0, int64(7), 0.3, int64(1<<40))
	f.Fuzz(func(t *testing.T, s1 int64, h1 float64, s2 int64, h2 float64, s3 int64, h3 float64, obs int64) {
		c, err := Fit([]Point{{s1, h1}, {s2, h2}, {s3, h3}})
		if err != nil {
			return
		}
		assertMonotone(t, c)
		assertMonotone(t, c.Corrected(Point{SizeBytes: obs, HitRatio: h2}))
		if target := h3; target >= 0 && target <= 1 {
			if s, ok := c.MinSize(target); ok && c.At(s) < target-1e-9 {
				t.Fatalf("MinSize(%v) = %d, At = %v", target, s, c.At(s))
			}
		}
	})
}

// TestCorrectedIgnoresSamplingNoise: an observed 0 below a loop's cliff, where the sampled
// curve credits a few hits, is within the curve's accuracy and leaves the cliff where it is;
// a small difference elsewhere still corrects the curve.
func TestCorrectedIgnoresSamplingNoise(t *testing.T) {
	loop := mustFit(t, []Point{{100, 0.03}, {2_600, 0.03}, {2_700, 1}})
	if got := loop.Corrected(Point{SizeBytes: 1_000, HitRatio: 0}); got != loop {
		t.Errorf("an observation within the sampling tolerance changed the curve: At(2700) = %v", got.At(2_700))
	}
	if got := loop.Corrected(Point{SizeBytes: 2_700, HitRatio: 0}); got == loop {
		t.Error("an observed 0 where the curve predicts 1 left the curve as it was")
	}
	if got := loop.Corrected(Point{SizeBytes: 2_700, HitRatio: 0.97}); got == loop {
		t.Error("an observed 0.97 where the curve predicts 1 left the curve as it was")
	}
}

// TestNoiseBelowACliffCorrectsNothing: a few hits observed below a loop's cliff, where the curve
// predicts none, are noise on both sides: the curve stays as it is (rescaled on them it once
// needed 16 times the memory: fleet 0x88380128b7a10323).
func TestNoiseBelowACliffCorrectsNothing(t *testing.T) {
	c := mustFit(t, []Point{{2_965_821, 0}, {4_776_426, 0.856}})
	for _, obs := range []float64{0, 0.002, SamplingTolerance} {
		at := Point{SizeBytes: 1_818_623, HitRatio: obs}
		if got := c.Corrected(at); got != c {
			t.Errorf("observed %v below the cliff: the curve was corrected to %v", obs, got.Points())
		}
		if f, ok := c.CorrectionFactor(at); ok {
			t.Errorf("observed %v below the cliff: correction factor %v", obs, f)
		}
	}
	// Above the noise it is a real correction.
	if _, ok := c.CorrectionFactor(Point{SizeBytes: 4_776_426, HitRatio: 0.5}); !ok {
		t.Error("an observation of 0.5 where the curve predicts 0.856 was not corrected")
	}
}
