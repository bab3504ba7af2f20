package planning

import (
	"errors"
	"fmt"
	"math"
	"regexp"
)

// Limits that keep every sum the allocator forms within int64.
const (
	// MaxNodes and MaxTenants bound the document sizes.
	MaxNodes   = 65536
	MaxTenants = 1 << 20
	// MaxNodeMemoryBytes is 64 TiB; with MaxNodes, total memory stays below 2^62.
	MaxNodeMemoryBytes int64 = 1 << 46
	// MaxRate bounds byte and request rates (and capacities): 2^50 per second.
	MaxRate = 1 << 50
	// MaxCurvePoints bounds a miss-ratio curve or a history.
	MaxCurvePoints = 4096
	// MaxLatencySeconds bounds latencies (an hour).
	MaxLatencySeconds = 3600
)

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ValidTenantID reports whether id is "<namespace>/<name>" with a DNS label as namespace and
// a DNS subdomain as name.
func ValidTenantID(id string) bool {
	for i := 0; i < len(id); i++ {
		if id[i] == '/' {
			ns, name := id[:i], id[i+1:]
			return len(ns) <= 63 && dnsLabel.MatchString(ns) && len(name) <= 253 && dnsSubdomain.MatchString(name)
		}
	}
	return false
}

// Validate checks the snapshot and returns every problem found, each prefixed by the path of
// the offending field (tenants[3].memory.minBytes: ...), joined with errors.Join.
func (s *Snapshot) Validate() error {
	v := &validator{}
	if s.APIVersion != APIVersion {
		v.addf("apiVersion", "got %q, want %q", s.APIVersion, APIVersion)
	}
	if s.Kind != KindSnapshot {
		v.addf("kind", "got %q, want %q", s.Kind, KindSnapshot)
	}
	switch {
	case len(s.Nodes) == 0:
		v.addf("nodes", "at least one node is required")
	case len(s.Nodes) > MaxNodes:
		v.addf("nodes", "%d nodes, at most %d", len(s.Nodes), MaxNodes)
	}
	if len(s.Tenants) > MaxTenants {
		v.addf("tenants", "%d tenants, at most %d", len(s.Tenants), MaxTenants)
	}
	nodes := make(map[string]bool, len(s.Nodes))
	for i, n := range s.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		switch {
		case n.Name == "":
			v.addf(p+".name", "is required")
		case nodes[n.Name]:
			v.addf(p+".name", "duplicate node %q", n.Name)
		}
		nodes[n.Name] = true
		v.intRange(p+".memoryBytes", n.MemoryBytes, 1, MaxNodeMemoryBytes)
		v.intRange(p+".bandwidthBytesPerSecond", n.BandwidthBytesPerSecond, 1, MaxRate)
		v.intRange(p+".opsPerSecond", n.OpsPerSecond, 1, MaxRate)
		v.rate(p+".load.opsPerSecond", n.Load.OpsPerSecond)
		v.rate(p+".load.bytesPerSecond", n.Load.BytesPerSecond)
	}
	ids := make(map[string]bool, len(s.Tenants))
	for i := range s.Tenants {
		t := &s.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		switch {
		case !ValidTenantID(t.ID):
			v.addf(p+".id", "%q is not <namespace>/<name>", t.ID)
		case ids[t.ID]:
			v.addf(p+".id", "duplicate tenant %q", t.ID)
		}
		ids[t.ID] = true
		v.tenant(p, t, nodes)
	}
	return v.err()
}

type validator struct{ errs []error }

func (v *validator) addf(path, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (v *validator) err() error { return errors.Join(v.errs...) }

func (v *validator) intRange(path string, x, lo, hi int64) {
	if x < lo || x > hi {
		v.addf(path, "%d is outside [%d, %d]", x, lo, hi)
	}
}

func (v *validator) rate(path string, x float64) {
	if math.IsNaN(x) || x < 0 || x > MaxRate {
		v.addf(path, "%v is outside [0, %d]", x, int64(MaxRate))
	}
}

func (v *validator) ratio(path string, x float64) {
	if math.IsNaN(x) || x < 0 || x > 1 {
		v.addf(path, "%v is outside [0, 1]", x)
	}
}

func (v *validator) latency(path string, x float64) {
	if math.IsNaN(x) || x < 0 || x > MaxLatencySeconds {
		v.addf(path, "%v is outside [0, %d] seconds", x, MaxLatencySeconds)
	}
}

func (v *validator) nodeRef(path, name string, nodes map[string]bool, seen map[string]bool) {
	switch {
	case !nodes[name]:
		v.addf(path, "unknown node %q", name)
	case seen[name]:
		v.addf(path, "node %q listed twice", name)
	}
	seen[name] = true
}

func (v *validator) tenant(p string, t *Tenant, nodes map[string]bool) {
	if t.Class != "" && t.Class != ClassStrict && t.Class != ClassBestEffort {
		v.addf(p+".class", "%q is not %q or %q", t.Class, ClassStrict, ClassBestEffort)
	}
	if t.Priority < 0 || t.Priority > MaxPriority {
		v.addf(p+".priority", "%d is outside [0, %d]", t.Priority, MaxPriority)
	}
	if t.Objective != nil {
		v.objective(p+".objective", t.Objective, t.Observed)
	} else if t.Class == ClassStrict {
		v.addf(p+".objective", "a strict tenant needs an objective")
	}
	v.intRange(p+".memory.minBytes", t.Memory.MinBytes, 0, MaxNodeMemoryBytes*MaxNodes)
	v.intRange(p+".memory.maxBytes", t.Memory.MaxBytes, 0, MaxNodeMemoryBytes*MaxNodes)
	if t.Memory.MaxBytes > 0 && t.Memory.MinBytes > t.Memory.MaxBytes {
		v.addf(p+".memory", "minBytes %d is above maxBytes %d", t.Memory.MinBytes, t.Memory.MaxBytes)
	}
	v.intRange(p+".bandwidth.guaranteedBytesPerSecond", t.Bandwidth.GuaranteedBytesPerSecond, 0, MaxRate)
	v.intRange(p+".bandwidth.limitBytesPerSecond", t.Bandwidth.LimitBytesPerSecond, 0, MaxRate)
	if b := t.Bandwidth; b.LimitBytesPerSecond > 0 && b.GuaranteedBytesPerSecond > b.LimitBytesPerSecond {
		v.addf(p+".bandwidth", "guaranteedBytesPerSecond %d is above limitBytesPerSecond %d", b.GuaranteedBytesPerSecond, b.LimitBytesPerSecond)
	}
	v.intRange(p+".opsLimitPerSecond", t.OpsLimitPerSecond, 0, MaxRate)
	v.intRange(p+".spread.minNodes", int64(t.Spread.MinNodes), 0, MaxNodes)
	v.intRange(p+".spread.maxNodes", int64(t.Spread.MaxNodes), 0, MaxNodes)
	if sp := t.Spread; sp.MaxNodes > 0 && sp.MinNodes > sp.MaxNodes {
		v.addf(p+".spread", "minNodes %d is above maxNodes %d", sp.MinNodes, sp.MaxNodes)
	}
	seen := map[string]bool{}
	for j, n := range t.AllowedNodes {
		v.nodeRef(fmt.Sprintf("%s.allowedNodes[%d]", p, j), n, nodes, seen)
	}
	seen = map[string]bool{}
	for j, r := range t.Rates {
		rp := fmt.Sprintf("%s.rates[%d]", p, j)
		v.nodeRef(rp+".node", r.Node, nodes, seen)
		v.rate(rp+".requestsPerSecond", r.RequestsPerSecond)
		v.rate(rp+".bytesPerSecond", r.BytesPerSecond)
	}
	if h := t.Observed.HitRatio; h != nil {
		v.ratio(p+".observed.hitRatio", *h)
	}
	v.latency(p+".observed.hitLatencySeconds", t.Observed.HitLatencySeconds)
	v.latency(p+".observed.missLatencySeconds", t.Observed.MissLatencySeconds)
	if len(t.MissRatioCurve) > MaxCurvePoints {
		v.addf(p+".missRatioCurve", "%d points, at most %d", len(t.MissRatioCurve), MaxCurvePoints)
	}
	for j, pt := range t.MissRatioCurve {
		pp := fmt.Sprintf("%s.missRatioCurve[%d]", p, j)
		v.intRange(pp+".sizeBytes", pt.SizeBytes, 1, MaxNodeMemoryBytes*MaxNodes)
		v.ratio(pp+".missRatio", pt.MissRatio)
	}
	if len(t.History) > MaxCurvePoints {
		v.addf(p+".history", "%d points, at most %d", len(t.History), MaxCurvePoints)
	}
	for j, pt := range t.History {
		pp := fmt.Sprintf("%s.history[%d]", p, j)
		v.intRange(pp+".sizeBytes", pt.SizeBytes, 1, MaxNodeMemoryBytes*MaxNodes)
		v.ratio(pp+".hitRatio", pt.HitRatio)
	}
	seen = map[string]bool{}
	for j, c := range t.Current.Partitions {
		cp := fmt.Sprintf("%s.current.partitions[%d]", p, j)
		v.nodeRef(cp+".node", c.Node, nodes, seen)
		v.intRange(cp+".memoryBytes", c.MemoryBytes, 0, MaxNodeMemoryBytes)
	}
}

func (v *validator) objective(p string, o *Objective, obs Observation) {
	set := 0
	if o.HitRatio != nil {
		set++
		if h := *o.HitRatio; math.IsNaN(h) || h <= 0 || h > 1 {
			v.addf(p+".hitRatio", "%v is outside (0, 1]", h)
		}
	}
	if o.LatencySeconds != nil {
		set++
		if l := *o.LatencySeconds; math.IsNaN(l) || l <= 0 || l > MaxLatencySeconds {
			v.addf(p+".latencySeconds", "%v is outside (0, %d]", l, MaxLatencySeconds)
		}
		if obs.HitLatencySeconds <= 0 || obs.MissLatencySeconds <= 0 {
			v.addf(p+".latencySeconds", "a latency objective needs observed.hitLatencySeconds and observed.missLatencySeconds")
		}
	}
	if o.MaxDegradation != nil {
		set++
		if d := *o.MaxDegradation; math.IsNaN(d) || d < 1 || d > 1000 {
			v.addf(p+".maxDegradation", "%v is outside [1, 1000]", d)
		}
	}
	if set != 1 {
		v.addf(p, "set exactly one of hitRatio, latencySeconds, maxDegradation (%d set)", set)
	}
}
