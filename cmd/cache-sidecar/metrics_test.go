package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cacheqos/cacheqos/internal/pki"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
	"github.com/cacheqos/cacheqos/test/metricsauth"
)

// TestSecureMetrics runs the sidecar with --metrics-secure against a real API server
// (envtest), serving its metrics address over HTTPS with a certificate from a pki.Authority:
// a ServiceAccount bound to get /metrics reads them (200), a request without a token is
// unauthenticated (401), another ServiceAccount is forbidden (403), plain HTTP gets no
// metrics, and /healthz and /readyz answer without a token (the kubelet's probes send none).
// A real Prometheus then scrapes the sidecar as the operator's ServiceMonitor says (https, the
// CA bundle, the serving name, the scraper's bearer token) and has its metrics.
func TestSecureMetrics(t *testing.T) {
	env, restConfig := metricsauth.StartAPIServer(t)
	// The sidecar's own identity holds only what the operator grants its ServiceAccount for
	// this: system:auth-delegator (TokenReviews and SubjectAccessReviews).
	user, err := env.AddUser(envtest.User{Name: "sidecar"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(restConfig)
	ctx := context.Background()
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sidecar-metrics-auth"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "sidecar"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfigData, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, kubeconfig, string(kubeconfigData))

	scraper, other := metricsauth.Tokens(t, kube)

	// The metrics certificate, from a CA as the operator issues it.
	dir := t.TempDir()
	authority := pki.NewAuthority("metrics")
	if _, err := authority.Rotate(time.Now(), pki.DefaultPolicy); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := authority.Issue([]string{tlsHost}, time.Now(), pki.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, caFile, string(authority.Bundle()))
	writeFile(t, certFile, string(certPEM))
	writeFile(t, keyFile, string(keyPEM))

	s := startSidecar(t, "redis", false, "--kubeconfig", kubeconfig, "--metrics-secure",
		"--metrics-tls-cert-file", certFile, "--metrics-tls-key-file", keyFile)
	metricsAddr := waitLog(t, s.logs, "listening")["metrics"].(string)
	_, port, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr = net.JoinHostPort(tlsHost, port)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(authority.Bundle())
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: tlsHost, MinVersion: tls.VersionTLS12}}}
	get := func(url, bearer string) (int, string, error) { return metricsauth.Get(ctx, client, url, bearer) }
	metricsURL := "https://" + metricsAddr + "/metrics"
	metricsauth.WaitReadable(t, func() (int, string, error) { return get(metricsURL, scraper) }, "cacheqos_sidecar_plan_generation")
	for _, tc := range []struct {
		name, url, bearer string
		want              int
	}{
		{"no token", metricsURL, "", http.StatusUnauthorized},
		{"a ServiceAccount without get /metrics", metricsURL, other, http.StatusForbidden},
		{"an unknown path without a token", "https://" + metricsAddr + "/debug/pprof/", "", http.StatusUnauthorized},
		{"liveness without a token", "https://" + metricsAddr + "/healthz", "", http.StatusOK},
		{"readiness without a token", "https://" + metricsAddr + "/readyz", "", http.StatusOK},
	} {
		if code, body, err := get(tc.url, tc.bearer); err != nil || code != tc.want {
			t.Errorf("%s: %d %.200q %v, want %d", tc.name, code, body, err, tc.want)
		}
	}
	// Go's TLS server answers plain HTTP with 400 and no metrics (or resets the connection).
	if code, body, err := get("http://"+metricsAddr+"/metrics", scraper); err == nil && (code != http.StatusBadRequest || strings.Contains(body, "cacheqos_")) {
		t.Errorf("plain HTTP: %d %.200q", code, body)
	}

	// Prometheus scrapes as the ServiceMonitor configures it.
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, scraper)
	prom := promtest.StartScrape(t, fmt.Sprintf(`  - job_name: sidecars
    scheme: https
    authorization:
      credentials_file: %q
    tls_config:
      ca_file: %q
      server_name: %q
    static_configs:
      - targets: [%q]
`, tokenFile, caFile, tlsHost, "127.0.0.1:"+port), 500*time.Millisecond, promtest.Web{})
	prom.WaitFor(t, `cacheqos_sidecar_plan_generation{node="node-1"} == 3`, 1, 30*time.Second)
	prom.WaitFor(t, `up{job="sidecars"} == 1`, 1, 10*time.Second)
}

// TestMetricsFlags: --metrics-secure needs the metrics certificate, whose files go together.
func TestMetricsFlags(t *testing.T) {
	env := map[string]string{"NODE_NAME": "node-a", "POD_NAMESPACE": "cache", "CLUSTER_NAME": "shared", "ENGINE": "redis"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--metrics-secure"}, "--metrics-secure needs --metrics-tls-cert-file and --metrics-tls-key-file"},
		{[]string{"--metrics-tls-cert-file", "/m/tls.crt"}, "--metrics-tls-cert-file and --metrics-tls-key-file go together"},
		{[]string{"--metrics-secure", "--metrics-tls-cert-file", "/m/tls.crt", "--metrics-tls-key-file", "/m/tls.key"}, ""},
	} {
		o, err := parseFlags(tc.args, getenv, io.Discard)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr == "" && (!o.metricsSecure || o.metricsTLSCert != "/m/tls.crt" || o.metricsTLSKey != "/m/tls.key"):
			t.Errorf("%v: options %+v", tc.args, o)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}
