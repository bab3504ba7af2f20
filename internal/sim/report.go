package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/plot"
)

// ReportOptions tunes WriteReport.
type ReportOptions struct {
	// PlotDir is where the plots are linked from, relative to the report.
	PlotDir string
	// Timings includes plan wall times. They differ from run to run, so a report compared
	// byte for byte (the determinism test) leaves them out.
	Timings bool
}

// maxPlottedTenants bounds the tenants drawn in one over-time plot.
const maxPlottedTenants = 10

// WriteReport writes the generated part of the evaluation report: the headline tables, the
// papers' claims next to ours, and one section per scenario.
func WriteReport(w io.Writer, results []*ScenarioResult, opts ReportOptions) error {
	var b bytes.Buffer
	if !opts.Timings {
		results = withoutTimings(results)
	}
	writeHeadline(&b, results)
	writeClaims(&b, results)
	for _, r := range results {
		writeScenario(&b, r, opts)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// withoutTimings returns copies of the results with every plan time zeroed.
func withoutTimings(results []*ScenarioResult) []*ScenarioResult {
	out := make([]*ScenarioResult, len(results))
	for i, r := range results {
		c := *r
		c.Summaries = append([]PolicySummary(nil), r.Summaries...)
		for j := range c.Summaries {
			c.Summaries[j].PlanSeconds, c.Summaries[j].MaxPlanSeconds, c.Summaries[j].SolverTimeouts = 0, 0, 0
		}
		out[i] = &c
	}
	return out
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtHit(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

func fmtSeconds(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return planning.FormatSeconds(v)
}

func fmtPlan(s *PolicySummary, timings bool) string {
	switch {
	case s.Policy == PolicyShared:
		return "–"
	case !timings:
		return "(omitted)"
	}
	return fmt.Sprintf("%s / %s, %d at the limit", planning.FormatSeconds(s.PlanSeconds), planning.FormatSeconds(s.MaxPlanSeconds), s.SolverTimeouts)
}

func writeHeadline(b *bytes.Buffer, results []*ScenarioResult) {
	policies := Policies()
	b.WriteString("## Headline\n\n")
	b.WriteString("SLO attainment (mean over tenants with an objective of the fraction of counted intervals in which " +
		"they met it) / overall hit ratio, per scenario and policy. Best attainment in bold.\n\n")
	b.WriteString("| scenario | " + strings.Join(policies, " | ") + " |\n|---|" + strings.Repeat("---|", len(policies)) + "\n")
	for _, r := range results {
		best := math.Inf(-1)
		for _, p := range policies {
			if s := r.Summary(p); s != nil && !math.IsNaN(s.SLOAttainment) {
				best = math.Max(best, s.SLOAttainment)
			}
		}
		fmt.Fprintf(b, "| [%s](#%s) |", r.Scenario.Name, anchor(r.Scenario))
		for _, p := range policies {
			s := r.Summary(p)
			if s == nil {
				b.WriteString(" |")
				continue
			}
			att := fmtRatio(s.SLOAttainment)
			if s.SLOAttainment == best {
				att = "**" + att + "**"
			}
			fmt.Fprintf(b, " %s / %s |", att, fmtHit(s.HitRatio))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nMean request latency per scenario and policy:\n\n")
	b.WriteString("| scenario | " + strings.Join(policies, " | ") + " |\n|---|" + strings.Repeat("---|", len(policies)) + "\n")
	for _, r := range results {
		fmt.Fprintf(b, "| %s |", r.Scenario.Name)
		for _, p := range policies {
			if s := r.Summary(p); s != nil {
				fmt.Fprintf(b, " %s |", fmtSeconds(s.MeanLatency))
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func writeClaims(b *bytes.Buffer, results []*ScenarioResult) {
	b.WriteString("## The papers' claims next to ours\n\n")
	b.WriteString("| scenario | paper | their claim | ours | verdict | why |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		c := r.Scenario.Claim
		if c == nil || !r.hasPolicies(Policies()) {
			continue
		}
		res := c.Measure(r)
		fmt.Fprintf(b, "| [%s](#%s) | %s | %s | %s | **%s** | %s |\n", r.Scenario.Name, anchor(r.Scenario), c.Paper,
			cell(c.Statement), cell(res.Ours), res.Verdict, cell(res.Why))
	}
	b.WriteString("\n")
}

// hasPolicies reports whether every listed policy was run (claims compare several).
func (r *ScenarioResult) hasPolicies(policies []string) bool {
	for _, p := range policies {
		if r.Summary(p) == nil {
			return false
		}
	}
	return true
}

// cell makes text safe inside a markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "|", "\\|")
}

// anchor is the GitHub heading anchor of a scenario's section.
func anchor(sc *Scenario) string {
	var b strings.Builder
	for _, r := range strings.ToLower(sc.Name + " " + sc.Title) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		case r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func writeScenario(b *bytes.Buffer, r *ScenarioResult, opts ReportOptions) {
	sc := r.Scenario
	fmt.Fprintf(b, "## %s %s\n\n%s\n\n", sc.Name, sc.Title, sc.Description)
	model := sc.Cache
	if model == "" {
		model = CacheLRU
	}
	fmt.Fprintf(b, "%d nodes × %s, %s ops/s each; %d tenants; %d intervals of %gs (first %d after a tenant arrives not counted); cache model %s; seed %d.\n\n",
		len(sc.Nodes), planning.FormatBytes(sc.Nodes[0].MemoryBytes), humanCount(sc.Nodes[0].OpsPerSecond), len(sc.Tenants),
		sc.Intervals, sc.intervalSeconds(), sc.Warmup, model, r.Seed)
	if sc.PoolBestEffort {
		b.WriteString(pooledNote + "\n\n")
	}
	if len(sc.Tenants) <= maxPlottedTenants {
		b.WriteString("| tenant | workload | rate (req/s) | class | objective |\n|---|---|---|---|---|\n")
		for _, t := range sc.Tenants {
			rate := humanCount(t.Rate)
			for _, c := range t.RateFrom {
				rate += fmt.Sprintf(", %s from interval %d", humanCount(c.Rate), c.From)
			}
			active := ""
			if t.Arrive > 0 || t.Leave > 0 {
				active = fmt.Sprintf(" (intervals %d-%d)", t.Arrive, t.Leave-1)
			}
			fmt.Fprintf(b, "| %s%s | `%s` | %s | %s | %s |\n", t.ID, active, t.Workload.String(), rate, t.Class, t.Objective)
		}
		b.WriteString("\n")
	}
	b.WriteString("| policy | SLO attainment | all met | hit ratio | mean latency | p99 latency | moved / interval | prediction error | plan time mean / max, solves at the time limit |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for i := range r.Summaries {
		s := &r.Summaries[i]
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Policy, fmtRatio(s.SLOAttainment), fmtRatio(s.AllMet),
			fmtHit(s.HitRatio), fmtSeconds(s.MeanLatency), fmtSeconds(s.P99Latency), planning.FormatBytes(int64(s.MovedBytesPerInterval)),
			fmtHit(s.PredictionError), fmtPlan(s, opts.Timings))
	}
	b.WriteString("\n")
	if len(sc.Tenants) <= maxPlottedTenants {
		b.WriteString("Per tenant — attainment / hit ratio / mean latency / mean memory:\n\n")
		b.WriteString("| tenant |")
		for _, s := range r.Summaries {
			b.WriteString(" " + s.Policy + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Summaries)) + "\n")
		for k, t := range sc.Tenants {
			fmt.Fprintf(b, "| %s |", t.ID)
			for _, s := range r.Summaries {
				ts := s.Tenants[k]
				fmt.Fprintf(b, " %s / %s / %s / %s |", fmtRatio(ts.Attainment), fmtHit(ts.HitRatio), fmtSeconds(ts.MeanLatency), planning.FormatBytes(int64(ts.MeanMemoryBytes)))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	if c := sc.Claim; c != nil && r.hasPolicies(Policies()) {
		res := c.Measure(r)
		fmt.Fprintf(b, "**%s claims:** %s\n\n**Ours (%s):** %s %s\n\n", c.Paper, c.Statement, res.Verdict, res.Ours, res.Why)
	}
	if opts.PlotDir != "" {
		for _, p := range plottedPolicies(r) {
			fmt.Fprintf(b, "![%s hit ratio over time under %s](%s)\n", sc.Name, p, filepath.ToSlash(filepath.Join(opts.PlotDir, hitPlotName(sc, p))))
		}
		fmt.Fprintf(b, "![%s policy comparison](%s)\n\n", sc.Name, filepath.ToSlash(filepath.Join(opts.PlotDir, barsPlotName(sc))))
	}
}

func humanCount(v float64) string {
	if v >= 1000 && math.Mod(v, 1000) == 0 {
		return fmt.Sprintf("%gk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}

// plottedPolicies are the policies whose per-tenant hit ratio is plotted over time: the
// shared baseline, the paper's own policy and optimal.
func plottedPolicies(r *ScenarioResult) []string {
	want := []string{PolicyShared}
	if c := r.Scenario.Claim; c != nil {
		switch c.Paper {
		case "Soft-QoS":
			want = append(want, allocator.PolicySoftQoS)
		case "Maxperf":
			want = append(want, allocator.PolicyMaxperf)
		case "LACS":
			want = append(want, allocator.PolicyLACS)
		}
	}
	want = append(want, allocator.PolicyOptimal)
	var out []string
	for _, p := range want {
		if r.Run(p) != nil {
			out = append(out, p)
		}
	}
	return out
}

func hitPlotName(sc *Scenario, policy string) string { return sc.Name + "-hit-" + policy + ".png" }
func barsPlotName(sc *Scenario) string               { return sc.Name + "-policies.png" }

// WritePlots writes each scenario's PNG plots into dir: hit ratio over time per tenant
// (with its target dashed) for the plotted policies, and the policy comparison bars.
func WritePlots(dir string, results []*ScenarioResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range results {
		for _, p := range plottedPolicies(r) {
			if err := writePNG(filepath.Join(dir, hitPlotName(r.Scenario, p)), hitChart(r, p)); err != nil {
				return err
			}
		}
		if err := writePNG(filepath.Join(dir, barsPlotName(r.Scenario)), barsChart(r)); err != nil {
			return err
		}
	}
	return nil
}

type pngWriter interface {
	WritePNG(w io.Writer, width, height int) error
}

func writePNG(path string, chart pngWriter) error {
	var buf bytes.Buffer
	if err := chart.WritePNG(&buf, 760, 340); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func hitChart(r *ScenarioResult, policy string) plot.Lines {
	run := r.Run(policy)
	zero, one := 0.0, 1.0
	chart := plot.Lines{
		Title:  fmt.Sprintf("%s: hit ratio per interval under %s", r.Scenario.Name, policy),
		XLabel: "interval", YLabel: "hit ratio", YMin: &zero, YMax: &one,
	}
	for k, tr := range run.Tenants {
		if k == maxPlottedTenants {
			chart.Title += fmt.Sprintf(", first %d of %d tenants", maxPlottedTenants, len(run.Tenants))
			break
		}
		s := plot.Series{Name: tr.ID}
		for i := range tr.Requests {
			s.X = append(s.X, float64(i))
			y := math.NaN()
			if tr.Requests[i] > 0 {
				y = float64(tr.Hits[i]) / float64(tr.Requests[i])
			}
			s.Y = append(s.Y, y)
		}
		if target := r.Scenario.Tenants[k].Objective.HitRatio; target > 0 {
			s.Target = &target
			if !strings.Contains(chart.Title, "dashed") {
				chart.Title += " (dashed: target)"
			}
		}
		chart.Series = append(chart.Series, s)
	}
	return chart
}

func barsChart(r *ScenarioResult) plot.Bars {
	chart := plot.Bars{Title: r.Scenario.Name + ": policies compared", YLabel: "fraction"}
	attain := plot.BarSeries{Name: "SLO attainment"}
	allMet := plot.BarSeries{Name: "all SLOs met"}
	hit := plot.BarSeries{Name: "hit ratio"}
	for _, s := range r.Summaries {
		chart.Categories = append(chart.Categories, s.Policy)
		attain.Values = append(attain.Values, s.SLOAttainment)
		allMet.Values = append(allMet.Values, s.AllMet)
		hit.Values = append(hit.Values, s.HitRatio)
	}
	chart.Series = []plot.BarSeries{attain, allMet, hit}
	return chart
}
