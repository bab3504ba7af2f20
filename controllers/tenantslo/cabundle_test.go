package tenantslo_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// TestCABundleKeptWhileMissing: a tenant of a TLS cluster gets the cluster's CA bundle
// (Secret <cluster>-ca-bundle) as ca.crt. While that Secret is missing (deleted here, as it is
// before an operator that writes it first runs) the tenant keeps its ca.crt: polled every
// 20ms through five deletions it is never seen without it, and comes out unchanged. Turning
// TLS off removes it.
func TestCABundleKeptWhileMissing(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "bundle-cache"), env.Namespace(t, "bundle-team")
	nodes(t, "bundle", "bundle-a")
	c := cluster(t, cacheNS, "secure", "bundle", v1.EngineRedis, 1)
	setTLS := func(enabled bool) {
		testenv.Eventually(t, timeout, func() error {
			if err := get(c, cacheNS, c.Name); err != nil {
				return err
			}
			c.Spec.TLS = v1.ClientTLS{Enabled: enabled}
			return env.Client.Update(ctx(), c)
		})
	}
	setTLS(true)
	web := tenant(teamNS, "web", cacheNS, "secure", "1Gi")
	create(t, web)
	tenantCA := func() ([]byte, error) {
		own := &corev1.Secret{}
		if err := get(own, teamNS, "web-cache-credentials"); err != nil {
			return nil, err
		}
		return own.Data["ca.crt"], nil
	}
	var want []byte
	testenv.Eventually(t, timeout, func() error {
		bundle := &corev1.Secret{}
		if err := get(bundle, cacheNS, "secure-ca-bundle"); err != nil {
			return err
		}
		got, err := tenantCA()
		if err != nil {
			return err
		}
		if want = bundle.Data["ca.crt"]; len(want) == 0 || !bytes.Equal(got, want) {
			return fmt.Errorf("the tenant's ca.crt (%d bytes) is not the cluster's bundle (%d bytes)", len(got), len(want))
		}
		return nil
	})

	for range 5 {
		bundle := &corev1.Secret{}
		if err := get(bundle, cacheNS, "secure-ca-bundle"); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx(), bundle); err != nil {
			t.Fatal(err)
		}
		recreated := false
		for deadline := time.Now().Add(timeout); !recreated; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the CA bundle Secret was not written again")
			}
			got, err := tenantCA()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("while the CA bundle Secret was missing the tenant's ca.crt held %d bytes, want the %d it had", len(got), len(want))
			}
			again := &corev1.Secret{}
			recreated = get(again, cacheNS, "secure-ca-bundle") == nil && again.UID != bundle.UID
		}
	}
	// Once more after the tenant has heard of the new Secret.
	time.Sleep(time.Second)
	if got, err := tenantCA(); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the deletions the tenant's ca.crt holds %d bytes (%v), want the %d it had", len(got), err, len(want))
	}

	setTLS(false)
	testenv.Eventually(t, timeout, func() error {
		got, err := tenantCA()
		if err == nil && len(got) > 0 {
			err = errors.New("the tenant still has ca.crt with TLS off")
		}
		return err
	})
}
