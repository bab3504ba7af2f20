package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
)

// result is one test (SET or GET) against one target under one load.
type result struct {
	Test string
	RPS  float64
	P50  float64 // milliseconds
	P99  float64 // milliseconds
}

// redisTarget is where redis-benchmark connects and how it authenticates.
type redisTarget struct {
	name           string
	args           []string // -h/-p or -s
	user, password string
}

// runRedisBenchmark runs redis-benchmark for SET then GET against target and parses its CSV.
func runRedisBenchmark(ctx context.Context, binary string, target redisTarget, load load) ([]result, error) {
	args := append([]string{}, target.args...)
	args = append(args, "-c", strconv.Itoa(load.clients), "-n", strconv.Itoa(load.requests), "-P", strconv.Itoa(load.pipeline),
		"-t", "set,get", "-r", strconv.Itoa(keyspace), "-d", strconv.Itoa(valueSize), "--csv")
	if target.user != "" {
		args = append(args, "--user", target.user, "-a", target.password)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("redis-benchmark against %s: %w: %s", target.name, err, strings.TrimSpace(stderr.String()))
	}
	results, err := parseBenchmarkCSV(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark against %s: %w", target.name, err)
	}
	if len(results) != 2 {
		return nil, fmt.Errorf("redis-benchmark against %s printed %d results, want SET and GET:\n%s%s", target.name, len(results), stdout.String(), stderr.String())
	}
	return results, nil
}

// parseBenchmarkCSV reads redis-benchmark's --csv output: a header naming the columns, then one
// row per test. The columns are found by name, so their order may change between versions.
func parseBenchmarkCSV(data []byte) ([]result, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading the CSV: %w", err)
	}
	if len(rows) == 0 {
		return nil, errors.New("no CSV output")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"test", "rps", "p50_latency_ms", "p99_latency_ms"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("the CSV header %q has no column %q", strings.Join(rows[0], ","), name)
		}
	}
	var out []result
	for _, row := range rows[1:] {
		if len(row) != len(rows[0]) {
			return nil, fmt.Errorf("CSV row %q has %d fields, the header %d", strings.Join(row, ","), len(row), len(rows[0]))
		}
		res := result{Test: row[col["test"]]}
		for _, f := range []struct {
			name string
			dst  *float64
		}{{"rps", &res.RPS}, {"p50_latency_ms", &res.P50}, {"p99_latency_ms", &res.P99}} {
			v, err := strconv.ParseFloat(row[col[f.name]], 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("CSV row %q: %s %q is not a number >= 0", strings.Join(row, ","), f.name, row[col[f.name]])
			}
			*f.dst = v
		}
		out = append(out, res)
	}
	return out, nil
}
