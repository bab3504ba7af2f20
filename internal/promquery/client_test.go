package promquery

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

func TestSamplesOf(t *testing.T) {
	at := model.TimeFromUnixNano(time.Unix(1700000000, 5e8).UnixNano())
	tests := []struct {
		name    string
		value   model.Value
		want    []Sample
		wantErr string
	}{
		{
			name:  "vector",
			value: model.Vector{{Metric: model.Metric{"tenant": "a/b", "node": "n1"}, Value: 12.25, Timestamp: at}},
			want:  []Sample{{Labels: map[string]string{"tenant": "a/b", "node": "n1"}, Value: 12.25, Time: time.Unix(1700000000, 5e8)}},
		},
		{name: "empty vector", value: model.Vector{}, want: []Sample{}},
		{
			name:  "scalar",
			value: &model.Scalar{Value: 3, Timestamp: at},
			want:  []Sample{{Labels: map[string]string{}, Value: 3, Time: time.Unix(1700000000, 5e8)}},
		},
		{
			name:  "special values survive",
			value: model.Vector{{Metric: model.Metric{}, Value: model.SampleValue(math.Inf(1)), Timestamp: at}, {Value: model.SampleValue(math.NaN()), Timestamp: at}},
			want:  []Sample{{Labels: map[string]string{}, Value: math.Inf(1), Time: time.Unix(1700000000, 5e8)}, {Labels: map[string]string{}, Value: math.NaN(), Time: time.Unix(1700000000, 5e8)}},
		},
		{name: "matrix", value: model.Matrix{}, wantErr: `result type "matrix" is not supported`},
		{name: "nothing", value: nil, wantErr: "no result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := samplesOf(tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d samples, want %d", len(got), len(tt.want))
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				sameValue := g.Value == w.Value || (math.IsNaN(g.Value) && math.IsNaN(w.Value))
				if !sameValue || !g.Time.Equal(w.Time) || g.Labels == nil || len(g.Labels) != len(w.Labels) {
					t.Errorf("sample %d = %+v, want %+v", i, g, w)
				}
				for k, v := range w.Labels {
					if g.Labels[k] != v {
						t.Errorf("sample %d label %s = %q, want %q", i, k, g.Labels[k], v)
					}
				}
			}
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "prometheus:9090", "ftp://host", "http://", "http://[::1"} {
		if _, err := New(u, nil); err == nil {
			t.Errorf("New(%q) accepted it", u)
		}
	}
}

// TestQuerySendsFormAndPrefix checks the request the client makes: a POST form to the API
// path below any prefix of the base URL, with the evaluation time in seconds.
func TestQuerySendsFormAndPrefix(t *testing.T) {
	var gotMethod, gotPath, gotQuery, gotTime string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotMethod, gotPath = r.Method, r.URL.Path
		gotQuery, gotTime = r.PostFormValue("query"), r.PostFormValue("time")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/prom/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(context.Background(), `up{job="x"}`, time.UnixMilli(1700000000123)); err != nil {
		t.Fatal(err)
	}
	if gotMethod != http.MethodPost || gotPath != "/prom/api/v1/query" || gotQuery != `up{job="x"}` || gotTime != "1700000000.123" {
		t.Fatalf("request %s %q query %q time %q", gotMethod, gotPath, gotQuery, gotTime)
	}
}

// TestQueryErrors covers answers a real Prometheus does not give on demand (a proxy's 502, a
// non-API body), from a test server; real Prometheus' own errors are in measure_test.go.
func TestQueryErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   []string
		is     error
	}{
		{name: "proxy error", status: http.StatusBadGateway, body: "upstream down", want: []string{"HTTP 502 Bad Gateway", "upstream down"}},
		{name: "unauthorized", status: http.StatusUnauthorized, body: "Unauthorized", want: []string{"HTTP 401"}, is: ErrUnauthorized},
		{name: "forbidden", status: http.StatusForbidden, body: "no access to tenant", want: []string{"HTTP 403", "no access to tenant"}, is: ErrUnauthorized},
		{name: "server error", status: http.StatusBadRequest, body: `{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`, want: []string{"bad_data: parse error at char 3"}, is: ErrServer},
		{name: "not JSON", status: http.StatusOK, body: `<html>login</html>`, want: []string{"bad_response"}},
		{name: "matrix", status: http.StatusOK, body: `{"status":"success","data":{"resultType":"matrix","result":[]}}`, want: []string{`result type "matrix" is not supported`}},
		{name: "value not a number", status: http.StatusOK, body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}`, want: []string{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c, err := New(srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Query(context.Background(), "up", time.Time{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			if tt.is == nil && (errors.Is(err, ErrServer) || errors.Is(err, ErrUnauthorized)) {
				t.Errorf("error %v is marked as a Prometheus answer", err)
			}
		})
	}
}

func TestBoundedBody(t *testing.T) {
	for _, tt := range []struct {
		size    int
		wantErr bool
	}{{size: 9}, {size: 10}, {size: 11, wantErr: true}, {size: 1000, wantErr: true}} {
		b := &boundedBody{ReadCloser: io.NopCloser(strings.NewReader(strings.Repeat("x", tt.size))), limit: 10, left: 11}
		got, err := io.ReadAll(b)
		if (err != nil) != tt.wantErr || len(got) > 11 {
			t.Errorf("%d bytes: read %d, error %v (want error: %v)", tt.size, len(got), err, tt.wantErr)
		}
	}
}

// FuzzQueryResponse feeds arbitrary bodies through the client: an error or samples with label
// maps, never a panic.
func FuzzQueryResponse(f *testing.F) {
	for _, seed := range []string{
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1,"2"]}]}}`,
		`{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}`,
		`{"status":"error","errorType":"bad_data","error":"x"}`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":null,"value":null}]}}`,
		`{"status":"success","data":{"resultType":"string","result":[1,"s"]}}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(body.Load().([]byte))
	}))
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		body.Store(b)
		samples, err := c.Query(context.Background(), "up", time.Time{})
		if err != nil {
			return
		}
		for _, s := range samples {
			if s.Labels == nil {
				t.Fatalf("sample without a label map: %+v", s)
			}
		}
	})
}

func TestLoadHTTPClientErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, config, want string
	}{
		{name: "unknown field", config: "basic_auth:\n  username: a\n  pasword: b\n", want: "field pasword not found"},
		{name: "two auth kinds", config: "basic_auth:\n  username: a\n  password: b\nauthorization:\n  credentials: c\n", want: "at most one of basic_auth, oauth2 & authorization"},
		{name: "not YAML", config: "{", want: "prometheus HTTP client config"},
		{name: "missing CA file", config: "tls_config:\n  ca_file: nowhere.pem\n", want: "nowhere.pem"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strconv.Itoa(i)+".yaml")
			if err := os.WriteFile(path, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadHTTPClient(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := LoadHTTPClient(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Fatalf("error for a missing file = %v, want one naming it", err)
	}
}
