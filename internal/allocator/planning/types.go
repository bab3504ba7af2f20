// Package planning defines the allocator's versioned input and output documents: a
// PlanningSnapshot (the nodes, the tenants, what was measured and what is in place) and a Plan
// (per tenant per node memory, limits, routing weights, predictions and a verdict).
//
// Both are plain data with JSON tags; they encode as JSON or YAML and decode strictly (unknown
// fields are rejected with their path), so platform teams can save a snapshot from a live
// cluster, edit it and run what-ifs offline with the cacheqos CLI. docs/planning-snapshot.md
// is the reference for every field.
//
// Units everywhere: memory in bytes (int64), bandwidth in bytes per second, request rates in
// operations per second, ratios as float64 in [0, 1], latencies as float64 seconds. Tenants
// are identified as "<namespace>/<name>".
package planning

import (
	"fmt"
	"math"

	"github.com/cacheqos/cacheqos/internal/curve"
)

// APIVersion is the version of both documents. A future incompatible change gets a new version.
const APIVersion = "cacheqos.io/planning/v1"

// The document kinds.
const (
	KindSnapshot = "PlanningSnapshot"
	KindPlan     = "Plan"
)

// Snapshot is everything the allocator needs to compute a plan.
type Snapshot struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Cluster names the CacheCluster the snapshot was taken from (informational).
	Cluster string   `json:"cluster,omitempty"`
	Nodes   []Node   `json:"nodes"`
	Tenants []Tenant `json:"tenants"`
}

// Node is one cache node and what it can give to the tenants.
type Node struct {
	Name string `json:"name"`
	// MemoryBytes is the memory available for tenant partitions.
	MemoryBytes int64 `json:"memoryBytes"`
	// BandwidthBytesPerSecond and OpsPerSecond are the node's serving capacity.
	BandwidthBytesPerSecond int64 `json:"bandwidthBytesPerSecond"`
	OpsPerSecond            int64 `json:"opsPerSecond"`
	// Load is the total load measured on the node. The part not explained by the tenants'
	// rates on this node (replication, unmanaged clients) is kept as background load.
	Load Load `json:"load,omitzero"`
}

// Load is a request and byte rate.
type Load struct {
	OpsPerSecond   float64 `json:"opsPerSecond,omitempty"`
	BytesPerSecond float64 `json:"bytesPerSecond,omitempty"`
}

// Class says whether a tenant's objective is a promise.
type Class string

const (
	// ClassStrict objectives are met first, in priority order, before anyone's efficiency.
	ClassStrict Class = "strict"
	// ClassBestEffort tenants get what is left (the default).
	ClassBestEffort Class = "bestEffort"
)

// MaxPriority bounds Tenant.Priority.
const MaxPriority = 1000

// Tenant is one tenant: its objective and limits, what it is doing and what it has.
type Tenant struct {
	// ID is "<namespace>/<name>" of the tenant's TenantSLO.
	ID    string `json:"id"`
	Class Class  `json:"class,omitempty"`
	// Priority orders strict tenants when not all objectives can be met: meeting a tenant's
	// objective is worth 1+Priority (0..MaxPriority).
	Priority  int32      `json:"priority,omitempty"`
	Objective *Objective `json:"objective,omitempty"`
	Memory    Memory     `json:"memory,omitzero"`
	Bandwidth Bandwidth  `json:"bandwidth,omitzero"`
	// OpsLimitPerSecond caps the tenant's request rate over all nodes (0: no cap).
	OpsLimitPerSecond int64  `json:"opsLimitPerSecond,omitempty"`
	Spread            Spread `json:"spread,omitzero"`
	// AllowedNodes restricts where the tenant's partitions may live (empty: every node).
	AllowedNodes []string `json:"allowedNodes,omitempty"`
	// Rates are the tenant's measured request and byte rates per node.
	Rates    []NodeRate  `json:"rates,omitempty"`
	Observed Observation `json:"observed,omitzero"`
	// MissRatioCurve is the sampled miss-ratio curve: the miss ratio exact LRU would have with
	// each total size.
	MissRatioCurve []MissRatioPoint `json:"missRatioCurve,omitempty"`
	// History holds (total size, hit ratio) points observed in earlier intervals, oldest first;
	// used to fit a curve while no miss-ratio curve exists.
	History []HitRatioPoint `json:"history,omitempty"`
	// Current is what the tenant has now (the plan in force).
	Current Current `json:"current,omitzero"`
}

// Objective is one of: a hit ratio, a mean latency, or a maximum degradation relative to the
// fair share (Maxperf's delta). Exactly one field is set.
type Objective struct {
	// HitRatio in (0, 1].
	HitRatio *float64 `json:"hitRatio,omitempty"`
	// LatencySeconds is a mean request latency; it needs Observed.HitLatencySeconds and
	// Observed.MissLatencySeconds.
	LatencySeconds *float64 `json:"latencySeconds,omitempty"`
	// MaxDegradation >= 1: mean latency at most this factor times the latency the tenant would
	// have with a fair share (1/N) of the aggregate memory.
	MaxDegradation *float64 `json:"maxDegradation,omitempty"`
}

// Memory bounds the tenant's total memory over all nodes.
type Memory struct {
	MinBytes int64 `json:"minBytes,omitempty"`
	// MaxBytes of 0 means no limit beyond the capacity of the allowed nodes.
	MaxBytes int64 `json:"maxBytes,omitempty"`
}

// Bandwidth is the tenant's total bandwidth guarantee and limit over all nodes.
type Bandwidth struct {
	// GuaranteedBytesPerSecond is reserved on the tenant's nodes in proportion to its routing
	// weights; the reservations on a node never exceed its bandwidth.
	GuaranteedBytesPerSecond int64 `json:"guaranteedBytesPerSecond,omitempty"`
	// LimitBytesPerSecond caps the tenant (0: no cap).
	LimitBytesPerSecond int64 `json:"limitBytesPerSecond,omitempty"`
}

// Spread bounds how many nodes hold a partition of the tenant.
type Spread struct {
	// MinNodes defaults to 1.
	MinNodes int32 `json:"minNodes,omitempty"`
	// MaxNodes of 0 means no limit.
	MaxNodes int32 `json:"maxNodes,omitempty"`
}

// NodeRate is a tenant's measured traffic on one node.
type NodeRate struct {
	Node              string  `json:"node"`
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	BytesPerSecond    float64 `json:"bytesPerSecond,omitempty"`
}

// Observation is what was measured for the tenant at its current total size.
type Observation struct {
	// HitRatio observed at the current size (nil: not measured).
	HitRatio *float64 `json:"hitRatio,omitempty"`
	// HitLatencySeconds and MissLatencySeconds are the mean service times of a hit and of a
	// miss, without the node's queueing delay, which the allocator models (M/M/1).
	HitLatencySeconds  float64 `json:"hitLatencySeconds,omitempty"`
	MissLatencySeconds float64 `json:"missLatencySeconds,omitempty"`
}

// MissRatioPoint is one point of a sampled miss-ratio curve.
type MissRatioPoint struct {
	SizeBytes int64   `json:"sizeBytes"`
	MissRatio float64 `json:"missRatio"`
}

// HitRatioPoint is one observed (size, hit ratio) pair.
type HitRatioPoint struct {
	SizeBytes int64   `json:"sizeBytes"`
	HitRatio  float64 `json:"hitRatio"`
}

// Current is the allocation in force for a tenant.
type Current struct {
	Partitions []CurrentPartition `json:"partitions,omitempty"`
	// Isolated reports that the plan in force throttles the tenant as a LACS elephant; the
	// lacs policy uses it to avoid flapping at the threshold.
	Isolated bool `json:"isolated,omitempty"`
}

// CurrentPartition is the memory the tenant has on one node.
type CurrentPartition struct {
	Node        string `json:"node"`
	MemoryBytes int64  `json:"memoryBytes"`
}

// Plan is the allocator's answer for one snapshot.
type Plan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Cluster    string `json:"cluster,omitempty"`
	// Policy is the policy that produced the plan.
	Policy  string        `json:"policy"`
	Solver  *SolverReport `json:"solver,omitempty"`
	Summary Summary       `json:"summary"`
	Nodes   []NodePlan    `json:"nodes"`
	Tenants []TenantPlan  `json:"tenants"`
	// Notes are policy-level remarks (fallbacks, overload, elephants).
	Notes []string `json:"notes,omitempty"`
}

// SolverReport tells how an optimizing policy reached the plan.
type SolverReport struct {
	// Status is the CP-SAT status of the solve that produced the plan (Optimal, Feasible...),
	// or "Greedy" when the greedy solution was used.
	Status string `json:"status"`
	// Method is "joint" (one model for sizes and placement) or "decomposed" (sizing model,
	// then a placement model).
	Method string `json:"method,omitempty"`
	// Objective and Bound are in the solver's scaled integer units; Gap is the distance to the
	// bound measured in units of the expected-hits term, relative to that term.
	Objective float64 `json:"objective"`
	Bound     float64 `json:"bound"`
	Gap       float64 `json:"gap"`
	// GreedyObjective is the greedy warm start's objective in the same units.
	GreedyObjective float64 `json:"greedyObjective"`
	// WallTimeSeconds is the total planning time.
	WallTimeSeconds float64 `json:"wallTimeSeconds"`
	// Fallback explains why the greedy solution was used instead of the solver's, if it was.
	Fallback string `json:"fallback,omitempty"`
}

// Summary aggregates the plan.
type Summary struct {
	Tenants       int `json:"tenants"`
	StrictTenants int `json:"strictTenants"`
	StrictMet     int `json:"strictMet"`
	// ObjectivesMet counts every tenant (strict or not) whose objective is predicted met.
	ObjectivesMet int `json:"objectivesMet"`
	// ExpectedHitsPerSecond is the sum over tenants of request rate times predicted hit ratio;
	// ExpectedHitRatio divides it by the total request rate.
	ExpectedHitsPerSecond float64 `json:"expectedHitsPerSecond"`
	ExpectedHitRatio      float64 `json:"expectedHitRatio"`
	// MovementBytes is the L1 distance from the current plan: the sum over tenants and nodes
	// of |new memory - current memory|.
	MovementBytes int64 `json:"movementBytes"`
	MemoryBytes   int64 `json:"memoryBytes"`
	// SaturatedNodes counts nodes whose predicted load reaches their capacity.
	SaturatedNodes int `json:"saturatedNodes"`
}

// NodePlan is what the plan puts on one node.
type NodePlan struct {
	Name                string `json:"name"`
	MemoryBytes         int64  `json:"memoryBytes"`
	MemoryCapacityBytes int64  `json:"memoryCapacityBytes"`
	// GuaranteedBytesPerSecond is the bandwidth reserved by guarantees on this node.
	GuaranteedBytesPerSecond int64 `json:"guaranteedBytesPerSecond,omitempty"`
	// Predicted load after the plan, its utilization (the larger of ops and bandwidth) and the
	// M/M/1 queueing delay; QueueDelaySeconds is absent when the node is saturated.
	PredictedOpsPerSecond   float64  `json:"predictedOpsPerSecond"`
	PredictedBytesPerSecond float64  `json:"predictedBytesPerSecond"`
	Utilization             float64  `json:"utilization"`
	QueueDelaySeconds       *float64 `json:"queueDelaySeconds,omitempty"`
	Saturated               bool     `json:"saturated,omitempty"`
}

// Verdict is the plan's judgement of a tenant's objective.
type Verdict string

const (
	// VerdictMeetsSLO: the objective is predicted to be met.
	VerdictMeetsSLO Verdict = "MeetsSLO"
	// VerdictBestEffort: a best-effort tenant whose objective (if any) is not predicted met.
	VerdictBestEffort Verdict = "BestEffort"
	// VerdictInfeasible: a strict objective that is not predicted met; Reason says why.
	VerdictInfeasible Verdict = "Infeasible"
)

// TenantPlan is what the plan gives one tenant.
type TenantPlan struct {
	ID          string      `json:"id"`
	MemoryBytes int64       `json:"memoryBytes"`
	Partitions  []Partition `json:"partitions"`
	Predicted   Prediction  `json:"predicted"`
	Verdict     Verdict     `json:"verdict"`
	// Reason says why an objective is not met (empty when it is).
	Reason string `json:"reason,omitempty"`
	// Explanation says, in one or two sentences, why the tenant got what it got.
	Explanation string `json:"explanation"`
	// Isolated reports that the tenant is throttled as a LACS elephant.
	Isolated bool `json:"isolated,omitempty"`
}

// Partition is the tenant's share of one node.
type Partition struct {
	Node        string `json:"node"`
	MemoryBytes int64  `json:"memoryBytes"`
	// RoutingWeight is the share of the tenant's keys routed to this node, in parts per million
	// of the tenant's total (proportional to MemoryBytes; equal shares when the tenant has no
	// memory at all).
	RoutingWeight int32 `json:"routingWeight"`
	// BandwidthLimitBytesPerSecond and OpsLimitPerSecond are the token-bucket rates the node
	// enforces for this tenant (0: no limit).
	BandwidthLimitBytesPerSecond int64 `json:"bandwidthLimitBytesPerSecond,omitempty"`
	OpsLimitPerSecond            int64 `json:"opsLimitPerSecond,omitempty"`
	// GuaranteedBytesPerSecond is the part of the tenant's guarantee reserved here.
	GuaranteedBytesPerSecond int64 `json:"guaranteedBytesPerSecond,omitempty"`
}

// Prediction is the model's forecast for a tenant under the plan.
type Prediction struct {
	HitRatio float64 `json:"hitRatio"`
	// LatencySeconds is the predicted mean latency; absent when the tenant's latencies were
	// not measured or when a queue on its path is saturated.
	LatencySeconds *float64 `json:"latencySeconds,omitempty"`
	// HitsPerSecond is the request rate times the hit ratio.
	HitsPerSecond float64 `json:"hitsPerSecond"`
	Saturated     bool    `json:"saturated,omitempty"`
}

// MissRatios turns a hit-ratio curve into the snapshot's miss-ratio points; nil stays nil.
func MissRatios(points []curve.Point) []MissRatioPoint {
	if points == nil {
		return nil
	}
	out := make([]MissRatioPoint, len(points))
	for i, p := range points {
		out[i] = MissRatioPoint{SizeBytes: p.SizeBytes, MissRatio: 1 - p.HitRatio}
	}
	return out
}

// FormatBytes prints a byte count with a binary unit ("1.5 GiB"), as explanations and the CLI
// tables do.
func FormatBytes(b int64) string {
	const unit = 1024
	if b < unit && b > -unit {
		return fmt.Sprintf("%d B", b)
	}
	v := float64(b)
	for _, suffix := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= unit
		if math.Abs(v) < unit {
			return fmt.Sprintf("%.1f %s", v, suffix)
		}
	}
	return fmt.Sprintf("%.1f EiB", v/unit)
}

// FormatSeconds prints a duration given in seconds with a readable unit ("1.20 ms").
func FormatSeconds(s float64) string {
	switch {
	case math.IsInf(s, 0) || math.IsNaN(s):
		return "unbounded"
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.0f µs", s*1e6)
}
