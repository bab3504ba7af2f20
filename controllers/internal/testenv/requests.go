package testenv

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Request is one request the operator sent to the API server.
type Request struct {
	// Method is the HTTP method (GET for reads, watches and discovery; PATCH, PUT, POST,
	// DELETE for writes).
	Method string
	// Path is the URL path, e.g. /api/v1/namespaces/ns/secrets/name or /apis/group/version.
	Path string
	// FieldManager is the request's fieldManager parameter (set on applies).
	FieldManager string
}

// Write reports whether the request writes.
func (r Request) Write() bool { return r.Method != http.MethodGet }

// Requests records every request the operator sends, for tests that count them.
type Requests struct {
	mu  sync.Mutex
	all []Request
}

func (r *Requests) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		r.all = append(r.all, Request{Method: req.Method, Path: req.URL.Path, FieldManager: req.URL.Query().Get("fieldManager")})
		r.mu.Unlock()
		return next.RoundTrip(req)
	})
}

// Mark returns a position; Since(mark) lists the requests sent after it.
func (r *Requests) Mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// Since returns the requests sent after mark that keep passes.
func (r *Requests) Since(mark int, keep func(Request) bool) []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Request
	for _, req := range r.all[mark:] {
		if keep(req) {
			out = append(out, req)
		}
	}
	return out
}

// WritesUnder passes writes whose path starts with prefix.
func WritesUnder(prefix string) func(Request) bool {
	return func(r Request) bool { return r.Write() && strings.HasPrefix(r.Path, prefix) }
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Reconciles is how many reconciles the named controller (e.g. "tenantslo") has run in this
// process, from controller-runtime's reconcile counter.
func Reconciles(t testing.TB, controller string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
