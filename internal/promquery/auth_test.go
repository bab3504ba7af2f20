package promquery_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

const (
	testToken = "cacheqos-test-token"
	testOrg   = "team-cache"
)

// clientCase is one HTTP client configuration (prometheus/common's YAML, as the operator's
// --prometheus-http-config reads it) and what measuring with it gives.
type clientCase struct {
	name string
	// config may use the files written next to it: password, token, wrong-secret, and the
	// PEM files of promtest.Certs (ca.pem, client.pem, client-key.pem).
	config string
	// wantErr, when set, is a regular expression the error matches; wantIs is the error it
	// must wrap.
	wantErr string
	wantIs  error
}

// measureWith writes each case's configuration into its own directory with the secrets it
// names, loads it as the operator does, and measures the tenant the sidecar serves.
func measureWith(t *testing.T, prometheusURL string, certs promtest.Certs, cases []clientCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"password": promtest.Password, "token": testToken, "wrong-secret": "not-it"}
			for name, src := range map[string]string{"ca.pem": certs.CAFile, "client.pem": certs.ClientCertFile, "client-key.pem": certs.ClientKeyFile} {
				b, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				files[name] = string(b)
			}
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			configPath := filepath.Join(dir, "prometheus-http.yaml")
			if err := os.WriteFile(configPath, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			httpClient, err := promquery.LoadHTTPClient(configPath)
			if err != nil {
				t.Fatal(err)
			}
			client, err := promquery.New(prometheusURL, httpClient)
			if err != nil {
				t.Fatal(err)
			}
			m, err := promquery.Measure(context.Background(), client, promquery.Scope{Nodes: []string{"node-a"}, Window: 4 * time.Second})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("measuring: %v", err)
				}
				// TestMeasureAgainstPrometheus checks the values; here the series are young.
				if web := m.Tenants["shop/web"]; web == nil || web.RequestsPerSecond() <= 0 {
					t.Fatalf("shop/web not measured: %v", m.Tenants)
				}
				return
			}
			if err == nil || !regexp.MustCompile(tc.wantErr).MatchString(err.Error()) {
				t.Fatalf("error = %v, want one matching %q", err, tc.wantErr)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Fatalf("error %v does not wrap %v", err, tc.wantIs)
			}
		})
	}
}

// servedSidecar is one node's exporter with one tenant's traffic.
func servedSidecar(t *testing.T) *promtest.Sidecar {
	s := promtest.NewSidecar(t, "node-a")
	s.SetTraffic("shop/web", promtest.Traffic{RequestsPerSecond: 100, HitRatio: 0.9, HitLatency: time.Millisecond, MissLatency: time.Millisecond})
	s.SetPlanGeneration(1)
	return s
}

// waitForTraffic waits until rate() over the test's window has two samples to read.
func waitForTraffic(t *testing.T, prom *promtest.Server) {
	prom.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[4s]) >= 2`, 1, 30*time.Second)
}

// basicAuthPrometheus starts a Prometheus that serves only HTTPS and requires basic auth,
// scraping a servedSidecar, and waits for its traffic.
func basicAuthPrometheus(t *testing.T) (*promtest.Server, promtest.Certs) {
	certs := promtest.NewCerts(t, t.TempDir())
	prom := promtest.StartWeb(t, []string{servedSidecar(t).Address()}, time.Second, certs.BasicAuthWeb())
	waitForTraffic(t, prom)
	return prom, certs
}

// TestMeasureWithTLSAndBasicAuth runs a real Prometheus that serves only HTTPS and requires
// basic auth (its --web.config.file) and measures with right, wrong and missing credentials.
func TestMeasureWithTLSAndBasicAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	prom, certs := basicAuthPrometheus(t)
	const trusted = "tls_config:\n  ca_file: ca.pem\n"
	measureWith(t, prom.URL, certs, []clientCase{
		{name: "right credentials", config: trusted + "basic_auth:\n  username: cacheqos\n  password_file: password\n"},
		{name: "inline password", config: trusted + "basic_auth:\n  username: cacheqos\n  password: " + promtest.Password + "\n"},
		{name: "wrong password", config: trusted + "basic_auth:\n  username: cacheqos\n  password_file: wrong-secret\n", wantErr: "HTTP 401", wantIs: promquery.ErrUnauthorized},
		{name: "unknown user", config: trusted + "basic_auth:\n  username: someone\n  password_file: password\n", wantErr: "HTTP 401", wantIs: promquery.ErrUnauthorized},
		{name: "no credentials", config: trusted, wantErr: "HTTP 401", wantIs: promquery.ErrUnauthorized},
		{name: "CA not trusted", config: "basic_auth:\n  username: cacheqos\n  password_file: password\n", wantErr: "certificate signed by unknown authority"},
	})
	t.Run("password file rotated", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, content string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ca, err := os.ReadFile(certs.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		write("ca.pem", string(ca))
		write("password", "an old password")
		write("http.yaml", trusted+"basic_auth:\n  username: cacheqos\n  password_file: password\n")
		httpClient, err := promquery.LoadHTTPClient(filepath.Join(dir, "http.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		client, err := promquery.New(prom.URL, httpClient)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Query(context.Background(), "vector(1)", time.Time{}); !errors.Is(err, promquery.ErrUnauthorized) {
			t.Fatalf("error with the old password = %v, want ErrUnauthorized", err)
		}
		// The same client reads the file again on its next request.
		write("password", promtest.Password)
		if _, err := client.Query(context.Background(), "vector(1)", time.Time{}); err != nil {
			t.Fatalf("after the password file changed: %v", err)
		}
	})
	// Plain HTTP to the HTTPS port is refused, not answered.
	measureWith(t, strings.Replace(prom.URL, "https://", "http://", 1), certs, []clientCase{
		{name: "plain HTTP", config: "basic_auth:\n  username: cacheqos\n  password_file: password\n", wantErr: "HTTP 400 Bad Request: Client sent an HTTP request to an HTTPS server"},
	})
}

// TestMeasureWithClientCertificate runs a real Prometheus that requires a client certificate
// signed by its CA.
func TestMeasureWithClientCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	certs := promtest.NewCerts(t, t.TempDir())
	sidecar := servedSidecar(t)
	prom := promtest.StartWeb(t, []string{sidecar.Address()}, time.Second, promtest.Web{
		CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, ClientCAFile: certs.CAFile, Client: certs.ClientCertClient(),
	})
	waitForTraffic(t, prom)
	measureWith(t, prom.URL, certs, []clientCase{
		{name: "client certificate", config: "tls_config:\n  ca_file: ca.pem\n  cert_file: client.pem\n  key_file: client-key.pem\n"},
		// The server refuses the handshake; the client sees the alert, or, depending on which
		// side of the connection the refusal reaches first, only its consequence.
		{name: "no client certificate", config: "tls_config:\n  ca_file: ca.pem\n", wantErr: `remote error: tls:|http2: client conn could not be established|connection reset by peer|broken pipe`},
	})
}

// TestMeasureWithBearerTokenAndTenantHeader reads a real Prometheus through an HTTPS gateway
// that requires a bearer token and an X-Scope-OrgID header (promtest.StartBearerGateway); the
// Prometheus behind it is real.
func TestMeasureWithBearerTokenAndTenantHeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	sidecar := servedSidecar(t)
	prom := promtest.Start(t, []string{sidecar.Address()}, time.Second)
	waitForTraffic(t, prom)
	gateway := promtest.StartBearerGateway(t, prom, testToken, testOrg)
	// The gateway's certificate is its own CA.
	certs := promtest.Certs{CAFile: filepath.Join(t.TempDir(), "gateway-ca.pem")}
	if err := os.WriteFile(certs.CAFile, gateway.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	certs.ClientCertFile, certs.ClientKeyFile = certs.CAFile, certs.CAFile
	const trusted = "tls_config:\n  ca_file: ca.pem\n"
	const org = "http_headers:\n  X-Scope-OrgID:\n    values: [" + testOrg + "]\n"
	measureWith(t, gateway.URL, certs, []clientCase{
		{name: "token and tenant", config: trusted + org + "authorization:\n  credentials_file: token\n"},
		{name: "token inline", config: trusted + org + "authorization:\n  type: Bearer\n  credentials: " + testToken + "\n"},
		{name: "wrong token", config: trusted + org + "authorization:\n  credentials_file: wrong-secret\n", wantErr: "HTTP 401", wantIs: promquery.ErrUnauthorized},
		{name: "no token", config: trusted + org, wantErr: "invalid bearer token", wantIs: promquery.ErrUnauthorized},
		{name: "no tenant header", config: trusted + "authorization:\n  credentials_file: token\n", wantErr: "HTTP 403", wantIs: promquery.ErrUnauthorized},
	})
}

// TestHTTPClientFromSecret builds clients from a Secret's keys, as a CacheCluster's
// spec.monitoring.prometheusHTTPConfig gives them, and queries a real Prometheus that serves
// only HTTPS and requires basic auth: *_ref fields read other keys, file fields and refs to
// missing keys are refused when the client is built, and wrong credentials when it is used.
func TestHTTPClientFromSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	prom, certs := basicAuthPrometheus(t)
	ca, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	const key = "http-config.yaml"
	const refs = "tls_config:\n  ca_ref: ca.crt\nbasic_auth:\n  username: cacheqos\n  password_ref: password\n"
	for _, tc := range []struct {
		name string
		data map[string]string
		// buildErr is what building the client fails with; queryErr what querying fails with.
		buildErr, queryErr string
	}{
		{name: "refs to other keys", data: map[string]string{key: refs, "ca.crt": string(ca), "password": promtest.Password + "\n"}},
		{name: "inline", data: map[string]string{key: "tls_config:\n  ca: |\n    " + strings.ReplaceAll(strings.TrimSpace(string(ca)), "\n", "\n    ") +
			"\nbasic_auth:\n  username: cacheqos\n  password: " + promtest.Password + "\n"}},
		{name: "wrong password", data: map[string]string{key: refs, "ca.crt": string(ca), "password": "not-it"}, queryErr: "HTTP 401"},
		{name: "no config key", data: map[string]string{"config": refs}, buildErr: `no key "http-config.yaml" \(keys: config\)`},
		{name: "ref to a missing key", data: map[string]string{key: refs, "ca.crt": string(ca)}, buildErr: `basic_auth.password_ref names key "password", which the Secret does not have`},
		{name: "file fields", data: map[string]string{key: "tls_config:\n  ca_file: /etc/ssl/ca.pem\nauthorization:\n  credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token\n"},
			buildErr: `authorization.credentials_file, tls_config.ca_file read files of the operator's file system`},
		{name: "header files", data: map[string]string{key: "http_headers:\n  X-Scope-OrgID:\n    files: [/etc/hostname]\n"}, buildErr: `http_headers.X-Scope-OrgID.files read files`},
		{name: "not YAML of the format", data: map[string]string{key: "basic_auth: [1, 2]\n"}, buildErr: `key "http-config.yaml": yaml: unmarshal errors`},
		{name: "a password where a flag goes", data: map[string]string{key: "follow_redirects: " + promtest.Password + "\n"},
			buildErr: `cannot unmarshal !!str \(a value, not shown\) into bool`},
		{name: "two credentials", data: map[string]string{key: "basic_auth:\n  username: a\n  password: b\nauthorization:\n  credentials: c\n"}, buildErr: "at most one of basic_auth, oauth2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string][]byte{}
			for k, v := range tc.data {
				data[k] = []byte(v)
			}
			httpClient, err := promquery.NewHTTPClientFromSecret(data, key)
			if tc.buildErr != "" {
				if err == nil || !regexp.MustCompile(tc.buildErr).MatchString(err.Error()) {
					t.Fatalf("building: error = %v, want one matching %q", err, tc.buildErr)
				}
				if strings.Contains(err.Error(), promtest.Password) {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("building: %v", err)
			}
			client, err := promquery.New(prom.URL, httpClient)
			if err != nil {
				t.Fatal(err)
			}
			_, err = client.Query(context.Background(), "vector(1)", time.Time{})
			switch {
			case tc.queryErr == "" && err != nil:
				t.Fatalf("querying: %v", err)
			case tc.queryErr != "" && (err == nil || !strings.Contains(err.Error(), tc.queryErr)):
				t.Fatalf("querying: error = %v, want one containing %q", err, tc.queryErr)
			}
		})
	}
}
