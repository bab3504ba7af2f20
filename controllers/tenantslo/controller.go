// Package tenantslo reconciles TenantSLOs: the tenant's credentials Secret in its own
// namespace (a generated password, never in the spec), the salted hash of that password in
// the one Secret of the CacheCluster's namespace that sidecars read, admission against the
// cluster's capacity (first come, first served; admitted tenants keep their guarantees), and
// the Admitted and Ready conditions. The allocation loop owns the rest of the status
// (allocation, observations, SLOMet, Throttled). Deleting a TenantSLO removes its hash and
// waits until no CacheNodePlan holds a partition of it.
package tenantslo

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
}

// SetupWithManager registers the controller. Besides its TenantSLOs and their credentials
// Secrets it watches the clusters (capacity), the other tenants of a cluster (room freed or
// taken), the clusters' credentials Secrets (a hash removed by someone), the plans
// (partitions running, or gone after a deletion) and the labels of Namespaces (a cluster's
// tenants.namespaceSelector may select or drop a namespace's tenants).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.TenantSLO{}).
		Owns(&corev1.Secret{}).
		Watches(&v1.CacheCluster{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOfCluster), builder.WithPredicates(clusterCapacityChanged())).
		Watches(&v1.TenantSLO{}, handler.EnqueueRequestsFromMapFunc(r.waitingTenants)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.tenantsMissingHash)).
		Watches(&v1.CacheNodePlan{}, handler.EnqueueRequestsFromMapFunc(r.tenantsInPlan)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.tenantsInNamespace),
			builder.OnlyMetadata, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

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
		r.reconcileHash,
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
	}
	secret := &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: data}
	secret.Namespace, secret.Name = t.Namespace, name
	secret.Labels = objects.ManagedLabels(objects.CredentialsName)
	secret.Labels[objects.LabelTenant] = objects.LabelValue(t.Name)
	if err := controllerutil.SetControllerReference(t, secret, r.Client.Scheme()); err != nil {
		return err
	}
	if existing == nil || !equalData(existing.Data, data) || existing.Labels[objects.LabelManagedBy] != objects.ManagedBy {
		if err := ssa.Apply(ctx, r.Client, secret, objects.FieldOwnerTenantSLO); err != nil {
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

// reconcileHash stores the salted hash of the tenant's password under its key of the
// cluster's credentials Secret, unless the hash there already verifies. The Secret is the
// cluster reconciler's; until it exists there is nothing to do (its creation brings the
// tenant back here).
func (r *Reconciler) reconcileHash(ctx context.Context, s *scope) error {
	if s.cluster == nil || s.password == "" {
		return nil
	}
	key, err := credentials.SecretKey(s.tenant.TenantID())
	if err != nil {
		return err
	}
	secret := &corev1.Secret{}
	name := objects.CredentialsSecretName(s.cluster.Name)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: name}, secret); err != nil {
		return client.IgnoreNotFound(err)
	}
	if credentials.Verify(string(secret.Data[key]), s.password) {
		s.hashStored = true
		return nil
	}
	hash, err := credentials.Hash(s.password)
	if err != nil {
		return err
	}
	patch, err := objects.SecretKeyPatch(key, []byte(hash))
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, secret, patch); err != nil {
		return fmt.Errorf("storing the credential hash in Secret %s/%s: %w", secret.Namespace, name, err)
	}
	s.hashStored = true
	return nil
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
	plans, err := r.plansOf(ctx, s.cluster.Namespace, s.cluster.Name)
	s.plans = plans
	return err
}

func (r *Reconciler) tenantsOf(ctx context.Context, cluster types.NamespacedName) ([]v1.TenantSLO, error) {
	var list v1.TenantSLOList
	if err := r.Client.List(ctx, &list, client.MatchingFields{objects.TenantClusterIndex: cluster.String()}); err != nil {
		return nil, fmt.Errorf("listing the tenants of %s: %w", cluster, err)
	}
	return list.Items, nil
}

func (r *Reconciler) plansOf(ctx context.Context, namespace, cluster string) ([]v1.CacheNodePlan, error) {
	var list v1.CacheNodePlanList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing CacheNodePlans: %w", err)
	}
	var out []v1.CacheNodePlan
	for _, p := range list.Items {
		if p.Spec.ClusterName == cluster {
			out = append(out, p)
		}
	}
	return out, nil
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
		if err := r.removeHash(ctx, cluster, t); err != nil {
			return err
		}
		if r.Trigger != nil {
			r.Trigger.Trigger(t.ClusterKey())
		}
		plans, err := r.plansOf(ctx, cluster.Namespace, cluster.Name)
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

func (r *Reconciler) removeHash(ctx context.Context, cluster *v1.CacheCluster, t *v1.TenantSLO) error {
	key, err := credentials.SecretKey(t.TenantID())
	if err != nil {
		return err
	}
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: objects.CredentialsSecretName(cluster.Name)}, secret); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, ok := secret.Data[key]; !ok {
		return nil
	}
	patch, err := objects.SecretKeyPatch(key, nil)
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, secret, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the credential hash of %s: %w", t.TenantID(), err)
	}
	return nil
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
	tenants, err := r.tenantsOf(ctx, changed.ClusterKey())
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping a TenantSLO to the waiting tenants of its cluster")
		return nil
	}
	return requestsFor(tenants, func(t *v1.TenantSLO) bool {
		return t.TenantID() != changed.TenantID() && !isAdmitted(t)
	})
}

// tenantsMissingHash maps a cluster's credentials Secret to the tenants of that cluster whose
// hash is not in it (someone removed it, or the Secret was recreated).
func (r *Reconciler) tenantsMissingHash(ctx context.Context, obj client.Object) []reconcile.Request {
	secret, ok := obj.(*corev1.Secret)
	if !ok || secret.Labels[objects.LabelName] != objects.SidecarName {
		return nil
	}
	var clusters v1.CacheClusterList
	if err := r.Client.List(ctx, &clusters, client.InNamespace(secret.Namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping a credentials Secret to its cluster")
		return nil
	}
	var out []reconcile.Request
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if objects.CredentialsSecretName(c.Name) != secret.Name {
			continue
		}
		tenants, err := r.tenantsOf(ctx, client.ObjectKeyFromObject(c))
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "mapping a credentials Secret to its tenants")
			return nil
		}
		out = append(out, requestsFor(tenants, func(t *v1.TenantSLO) bool {
			key, err := credentials.SecretKey(t.TenantID())
			_, stored := secret.Data[key]
			return err == nil && !stored && t.DeletionTimestamp.IsZero()
		})...)
	}
	return out
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

// tenantsInPlan enqueues the tenants a plan holds partitions of (the handler maps both the
// old and the new object of an update, so a tenant whose partition was removed comes too).
func (r *Reconciler) tenantsInPlan(_ context.Context, obj client.Object) []reconcile.Request {
	plan, ok := obj.(*v1.CacheNodePlan)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, p := range plan.Spec.Partitions {
		ns, name, err := credentials.SplitTenantID(p.Tenant)
		if err != nil {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
	return out
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
