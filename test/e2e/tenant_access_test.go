package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// governanceLabel marks the namespaces the governance test's CacheCluster admits.
const governanceLabel = "cacheqos.io/e2e-governance"

// testTenantWithEditRole is a tenant as RBAC sees it: a user holding only the built-in edit
// ClusterRole in its namespaces (the chart's tenant roles aggregate into it) and the chart's
// CacheCluster reader in the cluster's namespace finds the cluster, creates a TenantSLO and
// reads it with `kubectl get`; it cannot write the status the operator owns; and a TenantSLO
// it creates in a namespace the cluster's tenants.namespaceSelector does not select is not
// admitted, with a condition that names the rule.
func testTenantWithEditRole(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "governed")
	c := testCluster(ns, "governed", func(c *v1.CacheCluster) {
		c.Spec.Capacity.Memory = resource.MustParse("32Mi")
		c.Spec.Tenants.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{governanceLabel: ns}}
	})
	create(t, c)
	allowed, refused := tenantNamespace(t, "governed-team"), tenantNamespace(t, "other-team")
	labelNamespace(t, allowed, governanceLabel, ns)
	user := "tenant-of-" + allowed
	bindRole(t, allowed, "edit", user)
	bindRole(t, refused, "edit", user)
	bindRole(t, ns, releaseName+"-cachecluster-reader", user)
	as := func(args ...string) (string, error) {
		return tool(t.Context(), "kubectl", append([]string{"--as", user}, args...)...)
	}
	// The clusterrole-aggregation controller copies the chart's rules into edit.
	waitFor(t, readyTimeout, "edit to include creating TenantSLOs", func() (bool, error) {
		out, _ := as("auth", "can-i", "create", "tenantslos.cacheqos.io", "-n", allowed)
		return strings.TrimSpace(out) == "yes", nil
	})

	if out, err := as("get", "cacheclusters", "-n", ns, "-o", "name"); err != nil || strings.TrimSpace(out) != "cachecluster.cacheqos.io/governed" {
		t.Errorf("the tenant listing CacheClusters in %s: %q, %v", ns, out, err)
	}

	mine := tenant(allowed, "web", c, "0.5", "", "16Mi")
	createAs(t, as, mine)
	waitCondition(t, tenantObject{mine}, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted, readyTimeout)
	out, err := as("get", "tenantslo", "-n", allowed)
	if err != nil || !strings.Contains(out, "web") || !strings.Contains(out, "hit>=0.5") {
		t.Errorf("kubectl get tenantslo as the tenant: %q, %v", out, err)
	}
	t.Logf("kubectl --as %s get tenantslo -n %s:\n%s", user, allowed, out)

	// The status is the operator's: the tenant may read it, never write it.
	if out, _ := as("auth", "can-i", "patch", "tenantslos.cacheqos.io", "--subresource=status", "-n", allowed); strings.TrimSpace(out) != "no" {
		t.Errorf("kubectl auth can-i patch tenantslos/status as the tenant: %q, want no", out)
	}
	for _, verb := range []string{"patch", "update"} {
		var err error
		if verb == "patch" {
			_, err = as("patch", "tenantslo", "web", "-n", allowed, "--subresource=status", "--type=merge", "-p", `{"status":{"predictedHitRatio":"1"}}`)
		} else {
			var obj string
			if obj, err = as("get", "tenantslo", "web", "-n", allowed, "-o", "json"); err == nil {
				_, err = as("replace", "--subresource=status", "-f", writeTemp(t, "status.json", obj))
			}
		}
		if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), `"tenantslos/status"`) {
			t.Errorf("%s of the status as the tenant: %v, want forbidden on tenantslos/status", verb, err)
		}
	}

	// A namespace the cluster does not admit: the object is stored (RBAC allows it), and the
	// operator refuses it with the rule.
	theirs := tenant(refused, "web", c, "0.5", "", "16Mi")
	createAs(t, as, theirs)
	cond := waitCondition(t, tenantObject{theirs}, v1.ConditionAdmitted, metav1.ConditionFalse, v1.ReasonNamespaceNotAllowed, readyTimeout)
	if !strings.Contains(cond.Message, "namespaceSelector") || !strings.Contains(cond.Message, refused) {
		t.Errorf("Admitted message %q does not name the selector and the namespace %s", cond.Message, refused)
	}
	out, err = as("get", "tenantslo", "-n", refused)
	if err != nil || !strings.Contains(out, v1.ReasonNamespaceNotAllowed) {
		t.Errorf("kubectl get tenantslo as the tenant does not show the refusal: %q, %v", out, err)
	}
	t.Logf("kubectl --as %s get tenantslo -n %s:\n%s\nAdmitted: %s", user, refused, out, cond.Message)
}

// labelNamespace sets one label on a namespace.
func labelNamespace(t *testing.T, ns, key, value string) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"` + key + `":"` + value + `"}}}`)
	if _, err := cluster.client.CoreV1().Namespaces().Patch(t.Context(), ns, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bindRole binds ClusterRole role to user in namespace ns (deleted with the namespace).
func bindRole(t *testing.T, ns, role, user string) {
	t.Helper()
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := cluster.client.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createAs creates s with `kubectl create` run by as (an impersonating kubectl) and deletes it
// with the suite's own client at the end of the test, waiting for the finalizer.
func createAs(t *testing.T, as func(...string) (string, error), s *v1.TenantSLO) {
	t.Helper()
	obj := s.DeepCopy()
	obj.TypeMeta = metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "TenantSLO"}
	manifest, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as("create", "-f", writeTemp(t, s.Namespace+"-"+s.Name+".json", string(manifest))); err != nil {
		t.Fatalf("creating TenantSLO %s/%s as the tenant: %v", s.Namespace, s.Name, err)
	}
	t.Cleanup(func() { deleteAndWait(t, s) })
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
