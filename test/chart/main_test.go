package chart

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// promOperatorModule holds the ServiceMonitor and PrometheusRule types; its version is the
// one go.mod pins.
const promOperatorModule = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"

// certManagerModule holds cert-manager's CRDs; hack/modules/cert-manager pins its version.
const certManagerModule = "github.com/cert-manager/cert-manager"

// fixture is what TestMain sets up once for every test.
var fixture struct {
	repo     string // module root
	chartDir string
	helm     string
	promtool string
	// sidecarRegistry holds the cache sidecar's collectors (newSidecarRegistry).
	sidecarRegistry *prometheus.Registry
	// kubeVersion is the API server's version, given to helm so that rendering sees the
	// cluster the manifests are applied to.
	kubeVersion string

	// kubeconfig is a file for helm commands that talk to the API server.
	kubeconfig string

	config    *rest.Config
	client    client.Client
	clientset kubernetes.Interface
	discovery discovery.DiscoveryInterface
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	// Fuzzing (go test -fuzz) runs only a fuzz target, which needs none of the fixtures, in
	// several worker processes: starting a control plane in each would only slow it down.
	flag.Parse()
	if fuzzing() {
		return m.Run()
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "test/chart: "+format+"\n", args...)
		return 1
	}
	repo, err := moduleRoot()
	if err != nil {
		return fail("%v", err)
	}
	fixture.repo = repo
	fixture.chartDir = filepath.Join(repo, "charts", "cacheqos")
	if fixture.helm, err = tool("helm"); err != nil {
		return fail("%v", err)
	}
	if fixture.promtool, err = tool("promtool"); err != nil {
		return fail("%v (Debian package prometheus: hack/bootstrap.sh apt)", err)
	}
	registry, stopSidecar, err := newSidecarRegistry()
	if err != nil {
		return fail("registering the cache sidecar's metrics: %v", err)
	}
	defer stopSidecar()
	fixture.sidecarRegistry = registry
	controllerGen, err := tool("controller-gen")
	if err != nil {
		return fail("%v", err)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if err := os.Setenv("KUBEBUILDER_ASSETS", filepath.Join(repo, "bin", "envtest")); err != nil {
			return fail("%v", err)
		}
	}

	crdDir, err := os.MkdirTemp("", "cacheqos-chart-crds-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(crdDir)
	if err := generatePrometheusOperatorCRDs(controllerGen, crdDir); err != nil {
		return fail("%v", err)
	}
	if err := copyCertManagerCRDs(crdDir); err != nil {
		return fail("%v", err)
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repo, "config", "crd", "bases"), crdDir},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return fail("starting the envtest control plane (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "test/chart: stopping the envtest control plane: %v\n", err)
		}
	}()
	if err := connect(cfg); err != nil {
		return fail("%v", err)
	}
	admin, err := env.AddUser(envtest.User{Name: "chart-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail("adding a user for helm: %v", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return fail("%v", err)
	}
	fixture.kubeconfig = filepath.Join(crdDir, "kubeconfig")
	if err := os.WriteFile(fixture.kubeconfig, kubeconfig, 0o600); err != nil {
		return fail("%v", err)
	}
	return m.Run()
}

func connect(cfg *rest.Config) error {
	fixture.config = cfg
	var err error
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	if fixture.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if fixture.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	fixture.discovery = fixture.clientset.Discovery()
	version, err := fixture.discovery.ServerVersion()
	if err != nil {
		return fmt.Errorf("asking the API server for its version: %w", err)
	}
	fixture.kubeVersion = version.GitVersion
	return nil
}

// fuzzing reports whether this process runs or coordinates a fuzz target.
func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// moduleRoot finds go.mod above the working directory (the package folder under go test).
func moduleRoot() (string, error) {
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

// tool finds a command on PATH, else in the repository's bin/ where hack/bootstrap.sh puts it.
func tool(name string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	path := filepath.Join(fixture.repo, "bin", name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is neither on PATH nor in %s: run hack/bootstrap.sh", name, filepath.Dir(path))
	}
	return path, nil
}

// generatePrometheusOperatorCRDs writes the ServiceMonitor and PrometheusRule CRDs into dir,
// generated by controller-gen from the prometheus-operator module go.mod pins (the other
// monitoring CRDs are large and the chart creates none of them).
func generatePrometheusOperatorCRDs(controllerGen, dir string) error {
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", promOperatorModule)
	list.Dir = fixture.repo
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("go list -m %s: %w", promOperatorModule, commandError(err))
	}
	moduleDir := strings.TrimSpace(string(out))
	if moduleDir == "" {
		return fmt.Errorf("go list -m %s: the module is not downloaded (go mod download)", promOperatorModule)
	}
	all := filepath.Join(dir, "all")
	gen := exec.Command(controllerGen, "crd", "paths=./v1/...", "output:crd:dir="+all)
	gen.Dir = moduleDir
	if out, err := gen.CombinedOutput(); err != nil {
		return fmt.Errorf("controller-gen crd in %s: %w: %s", moduleDir, err, out)
	}
	for _, name := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		if err := os.Rename(filepath.Join(all, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("controller-gen did not write %s: %w", name, err)
		}
	}
	return os.RemoveAll(all)
}

// copyCertManagerCRDs copies the Certificate and Issuer CRDs, which the operator's RBAC names,
// into dir from the cert-manager module hack/modules/cert-manager pins (downloaded, not built).
func copyCertManagerCRDs(dir string) error {
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", certManagerModule)
	list.Dir = filepath.Join(fixture.repo, "hack", "modules", "cert-manager")
	list.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("go list -m %s in hack/modules/cert-manager: %w", certManagerModule, commandError(err))
	}
	for _, name := range []string{"cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml"} {
		crd, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", name))
		if err != nil {
			return fmt.Errorf("the cert-manager module lacks its CRD: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), crd, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// commandError adds a failed command's standard error to its error.
func commandError(err error) error {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && len(exitErr.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exitErr.Stderr)))
	}
	return err
}
