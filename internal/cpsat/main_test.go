package cpsat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
)

// childModeEnv switches the test binary into a child process that reports
// what Available and Solve say about the library named by LibraryEnv; the
// library loads once per process, so other paths need another process.
const childModeEnv = "CPSAT_TEST_CHILD"

// childReport is what the child process prints as JSON.
type childReport struct {
	Available        string `json:"available"`
	SolveError       string `json:"solveError"`
	SolveUnavailable bool   `json:"solveUnavailable"`
	AvailableWraps   bool   `json:"availableWraps"`
}

func TestMain(m *testing.M) {
	if os.Getenv(childModeEnv) == "available" {
		os.Exit(runAvailabilityChild())
	}
	os.Exit(m.Run())
}

func runAvailabilityChild() int {
	var rep childReport
	if err := Available(); err != nil {
		rep.Available = err.Error()
		rep.AvailableWraps = errors.Is(err, ErrUnavailable)
	}
	model := NewModel()
	model.NewBoolVar("x")
	if _, err := Solve(context.Background(), model, Params{Workers: 1}); err != nil {
		rep.SolveError = err.Error()
		rep.SolveUnavailable = errors.Is(err, ErrUnavailable)
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// needSolver fails (never skips) the test when CP-SAT cannot be loaded: the
// solver tests are the point of this package.
func needSolver(tb testing.TB) {
	tb.Helper()
	err := Available()
	if err == nil {
		return
	}
	if os.Getenv(LibraryEnv) != "" {
		tb.Fatalf("%s is set but OR-Tools is unusable: %v", LibraryEnv, err)
	}
	tb.Fatalf("OR-Tools not found (%v): run `make bootstrap`, then test through the Makefile or export %s=<bin>/ortools/ortools/.libs/%s",
		err, LibraryEnv, DefaultLibrary)
}
