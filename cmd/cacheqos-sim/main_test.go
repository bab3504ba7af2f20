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
	code, stdout, stderr := runCmd(t, "run", "-file", path, "-policy", "shared,equal")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"## Headline", "| [file](#file-custom-scenario) |", "| equal |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
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
	code, stdout, stderr := runCmd(t, "eval", "-out", out, "-plots", plots, "-scenarios", "soundararajan-overload")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	report, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Evaluation", "## Headline", "Soundararajan et al.", "(eval/soundararajan-overload-policies.png)"} {
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
