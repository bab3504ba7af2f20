package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "usage: cacheqos-sim"},
		{[]string{"fly"}, exitUsage, `unknown command "fly"`},
		{[]string{"run"}, exitUsage, "give exactly one of -scenario and -file"},
		{[]string{"run", "-scenario", "softqos", "-policy", "fifo"}, exitUsage, `unknown policy "fifo"`},
		{[]string{"run", "-scenario", "nope"}, exitError, `no scenario "nope"`},
		{[]string{"run", "-bogus"}, exitUsage, "flag provided but not defined"},
		{[]string{"curve", "-workload", "zipf:keys=0"}, exitUsage, "-workload"},
		{[]string{"curve", "-workload", "loop:keys=5", "-sizes", "1MiB,1KiB"}, exitUsage, "increase strictly"},
		{[]string{"curve", "-workload", "loop:keys=5", "-sizes", "lots"}, exitUsage, `"lots" is not a positive byte count`},
		{[]string{"eval", "-scenarios", "nope"}, exitUsage, `no scenario "nope"`},
		{[]string{"eval", "-fuzz-cache", "fifo"}, exitUsage, `unknown cache model "fifo"`},
		{[]string{"fuzz", "-cache", "lru,fifo"}, exitUsage, `unknown cache model "fifo"`},
		{[]string{"fuzz", "-judge", "fifo"}, exitUsage, `-judge: unknown policy "fifo"`},
		{[]string{"fuzz", "-policies", "fifo"}, exitUsage, `unknown policy "fifo"`},
		{[]string{"fuzz", "-intervals", "3"}, exitUsage, "want at least 8 intervals"},
		{[]string{"fuzz", "-n", "-2"}, exitUsage, "-n: -2 fleets"},
		{[]string{"fuzz", "-fleet-seed", "0xzz"}, exitUsage, `"0xzz" is not a seed`},
		{[]string{"list", "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"help"}, exitOK, "commands:"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d, output %q%q; want exit %d and %q", code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestCurvePrintsTheLoopCliff(t *testing.T) {
	code, stdout, stderr := runCmd(t, "curve", "-workload", "loop:keys=1000,value=100", "-sizes", "50KiB,200KiB", "-warmup", "1000", "-accesses", "5000")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"50.0 KiB  0.0000", "200.0 KiB  1.0000"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("curve output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestRunScenarioFile(t *testing.T) {
	dir := t.TempDir()
	doc := `{"name": "file", "intervals": 3, "intervalSeconds": 1, "warmup": 1,
	 "nodes": {"count": 1, "memoryBytes": 1048576, "opsPerSecond": 100000},
	 "tenants": [{"id": "a/b", "workload": "zipf:keys=2000,skew=0.9", "rate": 1000, "hitRatio": 0.5}]}`
	path := filepath.Join(dir, "s.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"## Headline", "| [file](#file-custom-scenario) |", "| equal |"}},
		{[]string{"-pool"}, []string{"| equal |", "Best-effort tenants share one pooled cache per node"}},
	}
	for _, tc := range tests {
		code, stdout, stderr := runCmd(t, append([]string{"run", "-file", path, "-policy", "shared,equal"}, tc.flags...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", tc.flags, code, stderr)
		}
		for _, want := range tc.want {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v: output lacks %q:\n%s", tc.flags, want, stdout)
			}
		}
	}
}

// TestEvalWritesReportAndPlots runs the eval command on the smallest built-in scenario.
func TestEvalWritesReportAndPlots(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "docs", "evaluation.md")
	plots := filepath.Join(dir, "docs", "eval")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, "eval", "-out", out, "-plots", plots, "-scenarios", "soundararajan-overload", "-fuzz-n", "0")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	report, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Evaluation", "## Headline", "Soundararajan et al.", "(eval/soundararajan-overload-policies.png)", "The fuzz did not run"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(plots, "*.png"))
	if len(files) < 3 {
		t.Fatalf("%d plots written", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(data)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestFuzzReplaysAFleet replays one small fleet, dumps it, and runs the dump: the scenario
// file gives the same attainment as the fuzz did.
func TestFuzzReplaysAFleet(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCmd(t, "fuzz", "-fleet-seed", "0xa", "-intervals", "8", "-cache", "lru", "-policies", "shared", "-judge", "equal", "-dump", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	line, _, _ := strings.Cut(stdout, "\n")
	_, after, ok := strings.Cut(line, " equal ")
	if !strings.HasPrefix(line, "0x000000000000000a lru ") || !ok {
		t.Fatalf("first line %q does not report fleet 0xa's equal attainment", line)
	}
	attainment := after[:4]
	// equal misses in this tight fleet, so the report says how to replay it.
	for _, want := range []string{"Fleet `0xa`, replayed, each run for 8 intervals", "`cacheqos-sim fuzz -fleet-seed 0xa -cache lru -intervals 8`", "| every criterion met | 0 of 1 |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	file := filepath.Join(dir, "fleet-000000000000000a-lru.json")
	code, stdout, stderr = runCmd(t, "run", "-file", file, "-seed", "0xa", "-policy", "equal")
	if code != exitOK {
		t.Fatalf("run -file: exit %d: %s", code, stderr)
	}
	if want := "| equal | " + attainment + " |"; !strings.Contains(stdout, want) {
		t.Errorf("the dumped fleet's run lacks %q:\n%s", want, stdout)
	}
}

// TestFuzzCheckFailsOnMisses judges shared, which ignores objectives, on a tight fleet with
// a flood: -check turns its misses into exit status 1.
func TestFuzzCheckFailsOnMisses(t *testing.T) {
	args := []string{"fuzz", "-fleet-seed", "0xa", "-intervals", "8", "-cache", "lru", "-policies", "shared", "-judge", "shared"}
	if code, stdout, stderr := runCmd(t, args...); code != exitOK {
		t.Fatalf("without -check: exit %d: %s%s", code, stdout, stderr)
	}
	code, stdout, stderr := runCmd(t, append(args, "-check")...)
	if code != exitError || !strings.Contains(stderr, "shared missed a criterion in 1 of 1 fleet runs") {
		t.Fatalf("with -check: exit %d: %s%s", code, stdout, stderr)
	}
}

// TestEvalWritesFuzzSection runs the evaluation with one fleet and no scenario.
func TestEvalWritesFuzzSection(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "evaluation.md")
	code, stdout, stderr := runCmd(t, "eval", "-out", out, "-plots", filepath.Join(dir, "eval"), "-scenarios", "none",
		"-fuzz-n", "1", "-fuzz-seed", "13", "-fuzz-intervals", "8", "-fuzz-cache", "lru", "-fuzz-policies", "shared", "-fuzz-judge", "equal")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	report, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Random fleets", "1 fleets from seed 13", "`0x5a28e03ce505b45`"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
