package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"
	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

func TestParseFlags(t *testing.T) {
	clusterEnv := map[string]string{"NODE_NAME": "node-a", "POD_NAMESPACE": "cache", "CLUSTER_NAME": "shared", "ENGINE": "redis"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr []string
		check   func(t *testing.T, o *options)
	}{
		{
			name: "cluster mode from the environment",
			env:  clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.planName != "shared-node-a" || o.clientListen != defaultRedisClientListen || o.peerListen != defaultPeerListen ||
					o.stateRoot != defaultStateRoot || o.namespace != "cache" || o.peerRetryWindow != proxy.DefaultPeerRetryWindow || !o.peerFailover {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "flags override the environment",
			args: []string{"--plan-name", "custom", "--engine", "memcached", "--node-name", "node-b"},
			env:  clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.planName != "custom" || o.engine != "memcached" || o.clientListen != defaultMemcachedClientListen || o.nodeName != "node-b" {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "peer retry window",
			args: []string{"--peer-retry-window", "3s"},
			env:  clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.peerRetryWindow != 3*time.Second {
					t.Errorf("peer retry window %v, want 3s", o.peerRetryWindow)
				}
			},
		},
		{
			name: "peer failover off",
			args: []string{"--peer-failover=false"},
			env:  clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.peerFailover {
					t.Errorf("peer failover on, want off")
				}
			},
		},
		{
			name: "standalone needs no cluster settings",
			args: []string{"--engine", "redis", "--plan-file", "plan.yaml", "--credentials-file", "secret.yaml"},
			check: func(t *testing.T, o *options) {
				if o.planFile != "plan.yaml" || o.credentialsFile != "secret.yaml" {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name:    "nothing given",
			wantErr: []string{"--engine is required", "--node-name", "--namespace", "--plan-name or --cluster-name"},
		},
		{
			name:    "unknown engine",
			args:    []string{"--engine", "valkey", "--plan-file", "p"},
			wantErr: []string{`--engine "valkey" is neither redis nor memcached`},
		},
		{
			name:    "standalone files without a plan file",
			args:    []string{"--credentials-file", "s.yaml"},
			env:     clusterEnv,
			wantErr: []string{"--credentials-file and --status-file need --plan-file"},
		},
		{
			name:    "bad values",
			args:    []string{"--log-level", "loud", "--log-format", "xml", "--refresh-interval", "0s", "--shutdown-delay", "-1s", "--drain-timeout", "-2s", "--peer-retry-window", "0s"},
			env:     clusterEnv,
			wantErr: []string{`--log-level "loud"`, `--log-format "xml"`, "--refresh-interval 0s must be positive", "--shutdown-delay -1s is negative", "--drain-timeout -2s is negative", "--peer-retry-window 0s must be positive"},
		},
		{
			name:    "engines both stopped and saved on exit",
			args:    []string{"--stop-engines-on-exit", "--save-engines-on-exit", "--save-timeout", "0s"},
			env:     clusterEnv,
			wantErr: []string{"--stop-engines-on-exit and --save-engines-on-exit exclude each other", "--save-timeout 0s must be positive"},
		},
		{
			name: "miss-ratio curve settings",
			args: []string{"--mrc-sampling-rate", "0.25", "--mrc-max-tracked-keys", "1000", "--mrc-curve-points", "8"},
			env:  clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.mrcSamplingRate != 0.25 || o.mrcMaxTrackedKeys != 1000 || o.mrcCurvePoints != 8 {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name:    "bad miss-ratio curve settings",
			args:    []string{"--mrc-sampling-rate", "0", "--mrc-max-tracked-keys", "10", "--mrc-curve-points", "65"},
			env:     clusterEnv,
			wantErr: []string{"--mrc-sampling-rate 0 is outside (0, 1]", "--mrc-max-tracked-keys 10 is below 64", "--mrc-curve-points 65 is outside 3..64"},
		},
		{
			name: "client admission settings",
			args: []string{"--pre-auth-max-request-bytes", "4096", "--login-timeout", "3s", "--idle-timeout", "5m",
				"--max-client-connections", "50", "--auth-backoff-failures", "4", "--auth-backoff", "2s", "--auth-backoff-max", "30s",
				"--max-connection-reply-bytes", "1048576", "--max-reply-bytes-in-flight", "33554432"},
			env: clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.preAuthMaxRequestBytes != 4096 || o.loginTimeout != 3*time.Second || o.idleTimeout != 5*time.Minute ||
					o.maxClientConnections != 50 || o.authBackoffFailures != 4 || o.authBackoff != 2*time.Second || o.authBackoffMax != 30*time.Second ||
					o.maxConnReplyBytes != 1<<20 || o.maxReplyBytesInFlight != 32<<20 {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "bad client admission settings",
			args: []string{"--pre-auth-max-request-bytes", "0", "--login-timeout", "0s", "--idle-timeout", "-1s",
				"--max-client-connections", "-3", "--auth-backoff-failures", "0", "--auth-backoff", "10s", "--auth-backoff-max", "1s",
				"--max-connection-reply-bytes", "0", "--max-reply-bytes-in-flight", "-1"},
			env: clusterEnv,
			wantErr: []string{"--pre-auth-max-request-bytes 0 must be positive", "--login-timeout 0s must be positive",
				"--idle-timeout -1s is negative", "--max-client-connections -3 must be positive", "--auth-backoff-failures 0 must be positive",
				"--auth-backoff-max 1s is below --auth-backoff 10s", "--max-connection-reply-bytes 0 must be positive",
				"--max-reply-bytes-in-flight -1 is below --max-connection-reply-bytes 0"},
		},
		{
			name: "client TLS",
			args: []string{"--client-tls-cert-file", "/tls/tls.crt", "--client-tls-key-file", "/tls/tls.key"},
			env:  clusterEnv,
			check: func(t *testing.T, o *options) {
				if o.clientTLSCert != "/tls/tls.crt" || o.clientTLSKey != "/tls/tls.key" {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name:    "client TLS certificate without its key",
			args:    []string{"--client-tls-cert-file", "/tls/tls.crt"},
			env:     clusterEnv,
			wantErr: []string{"--client-tls-cert-file and --client-tls-key-file go together"},
		},
		{
			name:    "peer TLS without its CA bundle",
			args:    []string{"--peer-tls-cert-file", "/peer/tls.crt", "--peer-tls-key-file", "/peer/tls.key", "--peer-tls-identity", "cacheqos://ns/c"},
			env:     clusterEnv,
			wantErr: []string{"--peer-tls-cert-file, --peer-tls-key-file, --peer-tls-ca-file and --peer-tls-identity go together"},
		},
		{
			name:    "stray argument",
			args:    []string{"extra"},
			env:     clusterEnv,
			wantErr: []string{"unexpected arguments: extra"},
		},
		{
			name:    "unknown flag",
			args:    []string{"--nope"},
			env:     clusterEnv,
			wantErr: []string{"flag provided but not defined: -nope"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			o, err := parseFlags(tc.args, getenv, io.Discard)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, options %+v", o)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, io.Discard); code != exitOK || !strings.HasPrefix(out.String(), "cache-sidecar "+version+" (go") {
		t.Fatalf("exit %d, output %q", code, out.String())
	}
	if code := run(context.Background(), []string{"--engine"}, io.Discard, io.Discard); code != exitUsage {
		t.Fatalf("a bad command line exits %d, want %d", code, exitUsage)
	}
}

// TestStandaloneRun runs the whole command on a plan file with a real redis-server: a client
// authenticates through the proxy; on shutdown the engine keeps running for adoption, unless
// --stop-engines-on-exit says otherwise; with --save-engines-on-exit the engine stops and the
// next sidecar's engine has the key the client wrote.
func TestStandaloneRun(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: run hack/bootstrap.sh apt")
	}
	dir := t.TempDir()
	root, err := os.MkdirTemp("", "cqs") // short: engine sockets live below it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// The safety net when the test fails with engines still running (cleanups run last to
	// first: each sidecar still running stops before this, so none restarts a killed engine).
	t.Cleanup(func() { enginetest.KillEnginesUnder(t, root) })
	const tenant = "team-a/orders"
	password := writeStandaloneFiles(t, dir, "redis", tenant)

	start := func(extra ...string) (stop func() int, logs *enginetest.LockedBuffer) {
		args := append([]string{"--engine", "redis", "--plan-file", filepath.Join(dir, "plan.yaml"),
			"--credentials-file", filepath.Join(dir, "secret.yaml"), "--status-file", filepath.Join(dir, "status.yaml"),
			"--state-root", root, "--client-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0",
			"--metrics-listen", "127.0.0.1:0", "--shutdown-delay", "0s"}, extra...)
		ctx, cancel := context.WithCancel(context.Background())
		logs = &enginetest.LockedBuffer{}
		done := make(chan int, 1)
		go func() { done <- run(ctx, args, io.Discard, logs) }()
		var once sync.Once
		var code int
		stop = func() int {
			once.Do(func() { cancel(); code = <-done })
			return code
		}
		t.Cleanup(func() { stop() }) // a sidecar the test failed to stop
		return stop, logs
	}

	// serve runs the sidecar until the plan is applied and returns its client address and a
	// stop that checks it exits cleanly.
	serve := func(extra ...string) (client string, stop func()) {
		stopRun, logs := start(extra...)
		waitLog(t, logs, "plan applied")
		listening := waitLog(t, logs, "listening")
		return listening["client"].(string), func() {
			if code := stopRun(); code != exitOK {
				t.Fatalf("exit %d:\n%s", code, logs)
			}
		}
	}

	client, stop := serve()
	pid := roundTrip(t, client, tenant, password, root)
	stop()
	if !alive(pid) {
		t.Fatalf("the engine (pid %d) stopped with the sidecar; it should stay for adoption", pid)
	}

	client, stop = serve("--stop-engines-on-exit")
	if again := roundTrip(t, client, tenant, password, root); again != pid {
		t.Errorf("the restarted sidecar runs engine pid %d, want the adopted %d", again, pid)
	}
	stop()
	if alive(pid) {
		t.Fatalf("the engine (pid %d) still runs after --stop-engines-on-exit", pid)
	}

	// Saved on exit: the engine stops, and the next sidecar's engine has the key.
	client, stop = serve("--save-engines-on-exit")
	pid = roundTrip(t, client, tenant, password, root)
	stop()
	if alive(pid) {
		t.Fatalf("the engine (pid %d) still runs after --save-engines-on-exit", pid)
	}
	client, stop = serve("--stop-engines-on-exit")
	if got := redisSession(t, client, tenant, password)("GET", "k"); got != "v" {
		t.Errorf("GET k after --save-engines-on-exit and a restart: %q, want \"v\"", got)
	}
	stop()
}

// writeStandaloneFiles writes plan.yaml, a plan of node-1 with one 16Mi partition of tenant,
// and secret.yaml, the credentials Secret with the hash of a new password, into dir; it
// returns the password.
func writeStandaloneFiles(t *testing.T, dir, engineName, tenant string) string {
	t.Helper()
	password, hash, err := credentials.Issue()
	if err != nil {
		t.Fatal(err)
	}
	key, err := credentials.SecretKey(tenant)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "plan.yaml"), `apiVersion: cacheqos.io/v1alpha1
kind: CacheNodePlan
metadata: {name: local-node-1}
spec:
  clusterName: local
  nodeName: node-1
  engine: `+engineName+`
  planGeneration: 3
  partitions:
  - tenant: `+tenant+`
    memory: 16Mi
    evictionPolicy: lru
    routes: [{nodeName: node-1, host: 127.0.0.1, port: 1, weight: 1}]
`)
	writeFile(t, filepath.Join(dir, "secret.yaml"), "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData:\n  "+key+": \""+hash+"\"\n")
	return password
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func waitLog(t *testing.T, logs *enginetest.LockedBuffer, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if rec, ok := logs.LogRecord(msg); ok {
			return rec
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q in the log:\n%s", msg, logs)
	return nil
}

// roundTrip authenticates through the proxy at addr, SETs k and GETs it back, and returns the
// PID of the one engine under stateRoot.
func roundTrip(t *testing.T, addr, user, password, stateRoot string) int {
	t.Helper()
	send := redisSession(t, addr, user, password)
	if got := send("SET", "k", "v"); got != "+OK" {
		t.Fatalf("SET: %q", got)
	}
	if got := send("GET", "k"); got != "v" {
		t.Fatalf("GET: %q", got)
	}
	// The engine's pid from its partition's pidfile: tenants' INFO no longer shows it.
	pidfiles, err := filepath.Glob(filepath.Join(stateRoot, "*", "pid"))
	if err != nil || len(pidfiles) != 1 {
		t.Fatalf("pidfiles under the state root: %v (%v), want one partition's", pidfiles, err)
	}
	data, err := os.ReadFile(pidfiles[0])
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		t.Fatalf("pidfile %s holds %q", pidfiles[0], data)
	}
	return pid
}

// redisSession authenticates through the proxy at addr and returns a function that sends one
// command and returns its reply: a bulk string's content, or the line of any other reply.
func redisSession(t *testing.T, addr, user, password string) (send func(args ...string) string) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	send = func(args ...string) string {
		fmt.Fprintf(nc, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(nc, "$%d\r\n%s\r\n", len(a), a)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "$") {
			n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
			if err != nil || n < 0 {
				return strings.TrimSpace(line)
			}
			body := make([]byte, n+2)
			if _, err := io.ReadFull(br, body); err != nil {
				t.Fatal(err)
			}
			return string(body[:n])
		}
		return strings.TrimSpace(line)
	}
	if got := send("AUTH", user, password); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	return send
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && syscall.Kill(pid, 0) == nil
}
