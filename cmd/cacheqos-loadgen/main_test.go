package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/loadgen"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUsageExample keeps the example configuration of --help valid.
func TestUsageExample(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, io.Discard, &out); code != exitOK {
		t.Fatalf("--help exits %d", code)
	}
	text := out.String()
	start := strings.Index(text, "  interval: 5s")
	end := strings.Index(text, "\nWorkload specs")
	if start < 0 || end < start {
		t.Fatalf("no example config in the usage:\n%s", text)
	}
	cfg, err := loadgen.ParseConfig([]byte(text[start:end]))
	if err != nil {
		t.Fatalf("the example config does not parse: %v\n%s", err, text[start:end])
	}
	if len(cfg.Tenants) != 2 || cfg.Tenants[1].Start != loadgen.Duration(2*time.Minute) || cfg.MetricsListen != ":9390" {
		t.Errorf("example config parsed as %+v", cfg)
	}
	for _, want := range []string{"Flags:", "-tenant key=value,...", strings.Join(loadgen.CSVHeader, ",")} {
		if !strings.Contains(text, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	writeFile(t, config, `interval: 2s
duration: 1m
csv: from-file.csv
tenants:
- {name: team-a/orders, engine: redis, address: "127.0.0.1:6379", workload: "zipf:keys=10,skew=1", rate: 100}
`)
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr []string
	}{
		{
			name:       "check lists the file's and the flags' tenants",
			args:       []string{"--config", config, "--check", "--tenant", "name=team-b/batch,engine=memcached,address=unix:/s,workload=scan:keys=5"},
			wantCode:   exitOK,
			wantStdout: []string{"configuration valid: 2 tenant(s)", "team-a/orders: redis at 127.0.0.1:6379, rate 100/s", "team-b/batch: memcached at unix:/s, rate max, workload scan:keys=5"},
		},
		{
			name:       "version",
			args:       []string{"--version"},
			wantCode:   exitOK,
			wantStdout: []string{"cacheqos-loadgen dev (go"},
		},
		{
			name:       "no tenants",
			args:       []string{"--duration", "1s"},
			wantCode:   exitUsage,
			wantStderr: []string{"tenants: none given"},
		},
		{
			name:       "bad tenant flags are all reported",
			args:       []string{"--tenant", "name=a/b,rate=x,workload=zipf:keys=1", "--tenant", "oops"},
			wantCode:   exitUsage,
			wantStderr: []string{"--tenant: tenant \"name=a/b,rate=x,workload=zipf:keys=1\": rate: want a number", `--tenant: tenant "oops": "oops": want key=value`},
		},
		{
			name:       "a tenant problem names the tenant and the field",
			args:       []string{"--config", config, "--tenant", "name=team-b/batch,engine=redis,address=h:1,rate=-1,workload=scan:keys=5"},
			wantCode:   exitUsage,
			wantStderr: []string{`tenant "team-b/batch": rate: -1 is not a finite number >= 0`},
		},
		{
			name:       "missing config file",
			args:       []string{"--config", filepath.Join(dir, "absent.yaml")},
			wantCode:   exitUsage,
			wantStderr: []string{"reading the config file"},
		},
		{
			name:       "stray argument",
			args:       []string{"--config", config, "extra"},
			wantCode:   exitUsage,
			wantStderr: []string{"unexpected arguments: extra"},
		},
		{
			name:       "bad log level",
			args:       []string{"--log-level", "loud"},
			wantCode:   exitUsage,
			wantStderr: []string{`--log-level "loud"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
		})
	}
}

// TestFlagsOverrideFile checks that flags given explicitly win over the file, and only they.
func TestFlagsOverrideFile(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, config, "interval: 2s\nduration: 1m\ncsv: from-file.csv\nseed: 4\n")
	o, err := parseFlags([]string{"--config", config, "--csv", "from-flag.csv", "--seed", "0",
		"--tenant", "name=a/b,engine=redis,address=h:1,workload=scan:keys=1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CSV != "from-flag.csv" || cfg.Seed != 0 || cfg.Interval != loadgen.Duration(2*time.Second) || cfg.Duration != loadgen.Duration(time.Minute) || len(cfg.Tenants) != 1 {
		t.Errorf("config %+v", cfg)
	}
}

var listeningLine = regexp.MustCompile(`msg=listening metrics=(\S+)`)

// TestRunUntilSignal runs the command against redis-server with a config file and no duration:
// /healthz and /metrics answer while it runs; on the signal (the context's end) it exits 0
// with the CSV complete and the summary printed.
func TestRunUntilSignal(t *testing.T) {
	sock := enginetest.StartRedis(t)
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "out.csv")
	config := filepath.Join(dir, "config.yaml")
	writeFile(t, config, `interval: 300ms
metricsListen: "127.0.0.1:0"
csv: `+csvPath+`
tenants:
- name: test/cmd
  engine: redis
  address: "unix:`+sock+`"
  workload: "zipf:keys=1000,skew=1"
  rate: 1000
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr enginetest.LockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--config", config}, &stdout, &stderr) }()

	var metricsAddr string
	for deadline := time.Now().Add(10 * time.Second); metricsAddr == ""; {
		if m := listeningLine.FindStringSubmatch(stderr.String()); m != nil {
			metricsAddr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening line:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if body := httpGet(t, "http://"+metricsAddr+"/healthz"); strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %q", body)
	}
	time.Sleep(time.Second)
	metrics := httpGet(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		`cacheqos_loadgen_operations_total{tenant="test/cmd"}`,
		`cacheqos_loadgen_request_duration_seconds_bucket{op="get",tenant="test/cmd",le="0.001"}`,
		`cacheqos_loadgen_connections{tenant="test/cmd"} 4`,
		`cacheqos_loadgen_target_rate{tenant="test/cmd"} 1000`,
		"go_goroutines",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the command did not stop after the signal")
	}
	if out := stdout.String(); !strings.Contains(out, "summary over") || !strings.Contains(out, "test/cmd") {
		t.Errorf("stdout:\n%s", out)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) < 4 || strings.Join(records[0], ",") != strings.Join(loadgen.CSVHeader, ",") {
		t.Errorf("CSV:\n%v", records)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(body)
}
