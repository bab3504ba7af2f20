// Package scale measures the cacheqos operator at fleet scale: the operator as cmd/operator
// builds it (controllers.Setup), a real kube-apiserver (envtest), and a real Prometheus
// scraping synthetic sidecar exporters. BenchmarkOperator prints its numbers; make
// bench-operator runs it. No test layer of hack/test.sh lists test/scale.
package scale

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// Request is one HTTP request the operator made.
type Request struct {
	Start, End time.Time
	// Verb is the HTTP method, or WATCH for a watch.
	Verb string
	// Resource is the API resource ("tenantslos", "cachenodeplans/status") or, for
	// Prometheus, "prometheus"; Object is namespace/name when the request names one.
	Resource, Object string
	// Manager is the field manager a server-side apply or patch names.
	Manager string
	// Bytes is the length of the request's body (0 without one).
	Bytes int64
}

// Write reports whether the request changes state on the API server.
func (r Request) Write() bool {
	switch r.Verb {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// Recorder is an http.RoundTripper wrapper that records every request passing through it.
type Recorder struct {
	resource func(*http.Request) (resource, object string)

	mu       sync.Mutex
	requests []Request
}

// NewAPIRecorder records Kubernetes API requests, classified by resource.
func NewAPIRecorder() *Recorder { return &Recorder{resource: apiResource} }

// NewPrometheusRecorder records Prometheus queries.
func NewPrometheusRecorder() *Recorder {
	return &Recorder{resource: func(*http.Request) (string, string) { return "prometheus", "" }}
}

// Wrap returns next with the recorder in front.
func (r *Recorder) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		verb := req.Method
		if req.URL.Query().Get("watch") == "true" {
			verb = "WATCH"
		}
		resource, object := r.resource(req)
		r.mu.Lock()
		r.requests = append(r.requests, Request{Start: start, End: time.Now(), Verb: verb, Resource: resource, Object: object,
			Manager: req.URL.Query().Get("fieldManager"), Bytes: max(req.ContentLength, 0)})
		r.mu.Unlock()
		return resp, err
	})
}

// Since returns the requests that started at or after t.
func (r *Recorder) Since(t time.Time) []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Request
	for _, q := range r.requests {
		if !q.Start.Before(t) {
			out = append(out, q)
		}
	}
	return out
}

// LastWrite is when the last write ended (zero without any).
func (r *Recorder) LastWrite() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.requests) - 1; i >= 0; i-- {
		if r.requests[i].Write() {
			return r.requests[i].End
		}
	}
	return time.Time{}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// apiResource reads the resource and object from an API path: /api/v1/namespaces/ns/pods/name,
// /apis/group/version/namespaces/ns/kind/name/status, /apis/group/version/kind/name.
func apiResource(req *http.Request) (resource, object string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return req.URL.Path, ""
	}
	namespace := ""
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 {
		// Discovery.
		return req.URL.Path, ""
	}
	resource = parts[0]
	if len(parts) >= 2 {
		object = namespace + "/" + parts[1]
	}
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	return resource, object
}
