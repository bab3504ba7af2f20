package loadgen

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// CSVHeader is the first row of the CSV file. Each later row is one tenant over one interval:
//
//	timestamp        end of the interval, RFC 3339 UTC with milliseconds
//	elapsed_seconds  end of the interval, seconds since the run started
//	interval_seconds length of the interval; the last one ends when the requests in flight
//	                 at the end have been answered, and is shorter when SIGTERM ended the run
//	tenant           tenant ID
//	target_rate      configured accesses per second (0: as fast as possible)
//	connections      connections open at the end of the interval (0 before start, after stop)
//	ops              accesses completed: GETs answered with a value or a miss, write SETs stored
//	ops_per_second   ops / interval_seconds
//	gets, hits, misses  GET requests (any outcome), those that found a value, those that did not
//	hit_ratio        hits / (hits + misses); empty without reads
//	sets             SET requests (fills after a miss and writes; any outcome)
//	throttled        requests the sidecar refused as throttled
//	errors           all failures: auth_errors + connect_errors + reply_errors + io_errors
//	p50_ms, p95_ms, p99_ms, max_ms  latency of the replies (GETs and SETs) in milliseconds;
//	                 empty without replies
//	last_error       the last error of the interval, "<kind>: <message>"; empty if none
var CSVHeader = []string{
	"timestamp", "elapsed_seconds", "interval_seconds", "tenant", "target_rate", "connections",
	"ops", "ops_per_second", "gets", "hits", "misses", "hit_ratio", "sets", "throttled",
	"errors", "auth_errors", "connect_errors", "reply_errors", "io_errors",
	"p50_ms", "p95_ms", "p99_ms", "max_ms", "last_error",
}

// reporter turns the tenants' counters into report lines, CSV rows and the final result. Only
// its own goroutine uses it.
type reporter struct {
	interval time.Duration
	tenants  []*tenantRun
	out      io.Writer
	file     *os.File // nil without a CSV
	csv      *csv.Writer
	csvErr   error

	start, last time.Time
	prev        []counts
	totals      []histogram
	lastErrors  []string
	scratch     histogram
}

func newReporter(s settings, tenants []*tenantRun, out io.Writer) (*reporter, error) {
	r := &reporter{
		interval:   s.interval,
		tenants:    tenants,
		out:        out,
		prev:       make([]counts, len(tenants)),
		totals:     make([]histogram, len(tenants)),
		lastErrors: make([]string, len(tenants)),
	}
	if s.csv != "" {
		f, err := os.Create(s.csv)
		if err != nil {
			return nil, fmt.Errorf("creating the CSV file: %w", err)
		}
		r.file, r.csv = f, csv.NewWriter(f)
		r.writeCSV(CSVHeader)
		r.csv.Flush()
		if r.csvErr = r.csv.Error(); r.csvErr != nil {
			f.Close()
			return nil, fmt.Errorf("writing the CSV file: %w", r.csvErr)
		}
	}
	return r, nil
}

// loop reports every interval until ctx ends. A tick less than a tenth of an interval before
// the end of the run (end; zero if none) is left to the final report, so that the last row is
// not a sliver of an interval.
func (r *reporter) loop(ctx context.Context, start, end time.Time) {
	r.start, r.last = start, start
	ticker := time.NewTicker(r.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			if end.IsZero() || end.Sub(now) >= r.interval/10 {
				r.emit(now)
			}
		}
	}
}

// final reports the rest of the run, prints the summary and closes the CSV file.
func (r *reporter) final() error {
	now := time.Now()
	r.emit(now)
	fmt.Fprintf(r.out, "summary over %.1fs:\n", now.Sub(r.start).Seconds())
	for i, tr := range r.tenants {
		res := r.tenantResult(i)
		fmt.Fprintf(r.out, "  %-28s %d ops (%.1f ops/s)  hit %s  %s  throttled %d  errors %s\n",
			tr.id, res.Ops, float64(res.Ops)/now.Sub(r.start).Seconds(), formatRatio(r.prev[i].hitRatio()),
			formatLatencies(&r.totals[i]), res.Throttled, formatErrors(r.prev[i]))
		if res.LastError != "" {
			fmt.Fprintf(r.out, "  %-28s last error: %s\n", "", res.LastError)
		}
	}
	return r.close()
}

func (r *reporter) close() error {
	if r.file == nil {
		return nil
	}
	r.csv.Flush()
	err := errors.Join(r.csvErr, r.csv.Error(), r.file.Close())
	if err != nil {
		return fmt.Errorf("writing the CSV file: %w", err)
	}
	return nil
}

// emit reports the interval that ends at now.
func (r *reporter) emit(now time.Time) {
	span := now.Sub(r.last).Seconds()
	elapsed := now.Sub(r.start).Seconds()
	for i, tr := range r.tenants {
		cur := tr.stats.snapshot()
		d := cur.minus(r.prev[i])
		r.prev[i] = cur
		tr.stats.latency.take(&r.scratch)
		r.totals[i].add(&r.scratch)
		lastError := tr.stats.takeLastError()
		if lastError != "" {
			r.lastErrors[i] = lastError
		}
		conns := tr.stats.connections.Load()
		opsPerSecond := 0.0
		if span > 0 {
			opsPerSecond = float64(d.ops) / span
		}

		hitRatio, hasReads := d.hitRatio()
		p50, ok := r.scratch.quantile(0.50)
		p95, _ := r.scratch.quantile(0.95)
		p99, _ := r.scratch.quantile(0.99)
		maxLatency, _ := r.scratch.maximum()
		if r.csv != nil {
			ratio := ""
			if hasReads {
				ratio = strconv.FormatFloat(hitRatio, 'f', 4, 64)
			}
			ms := func(d time.Duration) string {
				if !ok {
					return ""
				}
				return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
			}
			u := func(n uint64) string { return strconv.FormatUint(n, 10) }
			r.writeCSV([]string{
				now.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
				strconv.FormatFloat(elapsed, 'f', 3, 64), strconv.FormatFloat(span, 'f', 3, 64),
				tr.id, strconv.FormatFloat(tr.rate, 'f', -1, 64), strconv.FormatInt(conns, 10),
				u(d.ops), strconv.FormatFloat(opsPerSecond, 'f', 1, 64),
				u(d.gets), u(d.hits), u(d.misses), ratio, u(d.sets), u(d.throttled),
				u(d.totalErrors()), u(d.errors[errAuth]), u(d.errors[errConnect]), u(d.errors[errReply]), u(d.errors[errIO]),
				ms(p50), ms(p95), ms(p99), ms(maxLatency), lastError,
			})
		}

		target := "max"
		if tr.rate > 0 {
			target = strconv.FormatFloat(tr.rate, 'f', -1, 64)
		}
		fmt.Fprintf(r.out, "%8.1fs %-28s %9.1f ops/s (target %s)  hit %s  %s  throttled %d  errors %s  conns %d\n",
			elapsed, tr.id, opsPerSecond, target, formatRatio(hitRatio, hasReads), formatLatencies(&r.scratch),
			d.throttled, formatErrors(d), conns)
		if lastError != "" {
			fmt.Fprintf(r.out, "%9s %-28s last error: %s\n", "", "", lastError)
		}
	}
	if r.csv != nil {
		r.csv.Flush() // a row per interval reaches the file even if the process is killed
		if r.csvErr == nil {
			r.csvErr = r.csv.Error()
		}
	}
	r.last = now
}

func (r *reporter) writeCSV(row []string) {
	if r.csvErr == nil {
		r.csvErr = r.csv.Write(row)
	}
}

// result is the run's totals so far.
func (r *reporter) result() Result {
	res := Result{Elapsed: r.last.Sub(r.start)}
	for i := range r.tenants {
		res.Tenants = append(res.Tenants, r.tenantResult(i))
	}
	return res
}

func (r *reporter) tenantResult(i int) TenantResult {
	c, h := r.prev[i], &r.totals[i]
	res := TenantResult{
		ID: r.tenants[i].id, Ops: c.ops, Gets: c.gets, Hits: c.hits, Misses: c.misses, Sets: c.sets, Throttled: c.throttled,
		AuthErrors: c.errors[errAuth], ConnectErrors: c.errors[errConnect], ReplyErrors: c.errors[errReply], IOErrors: c.errors[errIO],
		LastError: r.lastErrors[i],
	}
	res.HitRatio, _ = c.hitRatio()
	res.P50, _ = h.quantile(0.50)
	res.P95, _ = h.quantile(0.95)
	res.P99, _ = h.quantile(0.99)
	res.Max, _ = h.maximum()
	return res
}

func formatRatio(ratio float64, ok bool) string {
	if !ok {
		return "    -"
	}
	return fmt.Sprintf("%5.1f%%", 100*ratio)
}

func formatLatencies(h *histogram) string {
	var b strings.Builder
	for i, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}} {
		if i > 0 {
			b.WriteString("  ")
		}
		b.WriteString(q.name + " ")
		if d, ok := h.quantile(q.q); ok {
			b.WriteString(strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64) + "ms")
		} else {
			b.WriteString("-")
		}
	}
	return b.String()
}

// formatErrors is the error total, with the non-zero kinds.
func formatErrors(c counts) string {
	total := c.totalErrors()
	if total == 0 {
		return "0"
	}
	var kinds []string
	for k, n := range c.errors {
		if n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", errorKind(k), n))
		}
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(kinds, ", "))
}
