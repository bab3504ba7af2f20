package cachecluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/pki"
)

// certManagerPolicy gives cert-manager a serving certificate of 45s to issue, which it renews
// 30s into its life; the CA lives long enough not to rotate during the test.
var certManagerPolicy = pki.Policy{CAValidity: time.Hour, LeafValidity: 45 * time.Second, Publish: time.Second}

// certManagerDir holds what hack/bootstrap.sh builds for these tests: cert-manager's
// controllers (the cert-manager command) and its CRDs.
func certManagerDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CACHEQOS_CERT_MANAGER")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(wd, "..", "..", "bin", "cert-manager")
	}
	for _, p := range []string{filepath.Join(dir, "cert-manager"), filepath.Join(dir, "crds")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("cert-manager is not built (%v): run hack/bootstrap.sh certmanager, or set CACHEQOS_CERT_MANAGER", err)
		}
	}
	return dir
}

// writeKubeconfig writes a kubeconfig reaching the API server of cfg.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startCertManager installs cert-manager's CRDs in the control plane of e and runs its
// controllers against it until the test ends.
func startCertManager(t *testing.T, e *testenv.Env) {
	t.Helper()
	dir := certManagerDir(t)
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(dir, "crds")}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "cert-manager"), "--kubeconfig="+writeKubeconfig(t, e.Config))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("cert-manager's log:\n%s", logs.String())
		}
	})
}

// cmObject is an empty cert-manager.io/v1 object of kind.
func cmObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: kind})
	return u
}

// certificateReady checks that the cluster's Certificate is Ready and returns it.
func certificateReady(e *testenv.Env, ns, name string) (*unstructured.Unstructured, error) {
	u := cmObject("Certificate")
	if err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return nil, err
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			if m["status"] != "True" {
				return nil, fmt.Errorf("certificate %s is not Ready: %v", name, m["message"])
			}
			return u, nil
		}
	}
	return nil, fmt.Errorf("certificate %s has no Ready condition yet (%v)", name, conditions)
}

// servedSerial is the serial number of the certificate a TLS server presents that reloads
// its certificate from the files of the TLS Secret at every handshake, as the sidecar does,
// to a client that trusts ca.
func servedSerial(t *testing.T, dir string, ca []byte) (string, error) {
	t.Helper()
	reloader, err := pki.NewReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil)
	if err != nil {
		return "", err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", reloader.ServerConfig())
	if err != nil {
		return "", err
	}
	defer ln.Close()
	go func() {
		if conn, err := ln.Accept(); err == nil {
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(),
		&tls.Config{RootCAs: roots, ServerName: "vault.cert-manager.svc"})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// tlsClusterWithTenant starts an operator with policy and creates in it a TLS cluster, vault
// in namespace cert-manager, with a tenant, ledger.
func tlsClusterWithTenant(t *testing.T, policy pki.Policy) (*testenv.Env, *v1.CacheCluster) {
	t.Helper()
	e, err := testenv.Start(controllers.Options{Images: images, SidecarDefaults: sidecarDefaults, TLSPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	ns := e.Namespace(t, "cert-manager")
	c := newCluster(ns, "vault", "tls")
	c.Spec.TLS = v1.ClientTLS{Enabled: true, ExtraDNSNames: []string{"cache.example.com"}}
	if err := e.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	tenant := &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Name: c.Name},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.5"}},
		},
	}
	if err := e.Client.Create(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	return e, c
}

// TestCertManager installs cert-manager's CRDs and runs its own controllers against the
// control plane of an operator that already serves a TLS cluster with a certificate of its
// own. The cluster then gets a CA Issuer signing with the cluster's CA and a Certificate, both
// owned by the cluster; cert-manager issues the TLS Secret, owned by the cluster, which the
// sidecars mount; the tenant's ca.crt is the CA that signed it; then the objects settle (3s
// without a change). cert-manager's renewal reaches a server reloading the Secret's files; a new
// cluster CA (the old CA Secret deleted) has the certificate issued again from it at once;
// TLS off removes the Certificate, the Issuer and the Secrets, and so does deleting the
// cluster (TLS on again), for good.
func TestCertManager(t *testing.T) {
	e, c := tlsClusterWithTenant(t, certManagerPolicy)
	ctx, ns := context.Background(), c.Namespace
	names := []string{"vault.cert-manager.svc", "vault", "vault.cert-manager", "vault.cert-manager.svc.cluster.local", "cache.example.com"}
	read := func(obj client.Object, name string) error {
		return e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	}

	// Before cert-manager is installed the operator issues the serving certificate itself;
	// once its kinds are served, cert-manager's certificate replaces it.
	testenv.Eventually(t, timeout, func() error {
		secret := &corev1.Secret{}
		if err := read(secret, "vault-tls"); err != nil {
			return err
		}
		if len(secret.Data["tls.crt"]) == 0 || secret.Annotations["cert-manager.io/issuer-name"] != "" {
			return errors.New("the TLS Secret is not the operator's")
		}
		return nil
	})
	startCertManager(t, e)
	installed := time.Now()

	// issued waits for the Certificate to be Ready with a certificate in the TLS Secret that
	// the CA in the signer Secret signed, for every name, other than the one of serial skip;
	// it returns the certificate, the Secret and the signer.
	issued := func(skip string) (*x509.Certificate, *corev1.Secret, []byte) {
		t.Helper()
		var leaf *x509.Certificate
		secret, signer := &corev1.Secret{}, &corev1.Secret{}
		testenv.Eventually(t, 60*time.Second, func() error {
			cert, err := certificateReady(e, ns, "vault-tls")
			if err != nil {
				return err
			}
			if err := read(secret, "vault-tls"); err != nil {
				return err
			}
			for _, o := range []client.Object{cert, secret} {
				if ref := metav1.GetControllerOf(o); ref == nil || ref.UID != c.UID {
					return fmt.Errorf("%s %s is controlled by %v, not the cluster", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), ref)
				}
			}
			if err := read(signer, "vault-tls-signer"); err != nil {
				return err
			}
			if secret.Annotations["cert-manager.io/issuer-name"] != "vault-tls" {
				return fmt.Errorf("the TLS Secret is not cert-manager's: annotations %v", secret.Annotations)
			}
			pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
			if err != nil {
				return err
			}
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return err
			}
			if leaf.SerialNumber.String() == skip {
				return errors.New("the certificate was not issued again")
			}
			if !bytes.Equal(secret.Data["ca.crt"], signer.Data["tls.crt"]) {
				return errors.New("the TLS Secret's ca.crt is not the CA in the signer Secret")
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(signer.Data["tls.crt"])
			for _, name := range names {
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
					return fmt.Errorf("a client trusting the signer reaching %s: %w", name, err)
				}
			}
			return nil
		})
		return leaf, secret, signer.Data["tls.crt"]
	}
	first, secret, signerCA := issued("")
	// cert-manager would keep the operator's valid certificate until its renewal (30s).
	replaced := time.Since(installed)
	t.Logf("cert-manager's certificate replaced the operator's %v after cert-manager was installed", replaced.Round(100*time.Millisecond))
	if replaced > 20*time.Second {
		t.Fatalf("cert-manager replaced the operator's certificate only after %v", replaced)
	}
	if got := first.NotAfter.Sub(first.NotBefore); got != certManagerPolicy.LeafValidity {
		t.Fatalf("certificate valid for %v, want the policy's %v", got, certManagerPolicy.LeafValidity)
	}
	caSecret := &corev1.Secret{}
	if err := read(caSecret, "vault-tls-ca"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(caSecret.Data["ca.crt"], signerCA) {
		t.Fatal("the signer is not a CA of the cluster's CA Secret")
	}

	testenv.Eventually(t, timeout, func() error {
		ds := &appsv1.DaemonSet{}
		if err := read(ds, "vault-sidecar"); err != nil {
			return err
		}
		pod := ds.Spec.Template.Spec
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "vault-tls" }) {
			return fmt.Errorf("no volume of the TLS Secret in %+v", pod.Volumes)
		}
		if !slices.Contains(pod.Containers[0].Args, "--client-tls-cert-file=/etc/cacheqos/tls/tls.crt") {
			return fmt.Errorf("args %v do not serve TLS", pod.Containers[0].Args)
		}
		return nil
	})
	tenantCA := func(want []byte) func() error {
		return func() error {
			own := &corev1.Secret{}
			if err := read(own, "ledger-cache-credentials"); err != nil {
				return err
			}
			if !bytes.Equal(own.Data["ca.crt"], want) {
				return fmt.Errorf("the tenant's ca.crt (%d bytes) is not the issuing CA", len(own.Data["ca.crt"]))
			}
			return nil
		}
	}
	testenv.Eventually(t, timeout, tenantCA(signerCA))

	// Settled: the operator and cert-manager do not keep changing each other's objects (3s
	// without a change, within the timeout: cert-manager's own status updates follow the
	// issuance for a moment).
	versions := func() []string {
		var out []string
		for _, o := range []struct {
			name string
			obj  client.Object
		}{
			{"vault-tls", cmObject("Certificate")}, {"vault-tls", cmObject("Issuer")}, {"vault-tls", &corev1.Secret{}},
			{"vault-tls-signer", &corev1.Secret{}}, {"vault-sidecar", &appsv1.DaemonSet{}},
		} {
			if err := read(o.obj, o.name); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%T %s %s", o.obj, o.name, o.obj.GetResourceVersion()))
		}
		return out
	}
	testenv.Eventually(t, timeout, func() error {
		before := versions()
		time.Sleep(3 * time.Second)
		if after := versions(); !slices.Equal(before, after) {
			return fmt.Errorf("objects keep changing after the certificate was issued: resource versions %v then %v", before, after)
		}
		return nil
	})

	// The Secret's files as the kubelet writes them into the sidecar, served by a reloading
	// server: cert-manager's renewal is what the next handshake presents.
	files := t.TempDir()
	mount := func(s *corev1.Secret) {
		for _, key := range []string{"tls.crt", "tls.key"} {
			if err := os.WriteFile(filepath.Join(files, key+".new"), s.Data[key], 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(files, key+".new"), filepath.Join(files, key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mount(secret)
	if serial, err := servedSerial(t, files, secret.Data["ca.crt"]); err != nil || serial != first.SerialNumber.String() {
		t.Fatalf("served %s (%v), want the issued %s", serial, err, first.SerialNumber)
	}
	renewed, secret, renewedCA := issued(first.SerialNumber.String())
	if !bytes.Equal(renewedCA, signerCA) || !renewed.NotBefore.Before(first.NotAfter) {
		t.Fatalf("renewed from the same CA %v at %v, the first expiring at %v", bytes.Equal(renewedCA, signerCA), renewed.NotBefore, first.NotAfter)
	}
	t.Logf("cert-manager renewed the certificate %v into its %v life", renewed.NotBefore.Sub(first.NotBefore), certManagerPolicy.LeafValidity)
	mount(secret)
	if serial, err := servedSerial(t, files, signerCA); err != nil || serial != renewed.SerialNumber.String() {
		t.Fatalf("after renewal served %s (%v), want %s", serial, err, renewed.SerialNumber)
	}

	// A new CA: the certificate is issued from it long before cert-manager would renew it.
	if err := e.Client.Delete(ctx, caSecret); err != nil {
		t.Fatal(err)
	}
	reissued, _, newCA := issued(renewed.SerialNumber.String())
	if bytes.Equal(newCA, signerCA) {
		t.Fatal("the certificate was issued again from the old CA")
	}
	if due := renewed.NotBefore.Add(certManagerPolicy.LeafValidity * 2 / 3); !reissued.NotBefore.Before(due) {
		t.Fatalf("issued again at %v, not before the renewal due at %v", reissued.NotBefore, due)
	}
	testenv.Eventually(t, timeout, tenantCA(newCA))

	// TLS off: no Certificate, Issuer, TLS, signer or CA bundle Secret.
	// The operator writes the cluster's status meanwhile: read again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := read(c, c.Name); err != nil {
			return err
		}
		c.Spec.TLS = v1.ClientTLS{}
		return e.Client.Update(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	gone := func() error {
		for _, kind := range []string{"Certificate", "Issuer"} {
			if err := read(cmObject(kind), "vault-tls"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s vault-tls is still there (%w)", kind, err)
			}
		}
		for _, name := range []string{"vault-tls", "vault-tls-signer", "vault-ca-bundle"} {
			if err := read(&corev1.Secret{}, name); !apierrors.IsNotFound(err) {
				return fmt.Errorf("secret %s is still there (%w)", name, err)
			}
		}
		return nil
	}
	testenv.Eventually(t, timeout, gone)
	testenv.Eventually(t, timeout, tenantCA(nil))

	// TLS on again, then the cluster deleted: everything goes, and cert-manager does not
	// write the TLS Secret again (envtest runs no garbage collector: the operator deletes).
	// The operator writes the cluster's status meanwhile: read again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := read(c, c.Name); err != nil {
			return err
		}
		c.Spec.TLS = v1.ClientTLS{Enabled: true}
		return e.Client.Update(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	names = names[:4]
	issued(reissued.SerialNumber.String())
	if err := e.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if err := read(&v1.CacheCluster{}, c.Name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the cluster is still there (%w)", err)
		}
		return gone()
	})
	time.Sleep(2 * time.Second)
	if err := gone(); err != nil {
		t.Fatalf("after the cluster was deleted: %v", err)
	}
}

// caRotationPolicy rotates the cluster's CA while the test runs: a second CA 40s after the
// first, signing 10s later, the first expiring 60s after it was made. cert-manager's
// certificates live 45s.
var caRotationPolicy = pki.Policy{CAValidity: time.Minute, LeafValidity: 45 * time.Second, Publish: 10 * time.Second}

// observed is a value of a Secret's key as the test first saw it.
type observed struct {
	at   time.Time
	data []byte
}

// parseCerts parses every PEM block of data as a certificate.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return certs, nil
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
}

// TestCertManagerCARotation: with cert-manager issuing the serving certificate, the cluster's
// CA rotates on its own schedule, and the tenant's ca.crt goes from the first CA to both
// (before cert-manager is given the second to sign with) and to the second alone only once
// the first has expired, never anything else; certificates cert-manager issued from either CA
// verify against the two-CA bundle under every name the clients use.
func TestCertManagerCARotation(t *testing.T) {
	e, c := tlsClusterWithTenant(t, caRotationPolicy)
	startCertManager(t, e)
	ctx, ns := context.Background(), c.Namespace
	names := []string{"vault.cert-manager.svc", "vault", "vault.cert-manager", "vault.cert-manager.svc.cluster.local", "cache.example.com"}

	// Every tenant ca.crt and every certificate cert-manager wrote into the TLS Secret, in the
	// order seen, polled every 100ms until the tenant holds one CA other than the first and
	// cert-manager has issued a certificate from it.
	var bundles, leaves []observed
	record := func(seen []observed, data []byte) []observed {
		if len(data) > 0 && (len(seen) == 0 || !bytes.Equal(seen[len(seen)-1].data, data)) {
			seen = append(seen, observed{time.Now(), data})
		}
		return seen
	}
	testenv.Eventually(t, 3*caRotationPolicy.CAValidity, func() error {
		own, serving := &corev1.Secret{}, &corev1.Secret{}
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ledger-cache-credentials"}, own); client.IgnoreNotFound(err) != nil {
			return err
		}
		bundles = record(bundles, own.Data["ca.crt"])
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vault-tls"}, serving); client.IgnoreNotFound(err) != nil {
			return err
		}
		if serving.Annotations["cert-manager.io/certificate-name"] == "vault-tls" {
			leaves = record(leaves, serving.Data["tls.crt"])
		}
		if len(bundles) < 2 || len(leaves) == 0 {
			return fmt.Errorf("%d tenant bundles and %d certificates from cert-manager seen", len(bundles), len(leaves))
		}
		last, err := parseCerts(bundles[len(bundles)-1].data)
		if err != nil {
			return fmt.Errorf("the tenant's ca.crt: %w", err)
		}
		if len(last) != 1 || bytes.Equal(bundles[len(bundles)-1].data, bundles[0].data) {
			return fmt.Errorf("the tenant's ca.crt is not yet a single new CA (%d CAs)", len(last))
		}
		leaf, err := parseCerts(leaves[len(leaves)-1].data)
		if err != nil || len(leaf) == 0 || leaf[0].CheckSignatureFrom(last[0]) != nil {
			return errors.New("cert-manager has not yet issued a certificate from the new CA")
		}
		return nil
	})

	var cas [][]*x509.Certificate
	for i, b := range bundles {
		certs, err := parseCerts(b.data)
		if err != nil {
			t.Fatalf("tenant bundle %d: %v", i+1, err)
		}
		cas = append(cas, certs)
	}
	if len(cas) != 3 || len(cas[0]) != 1 || len(cas[1]) != 2 || len(cas[2]) != 1 ||
		!cas[1][0].Equal(cas[0][0]) || !cas[1][1].Equal(cas[2][0]) {
		counts := make([]int, len(cas))
		for i := range cas {
			counts[i] = len(cas[i])
		}
		t.Fatalf("the tenant's ca.crt held %v CAs in turn, want the first, both, then the second: [1 2 1]", counts)
	}
	first, second, overlap := cas[0][0], cas[2][0], bundles[1]
	if ended := bundles[2].at; ended.Before(first.NotAfter) {
		t.Fatalf("the first CA left the tenant's ca.crt at %v, before it expired at %v", ended, first.NotAfter)
	}
	t.Logf("the tenant's ca.crt held both CAs for %v; the first CA expired %v after the tenant got both",
		bundles[2].at.Sub(overlap.at).Round(100*time.Millisecond), first.NotAfter.Sub(overlap.at).Round(100*time.Millisecond))

	// Certificates from both CAs, each verifying against the bundle the tenant held during the
	// overlap (at the time it was seen: the first CA has expired since), and the second CA
	// joined the tenant's bundle before cert-manager issued a certificate from it.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(overlap.data)
	signedBy := map[*x509.Certificate]int{}
	for _, l := range leaves {
		leaf, err := parseCerts(l.data)
		if err != nil || len(leaf) == 0 {
			t.Fatalf("a certificate cert-manager wrote does not parse: %v", err)
		}
		for _, ca := range []*x509.Certificate{first, second} {
			if leaf[0].CheckSignatureFrom(ca) == nil {
				signedBy[ca]++
				if ca == second && l.at.Before(overlap.at) {
					t.Fatalf("a certificate from the second CA was in the TLS Secret at %v, before the tenant trusted that CA at %v", l.at, overlap.at)
				}
			}
		}
		for _, name := range names {
			if _, err := leaf[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: l.at}); err != nil {
				t.Fatalf("the certificate seen at %v (serial %s), for a client holding the two-CA bundle reaching %s: %v", l.at, leaf[0].SerialNumber, name, err)
			}
		}
	}
	if signedBy[first] == 0 || signedBy[second] == 0 {
		t.Fatalf("cert-manager issued %d certificates from the first CA and %d from the second, want both", signedBy[first], signedBy[second])
	}
	bundle := &corev1.Secret{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vault-ca-bundle"}, bundle); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(bundle); ref == nil || ref.UID != c.UID || !bytes.Equal(bundle.Data["ca.crt"], bundles[2].data) {
		t.Fatalf("the CA bundle Secret is controlled by %v and holds the tenant's ca.crt: %v", ref, bytes.Equal(bundle.Data["ca.crt"], bundles[2].data))
	}
}
