// Package promquery reads what the cache sidecars measured from Prometheus' HTTP API: a small
// client for instant queries, every PromQL expression cacheqos uses (queries.go, kept in step
// with docs/metrics.md by a test), and Measure, which runs the allocator's queries for one
// cluster and assembles per-tenant, per-node rates, hit ratios, latencies and miss-ratio
// curve points.
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
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxResponseBytes bounds one query response. Series are bounded per tenant partition (see
// docs/metrics.md), so a response this large means a query selected far more than intended.
const maxResponseBytes = 64 << 20

// Client queries one Prometheus server.
type Client struct {
	endpoint *url.URL
	http     *http.Client
}

// New returns a client for the Prometheus server at baseURL (http or https, optionally with a
// path prefix such as a reverse proxy's). httpClient nil means a client with a 30s timeout.
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
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	endpoint := *u
	endpoint.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/query"
	endpoint.RawQuery = ""
	return &Client{endpoint: &endpoint, http: httpClient}, nil
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
	Time   time.Time
}

// Query evaluates expr at time at (the server's current time when at is zero) and returns the
// instant vector (a scalar result is returned as one sample without labels). The expression
// travels in a POST body, so long label matchers fit.
func (c *Client) Query(ctx context.Context, expr string, at time.Time) ([]Sample, error) {
	form := url.Values{"query": {expr}}
	if !at.IsZero() {
		form.Set("time", formatTime(at))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("query %q: reading the response: %w", expr, err)
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("query %q: response larger than %d bytes", expr, maxResponseBytes)
	}
	samples, err := ParseResponse(body)
	if err != nil {
		return nil, fmt.Errorf("query %q (HTTP %d): %w", expr, resp.StatusCode, err)
	}
	return samples, nil
}

func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// apiResponse is the envelope of every Prometheus HTTP API answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorElement struct {
	Metric map[string]string `json:"metric"`
	Value  json.RawMessage   `json:"value"`
}

// ErrServer wraps errors Prometheus itself reported (status "error"): a bad expression, a
// timeout, an overloaded server.
var ErrServer = errors.New("prometheus reported an error")

// ParseResponse decodes the body of an instant query answer into samples. It accepts vector
// and scalar results and reports every other shape, and error answers, as errors.
func ParseResponse(body []byte) ([]Sample, error) {
	var env apiResponse
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("not a Prometheus API response: %w (body starts %q)", err, snippet(body))
	}
	switch env.Status {
	case "success":
	case "error":
		return nil, fmt.Errorf("%w: %s: %s", ErrServer, env.ErrorType, env.Error)
	default:
		return nil, fmt.Errorf("response status %q is neither success nor error", env.Status)
	}
	var data queryData
	if err := json.Unmarshal(env.Data, &data); err != nil {
		return nil, fmt.Errorf("response data: %w", err)
	}
	switch data.ResultType {
	case "vector":
		var elems []vectorElement
		if err := json.Unmarshal(data.Result, &elems); err != nil {
			return nil, fmt.Errorf("vector result: %w", err)
		}
		out := make([]Sample, 0, len(elems))
		for i, e := range elems {
			t, v, err := parseSamplePair(e.Value)
			if err != nil {
				return nil, fmt.Errorf("vector result[%d]: %w", i, err)
			}
			labels := e.Metric
			if labels == nil {
				labels = map[string]string{}
			}
			out = append(out, Sample{Labels: labels, Value: v, Time: t})
		}
		return out, nil
	case "scalar":
		t, v, err := parseSamplePair(data.Result)
		if err != nil {
			return nil, fmt.Errorf("scalar result: %w", err)
		}
		return []Sample{{Labels: map[string]string{}, Value: v, Time: t}}, nil
	default:
		return nil, fmt.Errorf("result type %q is not supported (want vector or scalar)", data.ResultType)
	}
}

// parseSamplePair decodes [<unix seconds>, "<value>"]. Values are strings so that NaN and the
// infinities survive JSON.
func parseSamplePair(raw json.RawMessage) (time.Time, float64, error) {
	var pair []json.RawMessage
	if err := json.Unmarshal(raw, &pair); err != nil {
		return time.Time{}, 0, fmt.Errorf("sample %s: %w", snippet(raw), err)
	}
	if len(pair) != 2 {
		return time.Time{}, 0, fmt.Errorf("sample %s: want [time, value]", snippet(raw))
	}
	var ts float64
	if err := json.Unmarshal(pair[0], &ts); err != nil {
		return time.Time{}, 0, fmt.Errorf("sample time %s: %w", snippet(pair[0]), err)
	}
	if math.IsNaN(ts) || math.IsInf(ts, 0) || math.Abs(ts) > 1e11 {
		return time.Time{}, 0, fmt.Errorf("sample time %v is out of range", ts)
	}
	var s string
	if err := json.Unmarshal(pair[1], &s); err != nil {
		return time.Time{}, 0, fmt.Errorf("sample value %s: want a quoted number: %w", snippet(pair[1]), err)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("sample value %q: %w", s, err)
	}
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9))), v, nil
}

func snippet(b []byte) string {
	const n = 64
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
