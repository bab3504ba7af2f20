package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportCountsAndVerdict(t *testing.T) {
	tests := []struct {
		name       string
		stream     string
		wantOK     bool
		wantClose  string
		wantInText []string
	}{
		{
			name: "passing package with a subtest and a skip",
			stream: `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestA/sub"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"pass","Package":"p","Elapsed":0.5}`,
			wantOK:     true,
			wantClose:  "unit: 1 passed, 0 failed, 1 skipped",
			wantInText: []string{"ok    p (0.5s)"},
		},
		{
			name: "a skipped subtest is named with its reason, not counted",
			stream: `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA/sub","Output":"    a_test.go:9: no partition-less node\n"}
{"Action":"skip","Package":"p","Test":"TestA/sub"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Elapsed":0.5}`,
			wantOK:     true,
			wantClose:  "unit: 1 passed, 0 failed, 0 skipped",
			wantInText: []string{"--- SKIP p TestA/sub", "no partition-less node"},
		},
		{
			name: "failed test prints its output",
			stream: `{"Action":"output","Package":"p","Test":"TestA","Output":"boom\n"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"fail","Package":"p","Elapsed":1}`,
			wantOK:     false,
			wantClose:  "unit: 0 passed, 1 failed, 0 skipped",
			wantInText: []string{"--- FAIL p TestA", "    boom"},
		},
		{
			name: "build failure counts as a failure without tests",
			stream: `{"ImportPath":"p","Action":"build-output","Output":"x.go:1: syntax error\n"}
{"ImportPath":"p","Action":"build-fail"}`,
			wantOK:     false,
			wantClose:  "unit: 0 passed, 0 failed, 0 skipped",
			wantInText: []string{"BUILD FAILED p", "syntax error"},
		},
		{
			name:       "text outside the JSON stream is a failure",
			stream:     "go: cannot find main module\n",
			wantOK:     false,
			wantClose:  "unit: 0 passed, 0 failed, 0 skipped",
			wantInText: []string{"cannot find main module"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			ok, err := report(strings.NewReader(tt.stream), &out, "unit", "")
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v\n%s", ok, tt.wantOK, out.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if got := lines[len(lines)-1]; got != tt.wantClose {
				t.Errorf("closing line %q, want %q", got, tt.wantClose)
			}
			for _, want := range tt.wantInText {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestSummarizeFailsOnEmptyRun(t *testing.T) {
	tests := []struct {
		name   string
		counts string
		wantOK bool
	}{
		{"all layers passed", "unit 10 0 1 0\nenvtest 5 0 0 0\n", true},
		{"no test ran anywhere", "unit 0 0 0 0\n", false},
		{"no layer had packages", "", false},
		{"a failed test", "unit 10 1 0 0\n", false},
		{"a package that did not build", "unit 10 0 0 1\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "counts")
			if err := os.WriteFile(file, []byte(tt.counts), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			ok, err := summarize(&out, file)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v\n%s", ok, tt.wantOK, out.String())
			}
		})
	}
}
