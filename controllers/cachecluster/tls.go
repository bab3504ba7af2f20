package cachecluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// Client TLS in the sidecar pod: the cluster's TLS Secret mounted whole (the kubelet replaces
// its files in place when the Secret changes, and the sidecar reloads them).
const (
	tlsVolume = "client-tls"
	tlsDir    = "/etc/cacheqos/tls"
	// Peer TLS: the cluster's peer TLS Secret, mounted whole the same way.
	peerTLSVolume = "peer-tls"
	peerTLSDir    = "/etc/cacheqos/peer-tls"
	// Metrics TLS: the cluster's metrics TLS Secret, mounted whole the same way.
	metricsTLSVolume = "metrics-tls"
	metricsTLSDir    = "/etc/cacheqos/metrics-tls"
)

// Keys of the CA Secret: every CA certificate still valid and their keys, in the same order.
const (
	caCertsKey = "ca.crt"
	caKeysKey  = "ca.key"
)

// ReasonCertificateIssued is the reason of the event on a cluster whose sidecars were given a
// new serving certificate.
const ReasonCertificateIssued = "CertificateIssued"

// servingNames are the names clients reach the sidecars by: the client Service's in each form
// a pod's DNS search path resolves (the first is the endpoint tenants are given), then
// spec.tls.extraDNSNames.
func servingNames(c *v1.CacheCluster) []string {
	svc := objects.ClientServiceName(c.Name)
	names := []string{
		svc + "." + c.Namespace + ".svc",
		svc,
		svc + "." + c.Namespace,
		svc + "." + c.Namespace + ".svc.cluster.local",
	}
	for _, n := range c.Spec.TLS.ExtraDNSNames {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func (r *Reconciler) tlsPolicy() pki.Policy {
	if r.TLSPolicy == (pki.Policy{}) {
		return pki.DefaultPolicy
	}
	return r.TLSPolicy
}

// readSecret reads the cluster's Secret name into secret and says whether it was found. A
// Secret the cache does not hold is asked of the API server: one this controller created a
// moment ago may not have reached the cache, and what is written next is based on this read.
func (r *Reconciler) readSecret(ctx context.Context, c *v1.CacheCluster, name string, secret *corev1.Secret) (bool, error) {
	key := client.ObjectKey{Namespace: c.Namespace, Name: name}
	err := r.Client.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, secret)
	}
	if err != nil {
		if client.IgnoreNotFound(err) == nil {
			return false, nil
		}
		return false, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return true, nil
}

// reconcileTLS keeps the cluster's CA (rotated with pki's overlap), the sidecars' peer
// certificate, while spec.tls.enabled the tenants' CA bundle and their serving certificate (from cert-manager while its
// kinds are served, see reconcileCertManagerServing), and while
// monitoring.sidecarMetrics is Secure their metrics certificate, each issued again when it is
// missing, broken, due, signed by a CA no longer signing, or made for other names; the
// cluster comes back when one next needs work. A serving, bundle or metrics Secret no longer
// wanted is removed.
func (r *Reconciler) reconcileTLS(ctx context.Context, s *scope) error {
	c := s.cluster
	caName, servingName, metricsName := objects.TLSCASecretName(c.Name), objects.TLSSecretName(c.Name), objects.MetricsTLSSecretName(c.Name)
	bundleName := objects.TLSCABundleSecretName(c.Name)
	certManager := false
	if c.Spec.TLS.Enabled {
		served, err := r.certManagerServed()
		if err != nil {
			return err
		}
		certManager = served
	}
	if !certManager {
		if err := r.removeCertManagerServing(ctx, c); err != nil {
			return err
		}
	}
	for _, unwanted := range []struct {
		name, why string
		wanted    bool
	}{
		{servingName, "spec.tls is off", c.Spec.TLS.Enabled},
		{bundleName, "spec.tls is off", c.Spec.TLS.Enabled},
		{metricsName, "monitoring.sidecarMetrics is Insecure", c.Spec.Monitoring.SidecarMetricsSecure()},
	} {
		if unwanted.wanted {
			continue
		}
		secret := &corev1.Secret{}
		found, err := r.readSecret(ctx, c, unwanted.name, secret)
		if err != nil {
			return err
		}
		if found {
			if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting Secret %s (%s): %w", unwanted.name, unwanted.why, err)
			}
		}
	}
	policy, now := r.tlsPolicy(), time.Now()
	caSecret := &corev1.Secret{}
	caFound, err := r.readSecret(ctx, c, caName, caSecret)
	if err != nil {
		return err
	}
	authority := pki.NewAuthority(c.Namespace + "/" + c.Name)
	if caFound {
		if authority, err = pki.ParseAuthority(c.Namespace+"/"+c.Name, caSecret.Data[caCertsKey], caSecret.Data[caKeysKey]); err != nil {
			return fmt.Errorf("the CA Secret %s is unreadable: %w; delete it to have a new CA made (clients then need the new %s)", caName, err, objects.TLSCAKey)
		}
	}
	changed, err := authority.Rotate(now, policy)
	if err != nil {
		return err
	}
	if changed {
		certs, keys, err := authority.Encode()
		if err != nil {
			return err
		}
		// Nothing is issued from a CA that is not stored: a write that raced another fails
		// here, and the next reconcile starts from the stored CA.
		if err := r.writeSecret(ctx, c, caSecret, caFound, caName, corev1.SecretTypeOpaque, map[string][]byte{caCertsKey: certs, caKeysKey: keys}); err != nil {
			return err
		}
	}
	if c.Spec.TLS.Enabled {
		// The tenants' bundle is every CA still valid, as pki rotates them, whoever issues the
		// serving certificate: written before any certificate from a new CA, and kept apart
		// from the TLS Secret, whose ca.crt cert-manager sets to the one CA that signed.
		bundle := &corev1.Secret{}
		found, err := r.readSecret(ctx, c, bundleName, bundle)
		if err != nil {
			return err
		}
		if err := r.writeSecret(ctx, c, bundle, found, bundleName, corev1.SecretTypeOpaque, map[string][]byte{objects.TLSCAKey: authority.Bundle()}); err != nil {
			return err
		}
	}
	identity := objects.PeerIdentity(c.Namespace, c.Name)
	leaves := []leafSecret{{
		name: objects.PeerTLSSecretName(c.Name), what: "peer",
		problem: func(cert, key []byte) string { return authority.PeerProblem(cert, key, identity, now, policy) },
		issue:   func() ([]byte, []byte, error) { return authority.IssuePeer(identity, now, policy) },
	}}
	if c.Spec.TLS.Enabled {
		names := servingNames(c)
		serving := leafSecret{
			name: servingName, what: "serving",
			problem: func(cert, key []byte) string { return authority.ServingProblem(cert, key, names, now, policy) },
			issue:   func() ([]byte, []byte, error) { return authority.Issue(names, now, policy) },
		}
		if certManager {
			certPEM, err := r.reconcileCertManagerServing(ctx, s, authority, serving, now, policy)
			if err != nil {
				return err
			}
			s.requeueBefore(authority.NextChange(certPEM, now, policy), now)
		} else {
			leaves = append(leaves, serving)
		}
	}
	if c.Spec.Monitoring.SidecarMetricsSecure() {
		names := []string{objects.MetricsServerName(c.Namespace, c.Name)}
		leaves = append(leaves, leafSecret{
			name: metricsName, what: "metrics",
			problem: func(cert, key []byte) string { return authority.ServingProblem(cert, key, names, now, policy) },
			issue:   func() ([]byte, []byte, error) { return authority.Issue(names, now, policy) },
		})
	}
	for _, leaf := range leaves {
		certPEM, err := r.reconcileLeaf(ctx, c, leaf, authority.Bundle())
		if err != nil {
			return err
		}
		s.requeueBefore(authority.NextChange(certPEM, now, policy), now)
	}
	return nil
}

// requeueBefore brings the cluster back by next (at least a second from now; zero: never).
func (s *scope) requeueBefore(next, now time.Time) {
	if !next.IsZero() && (s.requeueAfter == 0 || next.Sub(now) < s.requeueAfter) {
		s.requeueAfter = max(next.Sub(now), time.Second)
	}
}

// leafSecret is a kubernetes.io/tls Secret of the sidecars with a certificate from the CA.
type leafSecret struct {
	name, what string
	problem    func(certPEM, keyPEM []byte) string
	issue      func() (certPEM, keyPEM []byte, err error)
}

// reconcileLeaf issues the Secret's certificate again when it has a problem, writes it with
// the CA bundle, and returns the certificate in use.
func (r *Reconciler) reconcileLeaf(ctx context.Context, c *v1.CacheCluster, leaf leafSecret, bundle []byte) ([]byte, error) {
	secret := &corev1.Secret{}
	found, err := r.readSecret(ctx, c, leaf.name, secret)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	problem := leaf.problem(certPEM, keyPEM)
	if problem != "" {
		if certPEM, keyPEM, err = leaf.issue(); err != nil {
			return nil, err
		}
	}
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, objects.TLSCAKey: bundle}
	if err := r.writeSecret(ctx, c, secret, found, leaf.name, corev1.SecretTypeTLS, data); err != nil {
		return nil, err
	}
	if problem != "" && r.Recorder != nil {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, ReasonCertificateIssued, "issued the sidecars' %s certificate (Secret %s) because the previous one was not usable: %s", leaf.what, leaf.name, problem)
	}
	return certPEM, nil
}

// mountPeerTLS makes the sidecar container talk to its peers over mutual TLS with the
// cluster's peer TLS Secret.
func mountPeerTLS(pod *corev1.PodSpec, c *v1.CacheCluster) {
	mountSecret(pod, peerTLSVolume, objects.PeerTLSSecretName(c.Name), peerTLSDir,
		peerTLSFlag+peerTLSDir+"/"+corev1.TLSCertKey,
		"--peer-tls-key-file="+peerTLSDir+"/"+corev1.TLSPrivateKeyKey,
		"--peer-tls-ca-file="+peerTLSDir+"/"+objects.TLSCAKey,
		"--peer-tls-identity="+objects.PeerIdentity(c.Namespace, c.Name))
}

// mountMetricsTLS makes the sidecar container serve /metrics over HTTPS with the cluster's
// metrics TLS Secret, to scrapers the API server authenticates and authorizes.
func mountMetricsTLS(pod *corev1.PodSpec, c *v1.CacheCluster) {
	mountSecret(pod, metricsTLSVolume, objects.MetricsTLSSecretName(c.Name), metricsTLSDir,
		"--metrics-secure",
		"--metrics-tls-cert-file="+metricsTLSDir+"/"+corev1.TLSCertKey,
		"--metrics-tls-key-file="+metricsTLSDir+"/"+corev1.TLSPrivateKeyKey)
	for _, probe := range []*corev1.Probe{pod.Containers[0].ReadinessProbe, pod.Containers[0].LivenessProbe} {
		probe.HTTPGet.Scheme = corev1.URISchemeHTTPS
	}
}

// mountSecret mounts the Secret read-only at dir in the sidecar container and passes it args.
func mountSecret(pod *corev1.PodSpec, volume, secret, dir string, args ...string) {
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret},
	}})
	sc := &pod.Containers[0]
	sc.VolumeMounts = append(sc.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: dir, ReadOnly: true})
	sc.Args = append(sc.Args, args...)
}

// peerTLSFlag starts the argument of a sidecar with peer TLS.
const peerTLSFlag = "--peer-tls-cert-file="

// peersWithoutTLS reports whether some sidecar pod of the cluster runs without peer TLS (a
// version from before it, during the rollout that replaces them).
func (r *Reconciler) peersWithoutTLS(ctx context.Context, c *v1.CacheCluster) (bool, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(objects.SidecarLabels(c.Name))); err != nil {
		return false, fmt.Errorf("listing the sidecar pods: %w", err)
	}
	for _, pod := range pods.Items {
		if len(pod.Spec.Containers) > 0 && !slices.ContainsFunc(pod.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, peerTLSFlag) }) {
			return true, nil
		}
	}
	return false, nil
}

// mountClientTLS makes the sidecar container serve clients over TLS with the cluster's TLS
// Secret.
func mountClientTLS(pod *corev1.PodSpec, c *v1.CacheCluster) {
	mountSecret(pod, tlsVolume, objects.TLSSecretName(c.Name), tlsDir,
		"--client-tls-cert-file="+tlsDir+"/"+corev1.TLSCertKey,
		"--client-tls-key-file="+tlsDir+"/"+corev1.TLSPrivateKeyKey)
}
