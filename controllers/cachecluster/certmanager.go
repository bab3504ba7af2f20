package cachecluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// While cert-manager's Certificate and Issuer kinds are served, the serving certificate of a
// TLS cluster comes from cert-manager: a CA Issuer signs with the cluster's own CA (the one
// that signs now, copied into the signer Secret), and a Certificate writes the TLS Secret the
// sidecars mount. The CA stays the operator's, rotated as without cert-manager, so the peer and
// metrics certificates, issued by the operator, share it, and a cluster moves between the two
// paths (cert-manager installed or removed) without a certificate its clients do not trust.
// Tenants keep trusting the operator's bundle of every CA still valid (reconcileTLS), not the
// one CA cert-manager writes as the TLS Secret's ca.crt, so a rotation overlaps as without it.
const certManagerGroup = "cert-manager.io"

var (
	certificateKind = schema.GroupVersionKind{Group: certManagerGroup, Version: "v1", Kind: "Certificate"}
	issuerKind      = schema.GroupVersionKind{Group: certManagerGroup, Version: "v1", Kind: "Issuer"}
)

// Reasons of the Issuing condition the operator sets on a cluster's Certificate: its TLS
// Secret holds a certificate cert-manager did not write (the operator's own: cert-manager
// would keep a valid one until its renewal), or one not signed by the CA that signs now.
const (
	ReasonNotFromCertManager = "NotFromCertManager"
	ReasonSignerRotated      = "SignerRotated"
)

// certificateNameAnnotation is what cert-manager names, on a Secret it wrote, the Certificate
// it wrote it for.
const certificateNameAnnotation = "cert-manager.io/certificate-name"

// certManagerWait is how soon a cluster is looked at again after the operator asked
// cert-manager to issue its certificate.
const certManagerWait = 2 * time.Second

// certManagerServed reports whether cert-manager's Certificate and Issuer kinds are served.
func (r *Reconciler) certManagerServed() (bool, error) {
	for _, gvk := range []schema.GroupVersionKind{certificateKind, issuerKind} {
		ok, err := r.served(gvk)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// certManagerObject is an empty cert-manager object of kind named like the cluster's TLS
// Secret.
func certManagerObject(c *v1.CacheCluster, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(c.Namespace)
	u.SetName(objects.TLSSecretName(c.Name))
	return u
}

// deleteCertManagerObjects removes the cluster's Certificate and Issuer, when cert-manager's
// kinds are served, before its TLS Secret goes (TLS turned off, or the cluster deleted): the
// Certificate first, so cert-manager does not write the TLS Secret again.
func (r *Reconciler) deleteCertManagerObjects(ctx context.Context, c *v1.CacheCluster) error {
	served, err := r.certManagerServed()
	if err != nil || !served {
		return err
	}
	for _, gvk := range []schema.GroupVersionKind{certificateKind, issuerKind} {
		if err := r.Client.Delete(ctx, certManagerObject(c, gvk)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s %s: %w", gvk.Kind, objects.TLSSecretName(c.Name), err)
		}
	}
	return nil
}

// removeCertManagerServing undoes reconcileCertManagerServing (TLS off, or cert-manager's
// kinds no longer served) once: while the signer Secret exists, in the cache, the Certificate
// and Issuer are deleted, then the signer Secret. Clusters that never used cert-manager cost
// no request.
func (r *Reconciler) removeCertManagerServing(ctx context.Context, c *v1.CacheCluster) error {
	signer := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: objects.TLSSignerSecretName(c.Name)}, signer)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := r.deleteCertManagerObjects(ctx, c); err != nil {
		return err
	}
	if err := r.Client.Delete(ctx, signer); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Secret %s: %w", signer.Name, err)
	}
	return nil
}

// reconcileCertManagerServing writes the signer Secret, applies the cluster's Issuer and
// Certificate, and asks cert-manager to issue now when the TLS Secret holds a certificate it
// did not write or one not signed by the CA that signs now. While there is no TLS Secret the
// operator writes it with a certificate of its own (serving), which cert-manager replaces: so
// the Secret is the cluster's from the start (garbage collected with it), and the sidecars
// never wait for it. A TLS Secret without a
// controlling owner (written by cert-manager first) is adopted. It returns the certificate in
// the TLS Secret.
func (r *Reconciler) reconcileCertManagerServing(ctx context.Context, s *scope, authority *pki.Authority, serving leafSecret, now time.Time, policy pki.Policy) ([]byte, error) {
	c := s.cluster
	signerCert, signerKey, err := authority.SignerPEM(now, policy)
	if err != nil {
		return nil, err
	}
	signerName := objects.TLSSignerSecretName(c.Name)
	signer := &corev1.Secret{}
	found, err := r.readSecret(ctx, c, signerName, signer)
	if err != nil {
		return nil, err
	}
	if err := r.writeSecret(ctx, c, signer, found, signerName, corev1.SecretTypeTLS,
		map[string][]byte{corev1.TLSCertKey: signerCert, corev1.TLSPrivateKeyKey: signerKey}); err != nil {
		return nil, err
	}
	name := objects.TLSSecretName(c.Name)
	issuer := certManagerObject(c, issuerKind)
	issuer.Object["spec"] = map[string]any{"ca": map[string]any{"secretName": signerName}}
	certificate := certManagerObject(c, certificateKind)
	certificate.Object["spec"] = map[string]any{
		"secretName": name,
		"dnsNames":   toAny(servingNames(c)),
		"duration":   policy.LeafValidity.String(),
		// Renewed two thirds into its life, as the operator renews its own certificates.
		"renewBefore": (policy.LeafValidity / 3).String(),
		"privateKey":  map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"usages":      []any{"digital signature", "server auth"},
		"issuerRef":   map[string]any{"group": certManagerGroup, "kind": issuerKind.Kind, "name": name},
		"secretTemplate": map[string]any{
			"labels": toAnyMap(objects.SidecarLabels(c.Name)),
		},
	}
	for _, obj := range []*unstructured.Unstructured{issuer, certificate} {
		if err := r.apply(ctx, c, obj, obj.GetName()); err != nil {
			return nil, err
		}
	}
	secret := &corev1.Secret{}
	found, err = r.readSecret(ctx, c, name, secret)
	if err != nil {
		return nil, err
	}
	if !found {
		certPEM, err := r.reconcileLeaf(ctx, c, serving, authority.Bundle())
		if err != nil {
			return nil, err
		}
		return certPEM, r.triggerIssuance(ctx, certificate, ReasonNotFromCertManager, "the TLS Secret holds the operator's certificate")
	}
	certPEM := secret.Data[corev1.TLSCertKey]
	if metav1.GetControllerOf(secret) == nil {
		patch := client.MergeFromWithOptions(secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if err := r.owned(c, secret, name); err != nil {
			return nil, err
		}
		if err := r.Client.Patch(ctx, secret, patch); err != nil {
			return nil, fmt.Errorf("adopting Secret %s written by cert-manager: %w", name, err)
		}
	}
	reason, message := "", ""
	switch {
	case secret.Annotations[certificateNameAnnotation] != certificate.GetName():
		reason, message = ReasonNotFromCertManager, "the TLS Secret holds a certificate cert-manager did not write"
	case !authority.SignedBySigner(certPEM, now, policy):
		reason, message = ReasonSignerRotated, "the certificate is not signed by the cluster's CA that signs now"
	}
	if reason != "" {
		if err := r.triggerIssuance(ctx, certificate, reason, message); err != nil {
			return nil, err
		}
		s.requeueAfter = certManagerWait
	}
	return certPEM, nil
}

// triggerIssuance sets the Certificate's Issuing condition to True (replacing a False one, left
// by a failed issuance), which makes cert-manager issue it again now, unless an issuance is
// under way.
func (r *Reconciler) triggerIssuance(ctx context.Context, certificate *unstructured.Unstructured, reason, message string) error {
	conditions, _, err := unstructured.NestedSlice(certificate.Object, "status", "conditions")
	if err != nil {
		return fmt.Errorf("reading the conditions of Certificate %s: %w", certificate.GetName(), err)
	}
	issuing := map[string]any{
		"type": "Issuing", "status": string(metav1.ConditionTrue), "reason": reason, "message": message,
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
	}
	replaced := false
	for i, cond := range conditions {
		if m, ok := cond.(map[string]any); ok && m["type"] == "Issuing" {
			if m["status"] == string(metav1.ConditionTrue) {
				return nil
			}
			conditions[i], replaced = issuing, true
		}
	}
	if !replaced {
		conditions = append(conditions, issuing)
	}
	if err := unstructured.SetNestedSlice(certificate.Object, conditions, "status", "conditions"); err != nil {
		return err
	}
	if err := r.Client.Status().Update(ctx, certificate); err != nil {
		return fmt.Errorf("asking cert-manager to issue Certificate %s again: %w", certificate.GetName(), err)
	}
	return nil
}

func toAny(values []string) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = v
	}
	return out
}

func toAnyMap(values map[string]string) map[string]any {
	out := make(map[string]any, len(values))
	for k, v := range values {
		out[k] = v
	}
	return out
}
