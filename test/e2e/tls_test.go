package e2e

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// testClientTLS: on a cluster with spec.tls.enabled a tenant's client, trusting only the
// ca.crt of its credentials Secret and checking the name of its endpoint, authenticates and
// reads back its writes over TLS; a plaintext client is disconnected without a reply.
func testClientTLS(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "tls")
	c := testCluster(ns, "tls", func(c *v1.CacheCluster) { c.Spec.TLS = v1.ClientTLS{Enabled: true} })
	readyCluster(t, c)
	s := tenant(tenantNamespace(t, "tls-team"), "web", c, "0.5", "8Mi", "32Mi")
	admittedTenant(t, s)
	var secretData map[string][]byte
	waitFor(t, time.Minute, "the tenant's credentials to carry ca.crt", func() (bool, error) {
		secret, err := cluster.client.CoreV1().Secrets(s.Namespace).Get(t.Context(), s.Name+"-cache-credentials", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		secretData = secret.Data
		return len(secret.Data["ca.crt"]) > 0, nil
	})
	host, _, err := net.SplitHostPort(string(secretData["endpoint"]))
	if err != nil {
		t.Fatal(err)
	}
	// No DNS on the host: the client dials the Service's IP and checks the endpoint's name.
	addr := clientAddress(t, c)
	client := dialRedisTLS(t, addr, host, secretData["ca.crt"])
	client.expect("OK", "AUTH", string(secretData["username"]), string(secretData["password"]))
	client.expect("OK", "SET", "over-tls", "yes")
	client.expect("yes", "GET", "over-tls")

	plain, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(plain, "*1\r\n$4\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(plain); err != nil && !strings.Contains(err.Error(), "reset") || strings.Contains(string(got), "PONG") {
		t.Fatalf("a plaintext client to the TLS port got %q, %v; want the connection closed", got, err)
	}
}
