package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// testClientTLS: on clusters with spec.tls.enabled, tenants' clients trusting only the ca.crt
// of their credentials Secret authenticate and read back their writes over TLS, and a
// plaintext client is disconnected without a reply. The clients are the test's own Go client,
// redis-cli and redis-py for redis, and pymemcache for memcached, run on this host.
func testClientTLS(t *testing.T) {
	t.Parallel()
	t.Run("redis", testRedisClientTLS)
	t.Run("memcached", testMemcachedClientTLS)
}

// tlsTenant is an admitted tenant of a TLS cluster, as its clients on this host see it.
type tlsTenant struct {
	user, password string
	// serverName is the endpoint's host, the name the serving certificate carries; addr is
	// the client Service's IP and port, which the clients dial (no DNS on the host).
	serverName, addr string
	ca               []byte
	caFile           string
}

// readyTLSTenant creates a TLS cluster of the engine (mutate adjusts it further), admits a
// tenant and waits for its credentials Secret to carry ca.crt.
func readyTLSTenant(t *testing.T, engine v1.Engine, mutate func(*v1.CacheCluster)) tlsTenant {
	t.Helper()
	ns := newNamespace(t, "tls-"+string(engine))
	c := testCluster(ns, "tls", func(c *v1.CacheCluster) {
		c.Spec.Engine = engine
		c.Spec.TLS = v1.ClientTLS{Enabled: true}
		if mutate != nil {
			mutate(c)
		}
	})
	readyCluster(t, c)
	s := tenant(tenantNamespace(t, "tls-team"), "web", c, "0.5", "8Mi", "32Mi")
	admittedTenant(t, s)
	var data map[string][]byte
	waitFor(t, time.Minute, "the tenant's credentials to carry ca.crt", func() (bool, error) {
		secret, err := cluster.client.CoreV1().Secrets(s.Namespace).Get(t.Context(), s.Name+"-cache-credentials", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		data = secret.Data
		return len(secret.Data["ca.crt"]) > 0, nil
	})
	serverName, _, err := net.SplitHostPort(string(data["endpoint"]))
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, data["ca.crt"], 0o600); err != nil {
		t.Fatal(err)
	}
	return tlsTenant{user: string(data["username"]), password: string(data["password"]),
		serverName: serverName, addr: clientAddress(t, c), ca: data["ca.crt"], caFile: caFile}
}

// testRedisClientTLS: the Go client checking the endpoint's name, redis-cli --tls --cacert and
// redis-py with ssl=True each write and read back values the others wrote.
func testRedisClientTLS(t *testing.T) {
	t.Parallel()
	tt := readyTLSTenant(t, v1.EngineRedis, nil)
	client := dialRedisTLS(t, tt.addr, tt.serverName, tt.ca)
	client.expect("OK", "AUTH", tt.user, tt.password)
	client.expect("OK", "SET", "over-tls", "yes")
	client.expect("yes", "GET", "over-tls")

	// hiredis verifies the chain against --cacert and sends --sni, but does not match the
	// certificate's names: the Go and Python clients check those.
	ip, port, _ := net.SplitHostPort(tt.addr)
	cli := func(args ...string) string {
		return strings.TrimSpace(runHostClient(t, "redis-cli", append([]string{"-h", ip, "-p", port, "--tls", "--cacert", tt.caFile,
			"--sni", tt.serverName, "--user", tt.user, "--pass", tt.password, "--no-auth-warning"}, args...)...))
	}
	if out := cli("SET", "cli-key", "from redis-cli"); out != "OK" {
		t.Fatalf("redis-cli SET over TLS: %q", out)
	}
	if out := cli("GET", "over-tls"); out != "yes" {
		t.Fatalf("redis-cli GET of the Go client's key over TLS: %q", out)
	}
	py := resolveInPython + `import redis
r = redis.Redis(host=name, port=int(sys.argv[3]), ssl=True, ssl_ca_certs=sys.argv[4], ssl_check_hostname=True,
                username=sys.argv[5], password=sys.argv[6])
r.set("py-key", "from redis-py")
print(r.get("py-key").decode(), r.get("cli-key").decode(), sep="|")
`
	if out := runHostClient(t, "python3", "-c", py, tt.serverName, ip, port, tt.caFile, tt.user, tt.password); strings.TrimSpace(out) != "from redis-py|from redis-cli" {
		t.Fatalf("redis-py with ssl=True: %q", out)
	}
	client.expect("from redis-py", "GET", "py-key")

	plaintextRefused(t, tt.addr, "*1\r\n$4\r\nPING\r\n", "PONG")
}

// testMemcachedClientTLS: pymemcache with a tls_context checking the endpoint's name logs in
// (memcached's -Y convention) and reads back its write. One node: a second sidecar adds
// nothing to what TLS is tested for.
func testMemcachedClientTLS(t *testing.T) {
	t.Parallel()
	tt := readyTLSTenant(t, v1.EngineMemcached, onNode(cluster.nodes[0]))
	ip, port, _ := net.SplitHostPort(tt.addr)
	waitFor(t, serviceTimeout, "a connection to "+tt.addr, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", tt.addr, 2*time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil, nil
	})
	py := resolveInPython + `import ssl
from pymemcache.client.base import Client
c = Client((name, int(sys.argv[3])), tls_context=ssl.create_default_context(cafile=sys.argv[4]), timeout=10, connect_timeout=10)
c.set("auth", sys.argv[5] + " " + sys.argv[6], noreply=False)
c.set("mc-key", "from pymemcache", noreply=False)
print(c.get("mc-key").decode())
`
	if out := runHostClient(t, "python3", "-c", py, tt.serverName, ip, port, tt.caFile, tt.user, tt.password); strings.TrimSpace(out) != "from pymemcache" {
		t.Fatalf("pymemcache over TLS: %q", out)
	}
	plaintextRefused(t, tt.addr, "get mc-key\r\n", "VALUE")
}

// resolveInPython starts a client script: the host has no cluster DNS, so the endpoint's name
// (argv[1]) resolves to the Service's IP (argv[2]), and the client connects by name and
// checks the certificate against it, as a pod would.
const resolveInPython = `import socket, sys
name, ip = sys.argv[1], sys.argv[2]
resolve = socket.getaddrinfo
socket.getaddrinfo = lambda host, *rest, **kw: resolve(ip if host == name else host, *rest, **kw)
`

// runHostClient runs a client program installed on this host (hack/bootstrap.sh) and returns
// its output; a non-zero exit fails the test.
func runHostClient(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v:\n%s", name, args[:min(len(args), 4)], err, out)
	}
	return string(out)
}

// plaintextRefused: a client speaking the protocol without TLS to the TLS port has its
// connection closed without reply.
func plaintextRefused(t *testing.T, addr, request, reply string) {
	t.Helper()
	plain, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(plain, request); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(plain); err != nil && !strings.Contains(err.Error(), "reset") || strings.Contains(string(got), reply) {
		t.Fatalf("a plaintext client to the TLS port got %q, %v; want the connection closed", got, err)
	}
}
