package chart

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/cacheqos/cacheqos/cache-sidecar/agent"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"

	// The operator's packages, as cmd/operator links them: their init functions register the
	// operator's metrics (controllers/internal/opmetrics) and controller-runtime's in
	// controller-runtime's registry, which the operator's /metrics serves.
	_ "github.com/cacheqos/cacheqos/controllers"
)

// Origins of exported metrics.
const (
	originOperator   = "operator"
	originSidecar    = "cache sidecar"
	originPrometheus = "Prometheus"
)

// prometheusMetrics are series Prometheus itself makes for every target.
var prometheusMetrics = []string{"up"}

// newSidecarRegistry registers the cache sidecar's collectors the way cmd/cache-sidecar does
// (the proxy's and the agent's, in one registry) and returns that registry. Nothing listens
// and no engine starts: the agent's engine manager adopts the engines of an empty state
// directory, that is none. stop closes them. The Go runtime and process collectors the binary
// adds are no cacheqos metrics and are left out.
func newSidecarRegistry() (reg *prometheus.Registry, stop func(), err error) {
	reg = prometheus.NewRegistry()
	px, err := proxy.New(proxy.Options{Protocol: proxy.Redis, Registry: reg, NodeName: "chart-test"})
	if err != nil {
		return nil, nil, err
	}
	// The engine manager's state root must be short enough for unix socket paths.
	root, err := os.MkdirTemp("", "cqs-")
	if err != nil {
		px.Close()
		return nil, nil, err
	}
	ag, err := agent.New(context.Background(), agent.Config{
		NodeName: "chart-test",
		Engines:  engine.Config{Engine: engine.Redis, Root: root},
		Proxy:    px,
		Registry: reg,
	})
	if err != nil {
		px.Close()
		os.RemoveAll(root)
		return nil, nil, err
	}
	return reg, func() {
		ag.Close()
		px.Close()
		os.RemoveAll(root)
	}, nil
}

// probeLabel is a label name no cacheqos metric has.
const probeLabel = "test_chart_probe"

// probe is a collector describing one metric it never collects.
type probe struct{ desc *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// registered reports whether a registry holds a collector that describes a metric named
// name. A registry only serves the series of metrics its collectors describe, but gathers
// nothing of a metric without series yet (a tenant gauge before the first tenant), so the
// registry is asked directly: it refuses a descriptor of a name it holds with other label
// names or another help string (prometheus.Desc's consistency rule), and the probe's label and
// help are no real metric's. A probe the registry accepts is unregistered at once; the
// registry still remembers the probe's labels for that name, so nothing can register a real
// metric of that name in it afterwards — harmless here, where every collector is registered
// before the first probe.
func registered(reg prometheus.Registerer, name string) (bool, error) {
	p := probe{prometheus.NewDesc(name, "test/chart probe of the metric name "+name, []string{probeLabel}, nil)}
	if err := prometheus.NewRegistry().Register(p); err != nil {
		return false, fmt.Errorf("%q is no valid metric name: %w", name, err)
	}
	if err := reg.Register(p); err != nil {
		return true, nil
	}
	if !reg.Unregister(p) {
		return false, fmt.Errorf("the probe of %s could not be unregistered", name)
	}
	return false, nil
}

// exportedMetric is what lookup found for a name a query selects.
type exportedMetric struct {
	// base is the name without a histogram's series suffix (_bucket, _sum, _count).
	base string
	// origin is who exports it (origin*), empty when nobody does.
	origin string
}

// exportedMetrics says which metric names cacheqos exports, by asking the registries the
// operator and the sidecar serve.
type exportedMetrics struct {
	sources []metricSource
	// histograms are the metrics docs/metrics.md documents as histograms: a registry does not
	// tell a metric's type, and only a histogram's name takes the series suffixes.
	histograms map[string]bool
	cache      map[string]exportedMetric
}

type metricSource struct {
	origin string
	reg    prometheus.Registerer
}

func newExportedMetrics(t *testing.T) *exportedMetrics {
	t.Helper()
	e := &exportedMetrics{
		sources:    []metricSource{{originOperator, crmetrics.Registry}, {originSidecar, fixture.sidecarRegistry}},
		histograms: map[string]bool{},
		cache:      map[string]exportedMetric{},
	}
	for _, row := range metricsTableRow.FindAllStringSubmatch(string(readRepoFile(t, "docs/metrics.md")), -1) {
		if row[2] == "histogram" {
			e.histograms[row[1]] = true
		}
	}
	return e
}

// originOf says who registers a metric named exactly name ("" for nobody).
func (e *exportedMetrics) originOf(name string) (string, error) {
	for _, p := range prometheusMetrics {
		if p == name {
			return originPrometheus, nil
		}
	}
	for _, s := range e.sources {
		ok, err := registered(s.reg, name)
		if err != nil || ok {
			return s.origin, err
		}
	}
	return "", nil
}

// lookup finds the metric a selected series name belongs to: the name itself, or the
// registered histogram whose series it is.
func (e *exportedMetrics) lookup(name string) (exportedMetric, error) {
	if m, ok := e.cache[name]; ok {
		return m, nil
	}
	origin, err := e.originOf(name)
	if err != nil {
		return exportedMetric{}, err
	}
	m := exportedMetric{base: name, origin: origin}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && origin == "" && e.histograms[base] {
			if o, err := e.originOf(base); err == nil && o != "" {
				m = exportedMetric{base: base, origin: o}
			}
		}
	}
	e.cache[name] = m
	return m, nil
}

func TestRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "a_gauge", Help: "h"}, []string{"tenant"}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "h"}))
	for name, want := range map[string]bool{"a_gauge": true, "a_total": true, "a": false, "b_gauge": false} {
		got, err := registered(reg, name)
		if err != nil || got != want {
			t.Errorf("registered(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	// An accepted probe does not stay registered, or probing its name again would find it.
	if got, err := registered(reg, "b_gauge"); got || err != nil {
		t.Errorf("registered(b_gauge) after a probe = %v, %v; want false", got, err)
	}
	if _, err := registered(reg, "not-a-name"); err == nil {
		t.Error("registered accepted an invalid name")
	}
}

// TestExportedMetricsComeFromTheCode checks the registries the checks ask: both hold the
// metrics the allocator's queries and the dashboard's headline panels need, and nobody
// exports what no code defines.
func TestExportedMetricsComeFromTheCode(t *testing.T) {
	e := newExportedMetrics(t)
	for name, want := range map[string]string{
		"cacheqos_sidecar_hits_total":                        originSidecar,
		"cacheqos_sidecar_partition_used_bytes":              originSidecar, // the agent's
		"cacheqos_sidecar_request_duration_seconds_bucket":   originSidecar,
		"cacheqos_operator_solver_status":                    originOperator,
		"cacheqos_operator_tenant_objective_target":          originOperator,
		"cacheqos_operator_plan_duration_seconds_count":      originOperator,
		"controller_runtime_reconcile_total":                 originOperator,
		"up":                                                 originPrometheus,
		"cacheqos_sidecar_no_such_metric":                    "",
		"cacheqos_operator_tenant_objective_target_bucket":   "",
		"cacheqos_operator_node_memory_capacity_bytes_total": "",
	} {
		m, err := e.lookup(name)
		if err != nil || m.origin != want {
			t.Errorf("lookup(%s) = %+v, %v; want origin %q", name, m, err, want)
		}
	}
}

// metricsTableRow matches a row of docs/metrics.md: | `name` | type | labels | meaning |
var metricsTableRow = regexp.MustCompile("(?m)^\\| `(cacheqos_[a-z0-9_]+)` \\| ([a-z]+) \\|")

// TestMetricsDocMatchesTheCode checks docs/metrics.md against the registries: every metric it
// lists is registered by the binary its name says (cacheqos_operator_* by the operator,
// cacheqos_sidecar_* by the sidecar), and every cacheqos metric the code registers is listed.
func TestMetricsDocMatchesTheCode(t *testing.T) {
	e := newExportedMetrics(t)
	documented := map[string]bool{}
	for _, row := range metricsTableRow.FindAllStringSubmatch(string(readRepoFile(t, "docs/metrics.md")), -1) {
		name := row[1]
		documented[name] = true
		want := originOperator
		if strings.HasPrefix(name, "cacheqos_sidecar_") {
			want = originSidecar
		}
		if origin, err := e.originOf(name); err != nil || origin != want {
			t.Errorf("docs/metrics.md lists %s, which the %s does not register (registered by %q, %v)", name, want, origin, err)
		}
	}
	if len(documented) < 20 {
		t.Fatalf("docs/metrics.md lists %d metrics; its table rows no longer match", len(documented))
	}
	candidates := map[string]string{}
	for _, dir := range []string{"controllers", "internal", "cache-sidecar", "cmd"} {
		for _, lits := range goStringLiterals(t, dir) {
			for _, name := range metricNameCandidates(lits.values) {
				candidates[name] = lits.file
			}
		}
	}
	found := 0
	for _, name := range sortedKeys(candidates) {
		origin, err := e.originOf(name)
		if err != nil || origin == "" {
			continue
		}
		found++
		if !documented[name] {
			t.Errorf("the %s registers %s (named in %s), which docs/metrics.md does not list", origin, name, candidates[name])
		}
	}
	if found < len(documented) {
		t.Errorf("found %d registered metric names in the Go source, fewer than docs/metrics.md lists (%d): the source spells them in a way metricNameCandidates misses", found, len(documented))
	}
}

// cacheqosName is what a cacheqos metric name, or the part after a prefix, looks like.
var (
	cacheqosName = regexp.MustCompile(`^cacheqos_[a-z0-9_]*[a-z0-9]$`)
	nameSuffix   = regexp.MustCompile(`^[a-z][a-z0-9_]*[a-z0-9]$`)
)

// metricNameCandidates returns the cacheqos metric names one file's string literals may
// spell: each literal that is one, and each prefix literal ending in "_" joined with another
// literal (a helper that prepends the namespace, as prometheus.BuildFQName or "ns_"+name do).
func metricNameCandidates(literals []string) []string {
	var out []string
	for _, s := range literals {
		if cacheqosName.MatchString(s) {
			out = append(out, s)
		}
	}
	for _, prefix := range literals {
		if !strings.HasPrefix(prefix, "cacheqos_") || !strings.HasSuffix(prefix, "_") {
			continue
		}
		for _, s := range literals {
			if nameSuffix.MatchString(s) {
				out = append(out, prefix+s)
			}
		}
	}
	return out
}

func TestMetricNameCandidates(t *testing.T) {
	got := metricNameCandidates([]string{"cacheqos_sidecar_plan_generation", "cacheqos_proxy_", "hits_total", "tenant", "Hits.", "x_"})
	want := []string{"cacheqos_sidecar_plan_generation", "cacheqos_proxy_cacheqos_sidecar_plan_generation", "cacheqos_proxy_hits_total", "cacheqos_proxy_tenant"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("candidates %v, want %v", got, want)
	}
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
