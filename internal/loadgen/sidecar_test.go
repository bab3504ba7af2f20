package loadgen

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// sidecarStartTimeout bounds how long the sidecar may take to apply its plan.
const sidecarStartTimeout = 30 * time.Second

// TestThroughSidecar drives the real cache-sidecar (standalone mode: a plan file and a
// credentials Secret file, as the node agent reads them) for each engine, with three tenants
// at once: one authenticated and unlimited, one held to 2 operations per second, and one
// presenting a wrong password. The first is served without errors, the second gets the
// proxy's throttled replies (counted apart from errors), the third only auth errors.
func TestThroughSidecar(t *testing.T) {
	t.Parallel()
	bin := buildSidecar(t)
	for _, engine := range []string{EngineRedis, EngineMemcached} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			good, limited := newAccount(t, "team-a/orders"), newAccount(t, "team-b/batch")
			addr := startSidecar(t, bin, engine, good, limited)
			dir := t.TempDir()
			goodFile, limitedFile := filepath.Join(dir, "good"), filepath.Join(dir, "limited")
			writeTestFile(t, goodFile, good.password+"\n")
			writeTestFile(t, limitedFile, limited.password)
			res, rows, metrics := runLoad(t, context.Background(), Config{
				Interval: dur(time.Second), Duration: dur(2500 * time.Millisecond),
				Tenants: []TenantConfig{
					{Name: good.id, Engine: engine, Address: addr, PasswordFile: goodFile, Rate: 400,
						Workload: "zipf:keys=2000,skew=1,value=100-1000"},
					// One request at a time per connection: each may wait up to the proxy's 1 s
					// throttle bound, which pipelining would stack.
					{Name: limited.id, Engine: engine, Address: addr, PasswordFile: limitedFile, Rate: 200, Connections: 4, Inflight: 1,
						Workload: "uniform:keys=100"},
					{Name: "team-c/intruder", User: good.id, Password: "not-" + good.password, Engine: engine, Address: addr,
						Workload: "uniform:keys=100", Connections: 1},
				},
			})
			g, l, bad := res.Tenants[0], res.Tenants[1], res.Tenants[2]
			if errs := g.AuthErrors + g.ConnectErrors + g.ReplyErrors + g.IOErrors; errs != 0 || g.Throttled != 0 || !within(float64(g.Ops), 1000, 0.15) || g.Hits == 0 {
				t.Errorf("authenticated tenant: %+v; want about 1000 accesses with hits and no errors", g)
			}
			if l.Throttled == 0 || l.AuthErrors+l.ReplyErrors+l.IOErrors != 0 || l.Ops > 20 {
				t.Errorf("limited tenant: %+v; want at most 2 accesses a second plus a burst, the rest throttled, no errors", l)
			}
			wantAuth := "WRONGPASS"
			if engine == EngineMemcached {
				wantAuth = "CLIENT_ERROR authentication failure"
			}
			if bad.AuthErrors == 0 || bad.Ops != 0 || bad.Gets != 0 || !strings.Contains(bad.LastError, "auth: ") || !strings.Contains(bad.LastError, wantAuth) {
				t.Errorf("tenant with a wrong password: %+v; want auth errors (%s) and no requests", bad, wantAuth)
			}
			if got := metrics[fmt.Sprintf("cacheqos_loadgen_throttled_total{tenant=%q}", limited.id)]; got != float64(l.Throttled) {
				t.Errorf("throttled metric %v, want %d", got, l.Throttled)
			}
			if got := metrics[`cacheqos_loadgen_errors_total{kind="auth",tenant="team-c/intruder"}`]; got != float64(bad.AuthErrors) {
				t.Errorf("auth errors metric %v, want %d", got, bad.AuthErrors)
			}
			if sum := sumColumn(t, tenantRows(rows, limited.id), "throttled"); sum != l.Throttled {
				t.Errorf("CSV throttled column adds up to %d, want %d", sum, l.Throttled)
			}
		})
	}
}

// account is a tenant's credentials, as the operator issues them.
type account struct {
	id, password, hash string
}

func newAccount(t *testing.T, id string) account {
	t.Helper()
	password, hash, err := credentials.Issue()
	if err != nil {
		t.Fatal(err)
	}
	return account{id: id, password: password, hash: hash}
}

// buildSidecar builds cmd/cache-sidecar into a temporary directory.
func buildSidecar(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "cache-sidecar")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/cacheqos/cacheqos/cmd/cache-sidecar").CombinedOutput()
	if err != nil {
		t.Fatalf("building cache-sidecar: %v\n%s", err, out)
	}
	return bin
}

// startSidecar runs the sidecar on a plan holding a partition for good (unlimited) and one for
// limited (2 operations per second), and returns its client address once the plan is applied.
// The sidecar is stopped, with its engines, when the test ends.
func startSidecar(t *testing.T, bin, engine string, good, limited account) string {
	t.Helper()
	dir := t.TempDir()
	root, err := os.MkdirTemp("", "cqlg") // short: engine sockets live below it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// memcached runs as nobody when the sidecar runs as root, and must reach its socket.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	plan := fmt.Sprintf(`apiVersion: cacheqos.io/v1alpha1
kind: CacheNodePlan
metadata: {name: local-node-1}
spec:
  clusterName: local
  nodeName: node-1
  engine: %[1]s
  planGeneration: 1
  partitions:
  - tenant: %[2]s
    memory: 16Mi
    evictionPolicy: lru
    routes: [{nodeName: node-1, host: 127.0.0.1, port: 1, weight: 1}]
  - tenant: %[3]s
    memory: 16Mi
    evictionPolicy: lru
    opsLimit: 2
    routes: [{nodeName: node-1, host: 127.0.0.1, port: 1, weight: 1}]
`, engine, good.id, limited.id)
	goodKey, _ := credentials.SecretKey(good.id)
	limitedKey, _ := credentials.SecretKey(limited.id)
	secret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData:\n  %s: %q\n  %s: %q\n",
		goodKey, good.hash, limitedKey, limited.hash)
	planFile, secretFile := filepath.Join(dir, "plan.yaml"), filepath.Join(dir, "secret.yaml")
	writeTestFile(t, planFile, plan)
	writeTestFile(t, secretFile, secret)

	addr := net.JoinHostPort("127.0.0.1", freePort(t))
	var logs enginetest.LockedBuffer
	cmd := exec.Command(bin, "--engine", engine, "--plan-file", planFile, "--credentials-file", secretFile,
		"--state-root", root, "--client-listen", addr, "--peer-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--shutdown-delay", "0s", "--stop-engines-on-exit")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(sidecarStartTimeout):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the sidecar did not stop on SIGTERM:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(sidecarStartTimeout)
	for {
		if _, applied := logs.LogRecord("plan applied"); applied {
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("the sidecar exited:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not apply its plan within %v:\n%s", sidecarStartTimeout, logs.String())
		}
	}
}
