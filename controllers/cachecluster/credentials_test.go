package cachecluster_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/cachecluster"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

// TestCredentialHashesWithinTheSecretLimit: the hashes the cluster's credentials Secret gets
// stay within the size limit, oldest tenants first (ties by namespace and name); the tenants
// left out are named; a stored hash that verifies is kept byte for byte (hashes are salted,
// so a new one would differ); a tenant being deleted gets none.
func TestCredentialHashesWithinTheSecretLimit(t *testing.T) {
	ns := env.Namespace(t, "hash-limit")
	for _, name := range []string{"a", "b", "c", "gone"} {
		create(t, &v1.TenantSLO{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{"test/hold"}},
			Spec: v1.TenantSLOSpec{
				ClusterRef: v1.ClusterReference{Name: "absent"},
				Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.5"}},
			},
		})
	}
	passwords := map[string]string{}
	testenv.Eventually(t, timeout, func() error {
		for _, name := range []string{"a", "b", "c", "gone"} {
			own := &corev1.Secret{}
			if err := get(own, ns, name+"-cache-credentials"); err != nil {
				return err
			}
			passwords[ns+"/"+name] = string(own.Data["password"])
		}
		return nil
	})
	gone := &v1.TenantSLO{}
	if err := get(gone, ns, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	var list v1.TenantSLOList
	if err := env.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	tenants := slices.DeleteFunc(list.Items, func(t v1.TenantSLO) bool { return t.Namespace != ns })
	t.Cleanup(func() {
		for i := range tenants {
			_ = env.Client.Patch(context.Background(), &tenants[i], client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})

	all := map[string][]byte{}
	left, err := cachecluster.TenantHashes(context.Background(), env.Client, tenants, nil, all, corev1.MaxSecretSize)
	if err != nil || len(left) != 0 {
		t.Fatalf("without a limit: left out %v, error %v", left, err)
	}
	want := []string{ns + ".a", ns + ".b", ns + ".c"}
	if got := slices.Sorted(maps.Keys(all)); !slices.Equal(got, want) {
		t.Fatalf("hashes for %v, want %v (none for the tenant being deleted)", got, want)
	}
	for key, hash := range all {
		id, _ := credentials.TenantFromSecretKey(key)
		if !credentials.Verify(string(hash), passwords[id]) {
			t.Errorf("the hash of %s does not verify its password", id)
		}
	}

	size := func(keys ...string) int {
		n := 0
		for _, k := range keys {
			n += len(k) + len(all[k])
		}
		return n
	}
	for _, tc := range []struct {
		limit int
		kept  []string
		left  []string
	}{
		{limit: size(want...), kept: want},
		{limit: size(want...) - 1, kept: want[:2], left: []string{ns + "/c"}},
		{limit: size(want[0]), kept: want[:1], left: []string{ns + "/b", ns + "/c"}},
		{limit: size(want[0]) - 1, left: []string{ns + "/a", ns + "/b", ns + "/c"}},
	} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			data := map[string][]byte{}
			left, err := cachecluster.TenantHashes(context.Background(), env.Client, tenants, all, data, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(left, tc.left) {
				t.Errorf("left out %v, want %v", left, tc.left)
			}
			if got := slices.Sorted(maps.Keys(data)); !slices.Equal(got, tc.kept) {
				t.Errorf("hashes for %v, want %v", got, tc.kept)
			}
			for k, v := range data {
				if string(v) != string(all[k]) {
					t.Errorf("the stored hash of %s was replaced although it verifies", k)
				}
			}
		})
	}
}
