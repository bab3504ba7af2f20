package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// TestSecureMetrics starts a manager with the operator's metrics options against a real API
// server (envtest): over HTTPS, a scraper whose ServiceAccount may get /metrics reads them; a
// request without a token is unauthenticated (401), one of a ServiceAccount without that
// permission is forbidden (403), and plain HTTP is refused.
func TestSecureMetrics(t *testing.T) {
	env := &envtest.Environment{}
	restConfig, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest (KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kube := kubernetes.NewForConfigOrDie(restConfig)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	addr := promtest.FreeAddress(t)
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Metrics: metricsOptions(settings{metricsAddr: addr, metricsSecure: true})})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	})

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

	// The certificate is self-signed: what is checked here is who may read, not the server.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	get := func(scheme, bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
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
	// The server starts with the manager; RBAC for the new binding settles within a moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := get("https", scraper)
		if err == nil && code == http.StatusOK && strings.Contains(body, "controller_runtime_") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scraper: %d %.200s %v", code, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		name, scheme, bearer string
		want                 int
	}{
		{"no token", "https", "", http.StatusUnauthorized},
		// controller-runtime answers a token the TokenReview rejects with 500 "Authentication
		// failed", not 401.
		{"a token the API server did not issue", "https", "not-a-token", http.StatusInternalServerError},
		{"a ServiceAccount without get /metrics", "https", other, http.StatusForbidden},
		// Go's TLS server answers 400 and resets the connection, which may reach the client
		// before the answer does.
		{"plain HTTP", "http", scraper, http.StatusBadRequest},
	} {
		code, body, err := get(tc.scheme, tc.bearer)
		if tc.scheme == "http" && err != nil {
			continue
		}
		if err != nil || code != tc.want {
			t.Errorf("%s: %d %.200q %v, want %d", tc.name, code, body, err, tc.want)
		}
	}
}
