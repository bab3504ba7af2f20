package cachecluster

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
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
	return ssa.Apply(ctx, r.Client, obj, objects.FieldOwnerCacheCluster)
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

// reconcileSidecarIdentity applies the sidecar ServiceAccount, its Role and the RoleBinding.
func (r *Reconciler) reconcileSidecarIdentity(ctx context.Context, s *scope) error {
	name := objects.ServiceAccountName(s.cluster.Name)
	sa := &corev1.ServiceAccount{}
	role := &rbacv1.Role{Rules: sidecarRules(s.cluster.Name)}
	binding := &rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: s.cluster.Namespace}},
	}
	var errs []error
	for _, obj := range []client.Object{sa, role, binding} {
		errs = append(errs, r.apply(ctx, s.cluster, obj, name))
	}
	return errors.Join(errs...)
}

// reconcileCredentialsSecret creates the Secret tenants' password hashes go into (the
// TenantSLO reconciler adds and removes their keys) with a generated peer token, and adds the
// token when someone removed it. Existing keys are never rewritten here.
func (r *Reconciler) reconcileCredentialsSecret(ctx context.Context, s *scope) error {
	name := objects.CredentialsSecretName(s.cluster.Name)
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		token, err := credentials.Generate()
		if err != nil {
			return err
		}
		secret = &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{objects.PeerTokenKey: []byte(token)}}
		if err := r.owned(s.cluster, secret, name); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, secret); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating the credentials Secret %s: %w", name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the credentials Secret %s: %w", name, err)
	}
	if len(secret.Data[objects.PeerTokenKey]) > 0 {
		return nil
	}
	token, err := credentials.Generate()
	if err != nil {
		return err
	}
	patch, err := objects.SecretKeyPatch(objects.PeerTokenKey, []byte(token))
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, secret, patch); err != nil {
		return fmt.Errorf("adding the peer token to Secret %s: %w", name, err)
	}
	return nil
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
// docs/sidecar-limits.md gives. The DaemonSet leaves both flags at the sidecar's defaults.
func sidecarMemory(capacity *v1.NodeCapacity) resource.Quantity {
	memory := capacity.Memory.DeepCopy()
	memory.Add(sidecarOverhead)
	memory.Add(*resource.NewQuantity(sidecarmem.ProxyBound, resource.BinarySI))
	return memory
}
