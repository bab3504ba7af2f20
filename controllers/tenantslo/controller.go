// Package tenantslo reconciles TenantSLOs: the tenant's credentials Secret in its own
// namespace (a generated password, never in the spec; the CacheCluster reconciler puts its
// salted hash in the Secret the sidecars read), admission against the
// cluster's capacity (first come, first served; admitted tenants keep their guarantees), and
// the Admitted and Ready conditions. The allocation loop owns the rest of the status
// (allocation, observations, SLOMet, Throttled). Deleting a TenantSLO waits until its hash is
// removed and no CacheNodePlan holds a partition of it.
package tenantslo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

// Namespaces are watched (metadata only) for CacheCluster.spec.tenants.namespaceSelector.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconciler reconciles TenantSLOs.
type Reconciler struct {
	Client client.Client
	// APIReader reads a tenant's credentials Secret the cache does not hold (it holds only the
	// operator's Secrets), to tell a Secret someone else made from none at all.
	APIReader client.Reader
	Recorder  record.EventRecorder
	// Trigger asks the allocation loop for a new plan.
	Trigger objects.PlanTrigger

	writer *ssa.Writer
}

// SetupWithManager registers the controller. Besides its TenantSLOs and their credentials
// Secrets it watches the clusters (capacity), the other tenants of a cluster (room freed or
// taken), the clusters' credentials Secrets (a tenant's hash stored, changed or removed), the
// clusters' CA bundle Secrets (what tenants get as ca.crt), the plans (a tenant's partition placed, running, or gone after a deletion) and the labels of
// Namespaces (a cluster's
// tenants.namespaceSelector may select or drop a namespace's tenants).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.writer = ssa.NewWriter(r.Client, objects.FieldOwnerTenantSLO)
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.TenantSLO{}, builder.WithPredicates(objects.SpecOrLifecycleChanged())).
		Owns(&corev1.Secret{}).
		Watches(&v1.CacheCluster{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOfCluster), builder.WithPredicates(clusterCapacityChanged())).
		Watches(&v1.TenantSLO{}, handler.EnqueueRequestsFromMapFunc(r.waitingTenants), builder.WithPredicates(objects.TenantGuaranteesChanged())).
		Watches(&corev1.Secret{}, enqueueChangedTenants(0, storedHashes)).
		// A cluster's CA bundle, which tenants of a TLS cluster get as ca.crt.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOfCABundle), builder.WithPredicates(caBundleChanged())).
		Watches(&v1.CacheNodePlan{}, enqueueChangedTenants(planBatchDelay, partitionStates)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.tenantsInNamespace),
			builder.OnlyMetadata, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

// planBatchDelay is how long a tenant waits after a plan change before its Ready condition is
// computed again: an allocation writes the plans of every node within seconds, and a tenant
// whose partitions move from one node to another would otherwise be written once per plan.
const planBatchDelay = 5 * time.Second

// scope is what one reconcile learns about a tenant, for the status at its end.
type scope struct {
	tenant  *v1.TenantSLO
	cluster *v1.CacheCluster // nil when spec.clusterRef names no cluster
	// password is the tenant's current password, from its credentials Secret.
	password string
	// hashStored is set once the cluster's credentials Secret holds a hash of password.
	hashStored bool
	// admitted is the Admitted condition (nil when the reconcile failed before deciding).
	admitted *metav1.Condition
	plans    []v1.CacheNodePlan
}

// Reconcile issues credentials, decides admission and reports both in one status apply.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, reterr error) {
	defer func() { opmetrics.CountError(opmetrics.ControllerTenantSLO, reterr) }()
	t := &v1.TenantSLO{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.reconcileDelete(ctx, t)
	}
	if !controllerutil.ContainsFinalizer(t, objects.TenantFinalizer) {
		patch := client.MergeFromWithOptions(t.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(t, objects.TenantFinalizer)
		return reconcile.Result{}, r.Client.Patch(ctx, t, patch)
	}

	s := &scope{tenant: t}
	if err := r.getCluster(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	defer func() { reterr = errors.Join(reterr, r.applyStatus(ctx, s)) }()
	var errs []error
	for _, phase := range []func(context.Context, *scope) error{
		r.reconcileCredentials,
		r.readHash,
		r.reconcileAdmission,
		r.readPlans,
	} {
		if err := phase(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

func (r *Reconciler) getCluster(ctx context.Context, s *scope) error {
	cluster := &v1.CacheCluster{}
	err := r.Client.Get(ctx, s.tenant.ClusterKey(), cluster)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading CacheCluster %s: %w", s.tenant.ClusterKey(), err)
	}
	if cluster.DeletionTimestamp.IsZero() {
		s.cluster = cluster
	}
	return nil
}

// endpoint is host:port of the cluster's client Service.
func endpoint(c *v1.CacheCluster) string {
	return fmt.Sprintf("%s.%s.svc:%d", objects.ClientServiceName(c.Name), c.Namespace, objects.ClientPort(c.Spec.Engine))
}

// reconcileCredentials makes sure the tenant's credentials Secret exists with a password,
// generating one the first time (or when the password was removed) and keeping it after.
func (r *Reconciler) reconcileCredentials(ctx context.Context, s *scope) error {
	t := s.tenant
	name := objects.TenantCredentialsSecretName(t.Name)
	key := client.ObjectKey{Namespace: t.Namespace, Name: name}
	existing := &corev1.Secret{}
	err := r.Client.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		// Not among the operator's Secrets; someone else's may still have the name.
		err = r.APIReader.Get(ctx, key, existing)
	}
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return fmt.Errorf("reading credentials Secret %s: %w", name, err)
	case !isControlledBy(existing, t):
		return fmt.Errorf("secret %s/%s exists and is not this TenantSLO's; rename or remove it so credentials can be issued", t.Namespace, name)
	}
	password := ""
	if existing != nil {
		password = string(existing.Data[objects.CredentialsPasswordKey])
	}
	if password == "" {
		if password, err = credentials.Generate(); err != nil {
			return err
		}
	}
	data := map[string][]byte{
		objects.CredentialsUsernameKey: []byte(t.TenantID()),
		objects.CredentialsPasswordKey: []byte(password),
	}
	if s.cluster != nil {
		data[objects.CredentialsEndpointKey] = []byte(endpoint(s.cluster))
		var kept []byte
		if existing != nil {
			kept = existing.Data[objects.TLSCAKey]
		}
		bundle, err := r.caBundle(ctx, s.cluster, kept)
		if err != nil {
			return err
		}
		if len(bundle) > 0 {
			data[objects.TLSCAKey] = bundle
		}
	}
	secret := &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: data}
	secret.Namespace, secret.Name = t.Namespace, name
	secret.Labels = objects.ManagedLabels(objects.CredentialsName)
	secret.Labels[objects.LabelTenant] = objects.LabelValue(t.Name)
	if err := controllerutil.SetControllerReference(t, secret, r.Client.Scheme()); err != nil {
		return err
	}
	if existing == nil || !equalData(existing.Data, data) || existing.Labels[objects.LabelManagedBy] != objects.ManagedBy {
		if err := r.writer.Apply(ctx, secret); err != nil {
			return err
		}
	}
	s.password = password
	return nil
}

func isControlledBy(obj, owner client.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.GetUID()
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || string(v) != string(w) {
			return false
		}
	}
	return true
}

// readHash tells whether the cluster's credentials Secret holds a hash of the tenant's
// password. The cluster reconciler writes every tenant's hash there, in one write for all the
// tenants it finds changed; a change of the tenant's hash brings the tenant back here.
func (r *Reconciler) readHash(ctx context.Context, s *scope) error {
	if s.cluster == nil || s.password == "" {
		return nil
	}
	stored, err := r.storedHash(ctx, s.cluster, s.tenant)
	s.hashStored = credentials.Verify(stored, s.password)
	return err
}

// storedHash is the tenant's hash in the cluster's credentials Secret, empty when there is none.
func (r *Reconciler) storedHash(ctx context.Context, cluster *v1.CacheCluster, t *v1.TenantSLO) (string, error) {
	key, err := credentials.SecretKey(t.TenantID())
	if err != nil {
		return "", err
	}
	secret := &corev1.Secret{}
	name := objects.CredentialsSecretName(cluster.Name)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, secret); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	return string(secret.Data[key]), nil
}

// reconcileAdmission decides whether the tenant fits.
func (r *Reconciler) reconcileAdmission(ctx context.Context, s *scope) error {
	t := s.tenant
	switch {
	case s.cluster == nil:
		s.admitted = notAdmitted(v1.ReasonClusterNotFound, fmt.Sprintf("CacheCluster %s does not exist", t.ClusterKey()))
		return nil
	case !supported(s.cluster, t):
		s.admitted = notAdmitted(v1.ReasonUnsupportedEvictionPolicy,
			fmt.Sprintf("evictionPolicy %s is not available on engine %s; use lru", t.Spec.EvictionPolicy, s.cluster.Spec.Engine))
		return nil
	}
	tenants, err := r.tenantsOf(ctx, s.tenant.ClusterKey())
	if err != nil {
		return err
	}
	allowed, err := r.namespaceSelection(ctx, s.cluster, tenants, t)
	if err != nil {
		return err
	}
	if refusal := governanceRefusal(s.cluster, t, allowed); refusal != nil {
		s.admitted = refusal
		return nil
	}
	admitted := admission(s.cluster, tenants, t, allowed)
	s.admitted = &admitted
	return nil
}

// readPlans reads the cluster's plans, for the Ready condition.
func (r *Reconciler) readPlans(ctx context.Context, s *scope) error {
	if s.cluster == nil {
		return nil
	}
	plans, err := objects.ClusterPlans(ctx, r.Client, s.cluster.Namespace, s.cluster.Name)
	s.plans = plans
	return err
}

// tenantsOf lists the tenants of cluster, sharing their contents with the cache: callers only
// read them. (A deep copy of 2,000 tenants per reconcile and per TenantSLO event was most of
// what the operator allocated in a 2,000-tenant cold start.)
func (r *Reconciler) tenantsOf(ctx context.Context, cluster types.NamespacedName) ([]v1.TenantSLO, error) {
	var list v1.TenantSLOList
	if err := r.Client.List(ctx, &list, client.MatchingFields{objects.TenantClusterIndex: cluster.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the tenants of %s: %w", cluster, err)
	}
	return list.Items, nil
}

// holdsTenant reports whether the plan's spec has a partition of tenant.
func holdsTenant(p *v1.CacheNodePlan, tenant string) bool {
	return slices.ContainsFunc(p.Spec.Partitions, func(pp v1.PartitionPlan) bool { return pp.Tenant == tenant })
}

// reconcileDelete removes the tenant's hash, asks for a plan without it, and lets the
// TenantSLO go once no plan holds a partition of it (plan events bring it back here).
func (r *Reconciler) reconcileDelete(ctx context.Context, t *v1.TenantSLO) error {
	if !controllerutil.ContainsFinalizer(t, objects.TenantFinalizer) {
		return nil
	}
	cluster := &v1.CacheCluster{}
	err := r.Client.Get(ctx, t.ClusterKey(), cluster)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	if err == nil {
		if r.Trigger != nil {
			r.Trigger.Trigger(t.ClusterKey())
		}
		// The cluster reconciler removes the hash of a tenant being deleted.
		stored, err := r.storedHash(ctx, cluster, t)
		if err != nil {
			return err
		}
		if stored != "" {
			ctrl.LoggerFrom(ctx).Info("waiting for the cluster reconciler to remove the tenant's credential hash")
			return nil
		}
		plans, err := objects.ClusterPlans(ctx, r.Client, cluster.Namespace, cluster.Name)
		if err != nil {
			return err
		}
		for i := range plans {
			if holdsTenant(&plans[i], t.TenantID()) {
				ctrl.LoggerFrom(ctx).Info("waiting for the allocation loop to remove the tenant's partitions", "node", plans[i].Spec.NodeName)
				return nil
			}
		}
	}
	patch := client.MergeFromWithOptions(t.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(t, objects.TenantFinalizer)
	return r.Client.Patch(ctx, t, patch)
}

// clusterCapacityChanged passes cluster updates that can change admission: the spec, the
// number of nodes, deletion.
func clusterCapacityChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(*v1.CacheCluster)
		after, okAfter := e.ObjectNew.(*v1.CacheCluster)
		if !okBefore || !okAfter {
			return true
		}
		return before.Generation != after.Generation || before.Status.NodeCount != after.Status.NodeCount ||
			before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
	}}
}

func requestsFor(tenants []v1.TenantSLO, keep func(*v1.TenantSLO) bool) []reconcile.Request {
	var out []reconcile.Request
	for i := range tenants {
		if keep(&tenants[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&tenants[i])})
		}
	}
	return out
}

// caBundle is the CA bundle clients of a TLS cluster trust, from the cluster's CA bundle
// Secret; empty when the cluster does not serve TLS. While that Secret is not written (TLS
// just turned on, or the operator just upgraded from a version without it) the tenant keeps
// the bundle it has, kept, rather than lose it for a moment; its creation brings the tenants
// back.
func (r *Reconciler) caBundle(ctx context.Context, c *v1.CacheCluster, kept []byte) ([]byte, error) {
	if !c.Spec.TLS.Enabled {
		return nil, nil
	}
	secret := &corev1.Secret{}
	name := objects.TLSCABundleSecretName(c.Name)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return kept, nil
		}
		return nil, fmt.Errorf("reading the CA bundle of %s/%s (Secret %s): %w", c.Namespace, c.Name, name, err)
	}
	return secret.Data[objects.TLSCAKey], nil
}

// caBundleChanged passes Secrets created or deleted, and updates that change ca.crt.
func caBundleChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(*corev1.Secret)
		after, okAfter := e.ObjectNew.(*corev1.Secret)
		return !okBefore || !okAfter || !bytes.Equal(before.Data[objects.TLSCAKey], after.Data[objects.TLSCAKey])
	}}
}

// tenantsOfCABundle enqueues every tenant of the cluster whose CA bundle Secret obj is.
func (r *Reconciler) tenantsOfCABundle(ctx context.Context, obj client.Object) []reconcile.Request {
	owner := metav1.GetControllerOf(obj)
	if owner == nil || owner.Kind != "CacheCluster" || obj.GetName() != objects.TLSCABundleSecretName(owner.Name) {
		return nil
	}
	tenants, err := r.tenantsOf(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: owner.Name})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping a cluster's CA bundle Secret to its tenants")
		return nil
	}
	return requestsFor(tenants, func(*v1.TenantSLO) bool { return true })
}

// tenantsOfCluster enqueues every tenant of a cluster.
func (r *Reconciler) tenantsOfCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	tenants, err := r.tenantsOf(ctx, client.ObjectKeyFromObject(obj))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping a CacheCluster to its tenants")
		return nil
	}
	return requestsFor(tenants, func(*v1.TenantSLO) bool { return true })
}

// waitingTenants enqueues the other tenants of the same cluster that are not admitted: a
// tenant that came, went or changed its guarantees may have freed room for them. Admitted
// tenants keep their guarantees whatever others do.
func (r *Reconciler) waitingTenants(ctx context.Context, obj client.Object) []reconcile.Request {
	changed, ok := obj.(*v1.TenantSLO)
	if !ok {
		return nil
	}
	var waiting v1.TenantSLOList
	if err := r.Client.List(ctx, &waiting, client.MatchingFields{objects.TenantWaitingIndex: objects.TenantClusterIndexValue(changed)}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping a TenantSLO to the waiting tenants of its cluster")
		return nil
	}
	return requestsFor(waiting.Items, func(t *v1.TenantSLO) bool { return t.TenantID() != changed.TenantID() })
}

// tenantsInNamespace enqueues the TenantSLOs of a namespace whose labels changed, so each is
// admitted or refused again against its cluster's tenants.namespaceSelector. Tenants of other
// namespaces follow through waitingTenants when one of these gains or loses admission.
func (r *Reconciler) tenantsInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1.TenantSLOList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetName())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping a Namespace to its TenantSLOs")
		return nil
	}
	return requestsFor(list.Items, func(*v1.TenantSLO) bool { return true })
}

// storedHashes maps each tenant with a key in a cluster's credentials Secret to its hash.
func storedHashes(obj client.Object) map[types.NamespacedName]string {
	secret, ok := obj.(*corev1.Secret)
	if !ok || secret.Labels[objects.LabelName] != objects.SidecarName {
		return nil
	}
	out := map[types.NamespacedName]string{}
	for k, v := range secret.Data {
		key, ok := tenantKey(credentials.TenantFromSecretKey(k))
		if ok {
			out[key] = string(v)
		}
	}
	return out
}

// partitionStates maps each tenant a plan holds a partition of to whether the partition
// runs: what the tenant's Ready condition takes from the plan.
func partitionStates(obj client.Object) map[types.NamespacedName]string {
	plan, ok := obj.(*v1.CacheNodePlan)
	if !ok {
		return nil
	}
	out := map[types.NamespacedName]string{}
	for _, p := range plan.Spec.Partitions {
		key, ok := tenantKey(p.Tenant, nil)
		if !ok {
			continue
		}
		out[key] = "pending"
		if partitionRunning(plan, p.Tenant) {
			out[key] = "running"
		}
	}
	return out
}

// tenantKey is the TenantSLO of a tenant ID (namespace/name); false when id is not one.
func tenantKey(id string, err error) (types.NamespacedName, bool) {
	if err != nil {
		return types.NamespacedName{}, false
	}
	ns, name, err := credentials.SplitTenantID(id)
	return types.NamespacedName{Namespace: ns, Name: name}, err == nil
}

func notAdmitted(reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: v1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// namespaceSelection returns whether the cluster's tenants.namespaceSelector selects each
// namespace of tenants (target included), reading their labels from the Namespace metadata
// the controller watches (a label change enqueues the namespace's tenants).
func (r *Reconciler) namespaceSelection(ctx context.Context, cluster *v1.CacheCluster, tenants []v1.TenantSLO, target *v1.TenantSLO) (func(string) bool, error) {
	if cluster.Spec.Tenants.NamespaceSelector == nil {
		return func(string) bool { return true }, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(cluster.Spec.Tenants.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("tenants.namespaceSelector of CacheCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	selected := map[string]bool{}
	for _, t := range append([]v1.TenantSLO{*target}, tenants...) {
		if _, known := selected[t.Namespace]; known {
			continue
		}
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := r.Client.Get(ctx, client.ObjectKey{Name: t.Namespace}, ns); err != nil {
			return nil, fmt.Errorf("reading namespace %s for tenants.namespaceSelector: %w", t.Namespace, err)
		}
		selected[t.Namespace] = selector.Matches(labels.Set(ns.Labels))
	}
	return func(namespace string) bool { return selected[namespace] }, nil
}
