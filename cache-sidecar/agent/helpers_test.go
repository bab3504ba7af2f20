package agent

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"
	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// Test fixtures: namespaces, credentials, plans, a restricted sidecar user, and whole sidecars
// (a real proxy on loopback listeners plus an agent running real engines) driven by the
// envtest API server.

var namespaceSeq atomic.Int32

// newNamespace creates a namespace of its own for one test (envtest never deletes namespaces).
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("agent-%d-%d", os.Getpid()%10000, namespaceSeq.Add(1))
	if err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// tenantCredentials generates a password per tenant and returns the passwords and the Secret
// data the operator would write: a credentials.Hash per tenant key plus the peer token.
func tenantCredentials(t *testing.T, tenants ...string) (passwords map[string]string, data map[string][]byte) {
	t.Helper()
	passwords = make(map[string]string, len(tenants))
	data = map[string][]byte{PeerTokenKey: []byte("peer-token-for-tests")}
	for _, tenant := range tenants {
		password, hash, err := credentials.Issue()
		if err != nil {
			t.Fatal(err)
		}
		key, err := credentials.SecretKey(tenant)
		if err != nil {
			t.Fatal(err)
		}
		passwords[tenant] = password
		data[key] = []byte(hash)
	}
	return passwords, data
}

func createSecret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := admin.Create(context.Background(), secret); err != nil {
		t.Fatalf("creating Secret %s/%s: %v", ns, name, err)
	}
}

// partition is one partition of a test plan, routed to this node only.
func partition(tenant, memory string, peer string) v1.PartitionPlan {
	return v1.PartitionPlan{
		Tenant:         tenant,
		Memory:         resource.MustParse(memory),
		EvictionPolicy: v1.EvictionLRU,
		Routes:         []v1.TenantRoute{routeTo(testNode, peer)},
	}
}

// routeTo is a route of weight 1 to node's sidecar listening at address (host:port).
func routeTo(node, address string) v1.TenantRoute {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		panic(err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		panic(err)
	}
	return v1.TenantRoute{NodeName: node, Host: host, Port: int32(n), Weight: 1}
}

const testNode = "node-a"

func planName(cluster string) string { return cluster + "-" + testNode }

func createPlan(t *testing.T, ns, cluster string, eng v1.Engine, secret string, gen int64, parts ...v1.PartitionPlan) {
	t.Helper()
	plan := &v1.CacheNodePlan{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: planName(cluster)},
		Spec: v1.CacheNodePlanSpec{
			ClusterName:       cluster,
			NodeName:          testNode,
			Engine:            eng,
			PlanGeneration:    gen,
			CredentialsSecret: secret,
		},
	}
	plan.Spec.SetPartitions(parts)
	if err := admin.Create(context.Background(), plan); err != nil {
		t.Fatalf("creating plan: %v", err)
	}
}

// updatePlan changes the plan's partitions and generation as the operator would.
func updatePlan(t *testing.T, ns, cluster string, gen int64, parts ...v1.PartitionPlan) {
	t.Helper()
	ctx := context.Background()
	var plan v1.CacheNodePlan
	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: planName(cluster)}, &plan); err != nil {
		t.Fatal(err)
	}
	plan.Spec.PlanGeneration = gen
	plan.Spec.SetPartitions(parts)
	if err := admin.Update(ctx, &plan); err != nil {
		t.Fatalf("updating plan: %v", err)
	}
}

func getPlan(t *testing.T, ns, cluster string) *v1.CacheNodePlan {
	t.Helper()
	var plan v1.CacheNodePlan
	if err := admin.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: planName(cluster)}, &plan); err != nil {
		t.Fatal(err)
	}
	return &plan
}

// waitForPlan polls the plan until cond holds, failing the test with the last status after
// timeout.
func waitForPlan(t *testing.T, ns, cluster string, timeout time.Duration, what string, cond func(*v1.CacheNodePlan) bool) *v1.CacheNodePlan {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		plan := getPlan(t, ns, cluster)
		if cond(plan) {
			return plan
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status: %+v", what, plan.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func partitionStatus(plan *v1.CacheNodePlan, tenant string) (v1.PartitionStatus, bool) {
	for _, ps := range plan.Status.Partitions {
		if ps.Tenant == tenant {
			return ps, true
		}
	}
	return v1.PartitionStatus{}, false
}

var userSeq atomic.Int32

// sidecarUser is a user with exactly the sidecar's Role in ns: read its one plan and patch its
// status, read its one Secret. Any broader read by the agent fails at the API server.
func sidecarUser(t *testing.T, ns, plan, secret string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("sidecar-%s-%d", ns, userSeq.Add(1))
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1.GroupVersion.Group}, Resources: []string{"cachenodeplans"}, ResourceNames: []string{plan}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{v1.GroupVersion.Group}, Resources: []string{"cachenodeplans/status"}, ResourceNames: []string{plan}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}
	if err := admin.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	user, err := testEnv.AddUser(envtest.User{Name: name}, adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	return user.Config()
}

// sidecar is one node's sidecar under test: a real proxy on loopback and an agent with real
// engines.
type sidecar struct {
	t          *testing.T
	root       string
	proxy      *proxy.Proxy
	agent      *Agent
	registry   *prometheus.Registry
	clientAddr string
	peerAddr   string
	cancel     context.CancelFunc
	done       chan error
}

type sidecarSpec struct {
	engine  engine.Engine
	root    string // empty: a fresh short directory
	peer    net.Listener
	refresh time.Duration
	backoff time.Duration
	kube    *KubeConfig
	node    string // empty: testNode
}

// engineRoot is a fresh state root short enough for unix socket paths (t.TempDir() paths
// carry the test name and may be too long), searchable by the user memcached runs as.
func engineRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "cq")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		enginetest.KillEnginesUnder(t, root)
		os.RemoveAll(root)
	})
	return root
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startSidecar starts a proxy and an agent; with spec.kube the agent follows the plan in the
// API server. The sidecar stops at the end of the test, stopping its engines unless stop was
// called before.
func startSidecar(t *testing.T, spec sidecarSpec) *sidecar {
	t.Helper()
	if spec.root == "" {
		spec.root = engineRoot(t)
	}
	if spec.peer == nil {
		spec.peer = listen(t)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	registry := prometheus.NewRegistry()
	protocol := proxy.Redis
	if spec.engine == engine.Memcached {
		protocol = proxy.Memcached
	}
	px, err := proxy.New(proxy.Options{Protocol: protocol, Registry: registry, Logger: log.With("component", "proxy")})
	if err != nil {
		t.Fatal(err)
	}
	clientLn := listen(t)
	go serveUntilClosed(t, "client listener", func() error { return px.Serve(clientLn) })
	go serveUntilClosed(t, "peer listener", func() error { return px.ServePeer(spec.peer) })
	ag, err := New(context.Background(), Config{
		NodeName: cmp.Or(spec.node, testNode),
		Engines: engine.Config{
			Engine:         spec.engine,
			Root:           spec.root,
			StopTimeout:    3 * time.Second,
			BackoffInitial: cmpDuration(spec.backoff, 100*time.Millisecond),
			BackoffMax:     cmpDuration(spec.backoff, 2*time.Second),
			PollInterval:   50 * time.Millisecond,
		},
		Proxy:           px,
		Registry:        registry,
		RefreshInterval: cmpDuration(spec.refresh, time.Second),
		Logger:          log,
	})
	if err != nil {
		px.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sidecar{t: t, root: spec.root, proxy: px, agent: ag, registry: registry,
		clientAddr: clientLn.Addr().String(), peerAddr: spec.peer.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	if spec.kube != nil {
		go func() { s.done <- ag.RunKubernetes(ctx, *spec.kube) }()
	} else {
		close(s.done)
	}
	t.Cleanup(func() { s.stop(true) })
	return s
}

// serveUntilClosed runs a proxy listener; anything but the proxy closing fails the test.
func serveUntilClosed(t *testing.T, what string, serve func() error) {
	if err := serve(); err != nil && !errors.Is(err, proxy.ErrClosed) {
		t.Errorf("%s: %v", what, err)
	}
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// stop ends the agent and the proxy; with stopEngines the engines are stopped too, otherwise
// they keep running for the next agent on the same root.
func (s *sidecar) stop(stopEngines bool) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err, ok := <-s.done:
		if ok && err != nil {
			s.t.Errorf("agent: %v", err)
		}
	case <-time.After(30 * time.Second):
		s.t.Errorf("the agent did not stop within 30s")
	}
	if stopEngines {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.agent.StopEngines(ctx); err != nil {
			s.t.Errorf("stopping engines: %v", err)
		}
	}
	s.proxy.Close()
	s.agent.Close()
}

// testWriter sends log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// respClient is a minimal RESP2 client for checking what tenants see through the proxy.
type respClient struct {
	nc net.Conn
	br *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *respClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &respClient{nc: nc, br: bufio.NewReader(nc)}
}

// errNil is a nil bulk reply.
var errNil = errors.New("(nil)")

// do sends a command and returns a simple, integer or bulk reply as text; an error reply is
// returned as an error.
func (c *respClient) do(args ...string) (string, error) {
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.nc.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := c.br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", errNil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// memcacheClient is a minimal memcached text-protocol client.
type memcacheClient struct {
	nc net.Conn
	br *bufio.Reader
}

func dialMemcache(t *testing.T, addr string) *memcacheClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &memcacheClient{nc: nc, br: bufio.NewReader(nc)}
}

// set stores a value and returns the reply line ("STORED" or an error line).
func (c *memcacheClient) set(key, value string) (string, error) {
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c.nc, "set %s 0 0 %d\r\n%s\r\n", key, len(value), value); err != nil {
		return "", err
	}
	line, err := c.br.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// auth authenticates with memcached's -Y convention: a set whose value is "<user> <password>".
func (c *memcacheClient) auth(user, password string) (string, error) {
	return c.set("auth", user+" "+password)
}

// get returns the value of key; found is false on a miss.
func (c *memcacheClient) get(key string) (value string, found bool, err error) {
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c.nc, "get %s\r\n", key); err != nil {
		return "", false, err
	}
	line, err := c.br.ReadString('\n')
	if err != nil {
		return "", false, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "END" {
		return "", false, nil
	}
	fields := strings.Fields(line)
	if len(fields) != 4 || fields[0] != "VALUE" {
		return "", false, fmt.Errorf("unexpected reply %q", line)
	}
	n, err := strconv.Atoi(fields[3])
	if err != nil {
		return "", false, err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return "", false, err
	}
	end, err := c.br.ReadString('\n')
	if err != nil || strings.TrimRight(end, "\r\n") != "END" {
		return "", false, fmt.Errorf("no END after the value: %q, %w", end, err)
	}
	return string(buf[:n]), true, nil
}

// enginePID is the PID of the engine serving tenant in s, 0 when there is none.
func (s *sidecar) enginePID(tenant string) int {
	st, ok := s.agent.engines.Status(tenant)
	if !ok {
		return 0
	}
	return st.PID
}

// processAlive reports whether pid is a live process (not a zombie: engines are reaped by
// the manager that started them, but adopted ones are not our children).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}
