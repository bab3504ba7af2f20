package allocation

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// TestOperatorCredentialsStayWithTheOperatorsPrometheus measures a cluster against a real
// Prometheus that requires HTTPS and basic auth, which the operator's --prometheus-url and
// --prometheus-http-config name. A cluster whose prometheusURL is empty or that same URL is
// measured with the operator's credentials; a cluster whose prometheusURL is another server
// (here a proxy in front of the same Prometheus, which records what it is sent) and that has
// no Secret of its own gets no Authorization header, so its queries are refused.
func TestOperatorCredentialsStayWithTheOperatorsPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	const node = "promscope"
	sidecar := promtest.NewSidecar(t, node)
	sidecar.SetTraffic("promscope/a", promtest.Traffic{RequestsPerSecond: 100, HitRatio: 0.9, HitLatency: time.Millisecond, MissLatency: time.Millisecond})
	sidecar.SetPlanGeneration(0)
	certs := promtest.NewCerts(t, t.TempDir())
	prom := promtest.StartWeb(t, []string{sidecar.Address()}, time.Second, certs.BasicAuthWeb())
	prom.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 4`, 1, 30*time.Second)

	target, err := url.Parse(prom.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []string
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.Pool}}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get("Authorization"))
		mu.Unlock()
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	l := &Loop{opts: Options{DefaultPrometheusURL: prom.URL, HTTPClient: certs.BasicAuthClient()}.withDefaults(), log: logr.Discard()}
	for _, tc := range []struct {
		name, url string
		// refused is part of the error measuring gives; empty: measuring succeeds.
		refused string
	}{
		{name: "operator's URL by default", url: ""},
		{name: "operator's URL spelled out", url: prom.URL},
		{name: "own URL", url: proxy.URL, refused: "401 Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1.CacheCluster{Spec: v1.CacheClusterSpec{Monitoring: v1.MonitoringSettings{PrometheusURL: tc.url,
				ServiceMonitor: v1.ServiceMonitorSettings{Interval: &metav1.Duration{Duration: time.Second}}}}}
			r := l.measure(context.Background(), &inputs{cluster: c, nodes: []string{node}}, &clusterState{})
			switch {
			case tc.refused == "" && r.err != nil:
				t.Fatalf("measuring: %v", r.err)
			case tc.refused != "" && (r.err == nil || !strings.Contains(r.err.Error(), tc.refused)):
				t.Fatalf("measuring: error %v, want one with %q", r.err, tc.refused)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 {
		t.Fatal("the cluster's own URL was never queried")
	}
	for _, auth := range sent {
		if auth != "" {
			t.Errorf("the cluster's own URL was sent Authorization %q", auth)
		}
	}
}
