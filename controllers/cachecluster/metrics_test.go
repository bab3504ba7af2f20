package cachecluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// metricsArgs are the sidecar flags of secure metrics.
var metricsArgs = []string{"--metrics-secure", "--metrics-tls-cert-file=/etc/cacheqos/metrics-tls/tls.crt", "--metrics-tls-key-file=/etc/cacheqos/metrics-tls/tls.key"}

// sidecarMetricsRendered checks that the cluster's sidecars serve their metrics as secure
// says: with it, the DaemonSet mounts the metrics Secret read-only, passes the flags and
// probes over HTTPS, the Secret's certificate verifies for the peer Service's name with its
// ca.crt, and a ClusterRoleBinding gives the sidecars' ServiceAccount system:auth-delegator;
// without it, none of these exist and probes use HTTP.
func sidecarMetricsRendered(c *v1.CacheCluster, secure bool) func() error {
	return func() error {
		ds := &appsv1.DaemonSet{}
		if err := get(ds, c.Namespace, c.Name+"-sidecar"); err != nil {
			return err
		}
		pod := ds.Spec.Template.Spec
		sc := pod.Containers[0]
		hasVolume := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == c.Name+"-metrics-tls"
		}) && slices.ContainsFunc(sc.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.MountPath == "/etc/cacheqos/metrics-tls" && m.ReadOnly
		})
		hasArgs := 0
		for _, arg := range metricsArgs {
			if slices.Contains(sc.Args, arg) {
				hasArgs++
			}
		}
		wantScheme := corev1.URISchemeHTTP
		if secure {
			wantScheme = corev1.URISchemeHTTPS
		}
		var errs []error
		if hasVolume != secure || (secure && hasArgs != len(metricsArgs)) || (!secure && hasArgs != 0) {
			errs = append(errs, fmt.Errorf("secure %v: metrics volume mounted %v, args %v", secure, hasVolume, sc.Args))
		}
		for _, probe := range []*corev1.Probe{sc.ReadinessProbe, sc.LivenessProbe} {
			if probe.HTTPGet.Scheme != wantScheme {
				errs = append(errs, fmt.Errorf("probe %s over %s, want %s", probe.HTTPGet.Path, probe.HTTPGet.Scheme, wantScheme))
			}
		}
		binding := &rbacv1.ClusterRoleBinding{}
		bindingErr := env.Client.Get(context.Background(), client.ObjectKey{Name: "cacheqos-sidecar-metrics." + c.Namespace + "." + c.Name}, binding)
		secretErr := get(&corev1.Secret{}, c.Namespace, c.Name+"-metrics-tls")
		if !secure {
			for _, err := range []error{bindingErr, secretErr} {
				if !apierrors.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("insecure metrics, but the metrics Secret or ClusterRoleBinding is still there (%w)", err))
				}
			}
			return errors.Join(errs...)
		}
		if bindingErr != nil {
			return errors.Join(append(errs, bindingErr)...)
		}
		wantSubject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: c.Name + "-sidecar", Namespace: c.Namespace}
		if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != "system:auth-delegator" || !slices.Equal(binding.Subjects, []rbacv1.Subject{wantSubject}) {
			errs = append(errs, fmt.Errorf("ClusterRoleBinding role %+v subjects %+v", binding.RoleRef, binding.Subjects))
		}
		if binding.Labels["app.kubernetes.io/managed-by"] != "cacheqos-operator" {
			errs = append(errs, fmt.Errorf("ClusterRoleBinding labels %v: the operator's cache would not see it", binding.Labels))
		}
		if _, _, err := leafCert(c, c.Name+"-metrics-tls", []string{c.Name + "-sidecars." + c.Namespace + ".svc"}); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// TestSidecarMetricsAccess: a cluster's sidecars serve secure metrics by default; Insecure
// (a migration) takes the certificate, the flags and the ClusterRoleBinding away, Secure
// brings them back, and deleting the cluster deletes the cluster-scoped binding, which no
// owner reference would collect. The API server refuses any other value.
func TestSidecarMetricsAccess(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "metrics-access")
	c := newCluster(ns, "scraped", "metrics-access")
	create(t, c)
	testenv.Eventually(t, timeout, sidecarMetricsRendered(c, true))

	updateCluster(t, c, func(c *v1.CacheCluster) { c.Spec.Monitoring.SidecarMetrics = v1.SidecarMetricsInsecure })
	testenv.Eventually(t, timeout, sidecarMetricsRendered(c, false))
	updateCluster(t, c, func(c *v1.CacheCluster) { c.Spec.Monitoring.SidecarMetrics = v1.SidecarMetricsSecure })
	testenv.Eventually(t, timeout, sidecarMetricsRendered(c, true))

	bad := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"monitoring":{"sidecarMetrics":"Open"}}}`))
	if err := env.Client.Patch(ctx, c.DeepCopy(), bad); err == nil || !strings.Contains(err.Error(), `spec.monitoring.sidecarMetrics: Unsupported value: "Open"`) {
		t.Errorf("sidecarMetrics Open: %v, want the API server to name the field and its values", err)
	}

	if err := env.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "cacheqos-sidecar-metrics." + ns + ".scraped"}, &rbacv1.ClusterRoleBinding{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the ClusterRoleBinding outlived its cluster (get: %w)", err)
		}
		return nil
	})
}
