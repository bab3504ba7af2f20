package mrc

import (
	"math"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// exactCurve runs the trace through ExactLRU.
func exactCurve(t testing.TB, trace []access, sizes []int64) Curve {
	t.Helper()
	e, err := NewExactLRU(sizes)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range trace {
		e.Access(a.key, a.size)
	}
	return e.Curve()
}

// trackedCurve runs the trace through a Tracker.
func trackedCurve(t testing.TB, trace []access, cfg Config) Curve {
	t.Helper()
	tr, err := NewTracker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range trace {
		tr.AccessHash(a.hash, a.size)
	}
	return tr.Snapshot()
}

// partitionSizes are 32 candidate sizes from 1% of the trace's working set to all of it: the
// range of partition sizes the allocator chooses from.
func partitionSizes(t testing.TB, trace []access) []int64 {
	t.Helper()
	ws := workingSetBytes(trace)
	sizes, err := GeometricSizes(ws/100, ws, 32)
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

// TestTrackerAccuracy compares sampled curves with the exact LRU stack simulation on synthetic
// traces. SHARDS reports a mean absolute error below 0.01 at 1% sampling on production traces
// with millions of keys; these traces are far smaller (fewer sampled keys), so the bound is 0.02.
func TestTrackerAccuracy(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64
		maxBytes int64
		trace    func() []access
	}{
		{name: "zipf 0.6", rate: 0.1, trace: func() []access {
			b := newTraceBuilder(1, 100000, unitSize)
			return b.trace(500000, b.zipf(0, 100000, 0.6))
		}},
		{name: "zipf 0.9", rate: 0.1, trace: func() []access {
			b := newTraceBuilder(2, 100000, unitSize)
			return b.trace(500000, b.zipf(0, 100000, 0.9))
		}},
		{name: "zipf 1.2", rate: 0.1, trace: func() []access {
			b := newTraceBuilder(3, 100000, unitSize)
			return b.trace(500000, b.zipf(0, 100000, 1.2))
		}},
		{name: "zipf 0.9 variable sizes", rate: 0.1, trace: func() []access {
			b := newTraceBuilder(4, 100000, spreadSizes)
			return b.trace(500000, b.zipf(0, 100000, 0.9))
		}},
		{name: "loop mixed with zipf", rate: 0.1, trace: func() []access {
			b := newTraceBuilder(5, 60000, unitSize)
			return b.trace(500000, b.mix([]float64{0.5, 0.5}, loop(0, 30000), b.zipf(30000, 30000, 0.9)))
		}},
		{name: "scan mixed with zipf", rate: 0.1, trace: func() []access {
			b := newTraceBuilder(6, 200000, unitSize)
			return b.trace(500000, b.mix([]float64{0.8, 0.2}, b.zipf(0, 50000, 0.9), loop(50000, 150000)))
		}},
		{name: "zipf 0.9 one million keys at 1%", rate: 0.01, trace: func() []access {
			b := newTraceBuilder(7, 1000000, unitSize)
			return b.trace(2000000, b.zipf(0, 1000000, 0.9))
		}},
		{name: "fixed size 1 MiB from rate 1", rate: 1, maxBytes: DefaultMaxBytes, trace: func() []access {
			b := newTraceBuilder(8, 100000, spreadSizes)
			return b.trace(500000, b.zipf(0, 100000, 0.9))
		}},
		{name: "fixed size 256 KiB", rate: 1, maxBytes: 256 << 10, trace: func() []access {
			b := newTraceBuilder(9, 100000, unitSize)
			return b.trace(500000, b.zipf(0, 100000, 0.9))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trace := tt.trace()
			sizes := partitionSizes(t, trace)
			exact := exactCurve(t, trace, sizes)
			maxBytes := tt.maxBytes
			if maxBytes == 0 {
				maxBytes = 64 << 20 // never binding: fixed-rate SHARDS
			}
			got := trackedCurve(t, trace, Config{Sizes: sizes, SampleRate: tt.rate, MaxBytes: maxBytes})
			mae := meanAbsError(got.HitRatio, exact.HitRatio)
			byteMAE := meanAbsError(got.ByteHitRatio, exact.ByteHitRatio)
			t.Logf("rate %.4f, %d keys tracked, %.0f sampled accesses: MAE %.4f, byte MAE %.4f, cold %.4f vs %.4f",
				got.SampleRate, got.TrackedKeys, got.SampledAccesses, mae, byteMAE, got.ColdMissRatio, exact.ColdMissRatio)
			if mae > 0.02 {
				t.Errorf("hit ratio MAE %.4f > 0.02\nexact   %.3f\nsampled %.3f", mae, exact.HitRatio, got.HitRatio)
			}
			// Byte hit ratios also weigh each hit by its object's size, which adds the size
			// distribution's variance to the sampling error.
			if byteMAE > 0.03 {
				t.Errorf("byte hit ratio MAE %.4f > 0.03", byteMAE)
			}
			if d := math.Abs(got.ColdMissRatio - exact.ColdMissRatio); d > 0.01 {
				t.Errorf("cold miss ratio %.4f, exact %.4f", got.ColdMissRatio, exact.ColdMissRatio)
			}
			if got.Requests != uint64(len(trace)) || got.Accesses != float64(len(trace)) {
				t.Errorf("requests %d, accesses %.0f, want %d", got.Requests, got.Accesses, len(trace))
			}
		})
	}
}

// TestTrackerCliff: a loop over more keys than some candidate sizes hold has an LRU curve that
// is 0 below the loop length and jumps to 1 above it. The sampled curve must put the cliff
// between the same two candidate sizes.
func TestTrackerCliff(t *testing.T) {
	sizes, err := GeometricSizes(10000, 1000000, 32)
	if err != nil {
		t.Fatal(err)
	}
	// Loop length at the geometric middle between two candidates, ~7% from either; 5 passes.
	loopKeys := int(math.Sqrt(float64(sizes[15] * sizes[16])))
	b := newTraceBuilder(10, loopKeys, unitSize)
	trace := b.trace(5*loopKeys, loop(0, loopKeys))
	exact := exactCurve(t, trace, sizes)
	got := trackedCurve(t, trace, Config{Sizes: sizes, SampleRate: 0.1, MaxBytes: 64 << 20})
	for i := range sizes {
		want := 0.0
		if i > 15 {
			want = 0.8 // 4 of 5 passes hit
		}
		if math.Abs(exact.HitRatio[i]-want) > 1e-9 {
			t.Fatalf("exact hit ratio at %d = %.4f, want %.2f", sizes[i], exact.HitRatio[i], want)
		}
	}
	// The jump is between the same two sizes; its height carries the sampling error of the
	// number of loop keys sampled (about 1/sqrt(10000) here), which SHARDS-adj moves to the
	// smallest distances.
	jump := got.HitRatio[16] - got.HitRatio[15]
	if math.Abs(jump-0.8) > 0.02 || got.HitRatio[15]-got.HitRatio[0] > 1e-9 || got.HitRatio[31]-got.HitRatio[16] > 1e-9 {
		t.Errorf("sampled curve %.4f: want a single jump of 0.8 between %d and %d", got.HitRatio, sizes[15], sizes[16])
	}
	if mae := meanAbsError(got.HitRatio, exact.HitRatio); mae > 0.02 {
		t.Errorf("MAE %.4f > 0.02", mae)
	}
}

// TestTrackerFullRateMatchesExact: sampling every key reproduces the exact stack simulation,
// but for reading the distance histogram between its logarithmic bucket bounds.
func TestTrackerFullRateMatchesExact(t *testing.T) {
	b := newTraceBuilder(12, 20000, spreadSizes)
	trace := b.trace(200000, b.zipf(0, 20000, 0.9))
	sizes := partitionSizes(t, trace)
	exact := exactCurve(t, trace, sizes)
	got := trackedCurve(t, trace, Config{Sizes: sizes, SampleRate: 1, MaxBytes: 16 << 20})
	if got.SampleRate != 1 || got.SampledAccesses != float64(len(trace)) {
		t.Fatalf("rate %v, sampled %v, want every access sampled", got.SampleRate, got.SampledAccesses)
	}
	for i := range sizes {
		if math.Abs(got.HitRatio[i]-exact.HitRatio[i]) > 0.001 || math.Abs(got.ByteHitRatio[i]-exact.ByteHitRatio[i]) > 0.001 {
			t.Errorf("size %d: hit ratio %v/%v byte %v/%v", sizes[i], got.HitRatio[i], exact.HitRatio[i], got.ByteHitRatio[i], exact.ByteHitRatio[i])
		}
	}
}

// TestTrackerBoundedKeys: whatever the key space, the tracker keeps at most its budget's keys
// by lowering the sampling rate.
func TestTrackerBoundedKeys(t *testing.T) {
	tr, err := NewTracker(Config{Sizes: []int64{1 << 10, 1 << 20}, MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	maxKeys := tr.MaxTrackedKeys()
	prevRate := 1.0
	for i := range 200000 {
		tr.Access([]byte("k"+strconv.Itoa(i)), 100)
		if i%20000 == 19999 {
			c := tr.Snapshot()
			if c.TrackedKeys > maxKeys {
				t.Fatalf("after %d keys: %d tracked, budget %d", i+1, c.TrackedKeys, maxKeys)
			}
			if c.SampleRate > prevRate {
				t.Fatalf("sample rate rose from %v to %v", prevRate, c.SampleRate)
			}
			prevRate = c.SampleRate
		}
	}
	// The rate settles where the sample holds the budget: about maxKeys of 200000 keys.
	want := float64(maxKeys) / 200000
	if prevRate < want/1.5 || prevRate > want*1.5 {
		t.Errorf("final rate %v, want about %v", prevRate, want)
	}
}

// TestTrackerMemoryBound measures the heap a tracker holds after it has seen far more keys
// than its budget allows.
func TestTrackerMemoryBound(t *testing.T) {
	for _, budget := range []int64{64 << 10, 1 << 20, 4 << 20} {
		t.Run(strconv.FormatInt(budget, 10), func(t *testing.T) {
			sizes, err := GeometricSizes(1<<10, 1<<30, 32)
			if err != nil {
				t.Fatal(err)
			}
			before := liveHeap()
			tr, err := NewTracker(Config{Sizes: sizes, MaxBytes: budget})
			if err != nil {
				t.Fatal(err)
			}
			n := 8 * tr.MaxTrackedKeys()
			for i := range n {
				h := keyhash.Mix(uint64(i) + 1)
				tr.AccessHash(h, 100)
				tr.AccessHash(keyhash.Mix(uint64(i/2)+1), 100) // reuses keep timestamps churning
			}
			used := liveHeap() - before
			c := tr.Snapshot()
			t.Logf("budget %d: %d keys tracked (max %d), heap %d bytes (%.1f per key), rate %.4f",
				budget, c.TrackedKeys, tr.MaxTrackedKeys(), used, float64(used)/float64(c.TrackedKeys), c.SampleRate)
			if used > budget {
				t.Errorf("tracker holds %d bytes, budget %d", used, budget)
			}
			runtime.KeepAlive(tr)
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestTrackerDecay: after a phase change, decay makes the curve follow the new behaviour while
// reuse distances that span the interval boundary stay correct.
func TestTrackerDecay(t *testing.T) {
	sizes := []int64{100, 1000, 10000}
	// Phase A: a loop over 5000 keys, hits only at 10000. Phase B: 50 hot keys, hits everywhere.
	b := newTraceBuilder(13, 5000, unitSize)
	phaseA := b.trace(50000, loop(0, 5000))
	phaseB := b.trace(50000, loop(0, 50))

	tests := []struct {
		name    string
		keep    float64
		wantMin []float64 // lower bounds on the hit ratios after phase B
		wantMax []float64
	}{
		// Reset: the window holds phase B only; its first access of each of the 50 keys hits
		// at 10000 (they were all touched in phase A within 5000 keys) and at 1000 only if the
		// loop left them within the last 1000 keys (keys 0..49 are the oldest: no).
		{name: "reset", keep: 0, wantMin: []float64{0.998, 0.999, 1}, wantMax: []float64{0.9991, 0.9991, 1}},
		// Halving: phase A still weighs one third.
		// Halving: phase A (5000 cold misses, 45000 hits at 10000 only) weighs half, so out
		// of 75000: 49950 hits at 100 and 1000, 72500 at 10000.
		{name: "half", keep: 0.5, wantMin: []float64{0.6659, 0.6659, 0.9666}, wantMax: []float64{0.6661, 0.6661, 0.9667}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := NewTracker(Config{Sizes: sizes})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range phaseA {
				tr.AccessHash(a.hash, a.size)
			}
			if err := tr.Decay(tt.keep); err != nil {
				t.Fatal(err)
			}
			for _, a := range phaseB {
				tr.AccessHash(a.hash, a.size)
			}
			c := tr.Snapshot()
			for i := range sizes {
				if c.HitRatio[i] < tt.wantMin[i] || c.HitRatio[i] > tt.wantMax[i] {
					t.Errorf("hit ratio at %d = %.4f, want [%.4f, %.4f]", sizes[i], c.HitRatio[i], tt.wantMin[i], tt.wantMax[i])
				}
			}
			if c.Requests != 100000 {
				t.Errorf("requests %d, want 100000 (monotonic, not decayed)", c.Requests)
			}
		})
	}
	tr, err := NewTracker(Config{Sizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []float64{-0.1, 1.5, math.NaN()} {
		if err := tr.Decay(keep); err == nil {
			t.Errorf("Decay(%v) accepted", keep)
		}
	}
}

// TestTrackerEmptyAndImmutable: no data gives zero ratios; a snapshot is not changed by later
// accesses or by its holder.
func TestTrackerEmptyAndImmutable(t *testing.T) {
	tr, err := NewTracker(Config{Sizes: []int64{10, 20}})
	if err != nil {
		t.Fatal(err)
	}
	empty := tr.Snapshot()
	if empty.HitRatio[0] != 0 || empty.HitRatio[1] != 0 || empty.Accesses != 0 {
		t.Fatalf("empty tracker curve %+v", empty)
	}
	for range 3 {
		tr.Access([]byte("a"), 5)
	}
	first := tr.Snapshot()
	first.Sizes[0], first.HitRatio[0] = 999, 999
	for range 3 {
		tr.Access([]byte("b"), 5)
	}
	second := tr.Snapshot()
	if second.Sizes[0] != 10 || first.Accesses != 3 || second.Accesses != 6 {
		t.Errorf("snapshots share state: first %+v second %+v", first, second)
	}
	// a a a b b b: 4 hits at distance 5 (<= 10), 2 cold misses.
	if math.Abs(second.HitRatio[0]-4.0/6) > 1e-12 || math.Abs(second.ColdMissRatio-2.0/6) > 1e-12 {
		t.Errorf("curve %+v, want hit ratio 4/6 and cold 2/6", second)
	}
}

func TestTrackerConcurrent(t *testing.T) {
	sizes := []int64{100, 1000, 10000}
	tr, err := NewTracker(Config{Sizes: sizes, SampleRate: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	b := newTraceBuilder(14, 2000, unitSize)
	trace := b.trace(40000, b.zipf(0, 2000, 0.9))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(trace); i += 4 {
				tr.AccessHash(trace[i].hash, trace[i].size)
				if i%1000 == 0 {
					tr.Snapshot()
				}
			}
		}()
	}
	wg.Wait()
	c := tr.Snapshot()
	if c.Requests != uint64(len(trace)) || c.RequestBytes != uint64(len(trace)) {
		t.Errorf("requests %d bytes %d, want %d", c.Requests, c.RequestBytes, len(trace))
	}
	if c.HitRatio[2] < 0.9 {
		t.Errorf("hit ratio at 10000 (all 2000 keys fit) = %.3f", c.HitRatio[2])
	}
}

func TestNewTrackerErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no sizes", Config{}},
		{"unsorted sizes", Config{Sizes: []int64{10, 5}}},
		{"duplicate sizes", Config{Sizes: []int64{10, 10}}},
		{"zero size", Config{Sizes: []int64{0, 10}}},
		{"too many sizes", Config{Sizes: func() []int64 {
			s := make([]int64, MaxCurveSizes+1)
			for i := range s {
				s[i] = int64(i + 1)
			}
			return s
		}()}},
		{"negative rate", Config{Sizes: []int64{10}, SampleRate: -0.5}},
		{"rate above one", Config{Sizes: []int64{10}, SampleRate: 1.5}},
		{"NaN rate", Config{Sizes: []int64{10}, SampleRate: math.NaN()}},
		{"tiny budget", Config{Sizes: []int64{10}, MaxBytes: 1000}},
		{"negative budget", Config{Sizes: []int64{10}, MaxBytes: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewTracker(tt.cfg); err == nil {
				t.Errorf("NewTracker(%+v) accepted", tt.cfg)
			}
		})
	}
}

func TestGeometricSizes(t *testing.T) {
	tests := []struct {
		min, max int64
		n        int
		want     []int64
		wantErr  bool
	}{
		{min: 1, max: 1000, n: 4, want: []int64{1, 10, 100, 1000}},
		{min: 1 << 20, max: 1 << 24, n: 5, want: []int64{1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 24}},
		{min: 1, max: 4, n: 4, want: []int64{1, 2, 3, 4}}, // rounding collisions spread apart
		{min: 1, max: 3, n: 4, wantErr: true},
		{min: 0, max: 100, n: 4, wantErr: true},
		{min: 1, max: 100, n: 1, wantErr: true},
		{min: 1, max: 1 << 40, n: MaxCurveSizes + 1, wantErr: true},
	}
	for _, tt := range tests {
		got, err := GeometricSizes(tt.min, tt.max, tt.n)
		if tt.wantErr {
			if err == nil {
				t.Errorf("GeometricSizes(%d, %d, %d) = %v, want error", tt.min, tt.max, tt.n, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("GeometricSizes(%d, %d, %d): %v", tt.min, tt.max, tt.n, err)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("GeometricSizes(%d, %d, %d) = %v, want %v", tt.min, tt.max, tt.n, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("GeometricSizes(%d, %d, %d) = %v, want %v", tt.min, tt.max, tt.n, got, tt.want)
				break
			}
		}
		if err := ValidateSizes(got); err != nil {
			t.Errorf("GeometricSizes output invalid: %v", err)
		}
	}
}

// TestTrackerLookAside: reads that miss carry no size; the write that follows brings it. A
// look-aside client (read; write on a miss) then gives the exact curve of its reads with true
// sizes, and reads of keys that are never written count as misses but take no room.
func TestTrackerLookAside(t *testing.T) {
	b := newTraceBuilder(21, 20000, spreadSizes)
	trace := b.trace(200000, b.zipf(0, 20000, 0.9))
	sizes := partitionSizes(t, trace)
	exact := exactCurve(t, trace, sizes)
	tests := []struct {
		name        string
		neverStored int // reads of fresh keys never written, one per this many reads (0: none)
	}{
		{"every miss written", 0},
		{"one read in five never written", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := NewTracker(Config{Sizes: sizes, SampleRate: 1, MaxBytes: 16 << 20})
			if err != nil {
				t.Fatal(err)
			}
			cache, err := NewLRUCache(sizes[len(sizes)/2], nil)
			if err != nil {
				t.Fatal(err)
			}
			reads, hits := 0, 0
			for i, a := range trace {
				if tt.neverStored > 0 && i%tt.neverStored == 0 {
					tr.ReadHash(keyhash.Mix(uint64(i)+1<<40), 0, false)
					reads++
				}
				hit := cache.Contains(a.key)
				if hit {
					cache.Access(a.key, a.size)
					tr.ReadHash(a.hash, a.size, true)
					hits++
				} else {
					tr.ReadHash(a.hash, 0, false)
					cache.Access(a.key, a.size)
					tr.WriteHash(a.hash, a.size)
				}
				reads++
			}
			got := tr.Snapshot()
			scale := float64(len(trace)) / float64(reads)
			for i := range sizes {
				if want := exact.HitRatio[i] * scale; math.Abs(got.HitRatio[i]-want) > 0.001 {
					t.Errorf("size %d: hit ratio %.4f, want %.4f", sizes[i], got.HitRatio[i], want)
				}
			}
			if want := float64(hits) / float64(reads); math.Abs(got.AchievedHitRatio-want) > 1e-9 {
				t.Errorf("achieved hit ratio %.4f, want %.4f", got.AchievedHitRatio, want)
			}
			if got.TrackedKeys != exact.TrackedKeys {
				t.Errorf("%d keys tracked, want %d: never-written keys take room", got.TrackedKeys, exact.TrackedKeys)
			}
		})
	}
}

// TestTrackerSnapshotAt: a curve read at limits through a capacity function equals the
// curve read at those capacities.
func TestTrackerSnapshotAt(t *testing.T) {
	b := newTraceBuilder(22, 5000, spreadSizes)
	trace := b.trace(50000, b.zipf(0, 5000, 0.8))
	tr, err := NewTracker(Config{Sizes: []int64{1 << 20}, SampleRate: 1, MaxBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range trace {
		tr.AccessHash(a.hash, a.size)
	}
	limits := []int64{200000, 400000, 800000}
	got := tr.SnapshotAt(limits, func(limit int64) float64 { return float64(limit) / 2 })
	want := tr.SnapshotAt([]int64{100000, 200000, 400000}, nil)
	for i := range limits {
		if got.Sizes[i] != limits[i] || got.HitRatio[i] != want.HitRatio[i] {
			t.Errorf("limit %d: %v at %d, want %v", limits[i], got.HitRatio[i], got.Sizes[i], want.HitRatio[i])
		}
	}
	mean, n := tr.RecentMeanSize(100)
	if n != 100 || !(mean > 64) {
		t.Errorf("recent mean size %v over %d keys, want over 100 keys of at least 64 bytes", mean, n)
	}
}
