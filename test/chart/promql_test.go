package chart

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
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

// exportedMetrics are the metrics cacheqos exports, with where each is defined.
type exportedMetrics struct {
	names      map[string]string // name -> origin
	histograms map[string]bool
}

// Origins of exported metrics.
const (
	originPrometheus = "Prometheus"
	originSidecar    = "docs/metrics.md (sidecar)"
	originOperator   = "docs/metrics.md (operator)"
)

// prometheusMetrics are series Prometheus itself makes for every target.
var prometheusMetrics = []string{"up"}

// metricsTableRow matches a row of docs/metrics.md: | `name` | type | labels | meaning |
var metricsTableRow = regexp.MustCompile("(?m)^\\| `(cacheqos_[a-z0-9_]+)` \\| ([a-z]+) \\|")

// operatorMetricName matches the operator's metric names in its Go source.
var operatorMetricName = regexp.MustCompile(`^cacheqos_operator_[a-z0-9_]+$`)

// loadExportedMetrics gathers the metrics docs/metrics.md lists (the sidecar's must also be
// defined in the sidecar's source: TestQueriedSidecarMetricsAreDefined) and the operator's
// metric names in the string literals of its Go source (controllers/ and the internal
// packages it takes names from).
func loadExportedMetrics(t *testing.T) exportedMetrics {
	t.Helper()
	m := exportedMetrics{names: map[string]string{}, histograms: map[string]bool{}}
	for _, name := range prometheusMetrics {
		m.names[name] = originPrometheus
	}
	for _, row := range metricsTableRow.FindAllStringSubmatch(string(readRepoFile(t, "docs/metrics.md")), -1) {
		m.names[row[1]] = originOperator
		if strings.HasPrefix(row[1], "cacheqos_sidecar_") {
			m.names[row[1]] = originSidecar
		}
		if row[2] == "histogram" {
			m.histograms[row[1]] = true
		}
	}
	operatorDirs := []string{"controllers", "internal", "cmd/operator"}
	for _, dir := range operatorDirs {
		for _, lit := range goStringLiterals(t, dir) {
			for _, s := range lit.values {
				if operatorMetricName.MatchString(s) {
					m.names[s] = lit.file
				}
			}
		}
	}
	for name := range goHistogramNames(t, operatorDirs...) {
		m.histograms[name] = true
	}
	return m
}

// goHistogramNames returns the names of the histograms the Go source under the folders
// defines: the Name of every prometheus.HistogramOpts, a string literal or a string constant
// declared anywhere in those folders.
func goHistogramNames(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	constants := map[string]string{}
	var nameExprs []ast.Expr
	for _, dir := range dirs {
		walkGoFiles(t, dir, func(_ string, f *ast.File) {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, ident := range n.Names {
						if i < len(n.Values) {
							if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								if s, err := strconv.Unquote(lit.Value); err == nil {
									constants[ident.Name] = s
								}
							}
						}
					}
				case *ast.CompositeLit:
					if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "HistogramOpts" {
						for _, elt := range n.Elts {
							if kv, ok := elt.(*ast.KeyValueExpr); ok && fmt.Sprint(kv.Key) == "Name" {
								nameExprs = append(nameExprs, kv.Value)
							}
						}
					}
				}
				return true
			})
		})
	}
	names := map[string]bool{}
	for _, e := range nameExprs {
		switch e := e.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(e.Value); err == nil {
				names[s] = true
			}
		case *ast.Ident:
			names[constants[e.Name]] = true
		case *ast.SelectorExpr:
			names[constants[e.Sel.Name]] = true
		}
	}
	delete(names, "")
	return names
}

// base strips a histogram's series suffix.
func (m exportedMetrics) base(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suffix); ok && m.histograms[b] {
			return b
		}
	}
	return name
}

// check says why name is not a metric cacheqos exports ("" when it is).
func (m exportedMetrics) check(name string) string {
	if _, ok := m.names[m.base(name)]; ok {
		return ""
	}
	return fmt.Sprintf("%s is neither in docs/metrics.md nor an operator metric (cacheqos_operator_* in the operator's source)", name)
}

// fileLiterals are the string literals of one Go file.
type fileLiterals struct {
	file   string
	values []string
}

// goStringLiterals returns the string literals of the non-test Go files under a repository
// folder, file by file.
func goStringLiterals(t *testing.T, dir string) []fileLiterals {
	t.Helper()
	var out []fileLiterals
	walkGoFiles(t, dir, func(file string, f *ast.File) {
		lits := fileLiterals{file: file}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					lits.values = append(lits.values, s)
				}
			}
			return true
		})
		out = append(out, lits)
	})
	return out
}

// walkGoFiles parses every non-test Go file under a repository folder (none when the folder
// does not exist) and calls fn with its repository path.
func walkGoFiles(t *testing.T, dir string, fn func(file string, f *ast.File)) {
	t.Helper()
	root := filepath.Join(fixture.repo, filepath.FromSlash(dir))
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(fixture.repo, path)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), f)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// definedInSidecarSource reports whether the sidecar's Go source spells the metric name.
func definedInSidecarSource(t *testing.T, name string) bool {
	t.Helper()
	for _, dir := range []string{"cache-sidecar", "cmd/cache-sidecar"} {
		for _, lits := range goStringLiterals(t, dir) {
			if spells(lits.values, name) {
				return true
			}
		}
	}
	return false
}

// spells reports whether one file's string literals spell name: as one literal, or as a
// prefix literal ending in "_" and the rest as another literal (a helper that prepends the
// namespace, as prometheus.BuildFQName or "ns_"+name do).
func spells(literals []string, name string) bool {
	set := map[string]bool{}
	for _, s := range literals {
		set[s] = true
	}
	if set[name] {
		return true
	}
	for s := range set {
		if strings.HasSuffix(s, "_") && strings.HasPrefix(name, s) && set[strings.TrimPrefix(name, s)] {
			return true
		}
	}
	return false
}

func TestSpells(t *testing.T) {
	literals := []string{"cacheqos_sidecar_plan_generation", "cacheqos_proxy_", "hits_total", "tenant"}
	for name, want := range map[string]bool{
		"cacheqos_sidecar_plan_generation": true,
		"cacheqos_proxy_hits_total":        true,
		"cacheqos_sidecar_hits_total":      false,
		"cacheqos_proxy_misses_total":      false,
	} {
		if got := spells(literals, name); got != want {
			t.Errorf("spells(%q) = %v, want %v", name, got, want)
		}
	}
}

// metricChecker checks the metrics of expressions against what cacheqos exports, reporting
// each unknown metric once.
type metricChecker struct {
	exported exportedMetrics
	reported map[string]bool
}

func newMetricChecker(t *testing.T) *metricChecker {
	t.Helper()
	return &metricChecker{exported: loadExportedMetrics(t), reported: map[string]bool{}}
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
		base := c.exported.base(name)
		bases = append(bases, base)
		if why := c.exported.check(name); why != "" && !c.reported[base] {
			c.reported[base] = true
			t.Errorf("%s (first in %s)", why, q.where)
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
