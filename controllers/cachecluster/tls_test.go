package cachecluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/cachecluster"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// tlsPolicy is short so the test sees a serving certificate renewed (every 4s) and a CA
// rotated (after 16s, signing 3s later) while it runs.
var tlsPolicy = pki.Policy{CAValidity: 24 * time.Second, LeafValidity: 6 * time.Second, Publish: 3 * time.Second}

// servingCert is the cluster's TLS Secret, checked: a kubernetes.io/tls Secret owned by the
// cluster whose certificate crypto/tls loads with its key, and which a client holding ca.crt
// accepts under every name in names.
func servingCert(c *v1.CacheCluster, names []string) (*x509.Certificate, []byte, error) {
	return leafCert(c, c.Name+"-tls", names)
}

// leafCert is servingCert for the cluster's Secret name.
func leafCert(c *v1.CacheCluster, name string, names []string) (*x509.Certificate, []byte, error) {
	secret := &corev1.Secret{}
	if err := get(secret, c.Namespace, name); err != nil {
		return nil, nil, err
	}
	if secret.Type != corev1.SecretTypeTLS {
		return nil, nil, fmt.Errorf("the TLS Secret %s is of type %s", name, secret.Type)
	}
	if ref := metav1.GetControllerOf(secret); ref == nil || ref.UID != c.UID {
		return nil, nil, fmt.Errorf("the TLS Secret %s is not controlled by the cluster", name)
	}
	pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		return nil, nil, errors.New("ca.crt holds no certificate")
	}
	for _, name := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			return nil, nil, fmt.Errorf("a client reaching %s: %w", name, err)
		}
	}
	return leaf, secret.Data["ca.crt"], nil
}

func caCount(bundle []byte) int {
	n := 0
	for rest := bundle; ; n++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return n
		}
	}
}

// TestClientTLS: a cluster with spec.tls gets a CA Secret and a serving certificate for the
// names clients reach it by, its sidecars mount the certificate and are told to serve TLS,
// and its tenants' credentials Secrets carry the CA bundle. The serving certificate is renewed
// before it expires and the CA rotated with an overlap (the bundle holds both CAs before the
// new one signs), each time reaching the tenants; a broken CA Secret is reported; turning TLS
// off removes it all.
func TestClientTLS(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "client-tls")
	c := newCluster(ns, "secure", "tls")
	c.Spec.TLS = v1.ClientTLS{Enabled: true, ExtraDNSNames: []string{"cache.example.com"}}
	create(t, c)
	tenant := &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Name: c.Name},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.5"}},
		},
	}
	create(t, tenant)
	names := []string{"secure.client-tls.svc", "secure", "secure.client-tls", "secure.client-tls.svc.cluster.local", "cache.example.com"}

	var first *x509.Certificate
	var bundle []byte
	testenv.Eventually(t, timeout, func() (err error) {
		first, bundle, err = servingCert(c, names)
		return err
	})
	if first.Subject.CommonName != names[0] || !slices.Equal(first.DNSNames, names) {
		t.Fatalf("certificate for %q %v, want %v", first.Subject.CommonName, first.DNSNames, names)
	}
	if _, _, err := servingCert(c, []string{"other.client-tls.svc"}); err == nil {
		t.Fatal("the certificate verifies for a name clients do not use")
	}
	ca := &corev1.Secret{}
	if err := get(ca, ns, "secure-tls-ca"); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(ca); ref == nil || ref.UID != c.UID || len(ca.Data["ca.key"]) == 0 || !bytes.Equal(ca.Data["ca.crt"], bundle) {
		t.Fatalf("CA Secret owner %v, keys %d bytes, certificates match the bundle %v", ref, len(ca.Data["ca.key"]), bytes.Equal(ca.Data["ca.crt"], bundle))
	}

	testenv.Eventually(t, timeout, func() error {
		ds := &appsv1.DaemonSet{}
		if err := get(ds, ns, "secure-sidecar"); err != nil {
			return err
		}
		pod := ds.Spec.Template.Spec
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "secure-tls" })
		if i < 0 {
			return fmt.Errorf("no volume of the TLS Secret in %+v", pod.Volumes)
		}
		sc := pod.Containers[0]
		if !slices.ContainsFunc(sc.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == pod.Volumes[i].Name && m.MountPath == "/etc/cacheqos/tls" && m.ReadOnly
		}) {
			return fmt.Errorf("the TLS volume is not mounted read-only at /etc/cacheqos/tls: %+v", sc.VolumeMounts)
		}
		for _, arg := range []string{"--client-tls-cert-file=/etc/cacheqos/tls/tls.crt", "--client-tls-key-file=/etc/cacheqos/tls/tls.key"} {
			if !slices.Contains(sc.Args, arg) {
				return fmt.Errorf("args %v lack %s", sc.Args, arg)
			}
		}
		return nil
	})
	tenantBundle := func(want []byte) func() error {
		return func() error {
			own := &corev1.Secret{}
			if err := get(own, ns, "orders-cache-credentials"); err != nil {
				return err
			}
			if got := own.Data["ca.crt"]; !bytes.Equal(got, want) {
				return fmt.Errorf("the tenant's ca.crt holds %d CAs, want %d", caCount(got), caCount(want))
			}
			return nil
		}
	}
	testenv.Eventually(t, timeout, tenantBundle(bundle))

	// Renewal: a new serving certificate from the same CA before the first expires.
	var renewed *x509.Certificate
	testenv.Eventually(t, timeout, func() (err error) {
		renewed, _, err = servingCert(c, names)
		if err == nil && renewed.SerialNumber.Cmp(first.SerialNumber) == 0 {
			err = errors.New("the serving certificate was not renewed")
		}
		return err
	})
	if !renewed.NotBefore.Before(first.NotAfter) {
		t.Fatalf("renewed at %v, after the first expired at %v", renewed.NotBefore, first.NotAfter)
	}
	testenv.Eventually(t, timeout, func() error {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == c.Name && e.Reason == cachecluster.ReasonCertificateIssued && strings.Contains(e.Message, "due for renewal") {
				return nil
			}
		}
		return errors.New("no CertificateIssued event saying the certificate was due for renewal")
	})

	// CA rotation: both CAs in the bundle, reaching the tenant, then the new CA signs.
	var rotated []byte
	testenv.Eventually(t, 2*tlsPolicy.CAValidity, func() (err error) {
		_, rotated, err = servingCert(c, names)
		if err == nil && caCount(rotated) != 2 {
			err = fmt.Errorf("the bundle holds %d CAs", caCount(rotated))
		}
		return err
	})
	testenv.Eventually(t, timeout, tenantBundle(rotated))
	block, _ := pem.Decode(rotated[bytes.Index(rotated, []byte("-----END CERTIFICATE-----")):][len("-----END CERTIFICATE-----\n"):])
	newCA, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		leaf, _, err := servingCert(c, names)
		if err != nil {
			return err
		}
		return leaf.CheckSignatureFrom(newCA)
	})

	// A CA Secret that does not parse is reported, not replaced.
	if err := get(ca, ns, "secure-tls-ca"); err != nil {
		t.Fatal(err)
	}
	ca.Data["ca.key"] = []byte("not a key")
	if err := env.Client.Update(ctx, ca); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, clusterCondition(c, v1.ConditionProgressing, metav1.ConditionTrue, "ReconcileError",
		"CA certificates but 0 keys; delete it to have a new CA made", nil))

	// TLS off: the serving and CA bundle Secrets go (the CA stays: it signs the peer
	// certificate), the sidecars serve plaintext, the tenant has no ca.crt.
	if err := get(c, ns, c.Name); err != nil {
		t.Fatal(err)
	}
	c.Spec.TLS = v1.ClientTLS{}
	if err := env.Client.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		for _, name := range []string{"secure-tls", "secure-ca-bundle"} {
			if err := get(&corev1.Secret{}, ns, name); !apierrors.IsNotFound(err) {
				return fmt.Errorf("secret %s is still there (%w)", name, err)
			}
		}
		ds := &appsv1.DaemonSet{}
		if err := get(ds, ns, "secure-sidecar"); err != nil {
			return err
		}
		pod := ds.Spec.Template.Spec
		if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "secure-tls" }) ||
			slices.ContainsFunc(pod.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--client-tls") }) {
			return fmt.Errorf("the DaemonSet still has TLS: volumes %+v, args %v", ds.Spec.Template.Spec.Volumes, ds.Spec.Template.Spec.Containers[0].Args)
		}
		return nil
	})
	testenv.Eventually(t, timeout, tenantBundle(nil))
}

// TestPeerTLS: every cluster, with or without spec.tls, gets a peer certificate from its CA
// naming the cluster, usable to serve and to connect; its sidecars mount it and are told to
// use it. While a sidecar pod without peer TLS exists (an older version during a rollout) the
// credentials Secret lets the others talk plaintext to it; once none is left, it does not.
func TestPeerTLS(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "peer-tls")
	c := newCluster(ns, "peers", "tls")
	create(t, c)
	testenv.Eventually(t, timeout, func() error {
		secret := &corev1.Secret{}
		if err := get(secret, ns, "peers-peer-tls"); err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(secret); secret.Type != corev1.SecretTypeTLS || ref == nil || ref.UID != c.UID {
			return fmt.Errorf("peer Secret of type %s controlled by %v", secret.Type, ref)
		}
		pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
		if err != nil {
			return err
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(secret.Data["ca.crt"])
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				return err
			}
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "cacheqos://peer-tls/peers" {
			return fmt.Errorf("the peer certificate names %v", leaf.URIs)
		}
		return nil
	})
	testenv.Eventually(t, timeout, func() error {
		ds := &appsv1.DaemonSet{}
		if err := get(ds, ns, "peers-sidecar"); err != nil {
			return err
		}
		pod := ds.Spec.Template.Spec
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "peers-peer-tls" }) {
			return fmt.Errorf("no volume of the peer Secret in %+v", pod.Volumes)
		}
		sc := pod.Containers[0]
		if !slices.ContainsFunc(sc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/cacheqos/peer-tls" && m.ReadOnly }) {
			return fmt.Errorf("the peer volume is not mounted read-only at /etc/cacheqos/peer-tls: %+v", sc.VolumeMounts)
		}
		for _, arg := range []string{"--peer-tls-cert-file=/etc/cacheqos/peer-tls/tls.crt", "--peer-tls-key-file=/etc/cacheqos/peer-tls/tls.key",
			"--peer-tls-ca-file=/etc/cacheqos/peer-tls/ca.crt", "--peer-tls-identity=cacheqos://peer-tls/peers"} {
			if !slices.Contains(sc.Args, arg) {
				return fmt.Errorf("args %v lack %s", sc.Args, arg)
			}
		}
		return nil
	})

	plaintext := func(want bool) func() error {
		return func() error {
			secret := &corev1.Secret{}
			if err := get(secret, ns, "peers-tenant-credentials"); err != nil {
				return err
			}
			if got := string(secret.Data["peer-plaintext"]) == "true"; got != want {
				return fmt.Errorf("peer-plaintext %q, want %v", secret.Data["peer-plaintext"], want)
			}
			return nil
		}
	}
	testenv.Eventually(t, timeout, plaintext(false))
	old := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "peers-sidecar-old", Labels: map[string]string{
			"app.kubernetes.io/name": "cacheqos-sidecar", "app.kubernetes.io/instance": "peers", "app.kubernetes.io/managed-by": "cacheqos-operator",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Image: "sidecar:old", Args: []string{"--engine=redis"}}}},
	}
	create(t, old)
	testenv.Eventually(t, timeout, plaintext(true))
	if err := env.Client.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, plaintext(false))
}
