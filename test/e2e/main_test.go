package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// keepClusterEnv names the variable that leaves the cluster running after the tests.
const keepClusterEnv = "CACHEQOS_E2E_KEEP_CLUSTER"

// teardownMargin is how long before `go test`'s own deadline the cluster is purged: the test
// binary panics at the deadline without running deferred functions.
const teardownMargin = 45 * time.Second

// kubeconfigEnv names the variable that points the suite at a running cluster (kind) instead
// of starting the local one.
const kubeconfigEnv = "CACHEQOS_E2E_KUBECONFIG"

// clusterNodes is how many nodes the suite needs: the local cluster is started with that many
// (CACHEQOS_CLUSTER_NODES), and a cluster it is given or reuses must have that many Ready.
const clusterNodes = 3

// imageNames are the images of hack/images/build.sh the suite runs.
var imageNames = []string{"smoke", "redis", "operator", "cache-sidecar", "loadgen",
	"prometheus-operator", "prometheus-config-reloader", "prometheus"}

// localTag is the tag hack/images/build.sh (and hack/kind.sh) give an image.
func localTag(name string) string { return "localhost/cacheqos/" + name + ":local" }

// cluster is the shared fixture TestMain sets up.
var cluster struct {
	repo       string
	kubeconfig string
	nodes      []string // the Ready nodes, sorted by name
	// prometheusURL is the in-cluster Prometheus, reachable from this host.
	prometheusURL string
	client        kubernetes.Interface
	kube          ctrlclient.Client // typed client that knows the cacheqos.io kinds
	images        map[string]string // image name in hack/images/build.sh -> tag
	imageIDs      map[string]string // image name -> ID, for images this run built
}

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
}

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		logf("skipped in -short mode: these tests start a Kubernetes cluster")
		return 0
	}
	if os.Geteuid() != 0 {
		logf("needs root: the local cluster creates a bridge, changes sysctls and iptables, and runs kubelet")
		return 1
	}
	repo, err := repoRoot()
	if err != nil {
		logf("%v", err)
		return 1
	}
	cluster.repo = repo

	if kubeconfig := os.Getenv(kubeconfigEnv); kubeconfig != "" {
		return runAgainst(m, kubeconfig)
	}

	// A cluster someone already runs is reused and left as it was found.
	reuse := script("hack/local-cluster.sh", "status").Run() == nil
	keep := os.Getenv(keepClusterEnv) != ""
	var teardownOnce sync.Once
	teardown := func() {
		teardownOnce.Do(func() {
			switch {
			case reuse:
				logf("leaving the cluster that was running before the tests")
			case keep:
				logf("%s is set: leaving the cluster running; purge it with hack/local-cluster.sh purge", keepClusterEnv)
			default:
				start := time.Now()
				if err := runScript("hack/local-cluster.sh", "purge"); err != nil {
					logf("purge failed: %v", err)
					return
				}
				logf("purge took %s", since(start))
			}
		})
	}
	defer teardown()
	// abort purges and exits from another goroutine while tests may still run; they then
	// fail against the vanishing cluster, and aborting keeps runTests from reporting that.
	var aborting atomic.Bool
	abort := func(reason string, showLogs bool) {
		aborting.Store(true)
		logf("%s: purging the cluster and exiting", reason)
		if showLogs {
			_ = runScript("hack/local-cluster.sh", "logs", "20")
		}
		teardown()
		os.Exit(1)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() { abort(fmt.Sprintf("got %v", <-signals), false) }()
	if timeout := testTimeout(); timeout > 2*teardownMargin {
		guard := time.AfterFunc(timeout-teardownMargin, func() { abort("the test timeout is near", true) })
		defer guard.Stop()
	}

	imageDir, err := os.MkdirTemp("", "cacheqos-e2e-images-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(imageDir)
	start := time.Now()
	tars, err := buildImages(imageDir, imageNames...)
	if err != nil {
		logf("building images: %v", err)
		return 1
	}
	logf("images built in %s", since(start))

	start = time.Now()
	if err := runScript("hack/local-cluster.sh", "up"); err != nil {
		logf("the cluster did not come up: %v", err)
		return 1
	}
	if err := runScript("hack/images/import.sh", tars...); err != nil {
		logf("importing images: %v", err)
		return 1
	}
	logf("cluster up with images imported in %s", since(start))
	out, err := script("hack/local-cluster.sh", "kubeconfig").Output()
	if err != nil {
		logf("hack/local-cluster.sh kubeconfig: %v", err)
		return 1
	}
	code := runSuite(m, strings.TrimSpace(string(out)))
	if aborting.Load() {
		select {} // abort exits the process
	}
	if code != 0 {
		logf("tests failed; last lines of every component's log:")
		_ = runScript("hack/local-cluster.sh", "logs", "40")
	}
	logf("memory in use (hack/local-cluster.sh status):")
	_ = runScript("hack/local-cluster.sh", "status")
	return code
}

// runAgainst runs the suite against a cluster someone else provides (kind, through
// hack/kind-e2e.sh), whose nodes already have every image of imageNames under its local tag.
func runAgainst(m *testing.M, kubeconfig string) int {
	logf("using the cluster of %s=%s; images must be loaded already", kubeconfigEnv, kubeconfig)
	cluster.images = map[string]string{}
	for _, name := range imageNames {
		cluster.images[name] = localTag(name)
	}
	return runSuite(m, kubeconfig)
}

// runSuite connects to the cluster, installs monitoring and the product, and runs the tests.
func runSuite(m *testing.M, kubeconfig string) int {
	cluster.kubeconfig = kubeconfig
	if err := connect(); err != nil {
		logf("%v", err)
		return 1
	}
	if err := checkNodes(); err != nil {
		logf("%v", err)
		return 1
	}
	start := time.Now()
	if err := installProduct(); err != nil {
		logf("installing: %v", err)
		printProductLogs()
		return 1
	}
	logf("monitoring and the product installed in %s", since(start))

	start = time.Now()
	code := m.Run()
	logf("tests took %s", since(start))
	if code != 0 {
		printProductLogs()
	}
	return code
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// repoRoot finds the module root above the test's working directory (its package folder).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "local-cluster.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("hack/local-cluster.sh not found above the working directory")
		}
		dir = parent
	}
}

// testTimeout is the -test.timeout in effect (0: none).
func testTimeout() time.Duration {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return 0
	}
	d, _ := f.Value.(flag.Getter).Get().(time.Duration)
	return d
}

// script prepares one of the repository's scripts. It runs in its own process group, so a
// Ctrl-C in the terminal reaches only this test binary, which then purges in order.
func script(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(cluster.repo, name), args...)
	cmd.Dir = cluster.repo
	cmd.Env = append(os.Environ(), fmt.Sprintf("CACHEQOS_CLUSTER_NODES=%d", clusterNodes))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// runScript runs a script with its output on stderr, where `go test -v` shows it.
func runScript(name string, args ...string) error {
	cmd := script(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// buildImages runs hack/images/build.sh and returns the tars; it records the tags in
// cluster.images.
func buildImages(dir string, names ...string) ([]string, error) {
	cmd := script("hack/images/build.sh", append([]string{"-o", dir}, names...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	cluster.images, cluster.imageIDs = map[string]string{}, map[string]string{}
	var tars []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		fields := strings.Fields(sc.Text()) // TAG IMAGE_ID TAR
		if len(fields) != 3 {
			return nil, fmt.Errorf("unexpected build.sh output line %q", sc.Text())
		}
		name := strings.TrimSuffix(filepath.Base(fields[2]), ".tar")
		cluster.images[name], cluster.imageIDs[name] = fields[0], fields[1]
		tars = append(tars, fields[2])
	}
	for _, name := range names {
		if cluster.images[name] == "" {
			return nil, fmt.Errorf("build.sh did not report image %q", name)
		}
	}
	return tars, nil
}

// connect builds the clients of cluster.kubeconfig.
func connect() error {
	config, err := clientcmd.BuildConfigFromFlags("", cluster.kubeconfig)
	if err != nil {
		return err
	}
	config.Timeout = 30 * time.Second
	// client-go's own warning logger: controller-runtime's default one complains that no
	// logger was set up.
	config.WarningHandler = rest.WarningLogger{}
	if cluster.client, err = kubernetes.NewForConfig(config); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cluster.kube, err = ctrlclient.New(config, ctrlclient.Options{Scheme: scheme})
	return err
}
