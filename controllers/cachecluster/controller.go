// Package cachecluster reconciles CacheClusters: the sidecar DaemonSet on the selected nodes,
// its Services, ServiceAccount and least-privilege RBAC, the credentials Secret the sidecars
// read, with spec.tls the cluster's CA and the sidecars' serving certificate, one
// CacheNodePlan per selected node, and — when the prometheus-operator CRDs are
// served — a ServiceMonitor and a PrometheusRule. Status says whether the sidecars serve
// (DaemonSet readiness, never assumed), whether the plans are applied, and whether monitoring
// is in place; the allocation loop owns the rest of the status.
package cachecluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// +kubebuilder:rbac:groups=cacheqos.io,resources=cachenodeplans/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts;secrets,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=nodes;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;prometheusrules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates;issuers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates/status,verbs=get;update;patch

// Images are the operator's default images, used where a CacheCluster leaves them empty.
type Images struct {
	// Sidecar is the cacheqos node agent and proxy image (required).
	Sidecar string
	// Redis and Memcached provide the engine binaries; the sidecar runs inside them. Empty:
	// the sidecar image, which carries both engines.
	Redis, Memcached string
}

// Reconciler reconciles CacheClusters.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets the cache does not hold yet (see readSecret).
	APIReader client.Reader
	Cache     cache.Cache
	Mapper    meta.RESTMapper
	Recorder  record.EventRecorder
	// Trigger asks the allocation loop for a new plan.
	Trigger objects.PlanTrigger
	// Forget drops the allocation loop's state of a deleted cluster.
	Forget func(types.NamespacedName)
	Images Images
	// SidecarDefaults shape the sidecar pods where a CacheCluster's spec.sidecar says nothing.
	SidecarDefaults SidecarDefaults
	// TLSPolicy sets the lifetimes of the clusters' CAs and serving certificates; zero:
	// pki.DefaultPolicy.
	TLSPolicy pki.Policy

	writer     *ssa.Writer
	controller controller.Controller
	// watching records the monitoring kinds a watch was started for, once they were found.
	watchMu  sync.Mutex
	watching map[string]bool
	// servedKinds caches discovery's answer per optional kind (see served).
	servedMu    sync.Mutex
	servedKinds map[schema.GroupVersionKind]servedAnswer
	crdChanged  time.Time // the last event of an optional CRD
}

// SetupWithManager registers the controller. It owns everything it creates, maps Nodes (when
// their labels, taints or schedulability change), sidecar Pods, TenantSLOs (their guarantees
// and admission), tenants' credentials Secrets and the prometheus-operator and cert-manager
// CRDs to clusters,
// and starts watches on ServiceMonitors and PrometheusRules once their CRDs are found.
//
// Tenants and plans change in bursts (a cold start, an allocation writing every node's plan,
// a namespace of tenants applied at once), and the reconcile writes what they change (the
// credentials Secret, the status): their events, and those of the objects the reconcile
// writes itself, reach the cluster after batchDelay, so a burst makes one reconcile and one
// write of each. The cluster's own updates pass only for its spec, finalizers and deletion:
// the status writes (its own and the allocation loop's) do not wake it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.writer = ssa.NewWriter(r.Client, objects.FieldOwnerCacheCluster)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1.CacheCluster{}, builder.WithPredicates(objects.SpecOrLifecycleChanged())).
		Watches(&v1.CacheNodePlan{}, delayed(batchDelay, handler.EnqueueRequestsFromMapFunc(clusterOfPlan)), builder.WithPredicates(planChangedForCluster())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allClusters), builder.WithPredicates(nodeSchedulingChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.clustersForPod)).
		Watches(&v1.TenantSLO{}, delayed(batchDelay, handler.EnqueueRequestsFromMapFunc(clusterOfTenant)), builder.WithPredicates(objects.TenantGuaranteesChanged())).
		// A tenant's password (its hash goes into the cluster's credentials Secret).
		Watches(&corev1.Secret{}, delayed(batchDelay, handler.EnqueueRequestsFromMapFunc(r.clusterOfCredentials)),
			builder.WithPredicates(predicate.NewPredicateFuncs(isTenantCredentials))).
		// The prometheus-operator and cert-manager CRDs may come (or go) while the operator runs.
		// Discovery may serve a new CRD's kind a moment after its events: the clusters are
		// reconciled at once and again after batchDelay (see served).
		Watches(&apiextensionsv1.CustomResourceDefinition{}, nowAndLater(batchDelay, handler.EnqueueRequestsFromMapFunc(r.optionalCRDChanged)),
			builder.OnlyMetadata, builder.WithPredicates(predicate.NewPredicateFuncs(isOptionalCRD)))
	for _, obj := range []client.Object{&appsv1.DaemonSet{}, &corev1.Service{}, &corev1.ServiceAccount{}, &corev1.Secret{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		b = b.Watches(obj, r.owner())
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	r.controller = c
	return nil
}

// watchOwned starts, once, a watch of obj's kind that enqueues the owning CacheCluster. It is
// called only after the kind was found served, so a cluster without the prometheus-operator
// CRDs never starts a watch that cannot sync.
func (r *Reconciler) watchOwned(kind string, obj client.Object) error {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	if r.watching[kind] {
		return nil
	}
	src := source.Kind(r.Cache, obj, r.owner())
	if err := r.controller.Watch(src); err != nil {
		return fmt.Errorf("watching %s: %w", kind, err)
	}
	if r.watching == nil {
		r.watching = map[string]bool{}
	}
	r.watching[kind] = true
	return nil
}

// scope is what one reconcile learns about a cluster, for the status at its end.
type scope struct {
	cluster   *v1.CacheCluster
	nodes     []corev1.Node
	daemonSet *appsv1.DaemonSet
	pods      []corev1.Pod
	plans     []v1.CacheNodePlan
	tenants   []v1.TenantSLO
	// tenantsRead is set once tenants holds the cluster's TenantSLOs.
	tenantsRead bool
	monitoring  monitoringResult
	// overridesRefused says why spec.sidecar resources were not applied.
	overridesRefused []string
	// requeueAfter, when set, is when the cluster needs a reconcile without any event (a
	// certificate to renew).
	requeueAfter time.Duration
	// replan is set when the allocation loop must plan again (nodes came or went, a sidecar's
	// address changed, the spec changed).
	replan bool
}

// Reconcile brings a CacheCluster's objects to their desired state and reports it in one
// status apply at the end, whatever happened on the way.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, reterr error) {
	defer func() { opmetrics.CountError(opmetrics.ControllerCacheCluster, reterr) }()
	cluster := &v1.CacheCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.reconcileDelete(ctx, cluster)
	}
	if !controllerutil.ContainsFinalizer(cluster, objects.ClusterFinalizer) {
		// The update event brings the cluster back with its finalizer.
		return reconcile.Result{}, r.addFinalizer(ctx, cluster)
	}

	s := &scope{cluster: cluster, replan: cluster.Status.ObservedGeneration != cluster.Generation}
	defer func() {
		reterr = errors.Join(reterr, r.applyStatus(ctx, s, reterr))
		if s.replan && r.Trigger != nil {
			r.Trigger.Trigger(req.NamespacedName)
		}
	}()
	var errs []error
	for _, phase := range []func(context.Context, *scope) error{
		r.readTenants,
		r.reconcileSidecarIdentity,
		r.reconcileCredentialsSecret,
		r.reconcileTLS,
		r.reconcileServices,
		r.reconcileDaemonSet,
		r.reconcileNodePlans,
		r.rollOutSidecars,
		r.reconcileMonitoring,
	} {
		if err := phase(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return reconcile.Result{RequeueAfter: s.requeueAfter}, errors.Join(errs...)
}

func (r *Reconciler) addFinalizer(ctx context.Context, cluster *v1.CacheCluster) error {
	patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(cluster, objects.ClusterFinalizer)
	return r.Client.Patch(ctx, cluster, patch)
}

// reconcileDelete removes the sidecars first (so no sidecar acts on a half-deleted cluster),
// then the plans and every other object the cluster owns, then the allocation loop's state
// and metrics, and finally the finalizer. Garbage collection would remove the owned objects
// too, but in no particular order.
func (r *Reconciler) reconcileDelete(ctx context.Context, cluster *v1.CacheCluster) error {
	if !controllerutil.ContainsFinalizer(cluster, objects.ClusterFinalizer) {
		return nil
	}
	key := client.ObjectKeyFromObject(cluster)
	inNamespace := client.InNamespace(cluster.Namespace)
	sidecars := client.MatchingLabels(objects.SidecarLabels(cluster.Name))
	if err := r.Client.DeleteAllOf(ctx, &appsv1.DaemonSet{}, inNamespace, sidecars); err != nil {
		return fmt.Errorf("deleting the sidecar DaemonSet: %w", err)
	}
	plans, err := objects.ClusterPlans(ctx, r.Client, cluster.Namespace, cluster.Name)
	if err != nil {
		return err
	}
	for i := range plans {
		if err := r.Client.Delete(ctx, &plans[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting CacheNodePlan %s: %w", plans[i].Name, err)
		}
	}
	// cert-manager would write the TLS Secret again while the Certificate is there.
	if err := r.deleteCertManagerObjects(ctx, cluster); err != nil {
		return err
	}
	for _, obj := range []client.Object{&corev1.Service{}, &rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}, &corev1.Secret{}} {
		if err := r.Client.DeleteAllOf(ctx, obj, inNamespace, sidecars); err != nil {
			return fmt.Errorf("deleting %T of the cluster: %w", obj, err)
		}
	}
	if err := r.deleteMonitoring(ctx, cluster); err != nil {
		return err
	}
	if err := r.deleteMetricsAuthBinding(ctx, cluster); err != nil {
		return err
	}
	if r.Forget != nil {
		r.Forget(key)
	}
	opmetrics.ForgetCluster(key.String())
	patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(cluster, objects.ClusterFinalizer)
	return r.Client.Patch(ctx, cluster, patch)
}

// isOptionalCRD passes the CRDs of the optional kinds the operator creates: the monitoring
// kinds and cert-manager's.
func isOptionalCRD(obj client.Object) bool {
	switch obj.GetName() {
	case "servicemonitors." + monitoringv1.SchemeGroupVersion.Group, "prometheusrules." + monitoringv1.SchemeGroupVersion.Group,
		"certificates." + certManagerGroup, "issuers." + certManagerGroup:
		return true
	}
	return false
}

// allClusters enqueues every CacheCluster: for a Node, its labels or taints decide which
// clusters select it, before and after the change; for an optional CRD, every cluster may
// have asked for monitoring or TLS.
func (r *Reconciler) allClusters(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1.CacheClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing CacheClusters")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// batchDelay is how long a change of a tenant or a plan waits before its cluster is
// reconciled, so that the changes of many are written together: with tenants arriving at the
// operator's client rate (20 writes a second), one credentials Secret write holds about a
// hundred of them. It is also the longest a new tenant waits for its hash to be stored.
const batchDelay = 5 * time.Second

// owner enqueues the cluster controlling an object, after batchDelay.
func (r *Reconciler) owner() handler.EventHandler {
	return delayed(batchDelay, handler.EnqueueRequestForOwner(r.Client.Scheme(), r.Mapper, &v1.CacheCluster{}, handler.OnlyControllerOwner()))
}

// nowAndLater enqueues what h enqueues at once and again after delay.
func nowAndLater(delay time.Duration, h handler.EventHandler) handler.EventHandler {
	return onQueue(h, func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return delayingQueue{TypedRateLimitingInterface: q, delay: delay, alsoNow: true}
	})
}

// delayed enqueues what h enqueues after delay; a request enqueued again while it waits is
// reconciled once.
func delayed(delay time.Duration, h handler.EventHandler) handler.EventHandler {
	return onQueue(h, func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return delayingQueue{TypedRateLimitingInterface: q, delay: delay}
	})
}

// onQueue hands h the queue wrap makes of the controller's.
func onQueue(h handler.EventHandler, wrap func(workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request]) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, wrap(q))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, wrap(q))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, wrap(q))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, wrap(q))
		},
	}
}

// delayingQueue turns Add into AddAfter(delay), after an Add at once when alsoNow.
type delayingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	delay   time.Duration
	alsoNow bool
}

func (q delayingQueue) Add(req reconcile.Request) {
	if q.alsoNow {
		q.TypedRateLimitingInterface.Add(req)
	}
	q.AddAfter(req, q.delay)
}

// planChangedForCluster passes plan updates the cluster's reconcile reads: the spec (node,
// generation, routes), the generation the sidecar applied, its PlanApplied condition, and
// deletion. A sidecar's other reports (memory in use, partition states) do not concern it.
func planChangedForCluster() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(*v1.CacheNodePlan)
		after, okAfter := e.ObjectNew.(*v1.CacheNodePlan)
		if !okBefore || !okAfter {
			return true
		}
		applied := func(p *v1.CacheNodePlan) string {
			c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionPlanApplied)
			if c == nil {
				return ""
			}
			return string(c.Status) + "/" + c.Reason
		}
		return before.Generation != after.Generation || before.Status.AppliedGeneration != after.Status.AppliedGeneration ||
			applied(before) != applied(after) || before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
	}}
}

// clusterOfPlan enqueues the cluster a plan belongs to.
func clusterOfPlan(_ context.Context, obj client.Object) []reconcile.Request {
	p, ok := obj.(*v1.CacheNodePlan)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.ClusterName}}}
}

// isTenantCredentials passes the tenants' credentials Secrets.
func isTenantCredentials(obj client.Object) bool {
	return obj.GetLabels()[objects.LabelName] == objects.CredentialsName
}

// clusterOfCredentials enqueues the cluster of the tenant that controls a credentials Secret.
func (r *Reconciler) clusterOfCredentials(ctx context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "TenantSLO" {
		return nil
	}
	t := &v1.TenantSLO{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}, t); err != nil {
		if client.IgnoreNotFound(err) != nil {
			ctrl.LoggerFrom(ctx).Error(err, "mapping a credentials Secret to its cluster")
		}
		return nil
	}
	return []reconcile.Request{{NamespacedName: t.ClusterKey()}}
}

// clustersForPod enqueues the cluster a sidecar pod belongs to (its instance label).
func (r *Reconciler) clustersForPod(ctx context.Context, obj client.Object) []reconcile.Request {
	instance := obj.GetLabels()[objects.LabelInstance]
	if obj.GetLabels()[objects.LabelName] != objects.SidecarName || instance == "" {
		return nil
	}
	var list v1.CacheClusterList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing CacheClusters for a Pod event")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if objects.LabelValue(list.Items[i].Name) == instance {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
