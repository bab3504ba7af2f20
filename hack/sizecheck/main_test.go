package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// newRepo makes a git repository tracking files (path -> size in bytes) and holding
// untracked ones that are never added.
func newRepo(t *testing.T, tracked, untracked map[string]int) string {
	t.Helper()
	repo := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	write := func(files map[string]int) {
		for path, size := range files {
			full := filepath.Join(repo, path)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(strings.Repeat("x", size)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(tracked)
	for path := range tracked {
		run("add", path)
	}
	write(untracked)
	return repo
}

func TestCheck(t *testing.T) {
	const limit = 100
	tracked := map[string]int{"small.txt": 10, "exact.txt": limit, "testdata/big.bin": limit + 1, "name with space.txt": 5}
	untracked := map[string]int{"bin/tool": 10 * limit}
	tests := []struct {
		name, allowed string
		want          []string // one problem each, in order; each string is part of it
		wantErr       string
	}{
		{name: "big file not listed", allowed: "# none\n", want: []string{"testdata/big.bin is 101 bytes, over the 100 byte limit"}},
		{name: "big file listed", allowed: "testdata/big.bin # the decoder's reference capture\n"},
		{name: "entry for an untracked file", allowed: "testdata/big.bin # capture\nbin/tool # a tool\n", want: []string{"lists bin/tool, which is not tracked"}},
		{name: "entry for a small file", allowed: "testdata/big.bin # capture\nexact.txt # x\n", want: []string{"lists exact.txt, which is 100 bytes, within the limit"}},
		{name: "no reason", allowed: "testdata/big.bin\n", wantErr: "line 1"},
		{name: "empty reason", allowed: "\ntestdata/big.bin #  \n", wantErr: "line 2"},
		{name: "listed twice", allowed: "testdata/big.bin # a\ntestdata/big.bin # b\n", wantErr: "listed twice"},
	}
	repo := newRepo(t, tracked, untracked)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(repo, "allowed.txt"), []byte(tt.allowed), 0o600); err != nil {
				t.Fatal(err)
			}
			problems, err := check(repo, limit, "allowed.txt")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != len(tt.want) {
				t.Fatalf("problems %q, want %d", problems, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %q does not say %q", problems[i], w)
				}
			}
		})
	}
}

// TestCheckReadsTheIndex: a tracked file grown in the working tree but not staged is not
// what a commit would hold; staging it is.
func TestCheckReadsTheIndex(t *testing.T) {
	repo := newRepo(t, map[string]int{"data.json": 10}, nil)
	if err := os.WriteFile(filepath.Join(repo, "allowed.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "data.json"), []byte(strings.Repeat("x", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	if problems, err := check(repo, 100, "allowed.txt"); err != nil || len(problems) != 0 {
		t.Fatalf("unstaged growth: problems %q, error %v", problems, err)
	}
	if out, err := exec.Command("git", "-C", repo, "add", "data.json").CombinedOutput(); err != nil {
		t.Fatalf("git add: %v\n%s", err, out)
	}
	if problems, err := check(repo, 100, "allowed.txt"); err != nil || len(problems) != 1 || !strings.Contains(problems[0], "data.json") {
		t.Fatalf("staged growth: problems %q, error %v", problems, err)
	}
}

// TestRepositoryPasses runs the check on this repository with its list.
func TestRepositoryPasses(t *testing.T) {
	problems, err := check(filepath.Join("..", ".."), defaultLimit, "hack/large-files.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
