package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// scenarioFile is the JSON form of a custom scenario, for running one's own workloads and
// traces:
//
//	{"name": "mine", "intervals": 10, "intervalSeconds": 10, "warmup": 2,
//	 "nodes": {"count": 2, "memoryBytes": 8388608, "opsPerSecond": 100000},
//	 "tenants": [
//	   {"id": "shop/web", "workload": "trace:file=web.csv", "rate": 2000, "hitRatio": 0.8},
//	   {"id": "bi/reports", "workload": "zipf:keys=50000,skew=0.8", "rate": 1000, "class": "bestEffort",
//	    "maxNodes": 1, "arrive": 4, "rateFrom": [{"from": 6, "rate": 5000}]}]}
//
// "engine" is "redis" (the default) or "memcached", whose memory accounting the partitions
// simulate. Workloads use the compact form of workload.ParseSpec; a relative trace file is found next
// to the scenario file. Unknown fields are errors. MarshalScenario writes this form, so a
// fuzzed fleet replays with "cacheqos-sim run -file".
type scenarioFile struct {
	Name             string       `json:"name"`
	Title            string       `json:"title"`
	Description      string       `json:"description"`
	Intervals        int          `json:"intervals"`
	IntervalSeconds  float64      `json:"intervalSeconds"`
	Warmup           int          `json:"warmup"`
	Cache            string       `json:"cache"`
	Engine           string       `json:"engine,omitempty"`
	HitLatencySecs   float64      `json:"hitLatencySeconds"`
	MissLatencySecs  float64      `json:"missLatencySeconds"`
	MRCSampleRate    float64      `json:"mrcSampleRate"`
	OptimalTimeLimit float64      `json:"optimalTimeLimitSeconds"`
	OptimalWorkLimit float64      `json:"optimalWorkLimit"`
	Nodes            nodesFile    `json:"nodes"`
	Tenants          []tenantFile `json:"tenants"`
}

type nodesFile struct {
	Count                   int     `json:"count"`
	MemoryBytes             int64   `json:"memoryBytes"`
	OpsPerSecond            float64 `json:"opsPerSecond"`
	BandwidthBytesPerSecond float64 `json:"bandwidthBytesPerSecond"`
}

type tenantFile struct {
	ID             string  `json:"id"`
	Workload       string  `json:"workload"`
	Rate           float64 `json:"rate"`
	Class          string  `json:"class"`
	Priority       int32   `json:"priority,omitempty"`
	HitRatio       float64 `json:"hitRatio,omitempty"`
	LatencySeconds float64 `json:"latencySeconds,omitempty"`
	MaxDegradation float64 `json:"maxDegradation,omitempty"`
	MinBytes       int64   `json:"minBytes,omitempty"`
	MaxBytes       int64   `json:"maxBytes,omitempty"`
	MinNodes       int32   `json:"minNodes,omitempty"`
	MaxNodes       int32   `json:"maxNodes,omitempty"`
	Arrive         int     `json:"arrive,omitempty"`
	Leave          int     `json:"leave,omitempty"`
	// RateFrom changes the rate from some interval on: [{"from": 6, "rate": 12000}].
	RateFrom []rateChangeFile `json:"rateFrom,omitempty"`
}

type rateChangeFile struct {
	From int     `json:"from"`
	Rate float64 `json:"rate"`
}

// maxFileNodes bounds a custom scenario's node count before anything is allocated.
const maxFileNodes = 4096

// LoadScenarioFile reads a custom scenario from a JSON file (see ParseScenario).
func LoadScenarioFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc, err := ParseScenario(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// ParseScenario decodes and validates a custom scenario; relative trace files are resolved
// against baseDir. Errors name the offending field.
func ParseScenario(data []byte, baseDir string) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f scenarioFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("scenario file: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("scenario file: unexpected data after the scenario object")
	}
	if f.Nodes.Count < 1 || f.Nodes.Count > maxFileNodes {
		return nil, fmt.Errorf("nodes.count: %d outside [1, %d]", f.Nodes.Count, maxFileNodes)
	}
	for _, v := range []struct {
		name  string
		value float64
	}{{"hitLatencySeconds", f.HitLatencySecs}, {"missLatencySeconds", f.MissLatencySecs}, {"optimalTimeLimitSeconds", f.OptimalTimeLimit}} {
		if !(v.value >= 0 && v.value <= planning.MaxLatencySeconds) {
			return nil, fmt.Errorf("%s: %v outside [0, %d]", v.name, v.value, planning.MaxLatencySeconds)
		}
	}
	bandwidth := f.Nodes.BandwidthBytesPerSecond
	if bandwidth == 0 {
		bandwidth = plenty
	}
	sc := &Scenario{
		Name: f.Name, Title: f.Title, Description: f.Description,
		Nodes:     nodes(f.Nodes.Count, f.Nodes.MemoryBytes, f.Nodes.OpsPerSecond, bandwidth),
		Intervals: f.Intervals, IntervalSeconds: f.IntervalSeconds, Warmup: f.Warmup, Cache: f.Cache,
		Engine:           f.Engine,
		HitLatency:       seconds(f.HitLatencySecs),
		MissLatency:      seconds(f.MissLatencySecs),
		MRCSampleRate:    f.MRCSampleRate,
		OptimalTimeLimit: seconds(f.OptimalTimeLimit),
		OptimalWorkLimit: f.OptimalWorkLimit,
	}
	if sc.Title == "" {
		sc.Title = "custom scenario"
	}
	for k, t := range f.Tenants {
		spec, err := workload.ParseSpec(t.Workload)
		if err != nil {
			return nil, fmt.Errorf("tenants[%d].workload: %w", k, err)
		}
		resolveTraces(&spec, baseDir)
		class := planning.Class(t.Class)
		if class == "" {
			class = planning.ClassStrict
		}
		if !(t.LatencySeconds >= 0 && t.LatencySeconds <= planning.MaxLatencySeconds) {
			return nil, fmt.Errorf("tenants[%d].latencySeconds: %v outside [0, %d]", k, t.LatencySeconds, planning.MaxLatencySeconds)
		}
		tenant := Tenant{
			ID: t.ID, Workload: spec, Rate: t.Rate, Class: class, Priority: t.Priority,
			Objective: Objective{HitRatio: t.HitRatio, Latency: seconds(t.LatencySeconds), MaxDegradation: t.MaxDegradation},
			MinBytes:  t.MinBytes, MaxBytes: t.MaxBytes, MinNodes: t.MinNodes, MaxNodes: t.MaxNodes, Arrive: t.Arrive, Leave: t.Leave,
		}
		for _, c := range t.RateFrom {
			tenant.RateFrom = append(tenant.RateFrom, RateChange(c))
		}
		sc.Tenants = append(sc.Tenants, tenant)
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return sc, nil
}

// MarshalScenario writes sc in the scenario file format, so that "cacheqos-sim run -file"
// replays it. The format describes identical nodes only, and no claim.
func MarshalScenario(sc *Scenario) ([]byte, error) {
	if len(sc.Nodes) == 0 {
		return nil, errors.New("scenario file: no nodes")
	}
	n := sc.Nodes[0]
	for _, other := range sc.Nodes[1:] {
		if other.MemoryBytes != n.MemoryBytes || other.OpsPerSecond != n.OpsPerSecond || other.BandwidthBytesPerSecond != n.BandwidthBytesPerSecond {
			return nil, fmt.Errorf("scenario file: node %s differs from %s, and the format describes identical nodes", other.Name, n.Name)
		}
	}
	f := scenarioFile{
		Name: sc.Name, Title: sc.Title, Description: sc.Description,
		Intervals: sc.Intervals, IntervalSeconds: sc.IntervalSeconds, Warmup: sc.Warmup, Cache: sc.Cache, Engine: sc.Engine,
		HitLatencySecs: sc.HitLatency.Seconds(), MissLatencySecs: sc.MissLatency.Seconds(),
		MRCSampleRate: sc.MRCSampleRate, OptimalTimeLimit: sc.OptimalTimeLimit.Seconds(), OptimalWorkLimit: sc.OptimalWorkLimit,
		Nodes: nodesFile{Count: len(sc.Nodes), MemoryBytes: n.MemoryBytes, OpsPerSecond: n.OpsPerSecond, BandwidthBytesPerSecond: n.BandwidthBytesPerSecond},
	}
	for _, t := range sc.Tenants {
		tf := tenantFile{
			ID: t.ID, Workload: t.Workload.String(), Rate: t.Rate, Class: string(t.Class), Priority: t.Priority,
			HitRatio: t.Objective.HitRatio, LatencySeconds: t.Objective.Latency.Seconds(), MaxDegradation: t.Objective.MaxDegradation,
			MinBytes: t.MinBytes, MaxBytes: t.MaxBytes, MinNodes: t.MinNodes, MaxNodes: t.MaxNodes, Arrive: t.Arrive, Leave: t.Leave,
		}
		for _, c := range t.RateFrom {
			tf.RateFrom = append(tf.RateFrom, rateChangeFile(c))
		}
		f.Tenants = append(f.Tenants, tf)
	}
	return json.MarshalIndent(f, "", "  ")
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// resolveTraces makes relative trace paths relative to baseDir.
func resolveTraces(spec *workload.Spec, baseDir string) {
	if spec.Shape == workload.ShapeTrace && !filepath.IsAbs(spec.TraceFile) {
		spec.TraceFile = filepath.Join(baseDir, spec.TraceFile)
	}
	for i := range spec.Phases {
		resolveTraces(&spec.Phases[i].Spec, baseDir)
	}
}
