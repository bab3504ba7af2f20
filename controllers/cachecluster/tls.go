package cachecluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// readSecret reads the cluster's Secret name into secret and says whether it was found.
func (r *Reconciler) readSecret(ctx context.Context, c *v1.CacheCluster, name string, secret *corev1.Secret) (bool, error) {
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, secret)
	if err != nil {
		if client.IgnoreNotFound(err) == nil {
			return false, nil
		}
		return false, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return true, nil
}

// reconcileTLS keeps, while spec.tls.enabled, the cluster's CA (rotated with pki's overlap)
// and the sidecars' serving certificate, issued again when it is missing, broken, due, signed
// by a CA no longer signing, or made for other names; the cluster comes back when either next
// needs work. Without TLS both Secrets are removed.
func (r *Reconciler) reconcileTLS(ctx context.Context, s *scope) error {
	c := s.cluster
	caName, servingName := objects.TLSCASecretName(c.Name), objects.TLSSecretName(c.Name)
	if !c.Spec.TLS.Enabled {
		for _, name := range []string{servingName, caName} {
			secret := &corev1.Secret{}
			found, err := r.readSecret(ctx, c, name, secret)
			if err != nil {
				return err
			}
			if found {
				if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("deleting Secret %s (spec.tls is off): %w", name, err)
				}
			}
		}
		return nil
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
	serving := &corev1.Secret{}
	servingFound, err := r.readSecret(ctx, c, servingName, serving)
	if err != nil {
		return err
	}
	names := servingNames(c)
	certPEM, keyPEM := serving.Data[corev1.TLSCertKey], serving.Data[corev1.TLSPrivateKeyKey]
	problem := authority.ServingProblem(certPEM, keyPEM, names, now, policy)
	if problem != "" {
		if certPEM, keyPEM, err = authority.Issue(names, now, policy); err != nil {
			return err
		}
	}
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, objects.TLSCAKey: authority.Bundle()}
	if err := r.writeSecret(ctx, c, serving, servingFound, servingName, corev1.SecretTypeTLS, data); err != nil {
		return err
	}
	if problem != "" && r.Recorder != nil {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, ReasonCertificateIssued, "issued the sidecars' serving certificate (Secret %s) because the previous one was not usable: %s", servingName, problem)
	}
	if next := authority.NextChange(certPEM, now, policy); !next.IsZero() {
		s.requeueAfter = max(next.Sub(now), time.Second)
	}
	return nil
}

// mountClientTLS makes the sidecar container serve clients over TLS with the cluster's TLS
// Secret.
func mountClientTLS(pod *corev1.PodSpec, c *v1.CacheCluster) {
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: objects.TLSSecretName(c.Name)},
	}})
	sc := &pod.Containers[0]
	sc.VolumeMounts = append(sc.VolumeMounts, corev1.VolumeMount{Name: tlsVolume, MountPath: tlsDir, ReadOnly: true})
	sc.Args = append(sc.Args,
		"--client-tls-cert-file="+tlsDir+"/"+corev1.TLSCertKey,
		"--client-tls-key-file="+tlsDir+"/"+corev1.TLSPrivateKeyKey)
}
