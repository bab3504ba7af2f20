// Package controllers wires the cacheqos operator into a controller-runtime manager: the
// CacheCluster and TenantSLO reconcilers and the leader-only allocation loop they trigger.
// cmd/operator and the envtest suites both build the operator through Setup, so the tests
// run exactly what ships.
package controllers

import (
	"context"
	"errors"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/allocation"
	"github.com/cacheqos/cacheqos/controllers/cachecluster"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/controllers/tenantslo"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// The operator's metrics endpoint (--metrics-secure) authenticates and authorizes its scrapers.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options configure the operator.
type Options struct {
	// Images are the defaults for CacheClusters that name none.
	Images cachecluster.Images
	// SidecarDefaults shape the sidecar pods of CacheClusters whose spec.sidecar leaves a
	// field unset, and add tolerations to every cluster's.
	SidecarDefaults cachecluster.SidecarDefaults
	// Allocation tunes the allocation loop.
	Allocation allocation.Options
	// TLSPolicy sets the lifetimes of the clusters' CAs and serving certificates; zero:
	// pki.DefaultPolicy.
	TLSPolicy pki.Policy
}

// NewScheme returns a scheme with every type the operator reads or writes.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// CacheOptions restricts the manager's informers to the objects the operator manages, so it
// neither holds every Secret and Pod of the cluster in memory nor needs to, and to namespaces
// when some are given (Nodes and CRDs, cluster-scoped, are always watched cluster-wide).
// Cached objects are kept without their managedFields (nothing reads them, and they were
// the larger half of a plan's or a tenant's bytes), CacheNodePlans without their
// remoteTenants (objects.CompactPlan) and Nodes without their list of images.
func CacheOptions(namespaces ...string) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{objects.LabelManagedBy: objects.ManagedBy})}
	var defaults map[string]cache.Config
	for _, ns := range namespaces {
		if defaults == nil {
			defaults = map[string]cache.Config{}
		}
		defaults[ns] = cache.Config{}
	}
	stripManagedFields := cache.TransformStripManagedFields()
	return cache.Options{DefaultNamespaces: defaults, DefaultTransform: stripManagedFields, ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:         managed,
		&corev1.Pod{}:            {Label: labels.SelectorFromSet(labels.Set{objects.LabelName: objects.SidecarName, objects.LabelManagedBy: objects.ManagedBy})},
		&corev1.Service{}:        managed,
		&corev1.ServiceAccount{}: managed,
		&appsv1.DaemonSet{}:      managed,
		&rbacv1.Role{}:           managed,
		&rbacv1.RoleBinding{}:    managed,
		// The sidecars' metrics auth bindings; the operator has no business with any other.
		&rbacv1.ClusterRoleBinding{}: managed,
		// A ByObject transform replaces the default one: each strips managedFields too.
		&v1.CacheNodePlan{}: {Transform: then(stripManagedFields, objects.CompactPlan)},
		&corev1.Node{}:      {Transform: then(stripManagedFields, dropNodeImages)},
	}}
}

// then runs first, then second on its result.
func then(first, second toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := first(obj)
		if err != nil {
			return nil, err
		}
		return second(obj)
	}
}

// dropNodeImages drops a Node's status.images (the images its kubelet holds, often tens of
// KiB per node), which the operator never reads.
func dropNodeImages(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
	}
	return obj, nil
}

// Setup adds the operator to mgr (built with NewScheme and CacheOptions) and returns the
// allocation loop.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) (*allocation.Loop, error) {
	if opts.Images.Sidecar == "" {
		return nil, errors.New("the default sidecar image is required")
	}
	if err := opts.SidecarDefaults.Validate(); err != nil {
		return nil, err
	}
	if opts.TLSPolicy != (pki.Policy{}) {
		if err := opts.TLSPolicy.Validate(); err != nil {
			return nil, err
		}
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.TenantSLO{}, objects.TenantClusterIndex, func(obj client.Object) []string {
		return []string{objects.TenantClusterIndexValue(obj.(*v1.TenantSLO))}
	}); err != nil {
		return nil, err
	}
	for index, values := range map[string]func(*v1.TenantSLO) []string{
		objects.TenantWaitingIndex:           objects.TenantWaitingIndexValues,
		objects.TenantAwaitingAdmissionIndex: objects.TenantAwaitingAdmissionIndexValues,
	} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.TenantSLO{}, index, func(obj client.Object) []string {
			return values(obj.(*v1.TenantSLO))
		}); err != nil {
			return nil, err
		}
	}
	reportUndecodable(mgr)
	loop := allocation.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorderFor("cacheqos-allocator"), mgr.GetLogger().WithName("allocation"), opts.Allocation)
	if err := mgr.Add(loop); err != nil {
		return nil, err
	}
	clusters := &cachecluster.Reconciler{
		APIReader: mgr.GetAPIReader(),
		Client:    mgr.GetClient(),
		Cache:     mgr.GetCache(),
		Mapper:    mgr.GetRESTMapper(),
		Recorder:  mgr.GetEventRecorderFor("cacheqos-cachecluster"),
		Trigger:   loop,
		Forget:    loop.Forget,
		Images:    opts.Images,
		// The chart's sidecar values, validated above.
		SidecarDefaults: opts.SidecarDefaults,
		TLSPolicy:       opts.TLSPolicy,
	}
	if err := clusters.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	tenants := &tenantslo.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorderFor("cacheqos-tenantslo"),
		Trigger:   loop,
	}
	if err := tenants.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return loop, nil
}

// ReasonUndecodable is the reason of the Warning event on a stored object the operator cannot
// decode and therefore leaves out.
const ReasonUndecodable = "Undecodable"

// reportUndecodable makes every list that leaves out an object count it, log it and put a
// Warning event on it, so its owner sees why the operator ignores it while everyone else is
// served.
func reportUndecodable(mgr ctrl.Manager) {
	recorder := mgr.GetEventRecorderFor("cacheqos-operator")
	log := mgr.GetLogger().WithName("decode")
	v1.SetUndecodableHandler(func(u v1.Undecodable) {
		opmetrics.UndecodableObjects.WithLabelValues(u.Object.Kind).Inc()
		log.Error(u.Err, "leaving out a stored object the operator cannot decode", "kind", u.Object.Kind, "namespace", u.Object.Namespace, "name", u.Object.Name)
		if u.Object.Name != "" {
			recorder.Eventf(&u.Object, corev1.EventTypeWarning, ReasonUndecodable,
				"the operator ignores this %s until it is fixed or deleted: %v", u.Object.Kind, u.Err)
		}
	})
}
