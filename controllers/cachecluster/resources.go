package cachecluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/sidecarmem"
)

// owned sets the metadata every object of the cluster carries: namespace, name, the sidecar
// labels (added to the object's own, which they win over) and the cluster as controlling owner.
func (r *Reconciler) owned(cluster *v1.CacheCluster, obj client.Object, name string) error {
	obj.SetNamespace(cluster.Namespace)
	obj.SetName(name)
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, objects.SidecarLabels(cluster.Name))
	obj.SetLabels(labels)
	return controllerutil.SetControllerReference(cluster, obj, r.Client.Scheme())
}

// apply server-side applies obj after stamping it as owned by the cluster.
func (r *Reconciler) apply(ctx context.Context, cluster *v1.CacheCluster, obj client.Object, name string) error {
	if err := r.owned(cluster, obj, name); err != nil {
		return err
	}
	return r.writer.Apply(ctx, obj)
}

// sidecarRules are everything a sidecar may do: read the plans in its namespace (it watches
// only its own node's, by name), write their status, and read the one credentials Secret.
func sidecarRules(cluster string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{v1.GroupVersion.Group}, Resources: []string{"cachenodeplans"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1.GroupVersion.Group}, Resources: []string{"cachenodeplans/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{objects.CredentialsSecretName(cluster)}, Verbs: []string{"get", "list", "watch"}},
	}
}

// metricsAuthRole is the built-in ClusterRole that may create TokenReviews and
// SubjectAccessReviews: what a sidecar serving secure metrics asks the API server.
const metricsAuthRole = "system:auth-delegator"

// reconcileSidecarIdentity applies the sidecar ServiceAccount, its Role and the RoleBinding,
// and, while monitoring.sidecarMetrics is Secure, the ClusterRoleBinding to
// system:auth-delegator the sidecars authenticate and authorize scrapers with (cluster-scoped,
// so it has no owner: it is deleted when the setting turns Insecure and with the cluster).
func (r *Reconciler) reconcileSidecarIdentity(ctx context.Context, s *scope) error {
	name := objects.ServiceAccountName(s.cluster.Name)
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: s.cluster.Namespace}}
	sa := &corev1.ServiceAccount{}
	role := &rbacv1.Role{Rules: sidecarRules(s.cluster.Name)}
	binding := &rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: subjects,
	}
	var errs []error
	for _, obj := range []client.Object{sa, role, binding} {
		errs = append(errs, r.apply(ctx, s.cluster, obj, name))
	}
	if !s.cluster.Spec.Monitoring.SidecarMetricsSecure() {
		return errors.Join(append(errs, r.deleteMetricsAuthBinding(ctx, s.cluster))...)
	}
	auth := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: objects.MetricsAuthBindingName(s.cluster.Namespace, s.cluster.Name), Labels: objects.SidecarLabels(s.cluster.Name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsAuthRole},
		Subjects:   subjects,
	}
	return errors.Join(append(errs, r.writer.Apply(ctx, auth))...)
}

// deleteMetricsAuthBinding removes the cluster's ClusterRoleBinding to system:auth-delegator.
func (r *Reconciler) deleteMetricsAuthBinding(ctx context.Context, c *v1.CacheCluster) error {
	name := objects.MetricsAuthBindingName(c.Namespace, c.Name)
	if err := r.Client.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}

// reconcileCredentialsSecret keeps the Secret the sidecars read: a generated peer token and,
// for every tenant of the cluster that has a password and is not being deleted, the salted
// hash of that password under the tenant's key. A stored hash that still verifies is kept, so
// an unchanged tenant never changes the Secret. The whole Secret is written at most once per
// reconcile, and only when its content changed: a burst of new tenants (a cold start) costs
// one write per reconcile, not one per tenant, and every watcher (each sidecar) receives the
// Secret that many times. Tenants whose hashes do not fit in a Secret's size limit are left
// out, the most recently created first, and named in the error.
func (r *Reconciler) reconcileCredentialsSecret(ctx context.Context, s *scope) error {
	name := objects.CredentialsSecretName(s.cluster.Name)
	existing := &corev1.Secret{}
	found, err := r.readSecret(ctx, s.cluster, name, existing)
	if err != nil {
		return err
	}
	if !s.tenantsRead {
		// Without the tenants the hashes cannot be told; a new Secret waits for them.
		return nil
	}
	data := map[string][]byte{objects.PeerTokenKey: existing.Data[objects.PeerTokenKey]}
	if len(data[objects.PeerTokenKey]) == 0 {
		token, err := credentials.Generate()
		if err != nil {
			return err
		}
		data[objects.PeerTokenKey] = []byte(token)
	}
	plaintext, err := r.peersWithoutTLS(ctx, s.cluster)
	if err != nil {
		return err
	}
	if plaintext {
		data[objects.PeerPlaintextKey] = []byte("true")
	}
	left, err := r.tenantHashes(ctx, s.tenants, existing.Data, data, corev1.MaxSecretSize)
	if err != nil {
		return err
	}
	// A create that finds the Secret there read a cache that lagged; its event brings the
	// cluster back.
	if err := r.writeSecret(ctx, s.cluster, existing, found, name, corev1.SecretTypeOpaque, data); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("the credentials of %d tenants (%s) do not fit in Secret %s (at most %d bytes of keys and hashes); they cannot authenticate until others leave",
			len(left), objects.ListNames(left), name, corev1.MaxSecretSize)
	}
	return nil
}

// writeSecret creates the cluster's Secret name with data, or, when found, replaces the data
// of existing (as last read) if it differs. Both are guarded against writers that raced this
// one: a create fails when the Secret exists, a replace when it changed since it was read,
// and the next reconcile starts again from what is stored (a cached read may lag behind the
// last write, and what is written here must never be based on that).
func (r *Reconciler) writeSecret(ctx context.Context, cluster *v1.CacheCluster, existing *corev1.Secret, found bool, name string, typ corev1.SecretType, data map[string][]byte) error {
	if !found {
		secret := &corev1.Secret{Type: typ, Data: data}
		if err := r.owned(cluster, secret, name); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, secret); err != nil {
			return fmt.Errorf("creating Secret %s: %w", name, err)
		}
		return nil
	}
	if maps.EqualFunc(existing.Data, data, bytes.Equal) {
		return nil
	}
	patch := client.MergeFromWithOptions(existing.DeepCopy(), client.MergeFromWithOptimisticLock{})
	existing.Data = data
	if err := r.Client.Patch(ctx, existing, patch); err != nil {
		return fmt.Errorf("writing Secret %s: %w", name, err)
	}
	return nil
}

// tenantHashes adds to data the hash of each tenant's password (the one in old when it still
// verifies), oldest tenant first, while keys and values stay within limit bytes, and returns
// the tenants left out.
func (r *Reconciler) tenantHashes(ctx context.Context, tenants []v1.TenantSLO, old, data map[string][]byte, limit int) ([]string, error) {
	size := 0
	for k, v := range data {
		size += len(k) + len(v)
	}
	ordered := make([]*v1.TenantSLO, 0, len(tenants))
	for i := range tenants {
		if tenants[i].DeletionTimestamp.IsZero() {
			ordered = append(ordered, &tenants[i])
		}
	}
	slices.SortFunc(ordered, func(a, b *v1.TenantSLO) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.TenantID(), b.TenantID())
	})
	var left []string
	for _, t := range ordered {
		password, err := r.password(ctx, t)
		if err != nil {
			return nil, err
		}
		if password == "" {
			continue
		}
		key, err := credentials.SecretKey(t.TenantID())
		if err != nil {
			return nil, err
		}
		hash := string(old[key])
		if !credentials.Verify(hash, password) {
			if hash, err = credentials.Hash(password); err != nil {
				return nil, err
			}
		}
		if size+len(key)+len(hash) > limit {
			left = append(left, t.TenantID())
			continue
		}
		size += len(key) + len(hash)
		data[key] = []byte(hash)
	}
	return left, nil
}

// password is the tenant's password from the credentials Secret the TenantSLO reconciler
// keeps in the tenant's namespace; empty while there is none (or it is not the tenant's).
func (r *Reconciler) password(ctx context.Context, t *v1.TenantSLO) (string, error) {
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: objects.TenantCredentialsSecretName(t.Name)}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the credentials of %s: %w", t.TenantID(), err)
	}
	if ref := metav1.GetControllerOf(secret); ref == nil || ref.UID != t.UID {
		return "", nil
	}
	return string(secret.Data[objects.CredentialsPasswordKey]), nil
}

// reconcileServices applies the client Service (the tenants' endpoint, any sidecar routes
// keys to the node that holds them) and the headless Service over every sidecar (peer and
// metrics ports, scraped through the ServiceMonitor, including sidecars not ready yet).
func (r *Reconciler) reconcileServices(ctx context.Context, s *scope) error {
	selector := objects.SidecarLabels(s.cluster.Name)
	clientPort := objects.ClientPort(s.cluster.Spec.Engine)
	clientSvc := &corev1.Service{Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeClusterIP,
		Selector: selector,
		Ports: []corev1.ServicePort{{
			Name: portClient, Protocol: corev1.ProtocolTCP, Port: clientPort, TargetPort: intstr.FromString(portClient),
		}},
	}}
	peers := &corev1.Service{Spec: corev1.ServiceSpec{
		ClusterIP:                corev1.ClusterIPNone,
		Selector:                 selector,
		PublishNotReadyAddresses: true,
		Ports: []corev1.ServicePort{
			{Name: portPeer, Protocol: corev1.ProtocolTCP, Port: objects.PeerPort, TargetPort: intstr.FromString(portPeer)},
			{Name: portMetrics, Protocol: corev1.ProtocolTCP, Port: objects.MetricsPort, TargetPort: intstr.FromString(portMetrics)},
		},
	}}
	return errors.Join(
		r.apply(ctx, s.cluster, clientSvc, objects.ClientServiceName(s.cluster.Name)),
		r.apply(ctx, s.cluster, peers, objects.PeerServiceName(s.cluster.Name)),
	)
}

// sidecarMemory is the sidecar container's memory request and limit: the node's cache memory,
// sidecarOverhead (the proxy's, the agent's and the miss-ratio trackers' baseline), the reply
// bytes the proxy may hold for all its clients (--max-reply-bytes-in-flight), and each client
// connection's budget up to the connection cap (--max-client-connections), the bound
// docs/sidecar-limits.md gives, with TLS's share of each connection when clients use TLS. The
// DaemonSet leaves both flags at the sidecar's defaults.
func sidecarMemory(capacity *v1.NodeCapacity, clientTLS bool) resource.Quantity {
	memory := capacity.Memory.DeepCopy()
	memory.Add(sidecarOverhead)
	bound := int64(sidecarmem.ProxyBound)
	if clientTLS {
		bound = sidecarmem.ProxyBoundTLS
	}
	memory.Add(*resource.NewQuantity(bound, resource.BinarySI))
	return memory
}
