package cpsat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// oneWorker keeps small solves deterministic and light on the shared cores.
var oneWorker = Params{Workers: 1, TimeLimit: 20 * time.Second}

func TestSolveKnownOptimum(t *testing.T) {
	needSolver(t)
	type check func(t *testing.T, r *Result)
	cases := []struct {
		name  string
		build func() (*Model, check)
		want  int64
		p     Params
	}{{
		name: "knapsack 5 items",
		build: func() (*Model, check) {
			m, items := knapsack([]int64{12, 2, 1, 1, 4}, []int64{4, 2, 1, 2, 10}, 15)
			return m, func(t *testing.T, r *Result) {
				assertChosen(t, r, items, []int{1, 2, 3, 4})
			}
		},
		want: 15,
		p:    oneWorker,
	}, {
		// The classic 10-item instance with capacity 165 (optimum 309).
		name: "knapsack 10 items",
		build: func() (*Model, check) {
			m, items := knapsack(
				[]int64{23, 31, 29, 44, 53, 38, 63, 85, 89, 82},
				[]int64{92, 57, 49, 68, 60, 43, 67, 84, 87, 72}, 165)
			return m, func(t *testing.T, r *Result) {
				assertChosen(t, r, items, []int{0, 1, 2, 3, 5})
			}
		},
		want: 309,
		p:    Params{Workers: 2, Presolve: true},
	}, {
		name: "assignment 4x4",
		build: func() (*Model, check) {
			m, x := assignment([][]int64{
				{90, 80, 75, 70},
				{35, 85, 55, 65},
				{125, 95, 90, 95},
				{45, 110, 95, 115},
			})
			return m, func(t *testing.T, r *Result) {
				got := make([]int, len(x))
				for w := range x {
					for task := range x[w] {
						if r.BoolValue(x[w][task]) {
							got[w] = task
						}
					}
				}
				if want := []int{3, 2, 1, 0}; !slices.Equal(got, want) {
					t.Errorf("worker->task = %v, want %v", got, want)
				}
			}
		},
		want: 265,
		p:    oneWorker,
	}, {
		name: "integer program",
		build: func() (*Model, check) {
			m := NewModel()
			x, y := m.NewIntVar(0, 10, "x"), m.NewIntVar(0, 10, "y")
			m.AddLinear([]Term{{x, 1}, {y, 1}}, math.MinInt64, 4)
			m.AddLinear([]Term{{x, 1}, {y, 3}}, math.MinInt64, 6)
			m.Maximize([]Term{{x, 3}, {y, 2}})
			return m, func(t *testing.T, r *Result) {
				if r.Value(x) != 4 || r.Value(y) != 0 {
					t.Errorf("x, y = %d, %d, want 4, 0", r.Value(x), r.Value(y))
				}
			}
		},
		want: 12,
		p:    oneWorker,
	}, {
		// a => !c, a or b, at most one of a and b; c forces z >= 50, !c
		// forces z >= 80. Cheapest: b with c, z = 50.
		name: "Boolean logic with enforced linear",
		build: func() (*Model, check) {
			m := NewModel()
			a, b, c := m.NewBoolVar("a"), m.NewBoolVar("b"), m.NewBoolVar("c")
			z := m.NewIntVar(0, 100, "z")
			m.AddImplication(a, Not(c))
			m.AddBoolOr(a, b)
			m.AddAtMostOne(a, b)
			m.AddLinearIf(c, []Term{{z, 1}}, 50, math.MaxInt64)
			m.AddLinearIf(Not(c), []Term{{z, 1}}, 80, math.MaxInt64)
			m.Minimize([]Term{{z, 1}, {a, 10}, {b, 30}})
			return m, func(t *testing.T, r *Result) {
				got := []int64{r.Value(a), r.Value(b), r.Value(c), r.Value(z), r.Value(Not(c))}
				if want := []int64{0, 1, 1, 50, 0}; !slices.Equal(got, want) {
					t.Errorf("a, b, c, z, !c = %v, want %v", got, want)
				}
			}
		},
		want: 80,
		p:    Params{Workers: 1, Presolve: true},
	}, {
		name: "duplicate terms and zero coefficients",
		build: func() (*Model, check) {
			m := NewModel()
			x := m.NewIntVar(-5, 5, "x")
			y := m.NewIntVar(0, 3, "y")
			// 2x - x + 0y - 2y <= 0, that is x <= 2y.
			m.AddLinear([]Term{{x, 2}, {x, -1}, {y, 0}, {y, -2}}, math.MinInt64, 0)
			m.Maximize([]Term{{x, 1}, {y, -1}})
			return m, nil
		},
		want: 2, // x - y with x <= 2y: (4, 2) or (5, 3)
		p:    oneWorker,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, check := tc.build()
			feasible, brute, ok := bruteForce(m)
			if !ok || !feasible {
				t.Fatalf("brute force: feasible=%v enumerated=%v", feasible, ok)
			}
			if brute != tc.want {
				t.Fatalf("brute force optimum %d, table says %d", brute, tc.want)
			}
			r, err := Solve(context.Background(), m, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != Optimal || r.Objective != float64(tc.want) || r.BestBound != float64(tc.want) {
				t.Fatalf("status %v objective %v bound %v, want Optimal %d", r.Status, r.Objective, r.BestBound, tc.want)
			}
			if r.Gap() != 0 || r.Stopped || r.WallTime <= 0 {
				t.Errorf("gap %v stopped %v wall time %v", r.Gap(), r.Stopped, r.WallTime)
			}
			if check != nil {
				check(t, r)
			}
		})
	}
}

func assertChosen(t *testing.T, r *Result, items []Var, want []int) {
	t.Helper()
	var got []int
	for i, v := range items {
		if r.BoolValue(v) {
			got = append(got, i)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("chosen items %v, want %v", got, want)
	}
}

func TestSolveInfeasible(t *testing.T) {
	needSolver(t)
	cases := map[string]func(m *Model){
		"two Booleans sum to 3": func(m *Model) {
			x, y := m.NewBoolVar("x"), m.NewBoolVar("y")
			m.AddLinear([]Term{{x, 1}, {y, 1}}, 3, math.MaxInt64)
		},
		"empty exactly-one": func(m *Model) { m.AddExactlyOne() },
		"implication cycle": func(m *Model) {
			x, y := m.NewBoolVar("x"), m.NewBoolVar("y")
			m.AddImplication(x, y)
			m.AddImplication(y, Not(x))
			m.AddBoolOr(x)
		},
		"parity": func(m *Model) {
			x := m.NewIntVar(0, 10, "x")
			m.AddLinear([]Term{{x, 2}}, 7, 7)
			m.Maximize([]Term{{x, 1}})
		},
		"both branches of an enforcement fail": func(m *Model) {
			b, x := m.NewBoolVar("b"), m.NewIntVar(0, 4, "x")
			m.AddLinearIf(b, []Term{{x, 1}}, 5, 10)
			m.AddLinearIf(Not(b), []Term{{x, 1}}, 5, 10)
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			m := NewModel()
			build(m)
			if feasible, _, ok := bruteForce(m); !ok || feasible {
				t.Fatalf("brute force: feasible=%v enumerated=%v", feasible, ok)
			}
			for _, presolve := range []bool{false, true} {
				r, err := Solve(context.Background(), m, Params{Workers: 1, Presolve: presolve})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != Infeasible || r.HasSolution() || !math.IsInf(r.Gap(), 1) {
					t.Errorf("presolve=%v: status %v, has solution %v, gap %v", presolve, r.Status, r.HasSolution(), r.Gap())
				}
			}
		})
	}
}

func TestSolveWithoutObjective(t *testing.T) {
	needSolver(t)
	m := NewModel()
	xs := []Var{m.NewBoolVar("a"), m.NewBoolVar("b"), m.NewBoolVar("c")}
	m.AddExactlyOne(xs...)
	m.AddBoolOr(Not(xs[0]))
	r, err := Solve(context.Background(), m, oneWorker)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != Optimal || r.Value(xs[0]) != 0 || r.Value(xs[1])+r.Value(xs[2]) != 1 || r.Objective != 0 {
		t.Fatalf("status %v, values %d %d %d, objective %v", r.Status, r.Value(xs[0]), r.Value(xs[1]), r.Value(xs[2]), r.Objective)
	}

	r, err = Solve(context.Background(), NewModel(), oneWorker)
	if err != nil || r.Status != Optimal || !r.HasSolution() {
		t.Fatalf("empty model: %+v, %v", r, err)
	}
}

// hardTimeLimit is far above the time limits used on the hard model, to
// catch a limit that is ignored without asserting timings.
const hardTimeLimit = 30 * time.Second

func TestTimeLimitHonoured(t *testing.T) {
	needSolver(t)
	m := marketSplit(5, 1)
	start := time.Now()
	r, err := Solve(context.Background(), m, Params{Workers: 2, TimeLimit: 300 * time.Millisecond})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != Unknown && r.Status != Feasible {
		t.Errorf("status %v, want Unknown or Feasible on a hard model", r.Status)
	}
	if elapsed > hardTimeLimit || r.Stopped {
		t.Errorf("solve took %v (stopped=%v) with a 300ms limit", elapsed, r.Stopped)
	}
}

// TestWorkLimitReproducible stops a hard search by its work limit: once alone, then twice at
// the same time (each solve slower, competing for the cores). With one worker the three
// return the same solution.
func TestWorkLimitReproducible(t *testing.T) {
	needSolver(t)
	m := multiKnapsack(80, 6, 3)
	params := Params{Workers: 1, WorkLimit: 0.05, TimeLimit: hardTimeLimit}
	results := make([]*Result, 3)
	errs := make([]error, len(results))
	results[0], errs[0] = Solve(context.Background(), m, params)
	var wg sync.WaitGroup
	for run := 1; run < len(results); run++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[run], errs[run] = Solve(context.Background(), m, params)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for run, r := range results {
		t.Logf("run %d: objective %v after %.3f work in %v", run, r.Objective, r.Work, r.WallTime)
		if r.Status != Feasible {
			t.Fatalf("run %d: status %v, want Feasible (stopped by the work limit with a solution)", run, r.Status)
		}
		if r.Work < params.WorkLimit || r.Work > 1.5*params.WorkLimit {
			t.Errorf("run %d: work %.3f, want about the limit %.3f", run, r.Work, params.WorkLimit)
		}
		if run > 0 && (r.Objective != results[0].Objective || !slices.Equal(r.values, results[0].values)) {
			t.Errorf("run %d: objective %v, values %v; first run: %v, %v", run, r.Objective, r.values, results[0].Objective, results[0].values)
		}
	}
}

func TestContextCancelStopsSolve(t *testing.T) {
	needSolver(t)
	m := marketSplit(5, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Solve(ctx, m, Params{Workers: 2, TimeLimit: 10 * time.Minute})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Stopped || (r.Status != Unknown && r.Status != Feasible) {
		t.Errorf("stopped=%v status %v, want a stopped Unknown/Feasible result", r.Stopped, r.Status)
	}
	if elapsed > hardTimeLimit {
		t.Errorf("cancelled solve returned after %v", elapsed)
	}

	// A context that is already done never starts the solver.
	r, err = Solve(ctx, m, oneWorker)
	if !errors.Is(err, context.DeadlineExceeded) || r != nil {
		t.Errorf("done context: %v, %v", r, err)
	}
}

// TestMemoryLimitStopsSolve: a limit below what the process holds stops a hard search, as a
// cancellation would, and says why; a limit far above it does not.
func TestMemoryLimitStopsSolve(t *testing.T) {
	needSolver(t)
	rss, err := ResidentBytes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		limit   int64
		stopped bool
	}{
		{name: "below the process", limit: rss / 2, stopped: true},
		{name: "far above", limit: rss + 64<<30, stopped: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Solve(context.Background(), marketSplit(5, 2), Params{Workers: 1, TimeLimit: time.Second, MemoryLimit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			if r.Stopped != tc.stopped || r.MemoryLimitReached != tc.stopped || (r.Status != Unknown && r.Status != Feasible) {
				t.Errorf("stopped=%v memoryLimitReached=%v status %v, want stopped and memoryLimitReached %v", r.Stopped, r.MemoryLimitReached, r.Status, tc.stopped)
			}
		})
	}
	// A cancellation by the caller is not reported as the memory limit.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r, err := Solve(ctx, marketSplit(5, 2), Params{Workers: 1, TimeLimit: time.Minute, MemoryLimit: rss + 64<<30})
	if err != nil || !r.Stopped || r.MemoryLimitReached {
		t.Errorf("cancelled with a memory limit: %+v, %v; want stopped, not by memory", r, err)
	}
}

func TestParseStatmResident(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int64
		wantErr bool
	}{
		{"425405 10232 5321 2810 0 71054 0\n", 10232, false},
		{"1 0", 0, false},
		{"", 0, true},
		{"425405", 0, true},
		{"425405 -3 1", 0, true},
		{"425405 lots 1", 0, true},
		{"1 99999999999999999999", 0, true},
	} {
		got, err := parseStatmResident(tc.content)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseStatmResident(%q) = %d, %v; want %d, error %v", tc.content, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseStatmResident(f *testing.F) {
	for _, seed := range []string{"425405 10232 5321 2810 0 71054 0\n", "", "1", "1 -1", "1 2e3"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, content string) {
		pages, err := parseStatmResident(content)
		if pages < 0 || pages > 1<<40 || err != nil && pages != 0 {
			t.Fatalf("parseStatmResident(%q) = %d, %v", content, pages, err)
		}
	})
}

// The hint is the one assignment the search tries first: with a single
// worker, no presolve and "stop after first solution", it is returned as is
// among 16 equally good candidates.
func TestHintAccepted(t *testing.T) {
	needSolver(t)
	for _, hinted := range []int{3, 11} {
		m := NewModel()
		xs := make([]Var, 16)
		for i := range xs {
			xs[i] = m.NewBoolVar(fmt.Sprintf("x%d", i))
			m.Hint(xs[i], 1) // overridden below: the last Hint wins
		}
		for i, x := range xs {
			m.Hint(x, int64(boolToInt(i == hinted)))
		}
		m.AddExactlyOne(xs...)
		r, err := Solve(context.Background(), m, Params{Workers: 1, StopAfterFirstSolution: true})
		if err != nil {
			t.Fatal(err)
		}
		if !r.HasSolution() || !r.BoolValue(xs[hinted]) {
			t.Errorf("hinted x%d, status %v, solution %v", hinted, r.Status, r.values)
		}
	}

	// A complete optimal hint on a larger model is accepted and kept.
	p := newMCKP(30, 8, 3)
	m, choice := p.model()
	for i, l := range p.greedy() {
		for level, v := range choice[i] {
			m.Hint(v, int64(boolToInt(level == l)))
		}
	}
	r, err := Solve(context.Background(), m, Params{Workers: 1, TimeLimit: 5 * time.Second})
	if err != nil || !r.HasSolution() {
		t.Fatalf("%+v, %v", r, err)
	}
	var greedyValue int64
	for i, l := range p.greedy() {
		greedyValue += p.value[i][l]
	}
	if r.Objective < float64(greedyValue) {
		t.Errorf("objective %v below the hinted greedy solution %d", r.Objective, greedyValue)
	}
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestParallelSolves(t *testing.T) {
	needSolver(t)
	const solvers = 6
	var wg sync.WaitGroup
	errs := make([]error, solvers)
	for g := range solvers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 11))
			weights, values := make([]int64, 12), make([]int64, 12)
			var total int64
			for i := range weights {
				weights[i], values[i] = 1+r.Int64N(50), 1+r.Int64N(80)
				total += weights[i]
			}
			m, _ := knapsack(weights, values, total/2)
			_, want, _ := bruteForce(m)
			res, err := Solve(context.Background(), m, Params{Workers: 1, Seed: int32(g)})
			switch {
			case err != nil:
				errs[g] = err
			case res.Status != Optimal || res.Objective != float64(want):
				errs[g] = fmt.Errorf("solver %d: status %v objective %v, want %d", g, res.Status, res.Objective, want)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidParams(t *testing.T) {
	m := NewModel()
	m.NewBoolVar("x")
	for _, p := range []Params{
		{TimeLimit: -time.Second},
		{Workers: -1},
		{RelativeGap: -0.1},
		{RelativeGap: math.NaN()},
		{RelativeGap: math.Inf(1)},
		{WorkLimit: -1},
		{WorkLimit: math.NaN()},
		{WorkLimit: math.Inf(1)},
		{MemoryLimit: -1},
	} {
		if _, err := Solve(context.Background(), m, p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%+v: error %v, want ErrInvalidParams", p, err)
		}
	}
}

func TestParamsEncoding(t *testing.T) {
	enc, err := Params{}.encode()
	if err != nil {
		t.Fatal(err)
	}
	if enc.GetMaxTimeInSeconds() != DefaultTimeLimit.Seconds() || int(enc.GetNumWorkers()) != DefaultWorkers() ||
		enc.GetCpModelPresolve() || enc.GetLogToStdout() || enc.GetLogSearchProgress() || enc.GetStopAfterFirstSolution() ||
		enc.MaxDeterministicTime != nil {
		t.Errorf("zero Params encode to %v", enc)
	}
	enc, err = Params{TimeLimit: 1500 * time.Millisecond, WorkLimit: 0.5, Workers: 3, Seed: 9, RelativeGap: 0.01, Presolve: true, StopAfterFirstSolution: true}.encode()
	if err != nil {
		t.Fatal(err)
	}
	if enc.GetMaxTimeInSeconds() != 1.5 || enc.GetMaxDeterministicTime() != 0.5 || enc.GetNumWorkers() != 3 || enc.GetRandomSeed() != 9 ||
		enc.GetRelativeGapLimit() != 0.01 || !enc.GetCpModelPresolve() || !enc.GetStopAfterFirstSolution() {
		t.Errorf("encoded %v", enc)
	}
}

func TestResultWithoutSolution(t *testing.T) {
	r := &Result{Status: Unknown}
	if r.HasSolution() || !math.IsInf(r.Gap(), 1) {
		t.Errorf("has solution %v, gap %v", r.HasSolution(), r.Gap())
	}
	for _, tc := range []struct {
		r    *Result
		v    Var
		want string
	}{
		{r, 0, "without solution (status Unknown)"},
		{&Result{Status: Optimal, values: []int64{1}}, 1, "out of range"},
		{&Result{Status: Optimal, values: []int64{1}}, Not(1), "out of range"},
	} {
		func() {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, tc.want) {
					t.Errorf("Value(%d) panic %q, want %q", tc.v, msg, tc.want)
				}
			}()
			tc.r.Value(tc.v)
		}()
	}
}

func TestStatusString(t *testing.T) {
	want := []string{"Unknown", "ModelInvalid", "Feasible", "Infeasible", "Optimal", "Status(9)"}
	for i, s := range []Status{Unknown, ModelInvalid, Feasible, Infeasible, Optimal, 9} {
		if s.String() != want[i] {
			t.Errorf("%d: %q, want %q", int(s), s.String(), want[i])
		}
	}
}

// A hint outside its variable's domain is clamped into it, never a reason to reject the
// model: with "stop after first solution" the clamped hint (x = 10, y = 0) is what comes back.
func TestHintOutsideTheDomainIsClamped(t *testing.T) {
	needSolver(t)
	m := NewModel()
	x := m.NewIntVar(0, 10, "x")
	y := m.NewIntVar(0, 10, "y")
	m.AddLinear([]Term{{Var: x, Coef: 1}, {Var: y, Coef: 1}}, 0, 10)
	m.Hint(x, 1311)
	m.Hint(y, -5)
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	r, err := Solve(context.Background(), m, Params{Workers: 1, StopAfterFirstSolution: true})
	if err != nil || !r.HasSolution() {
		t.Fatalf("%+v, %v", r, err)
	}
	if r.Value(x) != 10 || r.Value(y) != 0 {
		t.Errorf("solution x=%d y=%d, want the clamped hint 10, 0", r.Value(x), r.Value(y))
	}
}
