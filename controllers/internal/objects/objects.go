// Package objects names and labels everything the cacheqos controllers create, so the
// CacheCluster reconciler, the TenantSLO reconciler and the allocation loop agree on them
// without importing each other.
package objects

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// Field managers of server-side apply. Each writer owns its own fields (including its own
// conditions in the status lists), so writers never overwrite each other.
const (
	FieldOwnerCacheCluster = "cacheqos-cachecluster"
	FieldOwnerTenantSLO    = "cacheqos-tenantslo"
	FieldOwnerAllocator    = "cacheqos-allocator"
)

// Finalizers.
const (
	// ClusterFinalizer removes what the operator created for a CacheCluster, sidecars first.
	ClusterFinalizer = "cacheqos.io/cluster-cleanup"
	// TenantFinalizer removes a tenant's credential hash and waits until no CacheNodePlan
	// holds a partition of it.
	TenantFinalizer = "cacheqos.io/tenant-cleanup"
)

// Labels on every object the operator creates; the operator's informer caches for Secrets,
// Pods, DaemonSets, Services, ServiceAccounts, Roles and RoleBindings select on LabelManagedBy.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelTenant marks a tenant's credentials Secret with its TenantSLO's name.
	LabelTenant = "cacheqos.io/tenant"

	// ManagedBy is the LabelManagedBy value.
	ManagedBy = "cacheqos-operator"
	// SidecarName is the LabelName value of sidecar pods and everything serving them.
	SidecarName = "cacheqos-sidecar"
	// CredentialsName is the LabelName value of tenant credentials Secrets.
	CredentialsName = "cacheqos-credentials"
)

// AnnotationPlanWrittenAt on a CacheNodePlan is when the allocation loop last changed its spec
// (RFC 3339): a sidecar that has not applied the plan some intervals later is reported.
const AnnotationPlanWrittenAt = "cacheqos.io/plan-written-at"

// AnnotationSpecHash on a CacheNodePlan identifies the specs (cluster, tenants, nodes) the
// plan in force was made for, so the allocation loop, restarted or not, knows when they
// changed.
const AnnotationSpecHash = "cacheqos.io/spec-hash"

// Keys of the credentials Secret in the cluster's namespace: one key per tenant
// (credentials.SecretKey, which always contains a dot) with the salted hash of its password,
// and PeerTokenKey (no dot, so never a tenant's) with the token sidecars use among themselves.
const PeerTokenKey = "peer-token"

// PeerPlaintextKey, "true" in the credentials Secret, lets sidecars with peer TLS talk to
// peers without it: set while sidecar pods without peer TLS remain.
const PeerPlaintextKey = "peer-plaintext"

// Keys of a tenant's credentials Secret in its own namespace.
const (
	CredentialsUsernameKey = "username"
	CredentialsPasswordKey = "password"
	CredentialsEndpointKey = "endpoint"
	// TLSCAKey holds the CA bundle clients trust, in a tenant's credentials Secret (when the
	// cluster serves TLS), copied from the cluster's CA bundle Secret (TLSCABundleSecretName).
	TLSCAKey = "ca.crt"
)

// Ports of the sidecar pod (the cache-sidecar's own defaults).
const (
	PeerPort    = 7380
	MetricsPort = 9380
)

// ClientPort is the engine protocol's usual port, on which the sidecar proxy serves clients.
func ClientPort(e v1.Engine) int32 {
	if e == v1.EngineMemcached {
		return 11211
	}
	return 6379
}

// TenantClusterIndex indexes TenantSLOs by the "<namespace>/<name>" of their CacheCluster.
const TenantClusterIndex = "spec.clusterRef.key"

// TenantClusterIndexValue is the TenantClusterIndex value of t.
func TenantClusterIndexValue(t *v1.TenantSLO) string {
	return t.ClusterKey().String()
}

// TenantWaitingIndex indexes the TenantSLOs that are not admitted (and not being deleted) by
// the "<namespace>/<name>" of their CacheCluster; admitted tenants are not in it. The
// TenantSLO reconciler wakes them when room may have been freed, and listing only them, not
// every tenant of the cluster, on every TenantSLO event keeps that cheap once they are admitted.
const TenantWaitingIndex = "cacheqos.io/waiting-on-cluster"

// TenantWaitingIndexValues are the TenantWaitingIndex values of t: its cluster while it is
// neither admitted nor being deleted, none otherwise.
func TenantWaitingIndexValues(t *v1.TenantSLO) []string {
	if !t.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(t.Status.Conditions, v1.ConditionAdmitted) {
		return nil
	}
	return []string{TenantClusterIndexValue(t)}
}

// TenantAwaitingAdmissionIndex indexes, by the "<namespace>/<name>" of their CacheCluster, the
// TenantSLOs whose admission for their current spec the TenantSLO reconciler has not decided
// yet; the allocation loop waits for them (an allocation that sees a few more admitted
// rewrites every plan).
const TenantAwaitingAdmissionIndex = "cacheqos.io/awaiting-admission"

// TenantAwaitingAdmissionIndexValues are the TenantAwaitingAdmissionIndex values of t: its
// cluster while its status is for an older generation, it has no decided Admitted condition,
// or it was refused for a missing cluster (whoever asks for a cluster's tenants knows the
// cluster exists, so the tenant will be reconsidered); none when it is being deleted.
func TenantAwaitingAdmissionIndexValues(t *v1.TenantSLO) []string {
	if !t.DeletionTimestamp.IsZero() {
		return nil
	}
	admitted := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAdmitted)
	if t.Status.ObservedGeneration != t.Generation || admitted == nil || admitted.Status == metav1.ConditionUnknown ||
		(admitted.Status == metav1.ConditionFalse && admitted.Reason == v1.ReasonClusterNotFound) {
		return []string{TenantClusterIndexValue(t)}
	}
	return nil
}

// PlanTrigger is how reconcilers ask the allocation loop for a new plan soon.
type PlanTrigger interface {
	Trigger(cluster types.NamespacedName)
}

// SidecarLabels select the sidecar pods of a cluster and label everything serving them.
func SidecarLabels(cluster string) map[string]string {
	return map[string]string{
		LabelName:      SidecarName,
		LabelInstance:  LabelValue(cluster),
		LabelManagedBy: ManagedBy,
	}
}

// ManagedLabels label objects that belong to no sidecar set.
func ManagedLabels(name string) map[string]string {
	return map[string]string{LabelName: name, LabelManagedBy: ManagedBy}
}

// LabelValue returns s if it is a valid label value, else a shortened form with a hash.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	return shorten(s, validation.LabelValueMaxLength)
}

// DaemonSetName names the sidecar DaemonSet. Pod names add a suffix, so it stays a DNS label
// short enough for them.
func DaemonSetName(cluster string) string {
	return dnsLabel(cluster+"-sidecar", validation.DNS1123LabelMaxLength-6)
}

// ServiceAccountName names the sidecar ServiceAccount, and its Role and RoleBinding.
func ServiceAccountName(cluster string) string {
	return subdomain(cluster + "-sidecar")
}

// ClientServiceName names the Service clients connect to.
func ClientServiceName(cluster string) string {
	return dnsLabel(cluster, validation.DNS1035LabelMaxLength)
}

// PeerServiceName names the headless Service over every sidecar (peer and metrics ports).
func PeerServiceName(cluster string) string {
	return dnsLabel(cluster+"-sidecars", validation.DNS1035LabelMaxLength)
}

// MonitoringName names the ServiceMonitor and the PrometheusRule.
func MonitoringName(cluster string) string {
	return subdomain(cluster + "-cacheqos")
}

// CredentialsSecretName names the Secret, in the cluster's namespace, holding every tenant's
// password hash and the peer token.
func CredentialsSecretName(cluster string) string {
	return subdomain(cluster + "-tenant-credentials")
}

// TLSSecretName names the kubernetes.io/tls Secret, in the cluster's namespace, with the
// sidecars' serving certificate and key and the CA bundle (TLSCAKey).
func TLSSecretName(cluster string) string {
	return subdomain(cluster + "-tls")
}

// PeerTLSSecretName names the kubernetes.io/tls Secret, in the cluster's namespace, with the
// sidecars' peer certificate and key and the CA bundle (TLSCAKey).
func PeerTLSSecretName(cluster string) string {
	return subdomain(cluster + "-peer-tls")
}

// MetricsTLSSecretName is the Secret with the certificate the sidecars serve /metrics with.
func MetricsTLSSecretName(cluster string) string {
	return subdomain(cluster + "-metrics-tls")
}

// MetricsServerName is the name the sidecars' metrics certificate carries and scrapers verify:
// the headless Service they are scraped through, which reaches each sidecar by its pod IP.
func MetricsServerName(namespace, cluster string) string {
	return PeerServiceName(cluster) + "." + namespace + ".svc"
}

// MetricsAuthBindingName is the ClusterRoleBinding that lets a cluster's sidecars ask the API
// server who a scraper is and what it may read (namespace names have no dots, so two clusters
// never share one).
func MetricsAuthBindingName(namespace, cluster string) string {
	return subdomain("cacheqos-sidecar-metrics." + namespace + "." + cluster)
}

// PeerIdentity is the URI the peer certificate of a cluster's sidecars carries.
func PeerIdentity(namespace, cluster string) string {
	return "cacheqos://" + namespace + "/" + cluster
}

// TLSCASecretName names the Secret, in the cluster's namespace, with the cluster's CA
// certificates and keys; only the operator reads it.
func TLSCASecretName(cluster string) string {
	return subdomain(cluster + "-tls-ca")
}

// TLSCABundleSecretName names the Secret, in the cluster's namespace, with the CA bundle the
// clients of a TLS cluster trust (TLSCAKey), which the operator copies into every tenant's
// credentials Secret. The operator writes it whoever issues the serving certificate, so the
// bundle keeps the previous CA through a rotation even where cert-manager's ca.crt holds
// only the CA that signed.
func TLSCABundleSecretName(cluster string) string {
	return subdomain(cluster + "-ca-bundle")
}

// TLSSignerSecretName names the Secret, in the cluster's namespace, with the CA of the cluster
// that signs now and its key, read by the cert-manager Issuer of the cluster (named
// TLSSecretName, like its Certificate) while cert-manager issues the serving certificate.
func TLSSignerSecretName(cluster string) string {
	return subdomain(cluster + "-tls-signer")
}

// TenantCredentialsSecretName names a tenant's username/password Secret in its namespace.
func TenantCredentialsSecretName(tenant string) string {
	return subdomain(tenant + "-cache-credentials")
}

// PlanName names the CacheNodePlan of node. The sidecar computes the same name from its
// cluster and node name, so it is never shortened: an error says when it is too long.
func PlanName(cluster, node string) (string, error) {
	name := cluster + "-" + node
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("CacheNodePlan name %q for node %s: %s", name, node, strings.Join(errs, "; "))
	}
	return name, nil
}

// subdomain returns name if it is a valid DNS subdomain, else a shortened form with a hash.
func subdomain(name string) string {
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return shorten(name, validation.DNS1123SubdomainMaxLength)
}

// dnsLabel turns name into a DNS-1035 label of at most maxLen bytes (dots become dashes, a
// leading digit gets a letter), shortened with a hash when needed.
func dnsLabel(name string, maxLen int) string {
	label := strings.ReplaceAll(name, ".", "-")
	if label != "" && label[0] >= '0' && label[0] <= '9' {
		label = "c" + label
	}
	if len(label) <= maxLen && len(validation.IsDNS1035Label(label)) == 0 {
		return label
	}
	return shorten(label, maxLen)
}

// shorten keeps a prefix of name and appends a hash of the whole name, within maxLen bytes.
// The prefix keeps only lowercase letters, digits and dashes, and never ends in a dash.
func shorten(name string, maxLen int) string {
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:10]
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		}
	}
	prefix := b.String()
	if keep := maxLen - len(hash) - 1; len(prefix) > keep {
		prefix = prefix[:keep]
	}
	prefix = strings.TrimRight(prefix, "-")
	if prefix == "" || prefix[0] < 'a' || prefix[0] > 'z' {
		return "c" + hash
	}
	return prefix + "-" + hash
}

// Resources is NodeResources for server-side apply: only the fields set are sent, so two
// writers can own different resource entries of one node's status.
type Resources struct {
	Memory       *resource.Quantity `json:"memory,omitempty"`
	Bandwidth    *resource.Quantity `json:"bandwidth,omitempty"`
	OpsPerSecond *int64             `json:"opsPerSecond,omitempty"`
}

// maxListedNames bounds the names a condition message lists.
const maxListedNames = 10

// ListNames joins names for a condition message, at most maxListedNames of them and a count
// of the rest, so messages stay short on large clusters.
func ListNames(names []string) string {
	if len(names) <= maxListedNames {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListedNames], ", "), len(names)-maxListedNames)
}

// Bytes prints v as a quantity when it is a whole number of binary units (as users write them
// in specs), and rounded otherwise: a capacity minus headroom is rarely a round number.
func Bytes(v int64) string {
	if v%1024 != 0 {
		return planning.FormatBytes(v)
	}
	return resource.NewQuantity(v, resource.BinarySI).String()
}

// Rate prints bytes per second as a decimal quantity.
func Rate(v int64) string {
	return resource.NewQuantity(v, resource.DecimalSI).String()
}
