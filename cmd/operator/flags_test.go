package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

func TestParseFlagsRejectsBadPrometheusHTTPConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("basic_auth:\n  user: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{
		{file: bad, want: "field user not found"},
		{file: filepath.Join(dir, "absent.yaml"), want: "absent.yaml"},
	} {
		_, err := parseFlags([]string{"--prometheus-http-config=" + tt.file})
		if err == nil || !strings.Contains(err.Error(), "--prometheus-http-config") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error = %v, want one naming the flag and containing %q", err, tt.want)
		}
	}
}

// TestPrometheusHTTPConfigFlag gives the operator's flag a configuration file with a CA and
// basic auth credentials in files next to it, and queries a real Prometheus that requires
// them with the client the operator's allocation loop gets; without the flag the same query
// is refused.
func TestPrometheusHTTPConfigFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	certs := promtest.NewCerts(t, t.TempDir())
	prom := promtest.StartWeb(t, nil, time.Second, certs.BasicAuthWeb())
	dir := t.TempDir()
	ca, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"ca.pem":   string(ca),
		"password": promtest.Password,
		"http.yaml": "tls_config:\n  ca_file: ca.pem\nbasic_auth:\n  username: " + promtest.User + "\n  password_file: password\n" +
			"http_headers:\n  X-Scope-OrgID:\n    values: [cache]\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "with the flag", args: []string{"--prometheus-url=" + prom.URL, "--prometheus-http-config=" + filepath.Join(dir, "http.yaml")}},
		{name: "without it", args: []string{"--prometheus-url=" + prom.URL}, wantErr: "certificate signed by unknown authority"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			c, err := promquery.New(s.opts.Allocation.DefaultPrometheusURL, s.opts.Allocation.HTTPClient)
			if err != nil {
				t.Fatal(err)
			}
			samples, err := c.Query(context.Background(), "vector(1)", time.Time{})
			if tt.wantErr == "" {
				if err != nil || len(samples) != 1 {
					t.Fatalf("query: %v samples, error %v", samples, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestSidecarDefaultsFlag: the chart's sidecar values reach the operator's options, and a
// misspelt field, a malformed quantity or a reserved label stops the operator at start with
// an error naming the flag.
func TestSidecarDefaultsFlag(t *testing.T) {
	s, err := parseFlags([]string{`--sidecar-defaults={"imagePullSecrets":[{"name":"registry"}],"priorityClassName":"caches","podLabels":{"team":"platform"},"resources":{"requests":{"cpu":"500m","memory":"9Gi"}},"tolerations":[{"key":"dedicated","operator":"Exists"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	d := s.opts.SidecarDefaults
	if len(d.ImagePullSecrets) != 1 || d.ImagePullSecrets[0].Name != "registry" || d.PriorityClassName != "caches" || d.PodLabels["team"] != "platform" ||
		d.Resources.Requests.CPU != "500m" || d.Resources.Requests.Memory.String() != "9Gi" || len(d.Tolerations) != 1 || d.Tolerations[0].Key != "dedicated" {
		t.Errorf("sidecar defaults %+v", d)
	}
	for _, tt := range []struct{ value, want string }{
		{`{"priorityClass":"caches"}`, `unknown field "priorityClass"`},
		{`{"resources":{"requests":{"memory":"1e1.5"}}}`, "quantities must match"},
		{`{"resources":{"limits":{"cpu":"lots"}}}`, `resources.limits.cpu "lots"`},
		{`{"podLabels":{"app.kubernetes.io/name":"x"}}`, "podLabels[app.kubernetes.io/name]: the operator's own label"},
		{`{"podAnnotations":{"cacheqos.io/x":"y"}}`, `podAnnotations key "cacheqos.io/x": the cacheqos.io/ prefix is the operator's own`},
		{`{"imagePullSecrets":[{"name":"Bad_Name"}]}`, `imagePullSecrets[0].name "Bad_Name"`},
		{`{} {}`, "more than one JSON value"},
		{`{"tolerations":[{"key":"a","operator":"Equals"}]}`, `tolerations[0]: operator "Equals"`},
	} {
		_, err := parseFlags([]string{"--sidecar-defaults=" + tt.value})
		if err == nil || !strings.Contains(err.Error(), "--sidecar-defaults") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error = %v, want one naming the flag and containing %q", tt.value, err, tt.want)
		}
	}
}
