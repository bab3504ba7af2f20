package sim

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/workload"
)

func TestBuiltInScenariosAreValid(t *testing.T) {
	names := map[string]bool{}
	for _, sc := range Scenarios() {
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: %v", sc.Name, err)
		}
		if names[sc.Name] {
			t.Errorf("scenario name %q appears twice", sc.Name)
		}
		names[sc.Name] = true
		if got, err := ScenarioByName(sc.Name); err != nil || got.Name != sc.Name {
			t.Errorf("ScenarioByName(%q) = %v, %v", sc.Name, got, err)
		}
	}
	if _, err := ScenarioByName("nope"); err == nil || !strings.Contains(err.Error(), "softqos") {
		t.Errorf("unknown scenario: error %v, want one listing the names", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *Scenario)
		want   string
	}{
		{"no name", func(s *Scenario) { s.Name = "" }, "Name: missing"},
		{"no intervals", func(s *Scenario) { s.Intervals = 0 }, "Intervals: 0"},
		{"warmup too long", func(s *Scenario) { s.Warmup = s.Intervals }, "Warmup"},
		{"cache model", func(s *Scenario) { s.Cache = "lfu" }, `Cache: unknown model "lfu"`},
		{"engine", func(s *Scenario) { s.Engine = "dragonfly" }, `Engine: unknown engine "dragonfly"`},
		{"sample rate", func(s *Scenario) { s.MRCSampleRate = 2 }, "MRCSampleRate"},
		{"work limit", func(s *Scenario) { s.OptimalWorkLimit = math.NaN() }, "OptimalWorkLimit: NaN outside [0, 10000]"},
		{"no nodes", func(s *Scenario) { s.Nodes = nil }, "Nodes: none"},
		{"duplicate node", func(s *Scenario) { s.Nodes[1].Name = s.Nodes[0].Name }, `Nodes[1].Name: "node-01" appears twice`},
		{"node memory", func(s *Scenario) { s.Nodes[0].MemoryBytes = 0 }, "Nodes[0].MemoryBytes"},
		{"node ops", func(s *Scenario) { s.Nodes[0].OpsPerSecond = math.NaN() }, "Nodes[0]: OpsPerSecond"},
		{"tenant id", func(s *Scenario) { s.Tenants[0].ID = "no-slash" }, `Tenants[0].ID: "no-slash"`},
		{"duplicate tenant", func(s *Scenario) { s.Tenants[1].ID = s.Tenants[0].ID }, "Tenants[1].ID"},
		{"workload", func(s *Scenario) { s.Tenants[0].Workload = workload.Spec{Shape: "zipf"} }, "Tenants[0].Workload: Keys"},
		{"rate", func(s *Scenario) { s.Tenants[0].Rate = 0 }, "Tenants[0].Rate"},
		{"rate change", func(s *Scenario) { s.Tenants[0].RateFrom = []RateChange{{From: 3, Rate: 1}, {From: 2, Rate: 1}} }, "Tenants[0].RateFrom[1]"},
		{"class", func(s *Scenario) { s.Tenants[0].Class = "gold" }, `Tenants[0].Class: "gold"`},
		{"strict without objective", func(s *Scenario) { s.Tenants[0].Objective = Objective{} }, "Tenants[0].Objective: a strict tenant needs an objective"},
		{"two objectives", func(s *Scenario) { s.Tenants[0].Objective.Latency = time.Millisecond }, "set at most one"},
		{"hit ratio", func(s *Scenario) { s.Tenants[0].Objective.HitRatio = 1.5 }, "Objective.HitRatio"},
		{"degradation", func(s *Scenario) { s.Tenants[1].Objective.MaxDegradation = 0.5 }, "Objective.MaxDegradation"},
		{"priority", func(s *Scenario) { s.Tenants[0].Priority = -1 }, "Tenants[0].Priority"},
		{"memory bounds", func(s *Scenario) { s.Tenants[0].MinBytes, s.Tenants[0].MaxBytes = 10, 5 }, "MinBytes 10 and MaxBytes 5"},
		{"arrival", func(s *Scenario) { s.Tenants[0].Arrive, s.Tenants[0].Leave = 4, 4 }, "Arrive 4 and Leave 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := smallScenario()
			tc.change(sc)
			if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseScenarioWithTrace(t *testing.T) {
	dir := t.TempDir()
	var trace strings.Builder
	for i := range 3000 {
		trace.WriteString("user:" + strconv.Itoa(i%700) + ",300\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "web.csv"), []byte(trace.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `{"name": "mine", "intervals": 3, "intervalSeconds": 1, "warmup": 1,
	 "nodes": {"count": 2, "memoryBytes": 1048576, "opsPerSecond": 100000},
	 "tenants": [
	   {"id": "shop/web", "workload": "trace:file=web.csv", "rate": 2000, "hitRatio": 0.8},
	   {"id": "bi/reports", "workload": "zipf:keys=5000,skew=0.8", "rate": 1000, "class": "bestEffort", "latencySeconds": 0.004}]}`
	sc, err := ParseScenario([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Tenants[0].Workload.TraceFile; got != filepath.Join(dir, "web.csv") {
		t.Errorf("trace file %q, want it next to the scenario file", got)
	}
	if sc.Tenants[0].Class != planning.ClassStrict || sc.Tenants[1].Objective.Latency != 4*time.Millisecond {
		t.Errorf("tenants decoded as %+v", sc.Tenants)
	}
	run, err := Run(t.Context(), sc, PolicyShared, 1)
	if err != nil {
		t.Fatal(err)
	}
	// 700 keys of 300 bytes fit in the cache: after the first pass every request hits.
	if hits, reqs := run.Tenants[0].Hits[2], run.Tenants[0].Requests[2]; hits != reqs || reqs == 0 {
		t.Errorf("trace tenant hit %d of %d requests in its last interval", hits, reqs)
	}
}

func TestParseScenarioErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`{"name": "x", "colour": 1}`, `unknown field "colour"`},
		{`{"name": "x"} {}`, "unexpected data after"},
		{`{"name": "x", "nodes": {"count": 0}}`, "nodes.count: 0"},
		{`{"name": "x", "nodes": {"count": 1}, "hitLatencySeconds": -1}`, "hitLatencySeconds"},
		{`{"name": "x", "intervals": 2, "nodes": {"count": 1, "memoryBytes": 1, "opsPerSecond": 1}, "optimalWorkLimit": -1}`, "OptimalWorkLimit: -1 outside"},
		{`{"name": "x", "nodes": {"count": 1, "memoryBytes": 1, "opsPerSecond": 1}, "tenants": [{"id": "a/b", "workload": "zipf"}]}`, "tenants[0].workload"},
		{`{"name": "x", "nodes": {"count": 1, "memoryBytes": 1, "opsPerSecond": 1}, "tenants": [{"id": "a/b", "workload": "scan:keys=3", "latencySeconds": -2}]}`, "tenants[0].latencySeconds"},
		{`{"name": "x", "intervals": 2, "nodes": {"count": 1, "memoryBytes": 1, "opsPerSecond": 1}, "tenants": [{"id": "a/b", "workload": "scan:keys=3", "rate": 1}]}`, "Tenants[0].Objective: a strict tenant"},
		{`{"name": "x", "intervals": 2, "nodes": {"count": 1, "memoryBytes": 1, "opsPerSecond": 1}, "tenants": [{"id": "a/b", "workload": "scan:keys=3", "rate": 1, "class": "bestEffort", "rateFrom": [{"from": 1, "rate": 0}]}]}`, "Tenants[0].RateFrom[0]"},
		{`{"name": "x", "intervals": 2, "nodes": {"count": 1, "memoryBytes": 1, "opsPerSecond": 1}, "tenants": [{"id": "a/b", "workload": "scan:keys=3", "rate": 1, "class": "bestEffort", "minNodes": 3, "maxNodes": 2}]}`, "MinNodes 3 and MaxNodes 2"},
	}
	for _, tc := range tests {
		if _, err := ParseScenario([]byte(tc.doc), "."); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseScenario(%s): %v, want an error containing %q", tc.doc, err, tc.want)
		}
	}
	if _, err := LoadScenarioFile(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

// FuzzParseScenario checks that no input panics and that an accepted scenario validates.
func FuzzParseScenario(f *testing.F) {
	f.Add(`{"name": "mine", "intervals": 3, "nodes": {"count": 2, "memoryBytes": 1048576, "opsPerSecond": 1000}, "tenants": [{"id": "a/b", "workload": "zipf:keys=10", "rate": 5, "hitRatio": 0.5}]}`)
	f.Add(`{"name": "x", "nodes": {"count": 99999}}`)
	f.Add(`{"tenants": [{"workload": "phase:5@trace:file=x"}]}`)
	f.Add(`[]`)
	f.Add(`{"name": "x", "intervals": 4, "nodes": {"count": 2, "memoryBytes": 4096, "opsPerSecond": 10}, "tenants": [{"id": "a/b", "workload": "scan:keys=3", "rate": 1, "class": "bestEffort", "maxNodes": 1, "rateFrom": [{"from": 2, "rate": 9}]}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		sc, err := ParseScenario([]byte(doc), t.TempDir())
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("accepted a scenario that does not validate: %v", err)
		}
	})
}

func TestExactCurveShowsTheLoopCliff(t *testing.T) {
	// 2,000 keys of 100 bytes plus keys of about 4 bytes: the loop needs about 208 KB.
	c, err := ExactCurve(spec("loop:keys=2000,value=100"), 1, 2000, 10000, []int64{100_000, 200_000, 220_000, 400_000})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0, 0, 1, 1}
	for i := range want {
		if math.Abs(c.HitRatio[i]-want[i]) > 1e-9 {
			t.Fatalf("loop curve %v at %v, want %v", c.HitRatio, c.Sizes, want)
		}
	}
	if _, err := ExactCurve(spec("loop:keys=2"), 1, -1, 1, []int64{1}); err == nil {
		t.Error("negative warmup accepted")
	}
}

func TestLatencyHistQuantiles(t *testing.T) {
	h := newLatencyHist()
	if !math.IsNaN(h.quantile(0.5)) {
		t.Error("empty histogram has a median")
	}
	for range 990 {
		h.add(0.0002)
	}
	for range 10 {
		h.add(0.010)
	}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.0002}, {0.99, 0.0002}, {0.995, 0.010}, {1, 0.010}} {
		if got := h.quantile(tc.q); got < tc.want || got > tc.want*1.024 {
			t.Errorf("quantile(%v) = %v, want %v within one bucket", tc.q, got, tc.want)
		}
	}
	h.add(1e-9)
	h.add(1e9)
	if h.counts[0] != 1 || h.counts[len(h.counts)-1] != 1 {
		t.Error("out-of-range latencies not clamped to the end buckets")
	}
}

func TestArrivalHeapOrder(t *testing.T) {
	var h arrivalHeap
	for _, a := range []arrival{{3, 0}, {1, 2}, {1, 1}, {2, 0}, {0.5, 3}} {
		h.push(a)
	}
	var got []arrival
	for len(h) > 0 {
		got = append(got, h.pop())
	}
	want := []arrival{{0.5, 3}, {1, 1}, {1, 2}, {2, 0}, {3, 0}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pop order %v, want %v", got, want)
		}
	}
}
