package cachecluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// One control plane and one operator for every test of the package. No prometheus-operator
// CRDs are installed at first; TestMonitoring installs them half-way.
var env *testenv.Env

var images = testenv.Images

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(controllers.Options{Images: images, SidecarDefaults: sidecarDefaults, TLSPolicy: tlsPolicy})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping:", err)
	}
	os.Exit(code)
}

// node creates a Node with labels and taints; it is deleted when the test ends.
func node(t *testing.T, name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	if err := env.Client.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	return n
}

// newCluster is a redis CacheCluster selecting nodes labelled pool=<pool>.
func newCluster(ns, name, pool string) *v1.CacheCluster {
	return &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.CacheClusterSpec{
			Engine:       v1.EngineRedis,
			NodeSelector: map[string]v1.LabelValue{"pool": v1.LabelValue(pool)},
			Capacity: v1.NodeCapacity{
				Memory:       resource.MustParse("4Gi"),
				Bandwidth:    resource.MustParse("1250M"),
				OpsPerSecond: 100000,
			},
		},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func get(obj client.Object, ns, name string) error {
	return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// conditionIs checks a condition's status and reason, and returns it.
func conditionIs(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) (*metav1.Condition, error) {
	c := meta.FindStatusCondition(conds, typ)
	switch {
	case c == nil:
		return nil, fmt.Errorf("no %s condition in %+v", typ, conds)
	case c.Status != status || c.Reason != reason:
		return c, fmt.Errorf("%s is %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return c, nil
}

// clusterCondition is a check that the cluster's condition typ has status and reason and a
// message containing want; the condition found is copied into got when it is not nil.
func clusterCondition(c *v1.CacheCluster, typ string, status metav1.ConditionStatus, reason, want string, got *metav1.Condition) func() error {
	return func() error {
		if err := get(c, c.Namespace, c.Name); err != nil {
			return err
		}
		cond, err := conditionIs(c.Status.Conditions, typ, status, reason)
		if err != nil {
			return err
		}
		if !strings.Contains(cond.Message, want) {
			return fmt.Errorf("%s message %q does not contain %q", typ, cond.Message, want)
		}
		if got != nil {
			*got = *cond
		}
		return nil
	}
}
