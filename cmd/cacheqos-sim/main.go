// Command cacheqos-sim is cacheqos' trace-driven simulator: it runs scenarios (a cluster, its
// tenants and their workloads) under every allocation policy with the real allocator, the real
// miss-ratio trackers and the real token buckets, and writes the evaluation report.
//
//	cacheqos-sim list                                   # the built-in scenarios
//	cacheqos-sim run -scenario softqos                  # one scenario, every policy, a table
//	cacheqos-sim run -file mine.json -policy optimal,equal
//	cacheqos-sim curve -workload zipf:keys=50000,skew=0.9 -sizes 1MiB,4MiB,16MiB
//	cacheqos-sim eval -out docs/evaluation.md -plots docs/eval
//	cacheqos-sim fuzz -n 10 -seed 1                     # random fleets, judged against issue 17's criteria
//	cacheqos-sim fuzz -fleet-seed 0x1e04f145876cd675    # replay one of them
//
// Results depend only on the scenario and -seed (plan wall times aside). The optimal policy
// uses OR-Tools through CACHEQOS_ORTOOLS_LIB and falls back to its greedy plan without it.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/cpsat"
	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/sim"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// reportTemplate holds the hand-written parts of docs/evaluation.md around the generated
// tables.
//
//go:embed evaluation.md.tmpl
var reportTemplate string

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: cacheqos-sim <command> [flags]

commands:
  list    the built-in scenarios
  run     run one scenario (built-in or from a JSON file) and print its results
  curve   print the exact LRU hit-ratio curve of a workload
  eval    run every built-in scenario and write the evaluation report and plots
  fuzz    draw random feasible fleets, run them under every policy and judge the loop

"cacheqos-sim <command> -h" lists a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "list":
		err = cmdList(args[1:], stdout)
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr)
	case "curve":
		err = cmdCurve(args[1:], stdout, stderr)
	case "eval":
		err = cmdEval(ctx, args[1:], stdout, stderr)
	case "fuzz":
		err = cmdFuzz(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "cacheqos-sim: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	var ue usageError
	var missed criteriaMissed
	switch {
	case errors.As(err, &missed):
		fmt.Fprintf(stderr, "cacheqos-sim %s: %v\n", args[0], err)
		return exitError
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "cacheqos-sim %s: %v\n", args[0], err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "cacheqos-sim %s: %v\n", args[0], err)
		return exitError
	}
	return exitOK
}

// criteriaMissed is a fuzz run with -check whose judged policy missed a criterion.
type criteriaMissed struct{ error }

// usageError is a wrong command line.
type usageError struct{ error }

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	return nil
}

func cmdList(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", args)}
	}
	for _, s := range sim.Scenarios() {
		fmt.Fprintf(stdout, "%-24s %d nodes, %3d tenants, %2d intervals  %s\n", s.Name, len(s.Nodes), len(s.Tenants), s.Intervals, s.Title)
	}
	return nil
}

// policyList parses a comma-separated policy list ("" or "all": every policy).
func policyList(s string) ([]string, error) {
	if s == "" || s == "all" {
		return sim.Policies(), nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if !slices.Contains(sim.Policies(), p) {
			return nil, fmt.Errorf("-policy: unknown policy %q (want some of %s)", p, strings.Join(sim.Policies(), ","))
		}
		out = append(out, p)
	}
	return out, nil
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("scenario", "", "built-in scenario name (see list)")
	file := fs.String("file", "", "custom scenario JSON file (see the sim package's scenarioFile)")
	policies := fs.String("policy", "all", "comma-separated policies, or all")
	seed := fs.Uint64("seed", 1, "random seed")
	parallel := fs.Int("parallel", 2, "policies simulated at once")
	pool := fs.Bool("pool", false, poolUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*name == "") == (*file == "") {
		return usageError{errors.New("give exactly one of -scenario and -file")}
	}
	ps, err := policyList(*policies)
	if err != nil {
		return usageError{err}
	}
	var sc *sim.Scenario
	if *file != "" {
		sc, err = sim.LoadScenarioFile(*file)
	} else {
		sc, err = sim.ScenarioByName(*name)
	}
	if err != nil {
		return err
	}
	sc.PoolBestEffort = *pool
	warnWithoutSolver(ps, stderr)
	res, err := sim.RunScenario(ctx, sc, ps, *seed, *parallel)
	if err != nil {
		return err
	}
	return sim.WriteReport(stdout, []*sim.ScenarioResult{res}, sim.ReportOptions{Timings: true})
}

// poolUsage describes the -pool flags.
const poolUsage = "experiment: best-effort tenants share one pooled cache per node (not in the operator yet)"

func warnWithoutSolver(policies []string, stderr io.Writer) {
	if err := cpsat.Available(); err != nil && slices.Contains(policies, "optimal") {
		fmt.Fprintf(stderr, "cacheqos-sim: OR-Tools unavailable (%v); the optimal policy uses its greedy plan\n", err)
	}
}

func cmdCurve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("curve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := fs.String("workload", "", "workload in compact form, e.g. zipf:keys=50000,skew=0.9")
	sizes := fs.String("sizes", "256KiB,1MiB,4MiB,16MiB,64MiB", "comma-separated cache sizes (B, KiB, MiB, GiB)")
	warmup := fs.Int("warmup", 100000, "requests before counting")
	accesses := fs.Int("accesses", 200000, "requests counted")
	seed := fs.Uint64("seed", 1, "random seed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ws, err := workload.ParseSpec(*spec)
	if err != nil {
		return usageError{fmt.Errorf("-workload: %w", err)}
	}
	var list []int64
	for _, s := range strings.Split(*sizes, ",") {
		n, err := parseBytes(s)
		if err != nil {
			return usageError{fmt.Errorf("-sizes: %w", err)}
		}
		list = append(list, n)
	}
	if err := mrc.ValidateSizes(list); err != nil {
		return usageError{fmt.Errorf("-sizes: %w", err)}
	}
	c, err := sim.ExactCurve(ws, *seed, *warmup, *accesses, list)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%12s  %s\n", "size", "hit ratio")
	for i, s := range c.Sizes {
		fmt.Fprintf(stdout, "%12s  %.4f\n", planning.FormatBytes(s), c.HitRatio[i])
	}
	return nil
}

// parseBytes parses a byte count with an optional binary unit.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive byte count", s)
	}
	return n * mult, nil
}

// evalFleets is how many random fleets the evaluation runs by default. Measured with seed 1:
// a fleet takes about 45 s of CPU (both cache models, every policy) and the built-in
// scenarios about 160 s, so 40 fleets keep make eval near 16 minutes on two idle cores.
const evalFleets = 40

func cmdEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "docs/evaluation.md", "report file")
	plots := fs.String("plots", "docs/eval", "directory for the PNG plots")
	seed := fs.Uint64("seed", 1, "random seed")
	parallel := fs.Int("parallel", 2, "policies of a scenario, or fleet runs of the fuzz, simulated at once")
	only := fs.String("scenarios", "all", "comma-separated scenario names, all, or none")
	var fuzz fuzzFlags
	fuzz.register(fs, "fuzz-", evalFleets)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	scenarios := sim.Scenarios()
	switch *only {
	case "all":
	case "none":
		scenarios = nil
	default:
		scenarios = nil
		for _, n := range strings.Split(*only, ",") {
			sc, err := sim.ScenarioByName(n)
			if err != nil {
				return usageError{fmt.Errorf("-scenarios: %w", err)}
			}
			scenarios = append(scenarios, sc)
		}
	}
	if _, _, err := fuzz.run(*parallel); err != nil {
		return usageError{err}
	}
	warnWithoutSolver(sim.Policies(), stderr)
	start := time.Now()
	var results []*sim.ScenarioResult
	for _, sc := range scenarios {
		t0 := time.Now()
		res, err := sim.RunScenario(ctx, sc, nil, *seed, *parallel)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-24s %6.1fs\n", sc.Name, time.Since(t0).Seconds())
		for _, s := range res.Summaries {
			fmt.Fprintf(stdout, "    %s\n", s)
		}
		results = append(results, res)
	}
	fuzzStart := time.Now()
	fuzzReport, err := fuzzSection(ctx, &fuzz, *parallel, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fuzz: %d fleets in %.0fs\n", fuzz.n, time.Since(fuzzStart).Seconds())
	if err := sim.WritePlots(*plots, results); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(*out), *plots)
	if err != nil {
		return err
	}
	var generated bytes.Buffer
	if err := sim.WriteReport(&generated, results, sim.ReportOptions{PlotDir: rel, Timings: true}); err != nil {
		return err
	}
	var doc bytes.Buffer
	tmpl, err := template.New("evaluation").Parse(reportTemplate)
	if err != nil {
		return err
	}
	err = tmpl.Execute(&doc, struct {
		Seed      uint64
		Policies  string
		Generated string
		Fuzz      string
	}{*seed, strings.Join(sim.Policies(), ", "), generated.String(), fuzzReport})
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, doc.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %d plots in %s (%.0fs)\n", *out, countPlots(*plots), *plots, time.Since(start).Seconds())
	return nil
}

func countPlots(dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	return len(m)
}
