package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
	"github.com/cacheqos/cacheqos/test/metricsauth"
)

// TestSecureMetrics starts a manager with the operator's metrics options against a real API
// server (envtest): over HTTPS, a scraper whose ServiceAccount may get /metrics reads them; a
// request without a token is unauthenticated (401), one of a ServiceAccount without that
// permission is forbidden (403), and plain HTTP is refused.
func TestSecureMetrics(t *testing.T) {
	_, restConfig := metricsauth.StartAPIServer(t)
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

	scraper, other := metricsauth.Tokens(t, kube)

	// The certificate is self-signed: what is checked here is who may read, not the server.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	get := func(scheme, bearer string) (int, string, error) {
		return metricsauth.Get(ctx, client, scheme+"://"+addr+"/metrics", bearer)
	}
	metricsauth.WaitReadable(t, func() (int, string, error) { return get("https", scraper) }, "controller_runtime_")
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
