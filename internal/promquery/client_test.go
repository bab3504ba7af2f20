package promquery

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseResponse(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []Sample
		wantErr string
	}{
		{
			name: "vector",
			body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"tenant":"a/b","node":"n1"},"value":[1700000000.5,"12.25"]}]}}`,
			want: []Sample{{Labels: map[string]string{"tenant": "a/b", "node": "n1"}, Value: 12.25, Time: time.Unix(1700000000, 5e8)}},
		},
		{
			name: "empty vector",
			body: `{"status":"success","data":{"resultType":"vector","result":[]}}`,
			want: []Sample{},
		},
		{
			name: "scalar",
			body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}}`,
			want: []Sample{{Labels: map[string]string{}, Value: 3, Time: time.Unix(1700000000, 0)}},
		},
		{
			name: "special values survive",
			body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"+Inf"]},{"metric":{},"value":[1,"NaN"]}]}}`,
			want: []Sample{{Labels: map[string]string{}, Value: math.Inf(1), Time: time.Unix(1, 0)}, {Labels: map[string]string{}, Value: math.NaN(), Time: time.Unix(1, 0)}},
		},
		{
			name:    "server error",
			body:    `{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`,
			wantErr: "bad_data: parse error at char 3",
		},
		{name: "not JSON", body: `<html>502 Bad Gateway</html>`, wantErr: "not a Prometheus API response"},
		{name: "unknown status", body: `{"status":"maybe"}`, wantErr: `status "maybe"`},
		{name: "matrix", body: `{"status":"success","data":{"resultType":"matrix","result":[]}}`, wantErr: `result type "matrix" is not supported`},
		{name: "value not a string", body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`, wantErr: "want a quoted number"},
		{name: "value not a number", body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}`, wantErr: `sample value "x"`},
		{name: "pair too short", body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}`, wantErr: "want [time, value]"},
		{name: "time out of range", body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1e300,"1"]}]}}`, wantErr: "out of range"},
		{name: "data not an object", body: `{"status":"success","data":7}`, wantErr: "response data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseResponse([]byte(tt.body))
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
				if !sameValue || !g.Time.Equal(w.Time) || len(g.Labels) != len(w.Labels) {
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

func TestServerErrorIsMarked(t *testing.T) {
	_, err := ParseResponse([]byte(`{"status":"error","errorType":"timeout","error":"query timed out"}`))
	if !errors.Is(err, ErrServer) {
		t.Fatalf("error %v does not wrap ErrServer", err)
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
	var gotPath, gotQuery, gotTime string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath = r.URL.Path
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
	if gotPath != "/prom/api/v1/query" || gotQuery != `up{job="x"}` || gotTime != "1700000000.123" {
		t.Fatalf("request path %q query %q time %q", gotPath, gotQuery, gotTime)
	}
}

func TestQueryReportsHTTPStatusWithBadBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("upstream down"))
	}))
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Query(context.Background(), "up", time.Time{})
	if err == nil || !strings.Contains(err.Error(), "HTTP 502") || !strings.Contains(err.Error(), "upstream down") {
		t.Fatalf("error = %v, want the status and the body", err)
	}
}

func FuzzParseResponse(f *testing.F) {
	for _, seed := range []string{
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1,"2"]}]}}`,
		`{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}`,
		`{"status":"error","errorType":"bad_data","error":"x"}`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":null,"value":null}]}}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		samples, err := ParseResponse(body)
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
