package cpsat

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAvailableReportsWhy loads unusable libraries in child processes (the
// library is loaded once per process) and checks that Available names the
// path and the loader's reason, and that Solve reports ErrUnavailable.
func TestAvailableReportsWhy(t *testing.T) {
	needSolver(t)
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libortools.so.9")
	if err := os.WriteFile(notELF, []byte(strings.Repeat("not a shared object\n", 8)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A real shared object without the CP-SAT entry points: the compression
	// library shipped next to OR-Tools.
	withoutSymbols := filepath.Join(filepath.Dir(LibraryPath()), "libz.so.1")
	if _, err := os.Stat(withoutSymbols); err != nil {
		t.Fatalf("expected a neighbour library of OR-Tools: %v", err)
	}
	for _, tc := range []struct {
		name, path string
		reason     string
	}{
		{"missing file", filepath.Join(dir, "nowhere", "libortools.so.9"), "No such file or directory"},
		{"not a shared object", notELF, "invalid ELF header"},
		{"missing symbols", withoutSymbols, "missing symbol SolveCpNewEnv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := runChild(t, tc.path)
			for _, want := range []string{"cpsat: OR-Tools CP-SAT library unavailable", tc.path, "from " + LibraryEnv, tc.reason} {
				if !strings.Contains(rep.Available, want) {
					t.Errorf("Available() = %q, want it to contain %q", rep.Available, want)
				}
			}
			if !rep.AvailableWraps || !rep.SolveUnavailable || rep.SolveError != rep.Available {
				t.Errorf("errors do not wrap ErrUnavailable consistently: %+v", rep)
			}
		})
	}
	t.Run("default loader search", func(t *testing.T) {
		rep := runChild(t, "")
		if rep.Available == "" {
			return // installed where the loader looks by default: fine too
		}
		for _, want := range []string{`loading "` + DefaultLibrary + `" (default loader search)`, "cannot open shared object file"} {
			if !strings.Contains(rep.Available, want) {
				t.Errorf("Available() = %q, want it to contain %q", rep.Available, want)
			}
		}
	})
	t.Run("usable library", func(t *testing.T) {
		if rep := runChild(t, LibraryPath()); rep != (childReport{}) {
			t.Errorf("child reports %+v", rep)
		}
	})
}

// runChild re-runs the test binary in child mode with LibraryEnv set to
// libPath ("" leaves it unset).
func runChild(t *testing.T, libPath string) childReport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{childModeEnv + "=available"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, LibraryEnv+"=") && !strings.HasPrefix(kv, childModeEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if libPath != "" {
		cmd.Env = append(cmd.Env, LibraryEnv+"="+libPath)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	var rep childReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	return rep
}
