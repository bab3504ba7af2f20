package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// PolicyShared is the baseline without partitions: every node's memory is one LRU shared by
// all tenants, whose keys are spread over the nodes by rendezvous hashing with equal weights.
const PolicyShared = "shared"

// Policies lists every policy a scenario runs, the baseline first.
func Policies() []string {
	return []string{PolicyShared, allocator.PolicyEqual, allocator.PolicySoftQoS, allocator.PolicyMaxperf, allocator.PolicyLACS, allocator.PolicyOptimal}
}

// Defaults of a Scenario.
const (
	DefaultHitLatency     = 200 * time.Microsecond // Soft-QoS' t_c
	DefaultMissLatency    = 10 * time.Millisecond  // Soft-QoS' t_d
	DefaultMRCSampleRate  = 0.1                    // the sidecar's default SHARDS rate
	DefaultOptimalTimeOut = 30 * time.Second
	// DefaultOptimalWorkLimit is about what the solver gets done in a few seconds on the
	// development machine.
	DefaultOptimalWorkLimit = 0.5
	DefaultIntervalSeconds  = 10
	// SaturatedDelay is what a request waits on a node whose utilization reaches 1, where
	// the M/M/1 delay is unbounded: about a request timeout.
	SaturatedDelay = time.Second
	// ThrottleMaxWait is how long a token bucket holds a request before refusing it (the
	// proxy's default); a refused request goes to the backend, a miss.
	ThrottleMaxWait = time.Second
	// burstWindow sizes token buckets as the proxy does: depth = rate x window.
	burstWindow = 100 * time.Millisecond
	// maxValueBytes is the smallest bytes-bucket depth (the proxy's largest value).
	maxValueBytes = 1 << 20
)

// Scenario is a simulated cluster, its tenants and how long it runs.
type Scenario struct {
	// Name identifies the scenario in file names and flags (lower case, digits, '-').
	Name  string
	Title string
	// Description says what the scenario models (markdown, one paragraph).
	Description string
	Nodes       []Node
	Tenants     []Tenant
	// Intervals is the number of allocation intervals simulated; each lasts IntervalSeconds
	// of simulated time and ends with a new plan.
	Intervals       int
	IntervalSeconds float64
	// Warmup is how many intervals after a tenant arrives are not counted in its results
	// (the caches start cold and the first plan has no measurements).
	Warmup int
	// Cache is CacheLRU (default) or CacheSampledLRU.
	Cache string
	// Engine is the engine whose memory accounting the partitions simulate: EngineRedis
	// (default) or EngineMemcached. An object takes the bytes the engine allocates for it
	// (mrc.EngineModel.ObjectBytes) of its partition's limit, in the caches and in the curves.
	Engine string
	// HitLatency and MissLatency are a hit's and a miss's service time, without queueing.
	HitLatency, MissLatency time.Duration
	// MRCSampleRate is the trackers' initial SHARDS rate (DefaultMRCSampleRate when 0).
	MRCSampleRate float64
	// OptimalTimeLimit bounds each optimal plan's wall time (DefaultOptimalTimeOut when 0).
	OptimalTimeLimit time.Duration
	// OptimalWorkLimit bounds each optimal plan's search in the solver's deterministic time
	// (DefaultOptimalWorkLimit when 0), so that a search it stops gives the same plan on any
	// machine; see allocator.Options.WorkLimit.
	OptimalWorkLimit float64
	// PoolBestEffort serves every best-effort tenant on a node from one cache sized to the
	// memory the plan gives them there (pool.go), under every policy but shared. It is an
	// experiment of the simulator: the operator and the sidecar do not pool yet.
	PoolBestEffort bool
	// Claim is the seed paper's headline result this scenario mirrors, if any.
	Claim *Claim
}

// Node is one cache node.
type Node struct {
	Name                    string
	MemoryBytes             int64
	OpsPerSecond            float64
	BandwidthBytesPerSecond float64
}

// Tenant is one tenant and its workload.
type Tenant struct {
	// ID is "<namespace>/<name>".
	ID       string
	Workload workload.Spec
	// Rate is the request rate (requests per second of simulated time).
	Rate float64
	// RateFrom changes the rate from some interval on (overload, growing elephants).
	RateFrom []RateChange
	Class    planning.Class
	Priority int32
	// Objective is the tenant's SLO; the zero value means none.
	Objective          Objective
	MinBytes, MaxBytes int64
	// MinNodes and MaxNodes bound how many nodes hold a partition of the tenant (0: the
	// defaults, at least one node and no maximum).
	MinNodes, MaxNodes int32
	// Arrive and Leave bound the intervals the tenant is active in: [Arrive, Leave), where
	// Leave 0 means until the end.
	Arrive, Leave int
}

// RateChange sets a tenant's rate from interval From on.
type RateChange struct {
	From int
	Rate float64
}

// Objective is at most one of a hit ratio, a mean latency and a maximum degradation relative
// to the fair share (Maxperf's delta).
type Objective struct {
	HitRatio       float64
	Latency        time.Duration
	MaxDegradation float64
}

// IsZero reports whether the objective is unset.
func (o Objective) IsZero() bool { return o == Objective{} }

// String describes the objective for the report.
func (o Objective) String() string {
	switch {
	case o.HitRatio > 0:
		return fmt.Sprintf("hit ratio ≥ %.2f", o.HitRatio)
	case o.Latency > 0:
		return fmt.Sprintf("mean latency ≤ %s", planning.FormatSeconds(o.Latency.Seconds()))
	case o.MaxDegradation > 0:
		return fmt.Sprintf("latency ≤ %.2f× fair share", o.MaxDegradation)
	}
	return "none"
}

// Claim is a paper's headline claim and how to compute ours for the same kind of scenario.
type Claim struct {
	Paper string
	// Statement is the paper's claim, quoted or closely paraphrased with its numbers.
	Statement string
	// Measure computes our comparable numbers from the scenario's results and says whether we
	// are better, equal or worse, and why.
	Measure func(r *ScenarioResult) ClaimResult
}

// ClaimResult is our side of a Claim.
type ClaimResult struct {
	Ours    string
	Verdict string // "better", "equal" or "worse"
	Why     string
}

// rateAt returns the tenant's request rate in interval i.
func (t *Tenant) rateAt(i int) float64 {
	r := t.Rate
	for _, c := range t.RateFrom {
		if i >= c.From {
			r = c.Rate
		}
	}
	return r
}

// activeAt reports whether the tenant is active in interval i.
func (t *Tenant) activeAt(i int) bool {
	return i >= t.Arrive && (t.Leave == 0 || i < t.Leave)
}

func (s *Scenario) hitLatency() float64  { return orDuration(s.HitLatency, DefaultHitLatency) }
func (s *Scenario) missLatency() float64 { return orDuration(s.MissLatency, DefaultMissLatency) }

func (s *Scenario) intervalSeconds() float64 {
	if s.IntervalSeconds > 0 {
		return s.IntervalSeconds
	}
	return DefaultIntervalSeconds
}

func (s *Scenario) sampleRate() float64 {
	if s.MRCSampleRate > 0 {
		return s.MRCSampleRate
	}
	return DefaultMRCSampleRate
}

func (s *Scenario) optimalTimeLimit() time.Duration {
	if s.OptimalTimeLimit > 0 {
		return s.OptimalTimeLimit
	}
	return DefaultOptimalTimeOut
}

// maxOptimalWorkLimit bounds OptimalWorkLimit: hours of solver work per plan.
const maxOptimalWorkLimit = 10000

func (s *Scenario) optimalWorkLimit() float64 {
	if s.OptimalWorkLimit > 0 {
		return s.OptimalWorkLimit
	}
	return DefaultOptimalWorkLimit
}

func orDuration(d, def time.Duration) float64 {
	if d > 0 {
		return d.Seconds()
	}
	return def.Seconds()
}

// Validate reports every problem with the scenario, each naming its field.
func (s *Scenario) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Name == "" {
		add("Name: missing")
	}
	if s.Intervals < 1 {
		add("Intervals: %d, want at least 1", s.Intervals)
	}
	if s.IntervalSeconds < 0 || math.IsNaN(s.IntervalSeconds) {
		add("IntervalSeconds: %v is negative", s.IntervalSeconds)
	}
	if s.Warmup < 0 || s.Warmup >= max(s.Intervals, 1) {
		add("Warmup: %d, want 0 to Intervals-1 (%d)", s.Warmup, s.Intervals-1)
	}
	if s.Cache != "" && s.Cache != CacheLRU && s.Cache != CacheSampledLRU {
		add("Cache: unknown model %q (want %q or %q)", s.Cache, CacheLRU, CacheSampledLRU)
	}
	if s.Engine != "" && s.Engine != EngineRedis && s.Engine != EngineMemcached {
		add("Engine: unknown engine %q (want %q or %q)", s.Engine, EngineRedis, EngineMemcached)
	}
	if s.MRCSampleRate < 0 || s.MRCSampleRate > 1 {
		add("MRCSampleRate: %v outside (0, 1]", s.MRCSampleRate)
	}
	if s.HitLatency < 0 || s.MissLatency < 0 || s.OptimalTimeLimit < 0 {
		add("HitLatency, MissLatency, OptimalTimeLimit: must not be negative")
	}
	if !(s.OptimalWorkLimit >= 0 && s.OptimalWorkLimit <= maxOptimalWorkLimit) {
		add("OptimalWorkLimit: %v outside [0, %d]", s.OptimalWorkLimit, maxOptimalWorkLimit)
	}
	if len(s.Nodes) == 0 {
		add("Nodes: none")
	}
	names := map[string]bool{}
	for j, n := range s.Nodes {
		p := fmt.Sprintf("Nodes[%d]", j)
		switch {
		case n.Name == "":
			add("%s.Name: missing", p)
		case names[n.Name]:
			add("%s.Name: %q appears twice", p, n.Name)
		}
		names[n.Name] = true
		if n.MemoryBytes < 1 || n.MemoryBytes > planning.MaxNodeMemoryBytes {
			add("%s.MemoryBytes: %d outside [1, %d]", p, n.MemoryBytes, planning.MaxNodeMemoryBytes)
		}
		if !(n.OpsPerSecond >= 1) || !(n.BandwidthBytesPerSecond >= 1) || n.OpsPerSecond > planning.MaxRate || n.BandwidthBytesPerSecond > planning.MaxRate {
			add("%s: OpsPerSecond %v and BandwidthBytesPerSecond %v must be in [1, %d]", p, n.OpsPerSecond, n.BandwidthBytesPerSecond, int64(planning.MaxRate))
		}
	}
	if len(s.Tenants) == 0 {
		add("Tenants: none")
	}
	ids := map[string]bool{}
	for k := range s.Tenants {
		errs = append(errs, s.Tenants[k].validate(fmt.Sprintf("Tenants[%d]", k), ids)...)
	}
	return errors.Join(errs...)
}

func (t *Tenant) validate(p string, ids map[string]bool) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case !planning.ValidTenantID(t.ID):
		add("%s.ID: %q is not <namespace>/<name>", p, t.ID)
	case ids[t.ID]:
		add("%s.ID: %q appears twice", p, t.ID)
	}
	ids[t.ID] = true
	if err := t.Workload.Validate(); err != nil {
		add("%s.Workload: %w", p, err)
	}
	if !(t.Rate > 0) || t.Rate > planning.MaxRate {
		add("%s.Rate: %v, want a positive request rate", p, t.Rate)
	}
	for i, c := range t.RateFrom {
		if !(c.Rate > 0) || c.From < 0 || i > 0 && c.From <= t.RateFrom[i-1].From {
			add("%s.RateFrom[%d]: want a positive rate and increasing intervals", p, i)
		}
	}
	if t.Class != planning.ClassStrict && t.Class != planning.ClassBestEffort {
		add("%s.Class: %q, want %q or %q", p, t.Class, planning.ClassStrict, planning.ClassBestEffort)
	}
	if t.Priority < 0 || t.Priority > planning.MaxPriority {
		add("%s.Priority: %d outside [0, %d]", p, t.Priority, planning.MaxPriority)
	}
	o := t.Objective
	if t.Class == planning.ClassStrict && o.IsZero() {
		add("%s.Objective: a strict tenant needs an objective (or make it %s)", p, planning.ClassBestEffort)
	}
	set := 0
	for _, on := range []bool{o.HitRatio != 0, o.Latency != 0, o.MaxDegradation != 0} {
		if on {
			set++
		}
	}
	switch {
	case set > 1:
		add("%s.Objective: set at most one of HitRatio, Latency, MaxDegradation", p)
	case o.HitRatio < 0 || o.HitRatio > 1:
		add("%s.Objective.HitRatio: %v outside (0, 1]", p, o.HitRatio)
	case o.Latency < 0:
		add("%s.Objective.Latency: %v is negative", p, o.Latency)
	case o.MaxDegradation != 0 && (o.MaxDegradation < 1 || o.MaxDegradation > 1000):
		add("%s.Objective.MaxDegradation: %v outside [1, 1000]", p, o.MaxDegradation)
	}
	if t.MinBytes < 0 || t.MaxBytes < 0 || t.MaxBytes > 0 && t.MinBytes > t.MaxBytes {
		add("%s: MinBytes %d and MaxBytes %d must be >= 0 with MinBytes <= MaxBytes", p, t.MinBytes, t.MaxBytes)
	}
	if t.MinNodes < 0 || t.MaxNodes < 0 || t.MaxNodes > 0 && t.MinNodes > t.MaxNodes {
		add("%s: MinNodes %d and MaxNodes %d must be >= 0 with MinNodes <= MaxNodes", p, t.MinNodes, t.MaxNodes)
	}
	if t.Arrive < 0 || t.Leave < 0 || t.Leave != 0 && t.Leave <= t.Arrive {
		add("%s: Arrive %d and Leave %d must give a non-empty interval range", p, t.Arrive, t.Leave)
	}
	return errs
}
