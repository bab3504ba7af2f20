package chart

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// prometheusAuthValues configure basic auth with a password file and a CA from the Secret
// prom-creds, a tenant header, and the projected ServiceAccount token.
var prometheusAuthValues = values{
	"operator.prometheusAuth": `{
		"httpConfig": {
			"basic_auth": {"username": "` + promtest.User + `", "password_file": "password"},
			"tls_config": {"ca_file": "ca.crt"},
			"http_headers": {"X-Scope-OrgID": {"values": ["team-a"]}}
		},
		"secretName": "prom-creds",
		"serviceAccountToken": {"enabled": true, "audience": "prometheus", "expirationSeconds": 3600}
	}`,
}

// prometheusAuthVolume is what the chart gives the operator for Prometheus' credentials: the
// --prometheus-http-config file, the directory it is mounted in, the Secrets projected there
// and the token's projection.
type prometheusAuthVolume struct {
	configFile, mountPath string
	secrets               []string
	token                 map[string]any
}

func renderedPrometheusAuth(t *testing.T, objs []*unstructured.Unstructured) prometheusAuthVolume {
	t.Helper()
	var v prometheusAuthVolume
	v.configFile = operatorArgs(t, objs)["prometheus-http-config"]
	container := operatorContainer(t, objs)
	for _, m := range nested[[]any](t, container, "volumeMounts") {
		mount := m.(map[string]any)
		if mount["name"] == "prometheus-http" {
			v.mountPath, _ = mount["mountPath"].(string)
		}
	}
	deployment := findOne(t, objs, "Deployment")
	for _, vol := range nested[[]any](t, deployment.Object, "spec", "template", "spec", "volumes") {
		vol := vol.(map[string]any)
		if vol["name"] != "prometheus-http" {
			continue
		}
		for _, src := range nested[[]any](t, vol, "projected", "sources") {
			src := src.(map[string]any)
			if secret, ok := src["secret"].(map[string]any); ok {
				v.secrets = append(v.secrets, secret["name"].(string))
			}
			if token, ok := src["serviceAccountToken"].(map[string]any); ok {
				v.token = token
			}
		}
	}
	return v
}

// TestPrometheusAuthValuesReachPrometheus renders the chart with Prometheus credentials,
// lays the projected volume out as the kubelet would (the chart's Secret, the user's Secret
// prom-creds), and queries a real Prometheus that requires TLS and basic auth with the
// configuration file the operator's --prometheus-http-config names: the chart's output is
// what the operator can read.
func TestPrometheusAuthValuesReachPrometheus(t *testing.T) {
	objs := release{name: "auth", namespace: testNamespace, values: prometheusAuthValues}.mustRender(t)
	vol := renderedPrometheusAuth(t, objs)
	if vol.configFile == "" || vol.mountPath == "" || path.Dir(vol.configFile) != vol.mountPath {
		t.Fatalf("--prometheus-http-config=%q is not in the mounted directory %q", vol.configFile, vol.mountPath)
	}
	var configSecret *unstructured.Unstructured
	for _, s := range find(objs, "Secret") {
		if s.GetName() == vol.secrets[0] {
			configSecret = s
		}
	}
	if configSecret == nil || !slices.Equal(vol.secrets[1:], []string{"prom-creds"}) {
		t.Fatalf("projected Secrets %v; rendered Secrets %s", vol.secrets, describe(find(objs, "Secret")))
	}

	certs := promtest.NewCerts(t, t.TempDir())
	ca, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{"password": promtest.Password, "ca.crt": string(ca)}
	for key, content := range nested[map[string]any](t, configSecret.Object, "stringData") {
		files[key] = content.(string)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	httpClient, err := promquery.LoadHTTPClient(filepath.Join(dir, path.Base(vol.configFile)))
	if err != nil {
		t.Fatalf("the rendered configuration: %v", err)
	}
	prom := promtest.StartWeb(t, nil, time.Second, certs.BasicAuthWeb())
	c, err := promquery.New(prom.URL, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	if samples, err := c.Query(context.Background(), "vector(1)", time.Time{}); err != nil || len(samples) != 1 {
		t.Fatalf("query with the rendered configuration: %v samples, error %v", samples, err)
	}
}
