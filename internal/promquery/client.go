// Package promquery reads what the cache sidecars measured from Prometheus' HTTP API: instant
// queries through client_golang's API client with prometheus/common's HTTP client
// configuration (TLS, basic auth, bearer tokens, custom headers), every PromQL expression
// cacheqos uses (queries.go, kept in step with docs/metrics.md by a test), and Measure, which
// runs the allocator's queries for one cluster and assembles per-tenant, per-node rates, hit
// ratios, latencies and miss-ratio curve points.
//
// The package has no Kubernetes imports: the operator's allocation loop turns Measurements
// into a planning snapshot.
package promquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
)

// maxResponseBytes bounds one query response. Series are bounded per tenant partition (see
// docs/metrics.md), so a response this large means a query selected far more than intended.
const maxResponseBytes = 64 << 20

// DefaultTimeout bounds one query when the caller's HTTP client sets no timeout.
const DefaultTimeout = 30 * time.Second

// Client queries one Prometheus server.
type Client struct {
	address string
	api     promv1.API
}

// New returns a client for the Prometheus server at baseURL (http or https, optionally with a
// path prefix such as a reverse proxy's). httpClient carries the credentials (see
// NewHTTPClient); nil means a client without credentials and a DefaultTimeout timeout.
func New(baseURL string, httpClient *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("prometheus URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("prometheus URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("prometheus URL %q: no host", baseURL)
	}
	if httpClient == nil {
		httpClient = &http.Client{Timeout: DefaultTimeout}
	}
	bounded := *httpClient
	bounded.Transport = boundedTransport{next: httpClient.Transport, limit: maxResponseBytes}
	c, err := api.NewClient(api.Config{Address: baseURL, Client: &bounded})
	if err != nil {
		return nil, fmt.Errorf("prometheus URL %q: %w", baseURL, err)
	}
	return &Client{address: u.Redacted(), api: promv1.NewAPI(statusClient{c})}, nil
}

// LoadHTTPClient builds an HTTP client from a file in prometheus/common's HTTP client
// configuration format (the format of a Prometheus scrape config's authorization, basic_auth,
// oauth2, tls_config, proxy_url and http_headers). Relative file paths in it are relative to
// the file's directory; credential files are read on every request, so rotated tokens apply
// without a restart.
func LoadHTTPClient(path string) (*http.Client, error) {
	// Not config.LoadHTTPConfigFile: in the prometheus/common this module uses, it resolves
	// relative paths against the parent of the file's directory.
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("prometheus HTTP client config: %w", err)
	}
	cfg, err := config.LoadHTTPConfig(string(content))
	if err != nil {
		return nil, fmt.Errorf("prometheus HTTP client config %s: %w", path, err)
	}
	cfg.SetDirectory(filepath.Dir(path))
	return NewHTTPClient(*cfg)
}

// NewHTTPClient builds an HTTP client for Prometheus from a prometheus/common HTTP client
// configuration, with a DefaultTimeout timeout.
func NewHTTPClient(cfg config.HTTPClientConfig) (*http.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("prometheus HTTP client config: %w", err)
	}
	c, err := config.NewClientFromConfig(cfg, "cacheqos")
	if err != nil {
		return nil, fmt.Errorf("prometheus HTTP client config: %w", err)
	}
	c.Timeout = DefaultTimeout
	return c, nil
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
	Time   time.Time
}

// ErrServer wraps errors Prometheus itself reported (status "error"): a bad expression, a
// timeout, an overloaded server.
var ErrServer = errors.New("prometheus reported an error")

// ErrUnauthorized wraps answers 401 and 403: missing or wrong credentials.
var ErrUnauthorized = errors.New("prometheus refused the credentials")

// Query evaluates expr at time at (the server's current time when at is zero) and returns the
// instant vector (a scalar result is returned as one sample without labels). The expression
// travels in a POST body, so long label matchers fit.
func (c *Client) Query(ctx context.Context, expr string, at time.Time) ([]Sample, error) {
	// Warnings (a partial answer from Thanos, say) are dropped: the samples that did arrive
	// are still the measurement, and a missing node shows up as a stale one.
	v, _, err := c.api.Query(ctx, expr, at)
	if err != nil {
		var apiErr *promv1.Error
		if errors.As(err, &apiErr) && apiErr.Type != promv1.ErrBadResponse {
			return nil, fmt.Errorf("query %q at %s: %w: %s: %s", expr, c.address, ErrServer, apiErr.Type, apiErr.Msg)
		}
		return nil, fmt.Errorf("query %q at %s: %w", expr, c.address, err)
	}
	samples, err := samplesOf(v)
	if err != nil {
		return nil, fmt.Errorf("query %q at %s: %w", expr, c.address, err)
	}
	return samples, nil
}

// samplesOf converts an instant query's result: vectors and scalars; every other shape is an
// error.
func samplesOf(v model.Value) ([]Sample, error) {
	switch r := v.(type) {
	case model.Vector:
		out := make([]Sample, 0, len(r))
		for _, s := range r {
			labels := make(map[string]string, len(s.Metric))
			for k, l := range s.Metric {
				labels[string(k)] = string(l)
			}
			out = append(out, Sample{Labels: labels, Value: float64(s.Value), Time: s.Timestamp.Time()})
		}
		return out, nil
	case *model.Scalar:
		return []Sample{{Labels: map[string]string{}, Value: float64(r.Value), Time: r.Timestamp.Time()}}, nil
	case nil:
		return nil, errors.New("the response has no result")
	default:
		return nil, fmt.Errorf("result type %q is not supported (want vector or scalar)", v.Type())
	}
}

// statusClient turns HTTP statuses that carry no Prometheus API answer into errors that name
// the status and quote the body (client_golang's keep the body out of the message), and marks
// 401 and 403 as ErrUnauthorized.
type statusClient struct{ api.Client }

func (c statusClient) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := c.Client.Do(ctx, req)
	if err != nil || resp.StatusCode/100 == 2 {
		return resp, body, err
	}
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusServiceUnavailable:
		// Prometheus answers a bad or failed query with these and a JSON error body; other
		// bodies come from something else (plain HTTP sent to an HTTPS port, say).
		if json.Valid(body) {
			return resp, body, nil
		}
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		// client_golang retries the POST as a GET.
		return resp, body, nil
	case http.StatusUnauthorized, http.StatusForbidden:
		return resp, body, fmt.Errorf("%w: HTTP %s: %s", ErrUnauthorized, resp.Status, snippet(body))
	}
	return resp, body, fmt.Errorf("HTTP %s: %s", resp.Status, snippet(body))
}

// boundedTransport fails a response body longer than limit bytes.
type boundedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, limit: t.limit, left: t.limit + 1}
	return resp, nil
}

// boundedBody reads at most one byte more than limit, and fails on that byte.
type boundedBody struct {
	io.ReadCloser
	limit, left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, fmt.Errorf("response larger than %d bytes", b.limit)
	}
	return n, err
}

func snippet(b []byte) string {
	const n = 256
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
