package chart

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// promqlWords are PromQL keywords and aggregation operators: never metric names.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// labelListWords are followed by a parenthesized list of label names.
var labelListWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlMetrics returns the metric names an expression selects. It skips strings, label
// matchers ({...}), ranges ([...]), numbers, function and aggregation names, and the label
// lists of by/without/on/ignoring/group_left/group_right; what remains are metric names.
func promqlMetrics(expr string) ([]string, error) {
	var metrics []string
	i := 0
	skipTo := func(open, closing byte) error {
		depth := 0
		for ; i < len(expr); i++ {
			switch expr[i] {
			case '"', '\'', '`':
				if err := skipString(expr, &i); err != nil {
					return err
				}
				i-- // the loop's i++ steps past the closing quote
			case open:
				depth++
			case closing:
				depth--
				if depth == 0 {
					i++
					return nil
				}
			}
		}
		return fmt.Errorf("unbalanced %c in %q", open, expr)
	}
	nextNonSpace := func(from int) byte {
		for j := from; j < len(expr); j++ {
			if expr[j] != ' ' && expr[j] != '\t' && expr[j] != '\n' && expr[j] != '\r' {
				return expr[j]
			}
		}
		return 0
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(expr, &i); err != nil {
				return nil, err
			}
		case c == '{':
			if err := skipTo('{', '}'); err != nil {
				return nil, err
			}
		case c == '[':
			if err := skipTo('[', ']'); err != nil {
				return nil, err
			}
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1])):
			// A number or a duration (5m, 1e3, 0x1f): digits, letters and dots, plus an
			// exponent's sign.
			for i < len(expr) && (isIdentChar(expr[i]) || expr[i] == '.' || ((expr[i] == '+' || expr[i] == '-') && (expr[i-1] == 'e' || expr[i-1] == 'E'))) {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := nextNonSpace(i)
			switch {
			case labelListWords[word] && next == '(':
				for i < len(expr) && expr[i] != '(' {
					i++
				}
				if err := skipTo('(', ')'); err != nil {
					return nil, err
				}
			case promqlWords[strings.ToLower(word)], next == '(':
				// a keyword, or a function call
			default:
				metrics = append(metrics, word)
			}
		default:
			i++
		}
	}
	return metrics, nil
}

// skipString moves *i past the string literal starting there.
func skipString(s string, i *int) error {
	quote := s[*i]
	for j := *i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++
		case s[j] == quote:
			*i = j + 1
			return nil
		}
	}
	return fmt.Errorf("unterminated string in %q", s)
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }

func TestPromqlMetrics(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (tenant, le) (rate(a_bucket{job="x", tenant=~"$t"}[$__rate_interval]))`, []string{"a_bucket"}},
		{`histogram_quantile(0.99, sum(rate(b[5m])) by (le))`, []string{"b"}},
		{`c / on (job) group_left (node) d > 1e3 and e offset 5m`, []string{"c", "d", "e"}},
		{`time() - max by (node) (max_over_time(timestamp(f{a="}"})[1h:1m])) > 300`, []string{"f"}},
		{`count(g == 0) or vector(0)`, []string{"g"}},
		{`absent(up{job="a"} == 1)`, []string{"up"}},
	}
	for _, c := range cases {
		got, err := promqlMetrics(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("metrics of %s: %v, want %v", c.expr, got, c.want)
		}
	}
	for _, bad := range []string{`a{job="x"`, `rate(b[5m)`, `c{job="x}`} {
		if _, err := promqlMetrics(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// metricChecker checks the metrics of expressions against what cacheqos exports, reporting
// each unknown metric once.
type metricChecker struct {
	exported *exportedMetrics
	reported map[string]bool
}

func newMetricChecker(t *testing.T) *metricChecker {
	t.Helper()
	return &metricChecker{exported: newExportedMetrics(t), reported: map[string]bool{}}
}

// check checks that every metric an expression selects is exported and returns the metrics'
// base names (histogram series suffixes stripped).
func (c *metricChecker) check(t *testing.T, q query) []string {
	t.Helper()
	metrics, err := promqlMetrics(q.expr)
	if err != nil {
		t.Errorf("%s: %v", q.where, err)
		return nil
	}
	if len(metrics) == 0 {
		t.Errorf("%s selects no metric: %s", q.where, q.expr)
	}
	var bases []string
	for _, name := range metrics {
		e, err := c.exported.lookup(name)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		bases = append(bases, e.base)
		if e.origin == "" && !c.reported[e.base] {
			c.reported[e.base] = true
			t.Errorf("%s is a metric neither the operator nor the cache sidecar registers, nor one Prometheus makes (first in %s)", name, q.where)
		}
	}
	return bases
}

// metricNameRE is what a metric name looks like in PromQL.
var metricNameRE = regexp.MustCompile(`^[A-Za-z_:][A-Za-z0-9_:]*$`)

// FuzzPromqlMetrics checks that the scanner never panics or loops, and that what it returns
// is always metric-name shaped.
func FuzzPromqlMetrics(f *testing.F) {
	for _, seed := range []string{
		`up`, `sum by (a) (rate(x{b="c"}[5m]))`, `x{a="}"}`, `'a' + "b\"" + ` + "`c`",
		`histogram_quantile(0.9, sum(rate(h_bucket[1m])) by (le)) > 1e-3`, `a offset -5m`,
		`max_over_time(timestamp(g)[1h:1m])`, `x # comment`, `{`, `[`, `"`, `by (`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		metrics, err := promqlMetrics(expr)
		if err != nil {
			return
		}
		for _, m := range metrics {
			if !metricNameRE.MatchString(m) {
				t.Fatalf("promqlMetrics(%q) returned %q", expr, m)
			}
		}
	})
}
