// Command cacheqos runs the cacheqos allocator offline: it reads a planning snapshot (JSON or
// YAML, see docs/planning-snapshot.md) and prints the plan a policy makes for it, or compares
// every policy on it.
//
//	cacheqos plan -f snapshot.yaml [-policy optimal] [-o table|json|yaml]
//	cacheqos plan -f snapshot.yaml -compare
//	cacheqos policies
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed (bad file, infeasible snapshot)
	exitUsage = 2 // the command line is wrong
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `Usage:
  cacheqos plan -f FILE [flags]   print the plan a policy makes for a planning snapshot
  cacheqos policies               list the policies
  cacheqos help                   show this help

Run "cacheqos plan -h" for the flags of plan. FILE is a PlanningSnapshot in JSON or YAML
("-" reads standard input).
`

// run is the whole command: main only adds the process exit around it, so tests drive this.
// An interrupt stops a running solve, which then returns its best plan so far.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "plan":
		return runPlan(ctx, args[1:], stdout, stderr)
	case "policies":
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, p := range allocator.Policies() {
			fmt.Fprintf(w, "%s\t%s\n", p.Name, p.Description)
		}
		w.Flush()
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "cacheqos: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cacheqos plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "planning snapshot `file` (JSON or YAML; - for standard input)")
	policy := fs.String("policy", allocator.PolicyOptimal, "policy: "+strings.Join(allocator.PolicyNames(), ", "))
	output := fs.String("o", "table", "output `format`: table, json or yaml")
	compare := fs.Bool("compare", false, "run every policy on the snapshot and compare them")
	timeLimit := fs.Duration("time-limit", allocator.DefaultTimeLimit, "solver time limit of the optimal policy")
	workers := fs.Int("workers", 0, "CP-SAT workers (0: one per CPU, at most 8)")
	workLimit := fs.Float64("work-limit", 0, "solver work limit of the optimal policy in CP-SAT's deterministic time (0: none); with -workers 1 a search it stops gives the same plan on any machine")
	maxChurn := fs.Int64("max-churn", 0, "optimal: cap on the `bytes` moved from the current plan (0: none)")
	objective := fs.String("objective", allocator.ObjectiveHits, "optimal: efficiency objective, hits or latency")
	noSolver := fs.Bool("no-solver", false, "optimal: use the greedy solution only")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "cacheqos plan: unexpected argument %q (flags go before arguments; the snapshot is -f FILE)\n", fs.Arg(0))
		return exitUsage
	case *file == "":
		fmt.Fprintln(stderr, "cacheqos plan: -f FILE is required")
		return exitUsage
	case *output != "table" && *output != string(planning.FormatJSON) && *output != string(planning.FormatYAML):
		fmt.Fprintf(stderr, "cacheqos plan: -o %q: want table, json or yaml\n", *output)
		return exitUsage
	case !slices.Contains(allocator.PolicyNames(), *policy):
		fmt.Fprintf(stderr, "cacheqos plan: -policy %q: want one of %s\n", *policy, strings.Join(allocator.PolicyNames(), ", "))
		return exitUsage
	case *objective != allocator.ObjectiveHits && *objective != allocator.ObjectiveLatency:
		fmt.Fprintf(stderr, "cacheqos plan: -objective %q: want %s or %s\n", *objective, allocator.ObjectiveHits, allocator.ObjectiveLatency)
		return exitUsage
	}
	opts := allocator.Options{Policy: *policy, TimeLimit: *timeLimit, WorkLimit: *workLimit, Workers: *workers, MaxChurnBytes: *maxChurn,
		Objective: *objective, DisableSolver: *noSolver}
	snapshot, err := readSnapshot(*file)
	if err != nil {
		fmt.Fprintf(stderr, "cacheqos plan: %v\n", err)
		return exitError
	}
	if *compare {
		return comparePolicies(ctx, snapshot, opts, *output, stdout, stderr)
	}
	plan, err := allocator.Plan(ctx, snapshot, opts)
	if err != nil {
		writePlanError(stderr, snapshot, "", err)
		return exitError
	}
	if *output == "table" {
		writePlanTable(stdout, plan)
		return exitOK
	}
	data, err := planning.Encode(plan, planning.Format(*output))
	if err != nil {
		fmt.Fprintf(stderr, "cacheqos plan: %v\n", err)
		return exitError
	}
	_, _ = stdout.Write(data)
	return exitOK
}

func readSnapshot(name string) (*planning.Snapshot, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(os.Stdin)
		name = "standard input"
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	s, err := planning.DecodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func writePlanTable(out io.Writer, plan *planning.Plan) {
	s := plan.Summary
	fmt.Fprintf(out, "policy %s: %d/%d strict objectives met, %d/%d objectives met, %.0f hits/s (hit ratio %.3f), %s moved",
		plan.Policy, s.StrictMet, s.StrictTenants, s.ObjectivesMet, s.Tenants, s.ExpectedHitsPerSecond, s.ExpectedHitRatio, planning.FormatBytes(s.MovementBytes))
	if plan.Solver != nil {
		fmt.Fprintf(out, "; solver %s, gap %.3g%%, %.2fs", plan.Solver.Status, 100*plan.Solver.Gap, plan.Solver.WallTimeSeconds)
		if plan.Solver.Fallback != "" {
			fmt.Fprintf(out, " (fallback: %s)", plan.Solver.Fallback)
		}
	}
	fmt.Fprintln(out)
	for _, n := range plan.Notes {
		fmt.Fprintln(out, "note:", n)
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tVERDICT\tMEMORY\tNODES\tHIT RATIO\tLATENCY\tREASON")
	for _, tp := range plan.Tenants {
		var nodes []string
		for _, p := range tp.Partitions {
			nodes = append(nodes, fmt.Sprintf("%s:%s", p.Node, planning.FormatBytes(p.MemoryBytes)))
		}
		latency := "-"
		if l := tp.Predicted.LatencySeconds; l != nil {
			latency = planning.FormatSeconds(*l)
		} else if tp.Predicted.Saturated {
			latency = "saturated"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.3f\t%s\t%s\n", tp.ID, tp.Verdict, planning.FormatBytes(tp.MemoryBytes), strings.Join(nodes, ","),
			tp.Predicted.HitRatio, latency, tp.Reason)
	}
	w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tMEMORY\tCAPACITY\tUTILIZATION\tQUEUEING")
	for _, n := range plan.Nodes {
		queue := "saturated"
		if n.QueueDelaySeconds != nil {
			queue = planning.FormatSeconds(*n.QueueDelaySeconds)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.2f\t%s\n", n.Name, planning.FormatBytes(n.MemoryBytes), planning.FormatBytes(n.MemoryCapacityBytes), n.Utilization, queue)
	}
	w.Flush()
}

// writePlanError prints why the allocator made no plan. Unpackable memory minimums also get
// a table of the tenants of the set and of the nodes they may use, with the numbers.
func writePlanError(out io.Writer, s *planning.Snapshot, prefix string, err error) {
	fmt.Fprintf(out, "cacheqos plan: %s%v\n", prefix, err)
	var unpackable *allocator.UnpackableError
	if !errors.As(err, &unpackable) {
		return
	}
	tenants := map[string]*planning.Tenant{}
	for i := range s.Tenants {
		tenants[s.Tenants[i].ID] = &s.Tenants[i]
	}
	usable := map[string]bool{}
	fmt.Fprintf(out, "\nThe memory minimums of these %d tenants cannot all be placed:\n", len(unpackable.Tenants))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tMIN MEMORY\tMIN NODES\tMAX NODES\tALLOWED NODES")
	for _, id := range unpackable.Tenants {
		t := tenants[id]
		if t == nil {
			fmt.Fprintf(w, "%s\t?\t?\t?\t?\n", id)
			continue
		}
		minNodes, maxNodes, allowed := max(1, t.Spread.MinNodes), "any", "any"
		if t.Spread.MaxNodes > 0 {
			maxNodes = fmt.Sprint(t.Spread.MaxNodes)
		}
		if len(t.AllowedNodes) > 0 {
			allowed = strings.Join(t.AllowedNodes, ",")
		}
		for _, n := range s.Nodes {
			usable[n.Name] = usable[n.Name] || len(t.AllowedNodes) == 0 || slices.Contains(t.AllowedNodes, n.Name)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", id, planning.FormatBytes(t.Memory.MinBytes), minNodes, maxNodes, allowed)
	}
	w.Flush()
	fmt.Fprintln(out, "\nThe nodes they may use:")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tMEMORY")
	for _, n := range s.Nodes {
		if usable[n.Name] {
			fmt.Fprintf(w, "%s\t%s\n", n.Name, planning.FormatBytes(n.MemoryBytes))
		}
	}
	w.Flush()
}

// Comparison is the document `plan -compare -o json|yaml` prints: one row per policy.
type Comparison struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Results    []ComparisonRow `json:"results"`
}

// ComparisonRow summarizes one policy's plan.
type ComparisonRow struct {
	Policy                string  `json:"policy"`
	StrictMet             int     `json:"strictMet"`
	StrictTenants         int     `json:"strictTenants"`
	ObjectivesMet         int     `json:"objectivesMet"`
	ExpectedHitsPerSecond float64 `json:"expectedHitsPerSecond"`
	ExpectedHitRatio      float64 `json:"expectedHitRatio"`
	MovementBytes         int64   `json:"movementBytes"`
	SolveSeconds          float64 `json:"solveSeconds"`
	Status                string  `json:"status"`
}

func comparePolicies(ctx context.Context, s *planning.Snapshot, opts allocator.Options, output string, stdout, stderr io.Writer) int {
	doc := Comparison{APIVersion: planning.APIVersion, Kind: "PlanComparison"}
	for _, name := range allocator.PolicyNames() {
		opts.Policy = name
		start := time.Now()
		plan, err := allocator.Plan(ctx, s, opts)
		if err != nil {
			writePlanError(stderr, s, name+": ", err)
			return exitError
		}
		status := "heuristic"
		if plan.Solver != nil {
			status = plan.Solver.Status
			if plan.Solver.Fallback != "" {
				status += " (fallback)"
			}
		}
		doc.Results = append(doc.Results, ComparisonRow{
			Policy: name, StrictMet: plan.Summary.StrictMet, StrictTenants: plan.Summary.StrictTenants,
			ObjectivesMet: plan.Summary.ObjectivesMet, ExpectedHitsPerSecond: plan.Summary.ExpectedHitsPerSecond,
			ExpectedHitRatio: plan.Summary.ExpectedHitRatio, MovementBytes: plan.Summary.MovementBytes,
			SolveSeconds: time.Since(start).Seconds(), Status: status,
		})
	}
	if output != "table" {
		data, err := planning.Encode(&doc, planning.Format(output))
		if err != nil {
			fmt.Fprintf(stderr, "cacheqos plan: %v\n", err)
			return exitError
		}
		_, _ = stdout.Write(data)
		return exitOK
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POLICY\tSTRICT SLOS MET\tOBJECTIVES MET\tEXPECTED HITS/S\tHIT RATIO\tMOVEMENT\tSOLVE TIME\tSTATUS")
	for _, r := range doc.Results {
		fmt.Fprintf(w, "%s\t%d/%d\t%d\t%.0f\t%.3f\t%s\t%.2fs\t%s\n", r.Policy, r.StrictMet, r.StrictTenants, r.ObjectivesMet,
			r.ExpectedHitsPerSecond, r.ExpectedHitRatio, planning.FormatBytes(r.MovementBytes), r.SolveSeconds, r.Status)
	}
	w.Flush()
	return exitOK
}
