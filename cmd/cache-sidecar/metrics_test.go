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

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cacheqos/cacheqos/internal/pki"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// TestSecureMetrics runs the sidecar with --metrics-secure against a real API server
// (envtest), serving its metrics address over HTTPS with a certificate from a pki.Authority:
// a ServiceAccount bound to get /metrics reads them (200), a request without a token is
// unauthenticated (401), another ServiceAccount is forbidden (403), plain HTTP gets no
// metrics, and /healthz and /readyz answer without a token (the kubelet's probes send none).
// A real Prometheus then scrapes the sidecar as the operator's ServiceMonitor says (https, the
// CA bundle, the serving name, the scraper's bearer token) and has its metrics.
func TestSecureMetrics(t *testing.T) {
	env := &envtest.Environment{}
	restConfig, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest (KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// The sidecar's own identity: it needs only to create TokenReviews and
	// SubjectAccessReviews, which the operator grants its ServiceAccount (system:auth-delegator).
	user, err := env.AddUser(envtest.User{Name: "sidecar", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigData, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, kubeconfig, string(kubeconfigData))

	kube := kubernetes.NewForConfigOrDie(restConfig)
	ctx := context.Background()
	token := func(name string) string {
		t.Helper()
		if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, other := token("scraper"), token("other")
	// The chart's metrics-reader ClusterRole and its binding to a scraper.
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

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
	get := func(url, bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	metricsURL := "https://" + metricsAddr + "/metrics"
	// RBAC for the new binding settles within a moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := get(metricsURL, scraper)
		if err == nil && code == http.StatusOK && strings.Contains(body, "cacheqos_sidecar_plan_generation") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scraper: %d %.200s %v", code, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
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
