// Package promtest runs a real Prometheus server for tests, scraping real exporters that
// replay recorded sidecar traffic: a Sidecar serves the series docs/metrics.md lists for one
// node, with counters that advance at the rates the test sets, so rate() over any window
// reads those rates back.
package promtest

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cacheqos/cacheqos/internal/promquery"
)

// Server is a Prometheus process scraping static targets.
type Server struct {
	// URL is the base URL of the HTTP API.
	URL string

	cmd     *exec.Cmd
	client  *http.Client
	logPath string
	done    chan struct{}
	mu      sync.Mutex
	stopped bool
}

// Web is what Prometheus' --web.config.file asks of clients.
type Web struct {
	// CertFile and KeyFile (PEM) make the server speak only HTTPS.
	CertFile, KeyFile string
	// ClientCAFile (PEM), with TLS, makes the server require client certificates it signed.
	ClientCAFile string
	// BasicAuthUsers maps user names to bcrypt hashes of their passwords.
	BasicAuthUsers map[string]string
	// Client is what the Server's own helpers (the readiness wait, WaitFor) query with: one
	// that has the credentials. Nil means http.DefaultClient.
	Client *http.Client
}

// yaml renders the web configuration file; empty when nothing is required.
func (w Web) yaml() string {
	var b strings.Builder
	if w.CertFile != "" {
		fmt.Fprintf(&b, "tls_server_config:\n  cert_file: %s\n  key_file: %s\n", strconv.Quote(w.CertFile), strconv.Quote(w.KeyFile))
		if w.ClientCAFile != "" {
			fmt.Fprintf(&b, "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n", strconv.Quote(w.ClientCAFile))
		}
	}
	if len(w.BasicAuthUsers) > 0 {
		b.WriteString("basic_auth_users:\n")
		for user, hash := range w.BasicAuthUsers {
			fmt.Fprintf(&b, "  %s: %s\n", strconv.Quote(user), strconv.Quote(hash))
		}
	}
	return b.String()
}

// Start runs the prometheus binary found on PATH with a storage directory in t.TempDir(),
// scraping targets ("host:port") every scrapeInterval, and waits until it is ready. The
// process is stopped in t.Cleanup.
func Start(t testing.TB, targets []string, scrapeInterval time.Duration) *Server {
	t.Helper()
	return StartWeb(t, targets, scrapeInterval, Web{})
}

// StartWeb is Start for a server that requires what web says of its clients.
func StartWeb(t testing.TB, targets []string, scrapeInterval time.Duration, web Web) *Server {
	t.Helper()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	return StartScrape(t, "  - job_name: sidecars\n    static_configs:\n      - targets: ["+strings.Join(quoted, ", ")+"]\n", scrapeInterval, web)
}

// StartScrape is StartWeb with the scrape_configs list given as YAML (its entries indented by
// two spaces), for scrapes that need a scheme, TLS or credentials.
func StartScrape(t testing.TB, scrapeConfigs string, scrapeInterval time.Duration, web Web) *Server {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("the prometheus binary is not on PATH (hack/bootstrap.sh installs it): %v", err)
	}
	dir := t.TempDir()
	interval := fmt.Sprintf("%dms", scrapeInterval.Milliseconds())
	config := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
%[2]s`, interval, scrapeConfigs)
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddress(t)
	scheme := "http"
	if web.CertFile != "" {
		scheme = "https"
	}
	client := web.Client
	if client == nil {
		client = http.DefaultClient
	}
	s := &Server{URL: scheme + "://" + addr, client: client, logPath: filepath.Join(dir, "prometheus.log"), done: make(chan struct{})}
	args := []string{
		"--config.file=" + configPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}
	if webConfig := web.yaml(); webConfig != "" {
		webPath := filepath.Join(dir, "web.yml")
		if err := os.WriteFile(webPath, []byte(webConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--web.config.file="+webPath)
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	t.Cleanup(s.Stop)
	if err := s.waitReady(30 * time.Second); err != nil {
		t.Fatalf("prometheus did not become ready: %v\n%s", err, s.Log())
	}
	return s
}

// FreeAddress returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.done:
			return errors.New("the process exited")
		default:
		}
		resp, err := s.client.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last error: %w)", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log returns what the process logged so far.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Stop terminates the process and waits for it; later calls do nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// WaitFor polls expr until it returns at least want samples, and fails the test after timeout.
func (s *Server) WaitFor(t testing.TB, expr string, want int, timeout time.Duration) {
	t.Helper()
	c, err := promquery.New(s.URL, s.client)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		samples, err := c.Query(context.Background(), expr, time.Time{})
		if err == nil && len(samples) >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q returned %d samples (err %v) after %v, want %d\n%s", expr, len(samples), err, timeout, want, s.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Traffic is a tenant's steady load on one node.
type Traffic struct {
	RequestsPerSecond float64
	// HitRatio of the reads; every request is a read of one key.
	HitRatio float64
	// BytesInPerSecond and BytesOutPerSecond are the request and reply byte rates.
	BytesInPerSecond, BytesOutPerSecond float64
	// HitLatency and MissLatency are the times observed for hits and misses.
	HitLatency, MissLatency time.Duration
	// ThrottledPerSecond is the rate of requests that waited for tokens.
	ThrottledPerSecond float64
}

// tick is how often a Sidecar advances its counters.
const tick = 50 * time.Millisecond

// Sidecar is one node's exporter: the sidecar's metric families under their documented names,
// with the node as a constant label, advancing every tick at the rates of SetTraffic.
type Sidecar struct {
	node   string
	server *httptest.Server
	stop   chan struct{}
	wg     sync.WaitGroup

	requests, hits, misses, bytesIn, bytesOut, throttled *prometheus.CounterVec
	duration                                             *prometheus.HistogramVec
	curve, predicted, achieved, sampledReads             *prometheus.GaugeVec
	planGeneration                                       prometheus.Gauge

	mu      sync.Mutex
	traffic map[string]Traffic
	carry   map[string]float64 // fractional requests not yet counted, per tenant
}

// NewSidecar starts an exporter for node on a 127.0.0.1 port; it stops in t.Cleanup.
func NewSidecar(t testing.TB, node string) *Sidecar {
	t.Helper()
	reg := prometheus.NewRegistry()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{promquery.LabelNode: node}, reg)
	tenant := []string{promquery.LabelTenant}
	s := &Sidecar{
		node:      node,
		stop:      make(chan struct{}),
		traffic:   map[string]Traffic{},
		carry:     map[string]float64{},
		requests:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: promquery.MetricRequests, Help: "requests served"}, []string{promquery.LabelTenant, "class"}),
		hits:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: promquery.MetricHits, Help: "read hits"}, tenant),
		misses:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: promquery.MetricMisses, Help: "read misses"}, tenant),
		bytesIn:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: promquery.MetricBytesIn, Help: "request bytes"}, tenant),
		bytesOut:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: promquery.MetricBytesOut, Help: "reply bytes"}, tenant),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: promquery.MetricThrottledRequests, Help: "throttled requests"}, tenant),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: promquery.MetricRequestDuration, Help: "request latency",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, tenant),
		curve:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: promquery.MetricMRCHitRatio, Help: "predicted hit ratio"}, []string{promquery.LabelTenant, promquery.LabelSizeBytes}),
		predicted:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: promquery.MetricMRCPredicted, Help: "curve at the current size"}, tenant),
		achieved:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: promquery.MetricMRCAchieved, Help: "achieved hit ratio"}, tenant),
		sampledReads:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: promquery.MetricMRCSampledReads, Help: "sampled reads"}, tenant),
		planGeneration: prometheus.NewGauge(prometheus.GaugeOpts{Name: promquery.MetricPlanGeneration, Help: "applied plan generation"}),
	}
	for _, c := range []prometheus.Collector{s.requests, s.hits, s.misses, s.bytesIn, s.bytesOut, s.throttled, s.duration, s.curve,
		s.predicted, s.achieved, s.sampledReads, s.planGeneration} {
		wrapped.MustRegister(c)
	}
	s.server = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.wg.Add(1)
	go s.run()
	t.Cleanup(s.Close)
	return s
}

// Address is the exporter's host:port, a scrape target.
func (s *Sidecar) Address() string { return strings.TrimPrefix(s.server.URL, "http://") }

// SetTraffic sets a tenant's load from now on.
func (s *Sidecar) SetTraffic(tenant string, tr Traffic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.traffic[tenant] = tr
}

// SetCurve sets a tenant's miss-ratio curve points (hit ratio by local partition size).
func (s *Sidecar) SetCurve(tenant string, points []promquery.CurvePoint) {
	for _, p := range points {
		s.curve.WithLabelValues(tenant, strconv.FormatInt(p.SizeBytes, 10)).Set(p.HitRatio)
	}
}

// SetCurveCheck sets a tenant's curve read at its partition's size, the hit ratio the partition
// achieved and the sampled reads behind both.
func (s *Sidecar) SetCurveCheck(tenant string, c promquery.CurveCheck) {
	s.predicted.WithLabelValues(tenant).Set(c.Predicted)
	s.achieved.WithLabelValues(tenant).Set(c.Achieved)
	s.sampledReads.WithLabelValues(tenant).Set(c.SampledReads)
}

// SetPlanGeneration sets the applied plan generation gauge.
func (s *Sidecar) SetPlanGeneration(g int64) { s.planGeneration.Set(float64(g)) }

// Close stops the exporter; later calls do nothing.
func (s *Sidecar) Close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	s.wg.Wait()
	s.server.Close()
}

func (s *Sidecar) run() {
	defer s.wg.Done()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ticker.C:
			s.advance(tick.Seconds())
		}
	}
}

// advance counts dt seconds of every tenant's traffic.
func (s *Sidecar) advance(dt float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tenant, tr := range s.traffic {
		s.carry[tenant] += tr.RequestsPerSecond * dt
		n := float64(int64(s.carry[tenant]))
		s.carry[tenant] -= n
		if n == 0 {
			continue
		}
		hits := float64(int64(n*tr.HitRatio + 0.5))
		s.requests.WithLabelValues(tenant, "read").Add(n)
		s.hits.WithLabelValues(tenant).Add(hits)
		s.misses.WithLabelValues(tenant).Add(n - hits)
		s.bytesIn.WithLabelValues(tenant).Add(tr.BytesInPerSecond * dt)
		s.bytesOut.WithLabelValues(tenant).Add(tr.BytesOutPerSecond * dt)
		s.throttled.WithLabelValues(tenant).Add(tr.ThrottledPerSecond * dt)
		h := s.duration.WithLabelValues(tenant)
		for i := 0; i < int(n); i++ {
			if float64(i) < hits {
				h.Observe(tr.HitLatency.Seconds())
			} else {
				h.Observe(tr.MissLatency.Seconds())
			}
		}
	}
}

// BearerGateway is an HTTPS reverse proxy in front of a Server that requires a bearer token
// and an X-Scope-OrgID header, as the gateways of Mimir, Thanos or kube-rbac-proxy do:
// Prometheus' own web configuration has no bearer token check.
type BearerGateway struct {
	// URL is the gateway's base URL.
	URL string
	// CAPEM is the gateway's self-signed certificate, the CA a client must trust.
	CAPEM []byte
}

// StartBearerGateway serves s through a gateway that answers 401 without "Bearer token" in
// Authorization and 403 without org in X-Scope-OrgID; it stops in t.Cleanup.
func StartBearerGateway(t testing.TB, s *Server, token, org string) BearerGateway {
	t.Helper()
	target, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	gateway := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer "+token:
			http.Error(w, "invalid bearer token", http.StatusUnauthorized)
		case r.Header.Get("X-Scope-OrgID") != org:
			http.Error(w, "no access to tenant "+strconv.Quote(r.Header.Get("X-Scope-OrgID")), http.StatusForbidden)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(gateway.Close)
	return BearerGateway{URL: gateway.URL, CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gateway.Certificate().Raw})}
}
