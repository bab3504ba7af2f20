package sim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// CacheModels lists the cache models a fuzz run may use.
func CacheModels() []string { return []string{CacheLRU, CacheSampledLRU} }

// FuzzRun says what RunFleets runs.
type FuzzRun struct {
	// Policies to run; the equal policy always runs too (the degradation objectives'
	// baseline), and so does the judged one.
	Policies []string
	Caches   []string
	Judged   string
	// PoolBestEffort runs every fleet with Scenario.PoolBestEffort (the simulator experiment).
	PoolBestEffort bool
	// Parallel is how many fleet runs go at once.
	Parallel int
	// Progress, when set, gets each fleet run's judgement as it completes.
	Progress func(*FleetJudgement)
}

// runPolicies is the policies of r in the order of Policies(), with equal and the judged one.
func (r FuzzRun) runPolicies() []string {
	var out []string
	for _, p := range Policies() {
		if slices.Contains(r.Policies, p) || p == allocator.PolicyEqual || p == r.Judged {
			out = append(out, p)
		}
	}
	return out
}

// RunFleets runs every fleet under every cache model and policy of r and judges each run, in
// the order of the fleets then of the cache models. Up to r.Parallel fleet runs go at once,
// each running its policies one after the other. A fleet's seed is also its run's seed.
func RunFleets(ctx context.Context, fleets []*Fleet, r FuzzRun) ([]*FleetJudgement, error) {
	if !slices.Contains(Policies(), r.Judged) {
		return nil, fmt.Errorf("judged policy %q is not one of %v", r.Judged, Policies())
	}
	type job struct {
		fleet *Fleet
		cache string
	}
	var jobs []job
	for _, f := range fleets {
		for _, cache := range r.Caches {
			jobs = append(jobs, job{f, cache})
		}
	}
	out := make([]*FleetJudgement, len(jobs))
	var mu sync.Mutex
	err := forEach(len(jobs), r.Parallel, func(i int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		jb := jobs[i]
		sc := *jb.fleet.Scenario
		sc.Cache = jb.cache
		sc.PoolBestEffort = r.PoolBestEffort
		res, err := RunScenario(ctx, &sc, r.runPolicies(), jb.fleet.Seed, 1)
		if err != nil {
			return fmt.Errorf("%s with %s: %w", sc.Name, jb.cache, err)
		}
		out[i] = JudgeFleet(jb.fleet, jb.cache, res, r.Judged)
		out[i].Pooled = r.PoolBestEffort
		if r.Progress != nil {
			mu.Lock()
			r.Progress(out[i])
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// strictCount is the number of the fleet's tenants with a strict objective.
func (f *Fleet) strictCount() int {
	n := 0
	for k := range f.Scenario.Tenants {
		if f.Scenario.Tenants[k].isStrict() {
			n++
		}
	}
	return n
}

// Describe is a one-line description of the fleet.
func (f *Fleet) Describe() string {
	sc := f.Scenario
	memory := "loose"
	if f.Tight {
		memory = "tight"
	}
	flood := ""
	if f.Flood != "" {
		flood = ", flood"
	}
	return fmt.Sprintf("%d × %s, %d tenants (%d strict), %s%s", len(sc.Nodes), planning.FormatBytes(sc.Nodes[0].MemoryBytes), len(sc.Tenants), f.strictCount(), memory, flood)
}

// ReplayCommand is the command that replays one fleet run.
func (j *FleetJudgement) ReplayCommand() string {
	cmd := fmt.Sprintf("cacheqos-sim fuzz -fleet-seed %#x -cache %s", j.Fleet.Seed, j.Cache)
	if n := j.Fleet.Scenario.Intervals; n != DefaultFuzzOptions().Intervals {
		cmd += fmt.Sprintf(" -intervals %d", n)
	}
	if j.Pooled {
		cmd += " -pool"
	}
	return cmd
}

// Line is a one-line summary of the fleet run for progress output.
func (j *FleetJudgement) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "0x%016x %-11s %s | attainment", j.Fleet.Seed, j.Cache, j.Fleet.Describe())
	for _, p := range j.Policies {
		fmt.Fprintf(&b, " %s %s", p.Policy, fmtRatio(p.Attainment))
	}
	if len(j.Misses) == 0 {
		b.WriteString(" | every criterion met")
	} else {
		b.WriteString(" | missed: " + j.missList())
	}
	return b.String()
}

func (j *FleetJudgement) missList() string {
	var parts []string
	for _, c := range Criteria() {
		if m, ok := j.Misses[c]; ok {
			parts = append(parts, c+" ("+m+")")
		}
	}
	return strings.Join(parts, "; ")
}

// FuzzReport is what WriteFuzzReport writes about.
type FuzzReport struct {
	// MasterSeed is the seed the fleet seeds derive from; Replayed is true when the one fleet
	// was given by its own seed instead.
	MasterSeed uint64
	Replayed   bool
	Options    FuzzOptions
	Fleets     []*Fleet
	Rejected   []Rejection
	Caches     []string
	Judged     string
	Runs       []*FleetJudgement
}

// WriteFuzzReport writes the fuzz results as markdown: the aggregate per cache model, the
// criteria the judged policy missed and in which fleets (with the command replaying each),
// and a table of every fleet run.
func WriteFuzzReport(w io.Writer, r *FuzzReport) error {
	var b bytes.Buffer
	drawn := fmt.Sprintf("%d fleets from seed %d (the oracle rejected %d more)", len(r.Fleets), r.MasterSeed, len(r.Rejected))
	if r.Replayed && len(r.Fleets) == 1 {
		drawn = fmt.Sprintf("Fleet `%#x`, replayed", r.Fleets[0].Seed)
	}
	fmt.Fprintf(&b, "%s, each run for %d intervals of %s (the first %d after a tenant arrives not counted), under %s; the criteria are judged for `%s`.\n\n",
		drawn, r.Options.Intervals, planning.FormatSeconds(r.Options.IntervalSeconds), r.Options.Warmup, strings.Join(r.Caches, " and "), r.Judged)
	if len(r.Runs) > 0 && r.Runs[0].Pooled {
		b.WriteString(pooledNote + "\n\n")
	}
	writeFuzzAggregate(&b, r)
	writeFuzzCriteria(&b, r)
	writeFuzzPolicies(&b, r)
	writeFuzzMisses(&b, r)
	writeFuzzFleets(&b, r)
	if len(r.Rejected) > 0 {
		b.WriteString("Fleets the oracle rejected:\n\n")
		for _, rej := range r.Rejected {
			fmt.Fprintf(&b, "- `%#x`: %s\n", rej.Seed, rej.Reason)
		}
		b.WriteString("\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

func writeFuzzCriteria(b *bytes.Buffer, r *FuzzReport) {
	fmt.Fprintf(b, "Fleet runs in which `%s` missed each criterion, of those in which it applies:\n\n", r.Judged)
	b.WriteString("| criterion |")
	var sums []FuzzSummary
	for _, c := range r.Caches {
		fmt.Fprintf(b, " %s |", c)
		sums = append(sums, SummarizeFuzz(r.Runs, c))
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Caches)) + "\n")
	for _, c := range Criteria() {
		fmt.Fprintf(b, "| %s |", c)
		for _, s := range sums {
			fmt.Fprintf(b, " %d of %d |", s.Missed[c], s.Judged[c])
		}
		b.WriteString("\n")
	}
	b.WriteString("| every criterion met |")
	for _, s := range sums {
		fmt.Fprintf(b, " %d of %d |", s.AllMet, s.Runs)
	}
	b.WriteString("\n\n")
}

// writeFuzzAggregate writes the one-line verdict over every fleet run.
func writeFuzzAggregate(b *bytes.Buffer, r *FuzzReport) {
	all := SummarizeFuzz(r.Runs, "")
	fmt.Fprintf(b, "**Aggregate**: `%s` met every criterion in %d of %d fleet runs and reached attainment 0.99 in %d; mean attainment",
		r.Judged, all.AllMet, all.Runs, all.Judged[CriterionAttainment]-all.Missed[CriterionAttainment])
	for i, p := range all.PerPolicy {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(b, "%s %s %s", sep, p.Policy, fmtRatio(p.MeanAttainment))
	}
	b.WriteString(".\n\n")
}

func writeFuzzPolicies(b *bytes.Buffer, r *FuzzReport) {
	b.WriteString("Per policy: attainment of the strict objectives (mean, least, fleet runs at 0.99 or more), memory moved per steady interval as a share of the fleet's (mean, largest), the longest settling after a change, in intervals, and the node-intervals saturated over all fleet runs:\n\n")
	b.WriteString("| cache | policy | mean attainment | least | at ≥ 0.99 | steady moved mean / max | longest settling | saturated |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Caches {
		s := SummarizeFuzz(r.Runs, c)
		for _, p := range s.PerPolicy {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %d of %d | %s / %s | %s | %d |\n", c, p.Policy, fmtRatio(p.MeanAttainment), fmtRatio(p.MinAttainment),
				p.AtFloor, s.Runs, fmtShare(p.MeanSteadyMoved), fmtShare(p.MaxSteadyMoved), fmtSettle(p.MaxSettle), p.Saturated)
		}
	}
	b.WriteString("\n")
}

func writeFuzzMisses(b *bytes.Buffer, r *FuzzReport) {
	missed := MissedFleets(r.Runs)
	started := false
	for _, c := range Criteria() {
		if len(missed[c]) == 0 {
			continue
		}
		if !started {
			b.WriteString("Fleet runs that missed, per criterion (replay one with the command given):\n\n")
			started = true
		}
		fmt.Fprintf(b, "- **%s**:\n", c)
		for _, j := range missed[c] {
			fmt.Fprintf(b, "  - %s — `%s`\n", j.Misses[c], j.ReplayCommand())
		}
	}
	if started {
		b.WriteString("\n")
	}
}

func writeFuzzFleets(b *bytes.Buffer, r *FuzzReport) {
	var policies []string
	if len(r.Runs) > 0 {
		for _, p := range r.Runs[0].Policies {
			policies = append(policies, p.Policy)
		}
	}
	fmt.Fprintf(b, "Every fleet run: the share of the fleet's memory the oracle's plan leaves free in its fullest interval (slack), attainment per policy, then `%s`'s overall hit ratio and mean latency relative to the best policy that reached 0.99 (– when `%s` did not), memory moved per steady interval, the longest settling, node-intervals saturated, and how many criteria it missed:\n\n", r.Judged, r.Judged)
	b.WriteString("| fleet seed | cache | fleet | slack | " + strings.Join(policies, " | ") + " | hit ratio / best | latency / best | steady moved | settling | saturated | missed |\n")
	b.WriteString("|---|---|---|---|" + strings.Repeat("---|", len(policies)) + "---|---|---|---|---|---|\n")
	for _, j := range r.Runs {
		fmt.Fprintf(b, "| `%#x` | %s | %s | %.0f%% |", j.Fleet.Seed, j.Cache, j.Fleet.Describe(), 100*j.Fleet.Verdict.MinSlack)
		for _, p := range j.Policies {
			fmt.Fprintf(b, " %s |", fmtRatio(p.Attainment))
		}
		me := j.Policy(j.Judged)
		hit, lat := math.NaN(), math.NaN()
		if j.Compared {
			best := j.bestAtFloor()
			hit, lat = me.HitRatio/best.hitRatio, me.MeanLatency/best.latency
		}
		fmt.Fprintf(b, " %s | %s | %s | %s | %d | %d |\n", fmtRatio(hit), fmtRatio(lat), fmtShare(me.SteadyMoved), fmtSettle(me.Settle), me.Saturated, len(j.Misses))
	}
	b.WriteString("\n")
}

func fmtShare(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func fmtSettle(v int) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%d", v)
}
