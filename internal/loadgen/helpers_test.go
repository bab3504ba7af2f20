package loadgen

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// testIOTimeout bounds the tests' own requests to the engines.
const testIOTimeout = 10 * time.Second

// freePort returns a loopback TCP port nobody listens on right now.
func freePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// startRedisTCP starts redis-server on a loopback port (and a unix socket for the test's own
// requests) and returns the TCP address and the socket.
func startRedisTCP(tb testing.TB, extra ...string) (addr, sock string) {
	tb.Helper()
	port := freePort(tb)
	sock = enginetest.StartRedis(tb, append([]string{"--port", port, "--bind", "127.0.0.1"}, extra...)...)
	return net.JoinHostPort("127.0.0.1", port), sock
}

// redisCommand sends one command on a new connection to sock and returns the decoded reply's
// payload (bulk or simple string, or error text).
func redisCommand(t *testing.T, sock string, args ...string) string {
	t.Helper()
	nc := enginetest.Dial(t, sock)
	nc.SetDeadline(time.Now().Add(testIOTimeout))
	if _, err := nc.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
		t.Fatal(err)
	}
	r, err := resp.NewReplyReader(bufio.NewReader(nc), resp.ReplyLimits{}).ReadReply()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	v, err := r.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return string(v.Str)
}

// redisInfo returns the fields of an INFO section.
func redisInfo(t *testing.T, sock, section string) map[string]string {
	t.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(redisCommand(t, sock, "INFO", section), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// redisCalls returns how often a command was called (INFO commandstats).
func redisCalls(t *testing.T, sock, command string) uint64 {
	t.Helper()
	stat := redisInfo(t, sock, "commandstats")["cmdstat_"+command]
	for _, field := range strings.Split(stat, ",") {
		if v, ok := strings.CutPrefix(field, "calls="); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("cmdstat_%s %q", command, stat)
			}
			return n
		}
	}
	return 0
}

// memcachedStats returns memcached's general statistics.
func memcachedStats(t *testing.T, sock string) map[string]string {
	t.Helper()
	nc := enginetest.Dial(t, sock)
	nc.SetDeadline(time.Now().Add(testIOTimeout))
	if _, err := nc.Write([]byte("stats\r\n")); err != nil {
		t.Fatal(err)
	}
	r, err := memcache.NewResponseReader(bufio.NewReader(nc), memcache.ResponseLimits{}).ReadResponse(memcache.Expect{Command: memcache.CmdStats})
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]string{}
	for _, s := range r.Stats {
		stats[string(s.Name)] = string(s.Value)
	}
	return stats
}

func statUint(t *testing.T, stats map[string]string, name string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(stats[name], 10, 64)
	if err != nil {
		t.Fatalf("stat %s = %q", name, stats[name])
	}
	return n
}

// runLoad runs cfg with a fresh registry and a CSV file, and returns the result, the CSV rows
// and the metrics after the run.
func runLoad(t *testing.T, ctx context.Context, cfg Config) (Result, []map[string]string, map[string]float64) {
	t.Helper()
	if cfg.CSV == "" {
		cfg.CSV = filepath.Join(t.TempDir(), "loadgen.csv")
	}
	registry := prometheus.NewRegistry()
	var report strings.Builder
	res, err := Run(ctx, cfg, Env{Report: &report, Registerer: registry})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", report.String())
	return res, readCSV(t, cfg.CSV), gather(t, registry)
}

// readCSV returns the rows of a CSV file as maps from the header's columns, after checking the
// header.
func readCSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) == 0 || strings.Join(records[0], ",") != strings.Join(CSVHeader, ",") {
		t.Fatalf("CSV header %v, want %v", records, CSVHeader)
	}
	var rows []map[string]string
	for _, rec := range records[1:] {
		row := map[string]string{}
		for i, col := range CSVHeader {
			row[col] = rec[i]
		}
		rows = append(rows, row)
	}
	return rows
}

// tenantRows returns the rows of one tenant.
func tenantRows(rows []map[string]string, tenant string) []map[string]string {
	var out []map[string]string
	for _, r := range rows {
		if r["tenant"] == tenant {
			out = append(out, r)
		}
	}
	return out
}

// sumColumn adds up a numeric column.
func sumColumn(t *testing.T, rows []map[string]string, col string) uint64 {
	t.Helper()
	var sum uint64
	for _, r := range rows {
		n, err := strconv.ParseUint(r[col], 10, 64)
		if err != nil {
			t.Fatalf("column %s: %q", col, r[col])
		}
		sum += n
	}
	return sum
}

func floatColumn(t *testing.T, row map[string]string, col string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(row[col], 64)
	if err != nil {
		t.Fatalf("column %s: %q in %v", col, row[col], row)
	}
	return v
}

// gather returns every sample as `name{label="value",...}` → value; histograms give their
// _count and _sum.
func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			id := "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()+id] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()+id] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"+id] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+id] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// within reports whether got is within frac of want.
func within(got, want, frac float64) bool {
	return got >= want*(1-frac) && got <= want*(1+frac)
}

func dur(d time.Duration) Duration { return Duration(d) }
