package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

const example = "testdata/example.yaml"

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// solverFlags keeps the tests fast and reproducible whether or not OR-Tools is configured.
var solverFlags = []string{"-workers", "1", "-time-limit", "10s"}

func TestPlanTable(t *testing.T) {
	code, out, errOut := runCLI(append([]string{"plan", "-f", example}, solverFlags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"policy optimal:", "TENANT", "shop/orders", "MeetsSLO", "NODE", "cache-c"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanJSONAndYAMLDecode(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut := runCLI(append([]string{"plan", "-f", example, "-policy", "maxperf", "-o", format}, solverFlags...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", format, code, errOut)
		}
		plan, err := planning.DecodePlan([]byte(out))
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, out)
		}
		if plan.Policy != "maxperf" || len(plan.Tenants) != 5 || plan.Cluster != "shop-cache" {
			t.Errorf("%s: plan %s with %d tenants", format, plan.Policy, len(plan.Tenants))
		}
	}
}

func TestPlanCompareListsEveryPolicy(t *testing.T) {
	code, out, errOut := runCLI(append([]string{"plan", "-f", example, "-compare"}, solverFlags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range append([]string{"STRICT SLOS MET", "EXPECTED HITS/S", "MOVEMENT", "SOLVE TIME", "STATUS"}, allocator.PolicyNames()...) {
		if !strings.Contains(out, want) {
			t.Errorf("comparison lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(append([]string{"plan", "-f", example, "-compare", "-o", "json"}, solverFlags...)...)
	if code != 0 || !strings.Contains(out, `"kind": "PlanComparison"`) || strings.Count(out, `"policy"`) != len(allocator.PolicyNames()) {
		t.Errorf("JSON comparison (exit %d):\n%s", code, out)
	}
}

// Issue 16's snapshot: every policy keeps both memory minimums (b/onenode fits only on n1,
// beside part of a/big).
func TestPlanKeepsTightMinimums(t *testing.T) {
	for _, policy := range allocator.PolicyNames() {
		code, out, errOut := runCLI(append([]string{"plan", "-f", "testdata/tight-minimums.json", "-policy", policy, "-o", "json"}, solverFlags...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", policy, code, errOut)
		}
		plan, err := planning.DecodePlan([]byte(out))
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		for _, tp := range plan.Tenants {
			if min := map[string]int64{"a/big": 3156800962, "b/onenode": 1127428915}[tp.ID]; tp.MemoryBytes < min {
				t.Errorf("%s: %s holds %d, below its minimum %d", policy, tp.ID, tp.MemoryBytes, min)
			}
		}
	}
}

func TestPlanErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	typo := write("typo.yaml", strings.Replace(string(data), "minBytes: 536870912", "minBytez: 536870912", 1))
	tooSmall := write("small.yaml", strings.Replace(string(data), "minBytes: 536870912", "minBytes: 536870912000", 1))
	// Three tenants of 60 B limited to one node each cannot share two nodes of 100 B.
	unpackable := write("unpackable.yaml", `apiVersion: cacheqos.io/planning/v1
kind: PlanningSnapshot
nodes:
- {name: n1, memoryBytes: 100, bandwidthBytesPerSecond: 1000, opsPerSecond: 1000}
- {name: n2, memoryBytes: 100, bandwidthBytesPerSecond: 1000, opsPerSecond: 1000}
tenants:
- {id: a/one, memory: {minBytes: 60}, spread: {maxNodes: 1}}
- {id: b/two, memory: {minBytes: 60}, spread: {maxNodes: 1}}
- {id: c/free}
- {id: e/three, memory: {minBytes: 60}, spread: {maxNodes: 1}}
`)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "Usage:"},
		{"unknown command", []string{"deploy"}, 2, `unknown command "deploy"`},
		{"missing file flag", []string{"plan"}, 2, "-f FILE is required"},
		{"missing file", []string{"plan", "-f", filepath.Join(dir, "nope.yaml")}, 1, "reading the snapshot"},
		{"unknown field", []string{"plan", "-f", typo}, 1, `typo.yaml: tenants[0].memory: unknown field "minBytez"`},
		{"infeasible", []string{"plan", "-f", tooSmall}, 1, "exceeds the"},
		{"unpackable", []string{"plan", "-f", unpackable}, 1, "the memory minimums of a/one, b/two, e/three"},
		{"unknown policy", []string{"plan", "-f", example, "-policy", "fastest"}, 2, `-policy "fastest"`},
		{"bad output", []string{"plan", "-f", example, "-o", "xml"}, 2, `-o "xml"`},
		{"bad objective", []string{"plan", "-f", example, "-objective", "cost"}, 2, `-objective "cost"`},
		{"negative work limit", []string{"plan", "-f", example, "-work-limit", "-1"}, 1, "WorkLimit -1 must be a finite number >= 0"},
		{"stray argument", []string{"plan", "-f", example, "extra"}, 2, `unexpected argument "extra"`},
		{"unknown flag", []string{"plan", "-x"}, 2, "flag provided but not defined: -x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCLI(c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, c.code, c.want)
			}
		})
	}
}

// TestPlanNamesUnpackableTenants: unpackable minimums print, after the error, each tenant of
// the set with its minimum, spread and allowed nodes, and the nodes they may use; a tenant
// outside the set and a node none of them may use are left out.
func TestPlanNamesUnpackableTenants(t *testing.T) {
	path := filepath.Join(t.TempDir(), "unpackable.yaml")
	// On n1 and n2 (100 B each), no two of the three 60 B minimums fit on one node; n3 is
	// allowed to none of them.
	err := os.WriteFile(path, []byte(`apiVersion: cacheqos.io/planning/v1
kind: PlanningSnapshot
nodes:
- {name: n1, memoryBytes: 100, bandwidthBytesPerSecond: 1000, opsPerSecond: 1000}
- {name: n2, memoryBytes: 100, bandwidthBytesPerSecond: 1000, opsPerSecond: 1000}
- {name: n3, memoryBytes: 900, bandwidthBytesPerSecond: 1000, opsPerSecond: 1000}
tenants:
- {id: a/one, memory: {minBytes: 60}, spread: {maxNodes: 1}, allowedNodes: [n1, n2]}
- {id: b/two, memory: {minBytes: 60}, spread: {maxNodes: 1}, allowedNodes: [n1, n2]}
- {id: c/free, allowedNodes: [n1, n2, n3]}
- {id: e/three, memory: {minBytes: 60}, spread: {minNodes: 1, maxNodes: 1}, allowedNodes: [n2, n1]}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plan", "-f", path}, {"plan", "-f", path, "-compare"}} {
		code, _, errOut := runCLI(append(args, solverFlags...)...)
		if code != 1 {
			t.Fatalf("%v: exit %d, want 1:\n%s", args, code, errOut)
		}
		_, tables, found := strings.Cut(errOut, "The memory minimums of these 3 tenants cannot all be placed:\n")
		if !found {
			t.Fatalf("%v: no table of the tenants:\n%s", args, errOut)
		}
		var rows [][]string
		for _, line := range strings.Split(tables, "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				rows = append(rows, f)
			}
		}
		want := [][]string{
			{"TENANT", "MIN", "MEMORY", "MIN", "NODES", "MAX", "NODES", "ALLOWED", "NODES"},
			{"a/one", "60", "B", "1", "1", "n1,n2"},
			{"b/two", "60", "B", "1", "1", "n1,n2"},
			{"e/three", "60", "B", "1", "1", "n2,n1"},
			{"The", "nodes", "they", "may", "use:"},
			{"NODE", "MEMORY"},
			{"n1", "100", "B"},
			{"n2", "100", "B"},
		}
		if !slices.EqualFunc(rows, want, slices.Equal) {
			t.Errorf("%v: tables\n%q\nwant\n%q", args, rows, want)
		}
	}
}

func TestPoliciesAndHelp(t *testing.T) {
	code, out, _ := runCLI("policies")
	if code != 0 || !strings.Contains(out, "lacs") || !strings.Contains(out, "optimal") {
		t.Errorf("policies: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "cacheqos plan -f FILE") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCLI("plan", "-h"); code != 0 || !strings.Contains(errOut, "-compare") {
		t.Errorf("plan -h: exit %d\n%s", code, errOut)
	}
}
