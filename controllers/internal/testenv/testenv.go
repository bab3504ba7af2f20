// Package testenv runs the cacheqos operator against a real kube-apiserver and etcd
// (controller-runtime's envtest, binaries from KUBEBUILDER_ASSETS) for the controllers'
// test suites: the CRDs from config/crd/bases, the manager built by controllers.Setup, and
// the prometheus-operator CRDs generated on demand from the monitoring module's Go types.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/cachecluster"
)

// monitoringModule is the Go module whose v1 types define ServiceMonitor and PrometheusRule.
const monitoringModule = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"

// Images are default images for the operator under test; nothing pulls them.
var Images = cachecluster.Images{Sidecar: "test/cache-sidecar:v1", Redis: "test/redis:v1", Memcached: "test/memcached:v1"}

// Env is a control plane with the operator running against it.
type Env struct {
	// Config reaches the API server; Client reads and writes without a cache.
	Config *rest.Config
	Client client.Client
	// Loop is the operator's allocation loop.
	Loop *allocation.Loop
	// Requests holds every request the operator sent (not the tests' own, through Client).
	Requests *Requests

	env    *envtest.Environment
	root   string
	cancel context.CancelFunc
	done   chan error
}

// repoRoot finds the module root above the working directory (a package directory under test).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// LogLevelEnv names the variable that sets the operator's log level in tests (DEBUG, INFO,
// WARN, ERROR; default ERROR).
const LogLevelEnv = "CACHEQOS_TEST_LOG"

// Start starts the control plane with the cacheqos CRDs and runs the operator with opts.
func Start(opts controllers.Options) (*Env, error) {
	level := slog.LevelError
	if v := os.Getenv(LogLevelEnv); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("%s: %w", LogLevelEnv, err)
		}
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	e := &Env{root: root, env: &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}}
	e.Config, err = e.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the envtest control plane (KUBEBUILDER_ASSETS=%q): %w", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	if err := e.startOperator(opts); err != nil {
		_ = e.env.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) startOperator(opts controllers.Options) error {
	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	e.Client, err = client.New(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	e.Requests = &Requests{}
	operatorConfig := rest.CopyConfig(e.Config)
	operatorConfig.Wrap(e.Requests.wrap)
	mgr, err := ctrl.NewManager(operatorConfig, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// A restarted operator registers its controllers under the same names again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if e.Loop, err = controllers.Setup(ctx, mgr, opts); err != nil {
		cancel()
		return err
	}
	e.done = make(chan error, 1)
	go func() { e.done <- mgr.Start(ctx) }()
	return nil
}

// stopOperator stops the manager and waits for it.
func (e *Env) stopOperator() error {
	e.cancel()
	select {
	case err := <-e.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("the manager did not stop within 30s")
	}
}

// RestartOperator stops the operator and starts a new one with opts, as a new leader would.
func (e *Env) RestartOperator(opts controllers.Options) error {
	if err := e.stopOperator(); err != nil {
		return err
	}
	return e.startOperator(opts)
}

// Stop stops the operator and the control plane.
func (e *Env) Stop() error {
	return errors.Join(e.stopOperator(), e.env.Stop())
}

// InstallPrometheusOperatorCRDs generates the ServiceMonitor and PrometheusRule CRDs from the
// monitoring module the operator is built with (controller-gen from CONTROLLER_GEN, the
// repository's bin/ or PATH) and installs them, as a cluster would that runs the
// prometheus-operator. Nothing third-party is kept in the repository.
func (e *Env) InstallPrometheusOperatorCRDs() error {
	dir, err := os.MkdirTemp("", "cacheqos-prometheus-operator-crds")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	modDir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", monitoringModule).Output()
	if err != nil {
		return fmt.Errorf("locating module %s: %w", monitoringModule, err)
	}
	gen, err := e.controllerGen()
	if err != nil {
		return err
	}
	cmd := exec.Command(gen, "crd", "paths="+filepath.Join(strings.TrimSpace(string(modDir)), "v1")+"/...", "output:crd:artifacts:config="+dir)
	cmd.Dir = e.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("generating the prometheus-operator CRDs: %w\n%s", err, out)
	}
	var paths []string
	for _, kind := range []string{"servicemonitors", "prometheusrules"} {
		paths = append(paths, filepath.Join(dir, "monitoring.coreos.com_"+kind+".yaml"))
	}
	_, err = envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}

func (e *Env) controllerGen() (string, error) {
	if p := os.Getenv("CONTROLLER_GEN"); p != "" {
		return p, nil
	}
	if p := filepath.Join(e.root, "bin", "controller-gen"); fileExists(p) {
		return p, nil
	}
	p, err := exec.LookPath("controller-gen")
	if err != nil {
		return "", errors.New("controller-gen not found: set CONTROLLER_GEN, run hack/bootstrap.sh, or put it on PATH")
	}
	return p, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Namespace creates a namespace for one test (envtest never deletes namespaces, so every
// test uses its own name).
func (e *Env) Namespace(t testing.TB, name string) string {
	t.Helper()
	if err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// Eventually calls check until it returns nil, failing the test with its last error after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
