package main

import (
	"strings"
	"testing"
	"time"
)

// redis-benchmark 7.0's --csv output, as printed for -t set,get.
const benchmarkCSV = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","45682.96","0.762","0.112","0.527","2.823","4.919","22.639"
"GET","46860.36","0.632","0.040","0.527","1.039","4.063","11.095"
`

func TestParseBenchmarkCSV(t *testing.T) {
	got, err := parseBenchmarkCSV([]byte(benchmarkCSV))
	if err != nil {
		t.Fatal(err)
	}
	want := []result{{"SET", 45682.96, 0.527, 4.919}, {"GET", 46860.36, 0.527, 4.063}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	reordered := `"p99_latency_ms","test","p50_latency_ms","rps"` + "\n" + `"1.5","GET","0.5","1000"` + "\n"
	if got, err := parseBenchmarkCSV([]byte(reordered)); err != nil || got[0] != (result{"GET", 1000, 0.5, 1.5}) {
		t.Fatalf("columns found by name: %+v, %v", got, err)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no CSV output"},
		{"missing column", `"test","rps"` + "\n", `no column "p50_latency_ms"`},
		{"not a number", strings.Replace(benchmarkCSV, "45682.96", "fast", 1), `rps "fast" is not a number`},
		{"NaN", strings.Replace(benchmarkCSV, "45682.96", "NaN", 1), `rps "NaN" is not a number`},
		{"negative", strings.Replace(benchmarkCSV, "0.527", "-1", 1), `p50_latency_ms "-1"`},
		{"short row", benchmarkCSV + `"PING","1"` + "\n", "has 2 fields, the header 8"},
		{"bad quoting", `"test` + "\n", "reading the CSV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseBenchmarkCSV([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzParseBenchmarkCSV(f *testing.F) {
	f.Add([]byte(benchmarkCSV))
	f.Add([]byte(`"test","rps","p50_latency_ms","p99_latency_ms"` + "\n" + `"GET","1e3","0.1","Inf"` + "\n"))
	f.Add([]byte("\"\n\"\"\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		results, err := parseBenchmarkCSV(data)
		for _, r := range results {
			if err == nil && (r.RPS < 0 || r.P50 < 0 || r.P99 < 0) {
				t.Fatalf("accepted a negative number: %+v", r)
			}
		}
	})
}

func TestMedianAndPercentile(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3 = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 = %v", got)
	}
	rounds := [][]result{
		{{"SET", 10, 1, 5}, {"GET", 20, 2, 6}},
		{{"SET", 30, 3, 1}, {"GET", 10, 1, 7}},
		{{"SET", 20, 2, 3}, {"GET", 30, 3, 8}},
	}
	got := medianResults(rounds)
	if got[0] != (result{"SET", 20, 2, 3}) || got[1] != (result{"GET", 20, 2, 7}) {
		t.Errorf("medianResults = %+v", got)
	}
	sorted := make([]time.Duration, 100)
	for i := range sorted {
		sorted[i] = time.Duration(i+1) * time.Millisecond
	}
	if p50, p99 := percentileMillis(sorted, 0.5), percentileMillis(sorted, 0.99); p50 != 51 || p99 != 100 {
		t.Errorf("p50 %v, p99 %v", p50, p99)
	}
	if percentileMillis(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestParseStatCPU(t *testing.T) {
	// A /proc/<pid>/stat line whose command name holds a space and a parenthesis.
	stat := "4242 (redis (x) y) S 1 4242 4242 0 -1 4194560 2163 0 0 0 250 75 0 0 20 0 5 0 1234 0 0\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil || got != 3250*time.Millisecond {
		t.Fatalf("parseStatCPU = %v, %v; want 3.25s (325 ticks)", got, err)
	}
	for _, bad := range []string{"", "4242 redis S 1", "4242 (redis) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -5 7"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
	rounds := []cpuUse{{1, 5, 9, 20, 0.9}, {3, 1, 7, 30, 0.5}, {2, 2, 8, 10, 1}}
	if got := medianCPU(rounds); got != (cpuUse{2, 2, 8, 20, 0.9}) {
		t.Errorf("medianCPU = %+v", got)
	}
}

func TestParseMachineStat(t *testing.T) {
	stat := "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n"
	busy, total, err := parseMachineStat([]byte(stat))
	if err != nil || busy != 1600*time.Millisecond || total != 9800*time.Millisecond {
		t.Fatalf("parseMachineStat = %v, %v, %v; want busy 1.6s (160 ticks), total 9.8s", busy, total, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 3 x 5 6 7 8\n", "cpu 1 2 3 4 5 6 -7 8\n"} {
		if _, _, err := parseMachineStat([]byte(bad)); err == nil {
			t.Errorf("parseMachineStat(%q) succeeded", bad)
		}
	}
}

func TestBoundShare(t *testing.T) {
	// Direct: 24 us of machine CPU per request, 10 of them the engine's. Behind the proxies the
	// engine costs 4 or 5 us and the null hop alone 10 us: at best 24/(14+4+10) of direct.
	cpu := map[string]cpuUse{
		targetDirect:    {Engine: 10, Machine: 24},
		targetSidecar:   {Engine: 5, Proxy: 15, Machine: 33},
		targetTwemproxy: {Engine: 4, Proxy: 13, Machine: 30},
		targetNullHop:   {Proxy: 10, Machine: 23},
	}
	if got, want := boundShare(cpu), 24.0/28; got != want {
		t.Fatalf("boundShare = %v, want %v", got, want)
	}
}
