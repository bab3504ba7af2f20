package allocation_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// TestPerClusterPrometheusCredentials runs two CacheClusters, each reading its own real
// Prometheus with credentials from a Secret that spec.monitoring.prometheusHTTPConfig names:
// one serves only HTTPS and requires basic auth, the other sits behind a gateway that requires
// a bearer token and an X-Scope-OrgID header. Neither server answers with the other's
// credentials, nor with the operator's (none). A missing Secret, then wrong credentials, are
// reported in MetricsAvailable with their reason; fixing the Secret is picked up by the next
// allocation. Cluster B names its own key (prometheusHTTPConfig.key), and its Secret also
// holds a working configuration under the default key, which must not be read.
func TestPerClusterPrometheusCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus processes")
	}
	const token, org = "cluster-b-token", "team-b"
	traffic := promtest.Traffic{RequestsPerSecond: 100, HitRatio: 0.9, HitLatency: time.Millisecond, MissLatency: time.Millisecond}
	sidecarA, sidecarB := promtest.NewSidecar(t, "promauth-a"), promtest.NewSidecar(t, "promauth-b")
	sidecarA.SetTraffic("promauth-team/a", traffic)
	sidecarB.SetTraffic("promauth-team/b1", traffic)
	sidecarB.SetTraffic("promauth-team/b2", traffic)
	for _, s := range []*promtest.Sidecar{sidecarA, sidecarB} {
		s.SetPlanGeneration(0)
	}
	certs := promtest.NewCerts(t, t.TempDir())
	promA := promtest.StartWeb(t, []string{sidecarA.Address()}, time.Second, certs.BasicAuthWeb())
	promB := promtest.Start(t, []string{sidecarB.Address()}, time.Second)
	gatewayB := promtest.StartBearerGateway(t, promB, token, org)
	promA.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 4`, 1, 30*time.Second)
	promB.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 4`, 2, 30*time.Second)
	caA, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}

	nsA, nsB := env.Namespace(t, "promauth-a"), env.Namespace(t, "promauth-b")
	clusterOn := func(ns, node, url, key string) {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"pool": node}}})
		sidecarPod(t, ns, "shared", node, "10.4.0.1")
		c := sharedCluster(ns, node, url, 100000, v1.PolicyEqual)
		c.Spec.Monitoring.PrometheusHTTPConfig = &v1.PrometheusHTTPConfigSecret{SecretName: "prometheus", Key: key}
		create(t, c)
	}
	secret := func(ns string, data map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"}, StringData: data}
	}
	// metrics waits for the cluster's MetricsAvailable to have status and reason, and a
	// message containing want.
	metrics := func(ns string, status metav1.ConditionStatus, reason, want string) {
		t.Helper()
		testenv.Eventually(t, timeout, func() error {
			c := &v1.CacheCluster{}
			if err := get(c, ns, "shared"); err != nil {
				return err
			}
			got := condition(c.Status.Conditions, conditions.MetricsAvailable)
			if got.Status != status || got.Reason != reason || !strings.Contains(got.Message, want) {
				return fmt.Errorf("%s: MetricsAvailable %s %s %q, want %s %s with %q", ns, got.Status, got.Reason, got.Message, status, reason, want)
			}
			return nil
		})
	}

	const keyB = "gateway.yaml"
	clusterOn(nsA, "promauth-a", promA.URL, "")
	clusterOn(nsB, "promauth-b", gatewayB.URL, keyB)
	metrics(nsA, metav1.ConditionFalse, conditions.ReasonPrometheusHTTPConfigInvalid, "Secret promauth-a/prometheus does not exist")

	const configA = "tls_config:\n  ca_ref: ca.crt\nbasic_auth:\n  username: " + promtest.User + "\n  password_ref: password\n"
	secretA := secret(nsA, map[string]string{v1.DefaultPrometheusHTTPConfigKey: configA, "ca.crt": string(caA), "password": "not-the-password"})
	create(t, secretA)
	metrics(nsA, metav1.ConditionFalse, v1.ReasonPrometheusUnavailable, "401 Unauthorized")

	// Cluster B's Secret first holds what its gateway requires under the default key only,
	// then under its own key the right token without the tenant header, then a file
	// reference, then what its gateway requires.
	const tokenB = "tls_config:\n  ca_ref: ca.crt\nauthorization:\n  credentials_ref: token\n"
	const headerB = "http_headers:\n  X-Scope-OrgID:\n    values: [" + org + "]\n"
	secretB := secret(nsB, map[string]string{v1.DefaultPrometheusHTTPConfigKey: tokenB + headerB, "ca.crt": string(gatewayB.CAPEM), "token": token})
	create(t, secretB)
	metrics(nsB, metav1.ConditionFalse, conditions.ReasonPrometheusHTTPConfigInvalid, `no key "`+keyB+`" (keys: ca.crt, `+v1.DefaultPrometheusHTTPConfigKey+`, token)`)
	secretB.StringData = map[string]string{keyB: tokenB}
	if err := env.Client.Update(ctx(), secretB); err != nil {
		t.Fatal(err)
	}
	metrics(nsB, metav1.ConditionFalse, v1.ReasonPrometheusUnavailable, "403 Forbidden")
	secretB.StringData = map[string]string{keyB: tokenB + "http_headers:\n  X-Scope-OrgID:\n    files: [/etc/hostname]\n"}
	if err := env.Client.Update(ctx(), secretB); err != nil {
		t.Fatal(err)
	}
	metrics(nsB, metav1.ConditionFalse, conditions.ReasonPrometheusHTTPConfigInvalid, "http_headers.X-Scope-OrgID.files read files of the operator's file system")
	secretB.StringData = map[string]string{keyB: tokenB + headerB}
	if err := env.Client.Update(ctx(), secretB); err != nil {
		t.Fatal(err)
	}
	metrics(nsB, metav1.ConditionTrue, conditions.ReasonMetricsRead, "read 2 tenants' series")

	secretA.StringData = map[string]string{"password": promtest.Password}
	if err := env.Client.Update(ctx(), secretA); err != nil {
		t.Fatal(err)
	}
	metrics(nsA, metav1.ConditionTrue, conditions.ReasonMetricsRead, "read 1 tenants' series")
}
