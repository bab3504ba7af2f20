package workload

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func mustNew(t testing.TB, spec Spec, seed uint64) Generator {
	t.Helper()
	g, err := New(spec, seed)
	if err != nil {
		t.Fatalf("New(%v): %v", spec, err)
	}
	return g
}

func draw(g Generator, n int) []Access {
	out := make([]Access, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// keyIndex strips the prefix and returns the decimal index of a generated key.
func keyIndex(t *testing.T, prefix, key string) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(key, prefix))
	if err != nil || !strings.HasPrefix(key, prefix) {
		t.Fatalf("key %q is not %q followed by an index", key, prefix)
	}
	return i
}

func TestZipfRankFrequencies(t *testing.T) {
	const keys, draws = 1000, 400000
	for _, skew := range []float64{0, 0.6, 0.99, 1, 1.2} {
		t.Run(strconv.FormatFloat(skew, 'g', -1, 64), func(t *testing.T) {
			g := mustNew(t, Spec{Shape: ShapeZipf, Keys: keys, Skew: skew, ValueSize: Fixed(1)}, 7)
			counts := make([]int, keys)
			for range draws {
				counts[keyIndex(t, "", g.Next().Key)]++
			}
			norm := 0.0
			for r := 1; r <= keys; r++ {
				norm += math.Pow(float64(r), -skew)
			}
			for _, rank := range []int{1, 2, 3, 10, 100, 1000} {
				want := draws * math.Pow(float64(rank), -skew) / norm
				got := float64(counts[rank-1])
				if math.Abs(got-want) > 5*math.Sqrt(want)+1 {
					t.Errorf("rank %d: %v draws, want %.0f ± %.0f", rank, got, want, 5*math.Sqrt(want))
				}
			}
		})
	}
}

func TestUniformCoversKeysEvenly(t *testing.T) {
	const keys, draws = 100, 100000
	g := mustNew(t, Spec{Shape: ShapeUniform, Keys: keys, ValueSize: Fixed(10)}, 3)
	counts := make([]int, keys)
	for range draws {
		counts[keyIndex(t, "", g.Next().Key)]++
	}
	want := float64(draws) / keys
	for i, c := range counts {
		if math.Abs(float64(c)-want) > 5*math.Sqrt(want) {
			t.Errorf("key %d: %d draws, want %.0f", i, c, want)
		}
	}
}

func TestLoopCycles(t *testing.T) {
	g := mustNew(t, Spec{Shape: ShapeLoop, Keys: 5, ValueSize: Fixed(8), KeyPrefix: "l/"}, 1)
	var got []int
	for _, a := range draw(g, 12) {
		got = append(got, keyIndex(t, "l/", a.Key))
	}
	want := []int{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loop keys %v, want %v", got, want)
	}
}

func TestScanNeverRepeats(t *testing.T) {
	const keys = 1000
	g := mustNew(t, Spec{Shape: ShapeScan, Keys: keys, ValueSize: Fixed(8)}, 1)
	seen := map[string]bool{}
	for i, a := range draw(g, 3*keys) {
		if seen[a.Key] {
			t.Fatalf("access %d: key %q repeated", i, a.Key)
		}
		seen[a.Key] = true
		if idx := keyIndex(t, "", a.Key); idx != i {
			t.Fatalf("access %d: key index %d, want sequential", i, idx)
		}
	}
}

func TestPhasesRunInTurnAndResume(t *testing.T) {
	spec := Spec{Shape: ShapePhase, KeyPrefix: "p/", Phases: []Phase{
		{Spec: Spec{Shape: ShapeLoop, Keys: 10, ValueSize: Fixed(1), KeyPrefix: "a"}, Accesses: 3},
		{Spec: Spec{Shape: ShapeScan, Keys: 10, ValueSize: Fixed(1), KeyPrefix: "b"}, Accesses: 2},
	}}
	var got []string
	for _, a := range draw(mustNew(t, spec, 9), 10) {
		got = append(got, a.Key)
	}
	// The loop resumes at a3 on its second turn instead of restarting at a0.
	want := []string{"p/a0", "p/a1", "p/a2", "p/b0", "p/b1", "p/a3", "p/a4", "p/a5", "p/b2", "p/b3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("phase keys %v, want %v", got, want)
	}
}

func TestDeterminism(t *testing.T) {
	specs := map[string]string{
		"zipf":    "zipf:keys=100000,skew=0.99,value=100-4096",
		"uniform": "uniform:keys=5000,value=64-65536/log",
		"loop":    "loop:keys=300",
		"scan":    "scan:keys=50",
		"phase":   "phase:100@zipf:keys=1000,skew=0.5;50@uniform:keys=10",
	}
	for name, text := range specs {
		t.Run(name, func(t *testing.T) {
			spec, err := ParseSpec(text)
			if err != nil {
				t.Fatal(err)
			}
			a, b := draw(mustNew(t, spec, 42), 2000), draw(mustNew(t, spec, 42), 2000)
			if !reflect.DeepEqual(a, b) {
				t.Fatal("same spec and seed gave different accesses")
			}
			random := name == "zipf" || name == "uniform" || name == "phase"
			if c := draw(mustNew(t, spec, 43), 2000); random && reflect.DeepEqual(a, c) {
				t.Fatal("different seeds gave the same accesses")
			}
		})
	}
}

func TestValueSizes(t *testing.T) {
	// Sizes are a function of the key alone: two seeds agree on every key they both drew.
	spec := Spec{Shape: ShapeUniform, Keys: 2000, ValueSize: SizeDist{Min: 100, Max: 4096}}
	sizes := map[string]int64{}
	for _, seed := range []uint64{1, 2} {
		for _, a := range draw(mustNew(t, spec, seed), 20000) {
			if a.Size < 100 || a.Size > 4096 {
				t.Fatalf("size %d outside [100, 4096]", a.Size)
			}
			if s, ok := sizes[a.Key]; ok && s != a.Size {
				t.Fatalf("key %s has sizes %d and %d", a.Key, s, a.Size)
			}
			sizes[a.Key] = a.Size
		}
	}
	tests := []struct {
		name string
		dist SizeDist
	}{
		{"fixed", Fixed(300)},
		{"uniform", SizeDist{Min: 100, Max: 4096}},
		{"log-uniform", SizeDist{Min: 64, Max: 65536, LogUniform: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const n = 200000
			sum := 0.0
			for i := range uint64(n) {
				s := tc.dist.sizeOf(i)
				if s < tc.dist.Min || s > tc.dist.Max {
					t.Fatalf("size %d outside [%d, %d]", s, tc.dist.Min, tc.dist.Max)
				}
				sum += float64(s)
			}
			if got, want := sum/n, tc.dist.Mean(); math.Abs(got-want) > 0.02*want {
				t.Errorf("mean size %.1f, want %.1f", got, want)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		field string
	}{
		{"no shape", Spec{}, "Shape"},
		{"unknown shape", Spec{Shape: "gauss"}, "Shape"},
		{"no keys", Spec{Shape: ShapeZipf, ValueSize: Fixed(1)}, "Keys"},
		{"negative skew", Spec{Shape: ShapeZipf, Keys: 3, Skew: -1, ValueSize: Fixed(1)}, "Skew"},
		{"NaN skew", Spec{Shape: ShapeZipf, Keys: 3, Skew: math.NaN(), ValueSize: Fixed(1)}, "Skew"},
		{"zero size", Spec{Shape: ShapeLoop, Keys: 3}, "ValueSize.Min"},
		{"max below min", Spec{Shape: ShapeLoop, Keys: 3, ValueSize: SizeDist{Min: 5, Max: 4}}, "ValueSize.Max"},
		{"no phases", Spec{Shape: ShapePhase}, "Phases"},
		{"phase accesses", Spec{Shape: ShapePhase, Phases: []Phase{{Spec: Spec{Shape: ShapeScan, Keys: 1, ValueSize: Fixed(1)}}}}, "Phases[0].Accesses"},
		{"phase inner", Spec{Shape: ShapePhase, Phases: []Phase{{Spec: Spec{Shape: ShapeScan, ValueSize: Fixed(1)}, Accesses: 1}}}, "Phases[0].Keys"},
		{"nested phase", Spec{Shape: ShapePhase, Phases: []Phase{{Spec: Spec{Shape: ShapePhase}, Accesses: 1}}}, "Phases[0].Shape"},
		{"trace without file", Spec{Shape: ShapeTrace}, "TraceFile"},
		{"trace file missing", Spec{Shape: ShapeTrace, TraceFile: filepath.Join(t.TempDir(), "absent.csv")}, "TraceFile: open"},
		{"phase trace file missing", Spec{Shape: ShapePhase, Phases: []Phase{{Spec: Spec{Shape: ShapeTrace, TraceFile: filepath.Join(t.TempDir(), "absent.csv")}, Accesses: 1}}}, "Phases[0].TraceFile: open"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.spec, 1)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("New: error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.csv")
	text := "# a comment\nuser:1,100\n\nuser,2,5\r\nuser:1,100\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, err := ParseSpec("trace:prefix=x/,file=" + path)
	if err != nil {
		t.Fatal(err)
	}
	got := draw(mustNew(t, spec, 1), 4)
	want := []Access{{"x/user:1", 100}, {"x/user,2", 5}, {"x/user:1", 100}, {"x/user:1", 100}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trace accesses %v, want %v", got, want)
	}
}

func TestTraceErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"no comma", "a,1\nb\n", "t:2: want \"key,size\""},
		{"empty key", "a,1\n\n,5\n", "t:3: empty key"},
		{"bad size", "a,x\n", "t:1: size \"x\""},
		{"negative size", "a,1\na,2\na,-3\n", "t:3: size \"-3\""},
		{"empty", "# only a comment\n\n", "t: trace has no accesses"},
		{"too long", "a,1\n" + strings.Repeat("k", maxTraceLine+1) + ",1\n", "t:2: line longer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.text), "t")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
	}{
		{"zipf:keys=100000,skew=0.99,value=100-4096", Spec{Shape: ShapeZipf, Keys: 100000, Skew: 0.99, ValueSize: SizeDist{Min: 100, Max: 4096}}},
		{"uniform:keys=5000,value=1024,prefix=t1:", Spec{Shape: ShapeUniform, Keys: 5000, ValueSize: Fixed(1024), KeyPrefix: "t1:"}},
		{"loop:keys=20000,value=64-65536/log", Spec{Shape: ShapeLoop, Keys: 20000, ValueSize: SizeDist{Min: 64, Max: 65536, LogUniform: true}}},
		{"scan:keys=1000000", Spec{Shape: ShapeScan, Keys: 1000000, ValueSize: Fixed(DefaultValueSize)}},
		{"phase:50000@zipf:keys=1000,skew=0.9;50000@loop:keys=3000;prefix=a/", Spec{Shape: ShapePhase, KeyPrefix: "a/", Phases: []Phase{
			{Spec: Spec{Shape: ShapeZipf, Keys: 1000, Skew: 0.9, ValueSize: Fixed(DefaultValueSize)}, Accesses: 50000},
			{Spec: Spec{Shape: ShapeLoop, Keys: 3000, ValueSize: Fixed(DefaultValueSize)}, Accesses: 50000},
		}}},
		{"trace:prefix=real:,file=traces/a,b.csv", Spec{Shape: ShapeTrace, KeyPrefix: "real:", TraceFile: "traces/a,b.csv"}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSpec(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseSpec = %+v, want %+v", got, tc.want)
			}
			if again, err := ParseSpec(got.String()); err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("String() = %q parses to %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "Shape: missing"},
		{"gauss:keys=3", "unknown shape"},
		{"zipf:keys=ten", "parameter keys=\"ten\""},
		{"zipf:keys=10,keys=20", "keys: given twice"},
		{"uniform:keys=10,skew=1", "only zipf has a skew"},
		{"zipf:keys=10,colour=red", "\"colour\": unknown"},
		{"zipf:keys", "want name=value"},
		{"zipf:keys=10,value=-5", "parameter value"},
		{"zipf:keys=10,value=9/log", "/log needs a range"},
		{"zipf:keys=10,value=9-3", "ValueSize.Max"},
		{"zipf:keys=0", "Keys: zipf needs at least 1 key"},
		{"phase:", "Phases: phase needs at least one phase"},
		{"phase:zipf:keys=3", "want ACCESSES@SPEC"},
		{"phase:x@zipf:keys=3", "accesses \"x\""},
		{"phase:0@zipf:keys=3", "Phases[0].Accesses"},
		{"phase:5@phase:1@loop:keys=1", "cannot nest"},
		{"phase:5@loop:keys=1;prefix=a;prefix=b", "prefix given twice"},
		{"trace:", "TraceFile: trace needs a file"},
		{"trace:keys=3,file=x", "trace takes prefix= then file="},
		{"trace:prefix=a,prefix=b,file=x", "prefix: given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseSpec(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseSpec(%q) error %v, want it to contain %q", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzParseSpec checks that ParseSpec never panics and that every spec it accepts survives a
// round trip through String.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"zipf:keys=100000,skew=0.99,value=100-4096",
		"uniform:keys=5000,value=1024,prefix=t1:",
		"loop:keys=20000,value=64-65536/log",
		"scan:keys=1000000",
		"phase:50000@zipf:keys=1000,skew=0.9;50000@loop:keys=3000;prefix=a/",
		"trace:prefix=real:,file=traces/web.csv",
		"phase:5@trace:file=x;prefix=",
		"zipf:keys=1,skew=1e308,value=1-1/log",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseSpec(s)
		if err != nil {
			return
		}
		again, err := ParseSpec(spec.String())
		if err != nil {
			t.Fatalf("ParseSpec(%q) accepted, but its String %q fails: %v", s, spec.String(), err)
		}
		if !reflect.DeepEqual(spec, again) {
			t.Fatalf("round trip of %q: %+v became %+v", s, spec, again)
		}
	})
}

// BenchmarkZipfNext measures one draw over a large key space (the load generator's hot path).
func BenchmarkZipfNext(b *testing.B) {
	g := mustNew(b, Spec{Shape: ShapeZipf, Keys: 10_000_000, Skew: 0.99, ValueSize: SizeDist{Min: 100, Max: 4096}}, 1)
	b.ReportAllocs()
	for b.Loop() {
		g.Next()
	}
}
