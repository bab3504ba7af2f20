package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseMemoryMax(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int64
		wantErr bool
	}{
		{"max\n", 0, false},
		{"1073741824\n", 1 << 30, false},
		{"536870912", 512 << 20, false},
		{"", 0, true},
		{"0\n", 0, true},
		{"-5\n", 0, true},
		{"1Gi\n", 0, true},
		{"99999999999999999999\n", 0, true},
	} {
		got, err := parseMemoryMax(tc.content)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseMemoryMax(%q) = %d, %v; want %d, error %v", tc.content, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseMemoryMax(f *testing.F) {
	for _, seed := range []string{"max\n", "1073741824\n", "", "-1", "1e9"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, content string) {
		n, err := parseMemoryMax(content)
		if err != nil && n != 0 || n < 0 {
			t.Fatalf("parseMemoryMax(%q) = %d, %v", content, n, err)
		}
	})
}

// cgroupFile writes a memory.max with content into dir and returns its path.
func cgroupFile(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, content)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestApplyMemoryLimit: the soft limit the runtime holds afterwards, from a cgroup file.
func TestApplyMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	file := func(content string) string { return cgroupFile(t, dir, content) }
	for _, tc := range []struct {
		name, goMemLimit, memoryMax string
		want                        int64
		wantErr                     bool
	}{
		{name: "a container limit of 1Gi", memoryMax: file("1073741824"), want: 751619276},
		{name: "GOMEMLIMIT set", goMemLimit: "400MiB", memoryMax: file("1073741824")},
		{name: "no container limit", memoryMax: file("max")},
		{name: "no cgroup v2 file", memoryMax: filepath.Join(dir, "absent")},
		{name: "an unreadable limit", memoryMax: file("lots"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			got, err := applyMemoryLimit(tc.goMemLimit, tc.memoryMax)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("applyMemoryLimit = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
			held := debug.SetMemoryLimit(-1)
			if want := tc.want; (want == 0 && held != math.MaxInt64) || (want > 0 && held != want) {
				t.Errorf("the runtime's soft limit is %d, want %d (MaxInt64: none)", held, want)
			}
		})
	}
}

// TestSolverMemoryLimit: the flag's quantity when given, else 90% of the container's limit
// from the cgroup file, the same file the Go soft limit reads.
func TestSolverMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	file := func(content string) string { return cgroupFile(t, dir, content) }
	for _, tc := range []struct {
		name, flag, memoryMax string
		want                  int64
		wantErr               bool
	}{
		{name: "a container limit of 1Gi", memoryMax: file("1073741824"), want: 966367641},
		{name: "the flag over the container's", flag: "400Mi", memoryMax: file("1073741824"), want: 400 << 20},
		{name: "the flag at 0: no limit", flag: "0", memoryMax: file("1073741824")},
		{name: "no container limit", memoryMax: file("max")},
		{name: "no cgroup v2 file", memoryMax: filepath.Join(dir, "absent")},
		{name: "an unreadable limit", memoryMax: file("lots"), wantErr: true},
		{name: "the flag with an unreadable limit", flag: "1G", memoryMax: file("lots"), want: 1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{}
			if tc.flag != "" {
				args = append(args, "--solver-memory-limit="+tc.flag)
			}
			s, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			got, err := solverMemoryLimit(s.solverMemory, tc.memoryMax)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("solverMemoryLimit = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseFlagsRejectsBadSolverMemoryLimit(t *testing.T) {
	for _, v := range []string{"lots", "-1Gi", "1.5.5Gi"} {
		_, err := parseFlags([]string{"--solver-memory-limit=" + v})
		if err == nil || !strings.Contains(err.Error(), "--solver-memory-limit") {
			t.Errorf("--solver-memory-limit=%s: error %v, want one naming the flag", v, err)
		}
	}
}
