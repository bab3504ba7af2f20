package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cacheqos/cacheqos/internal/sim"
)

// fuzzFlags are the flags of the fuzz command, shared with eval's fuzz section.
type fuzzFlags struct {
	n         int
	seed      uint64
	policies  string
	caches    string
	judged    string
	intervals int
}

func (f *fuzzFlags) register(fs *flag.FlagSet, prefix string, defaultN int) {
	fs.IntVar(&f.n, prefix+"n", defaultN, "fleets that pass the oracle (0: none)")
	fs.Uint64Var(&f.seed, prefix+"seed", 1, "seed the fleet seeds derive from")
	fs.StringVar(&f.policies, prefix+"policies", "all", "comma-separated policies, or all (equal and the judged policy always run)")
	fs.StringVar(&f.caches, prefix+"cache", strings.Join(sim.CacheModels(), ","), "comma-separated cache models")
	fs.StringVar(&f.judged, prefix+"judge", sim.DefaultJudged, "the policy the criteria are judged for")
	fs.IntVar(&f.intervals, prefix+"intervals", sim.DefaultFuzzOptions().Intervals, "intervals per fleet (at least 8)")
}

// run returns the fuzz settings the flags give.
func (f *fuzzFlags) run(parallel int) (sim.FuzzRun, sim.FuzzOptions, error) {
	opts := sim.DefaultFuzzOptions()
	opts.Intervals = f.intervals
	if f.n < 0 {
		return sim.FuzzRun{}, opts, fmt.Errorf("-n: %d fleets", f.n)
	}
	if err := opts.Validate(); err != nil {
		return sim.FuzzRun{}, opts, fmt.Errorf("-intervals: %w", err)
	}
	policies, err := policyList(f.policies)
	if err != nil {
		return sim.FuzzRun{}, opts, err
	}
	if !slices.Contains(sim.Policies(), f.judged) {
		return sim.FuzzRun{}, opts, fmt.Errorf("-judge: unknown policy %q (want one of %s)", f.judged, strings.Join(sim.Policies(), ","))
	}
	var caches []string
	for _, c := range strings.Split(f.caches, ",") {
		if !slices.Contains(sim.CacheModels(), c) {
			return sim.FuzzRun{}, opts, fmt.Errorf("-cache: unknown cache model %q (want some of %s)", c, strings.Join(sim.CacheModels(), ","))
		}
		caches = append(caches, c)
	}
	return sim.FuzzRun{Policies: policies, Caches: caches, Judged: f.judged, Parallel: parallel}, opts, nil
}

// fuzz runs the fleets, printing each fleet run's line to progress.
func (f *fuzzFlags) fuzz(ctx context.Context, r sim.FuzzRun, opts sim.FuzzOptions, fleets []*sim.Fleet, rejected []sim.Rejection, progress io.Writer) (*sim.FuzzReport, error) {
	start := time.Now()
	r.Progress = func(j *sim.FleetJudgement) {
		fmt.Fprintf(progress, "%s (%.0fs)\n", j.Line(), time.Since(start).Seconds())
	}
	runs, err := sim.RunFleets(ctx, fleets, r)
	if err != nil {
		return nil, err
	}
	return &sim.FuzzReport{MasterSeed: f.seed, Options: opts, Fleets: fleets, Rejected: rejected, Caches: r.Caches, Judged: r.Judged, Runs: runs}, nil
}

func cmdFuzz(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f fuzzFlags
	f.register(fs, "", 10)
	fleetSeed := fs.String("fleet-seed", "", "replay the one fleet drawn from this seed (as printed), whatever the oracle says")
	dump := fs.String("dump", "", "directory to write each fleet as a scenario file (cacheqos-sim run -file F -seed SEED replays it)")
	parallel := fs.Int("parallel", 2, "fleet runs simulated at once")
	check := fs.Bool("check", false, "exit 1 when the judged policy misses a criterion in any fleet run")
	pool := fs.Bool("pool", false, poolUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, opts, err := f.run(*parallel)
	if err != nil {
		return usageError{err}
	}
	r.PoolBestEffort = *pool
	var fleets []*sim.Fleet
	var rejected []sim.Rejection
	if *fleetSeed != "" {
		seed, err := parseSeed(*fleetSeed)
		if err != nil {
			return usageError{fmt.Errorf("-fleet-seed: %w", err)}
		}
		fl, err := sim.DrawFleet(seed, opts)
		if err != nil {
			return err
		}
		if !fl.Verdict.Feasible {
			fmt.Fprintf(stderr, "cacheqos-sim fuzz: the oracle rejects fleet %#x (%s); running it anyway\n", seed, fl.Verdict.Reason)
		}
		fleets = []*sim.Fleet{fl}
	} else if fleets, rejected, err = sim.DrawFleets(f.seed, f.n, opts); err != nil {
		return err
	}
	if *dump != "" {
		if err := dumpFleets(*dump, fleets, r.Caches); err != nil {
			return err
		}
	}
	warnWithoutSolver(r.Policies, stderr)
	report, err := f.fuzz(ctx, r, opts, fleets, rejected, stdout)
	if err != nil {
		return err
	}
	report.Replayed = *fleetSeed != ""
	fmt.Fprintln(stdout)
	if err := sim.WriteFuzzReport(stdout, report); err != nil {
		return err
	}
	if *check {
		if missed := len(report.Runs) - sim.SummarizeFuzz(report.Runs, "").AllMet; missed > 0 {
			return criteriaMissed{fmt.Errorf("%s missed a criterion in %d of %d fleet runs", r.Judged, missed, len(report.Runs))}
		}
	}
	return nil
}

// parseSeed reads a seed in decimal or, with 0x, hexadecimal.
func parseSeed(s string) (uint64, error) {
	var seed uint64
	if _, err := fmt.Sscan(s, &seed); err != nil {
		return 0, fmt.Errorf("%q is not a seed (decimal, or hexadecimal with 0x)", s)
	}
	return seed, nil
}

// dumpFleets writes each fleet once per cache model as a scenario file.
func dumpFleets(dir string, fleets []*sim.Fleet, caches []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, fl := range fleets {
		for _, cache := range caches {
			sc := *fl.Scenario
			sc.Cache = cache
			data, err := sim.MarshalScenario(&sc)
			if err != nil {
				return err
			}
			path := filepath.Join(dir, fmt.Sprintf("%s-%s.json", sc.Name, cache))
			if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// fuzzSection runs the fuzz for the evaluation report and returns its markdown.
func fuzzSection(ctx context.Context, f *fuzzFlags, parallel int, progress io.Writer) (string, error) {
	if f.n == 0 {
		return "", nil
	}
	r, opts, err := f.run(parallel)
	if err != nil {
		return "", usageError{err}
	}
	fleets, rejected, err := sim.DrawFleets(f.seed, f.n, opts)
	if err != nil {
		return "", err
	}
	report, err := f.fuzz(ctx, r, opts, fleets, rejected, progress)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := sim.WriteFuzzReport(&b, report); err != nil {
		return "", err
	}
	return b.String(), nil
}
