package chart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// permission is one (API group, resource[/subresource], verb, resource name) a rule grants.
type permission struct {
	group, resource, verb, name string
}

func (p permission) String() string {
	s := fmt.Sprintf("%s %s.%s", p.verb, p.resource, p.group)
	if p.name != "" {
		s += " named " + p.name
	}
	return s
}

// expand lists every permission the rules grant.
func expand(rules []rbacv1.PolicyRule) []permission {
	var out []permission
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, permission{g, res, v, n})
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b permission) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// generatedPermissions are the permissions of config/rbac/role.yaml, controller-gen's
// output from the operator's +kubebuilder:rbac markers.
func generatedPermissions(t *testing.T) []permission {
	t.Helper()
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(readRepoFile(t, "config/rbac/role.yaml"), &role); err != nil {
		t.Fatalf("config/rbac/role.yaml: %v", err)
	}
	if len(role.Rules) == 0 {
		t.Fatal("config/rbac/role.yaml has no rules")
	}
	return expand(role.Rules)
}

// rulesOf decodes the rules of a rendered ClusterRole or Role.
func rulesOf(t *testing.T, obj *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	return role.Rules
}

// namespacedResources asks the API server's discovery which resources are namespaced, by
// "group/resource".
func namespacedResources(t *testing.T) map[string]bool {
	t.Helper()
	_, lists, err := fixture.discovery.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, list := range lists {
		gv, err := parseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			out[gv+"/"+r.Name] = r.Namespaced
		}
	}
	return out
}

func parseGroupVersion(gv string) (string, error) {
	if !strings.Contains(gv, "/") {
		return "", nil // the core group, "v1"
	}
	group, _, _ := strings.Cut(gv, "/")
	if group == "" {
		return "", fmt.Errorf("malformed group version %q", gv)
	}
	return group, nil
}

// TestRBACMatchesGeneratedRole checks, for both scopes, that the rendered RBAC grants exactly
// the generated rules, and that namespace scope puts only cluster-scoped resources (as the
// API server's discovery says) in its ClusterRole.
func TestRBACMatchesGeneratedRole(t *testing.T) {
	want := generatedPermissions(t)
	namespaced := namespacedResources(t)
	isNamespaced := func(p permission) bool {
		base, _, _ := strings.Cut(p.resource, "/")
		ns, known := namespaced[p.group+"/"+base]
		if !known {
			t.Fatalf("config/rbac/role.yaml grants %s, a resource the API server does not serve", p)
		}
		return ns
	}

	t.Run("cluster", func(t *testing.T) {
		objs := operatorObjects(release{name: "rbac", namespace: testNamespace}.mustRender(t))
		got := expand(rulesOf(t, findOne(t, objs, "ClusterRole")))
		if diff := permissionDiff(want, got); diff != "" {
			t.Errorf("the ClusterRole differs from config/rbac/role.yaml: %s", diff)
		}
	})

	t.Run("namespace", func(t *testing.T) {
		objs := operatorObjects(release{name: "rbac", namespace: testNamespace, values: values{
			"rbac.scope": `"namespace"`, "rbac.namespaces": `["tenant-a"]`,
		}}.mustRender(t))
		// A ClusterRole only when the generated rules name cluster-scoped resources.
		var clusterRules []rbacv1.PolicyRule
		for _, cr := range find(objs, "ClusterRole") {
			clusterRules = append(clusterRules, rulesOf(t, cr)...)
		}
		for _, p := range expand(clusterRules) {
			if isNamespaced(p) {
				t.Errorf("namespace scope grants the namespaced %s cluster-wide", p)
			}
		}
		roles := find(objs, "Role")
		if len(roles) != 2 {
			t.Fatalf("rendered Roles %s, want one in %s and one in tenant-a", describe(roles), testNamespace)
		}
		for _, role := range roles {
			inRole := expand(rulesOf(t, role))
			for _, p := range inRole {
				if !isNamespaced(p) {
					t.Errorf("Role %s/%s grants the cluster-scoped %s, which a Role cannot", role.GetNamespace(), role.GetName(), p)
				}
			}
			all := expand(append(rulesOf(t, role), clusterRules...))
			if diff := permissionDiff(want, all); diff != "" {
				t.Errorf("Role %s/%s with the ClusterRole differs from config/rbac/role.yaml: %s", role.GetNamespace(), role.GetName(), diff)
			}
		}
	})
}

// permissionDiff lists what got lacks and adds compared with want ("" when they are equal).
func permissionDiff(want, got []permission) string {
	var missing, extra []string
	for _, p := range want {
		if !slices.Contains(got, p) {
			missing = append(missing, p.String())
		}
	}
	for _, p := range got {
		if !slices.Contains(want, p) {
			extra = append(extra, p.String())
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	return fmt.Sprintf("missing %d %v, extra %d %v (make chart-sync copies config/rbac/role.yaml into the chart)", len(missing), missing, len(extra), extra)
}

// TestRBACGrantsOnAPIServer installs the chart's ServiceAccount and RBAC for real and asks the
// API server's RBAC authorizer (SubjectAccessReview) whether the operator may do each thing
// config/rbac/role.yaml grants: everywhere with rbac.scope=cluster; with rbac.scope=namespace,
// namespaced things only in the watched namespaces and cluster-scoped things cluster-wide.
func TestRBACGrantsOnAPIServer(t *testing.T) {
	want := generatedPermissions(t)
	namespaced := namespacedResources(t)
	cases := []struct {
		scope              string
		watched, unwatched []string
	}{
		{scope: "cluster", watched: []string{"rbac-cluster-op", "anywhere-else"}},
		{scope: "namespace", watched: []string{"rbac-namespace-op", "rbac-tenant-a"}, unwatched: []string{"rbac-not-watched"}},
	}
	for _, c := range cases {
		t.Run(c.scope, func(t *testing.T) {
			ctx := t.Context()
			operatorNamespace := c.watched[0]
			r := release{name: "rbac-" + c.scope, namespace: operatorNamespace, values: values{"rbac.scope": `"` + c.scope + `"`}}
			if c.scope == "namespace" {
				r.values["rbac.namespaces"] = `["` + c.watched[1] + `"]`
			}
			objs := operatorObjects(r.mustRender(t))
			var rendered []rbacv1.PolicyRule
			for _, o := range append(find(objs, "ClusterRole"), find(objs, "Role")...) {
				rendered = append(rendered, rulesOf(t, o)...)
			}
			if diff := permissionDiff(want, expand(rendered)); diff != "" {
				t.Fatalf("the chart's rules differ from config/rbac/role.yaml: %s", diff)
			}
			for _, ns := range append(slices.Clone(c.watched), c.unwatched...) {
				ensureNamespace(ctx, t, ns)
			}
			serviceAccount := findOne(t, objs, "ServiceAccount")
			for _, o := range objs {
				switch o.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
					if err := fixture.client.Patch(ctx, o.DeepCopy(), client.Apply, client.ForceOwnership, client.FieldOwner("chart-test")); err != nil {
						t.Fatalf("applying %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
					}
				}
			}
			user := fmt.Sprintf("system:serviceaccount:%s:%s", serviceAccount.GetNamespace(), serviceAccount.GetName())
			checks := 0
			for _, p := range want {
				base, _, _ := strings.Cut(p.resource, "/")
				if !namespaced[p.group+"/"+base] {
					checks++
					expectAccess(ctx, t, user, p, "", true)
					continue
				}
				clusterWide := c.scope == "cluster"
				expectAccess(ctx, t, user, p, "", clusterWide)
				for _, ns := range c.watched {
					expectAccess(ctx, t, user, p, ns, true)
				}
				for _, ns := range c.unwatched {
					expectAccess(ctx, t, user, p, ns, false)
				}
				checks += 1 + len(c.watched) + len(c.unwatched)
			}
			t.Logf("%d SubjectAccessReviews for %d permissions", checks, len(want))
			if err := bindMetricsAuth(ctx, t, user, c.watched[len(c.watched)-1]); err != nil {
				t.Errorf("the operator may not give its sidecars system:auth-delegator: %v", err)
			}
			// The check is the API server's: someone without the permissions is refused.
			if err := bindMetricsAuth(ctx, t, "system:serviceaccount:"+operatorNamespace+":nobody", c.watched[len(c.watched)-1]); err == nil {
				t.Error("a ServiceAccount without any permission bound system:auth-delegator")
			}
		})
	}
}

// bindMetricsAuth has the operator (impersonated) create, as a dry run, the ClusterRoleBinding
// it gives a CacheCluster's sidecars for secure metrics: the API server refuses to bind
// system:auth-delegator to anyone who lacks its permissions (TokenReviews and
// SubjectAccessReviews) or may not create ClusterRoleBindings.
func bindMetricsAuth(ctx context.Context, t *testing.T, user, namespace string) error {
	t.Helper()
	cfg := rest.CopyConfig(fixture.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	operator, err := client.New(cfg, client.Options{Scheme: fixture.client.Scheme(), Mapper: fixture.client.RESTMapper()})
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cacheqos-sidecar-metrics." + namespace + ".shared"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "shared-sidecar", Namespace: namespace}},
	}
	return operator.Create(ctx, binding, client.DryRunAll)
}

// access asks the API server whether user may use permission p in namespace ns ("" for
// cluster-wide).
func access(ctx context.Context, t *testing.T, user string, p permission, ns string) bool {
	t.Helper()
	resource, subresource, _ := strings.Cut(p.resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: p.verb, Group: p.group, Resource: resource, Subresource: subresource, Name: p.name,
		},
	}}
	out, err := fixture.clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.Status.Allowed
}

func expectAccess(ctx context.Context, t *testing.T, user string, p permission, ns string, want bool) {
	t.Helper()
	if want {
		// Each binding reaches the authorizer's caches on its own: one seen says nothing of
		// the others (this failed under load).
		waitUntilAllowed(ctx, t, user, p, ns)
		return
	}
	if access(ctx, t, user, p, ns) {
		t.Errorf("%s may %s %s, want not", user, p, scopeText(ns))
	}
}

func scopeText(ns string) string {
	if ns == "" {
		return "cluster-wide"
	}
	return "in namespace " + ns
}

// waitUntilAllowed waits for the RBAC authorizer's caches to see new bindings.
func waitUntilAllowed(ctx context.Context, t *testing.T, user string, p permission, ns string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !access(ctx, t, user, p, ns) {
		if time.Now().After(deadline) {
			t.Fatalf("%s was still not allowed to %s %s 10s after the bindings were created", user, p, scopeText(ns))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tenantAccessComponent labels the chart's ClusterRoles for people (templates/tenant-rbac.yaml).
const tenantAccessComponent = "tenant-access"

// metricsAccessComponent labels the ClusterRole (and binding) of who may read the operator's
// metrics: not the operator's own permissions.
const metricsAccessComponent = "metrics-access"

// operatorObjects leaves out the ClusterRoles for people and for metrics readers, so that the
// operator's own RBAC can be compared with config/rbac/role.yaml.
func operatorObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if c := o.GetLabels()["app.kubernetes.io/component"]; c != tenantAccessComponent && c != metricsAccessComponent {
			out = append(out, o)
		}
	}
	return out
}

// TestTenantRoles installs the chart's roles for people and checks, on the API server's RBAC
// authorizer, what a tenant bound to them may do. The built-in admin, edit and view roles pick
// them up by label (their aggregationRule, evaluated here by the API server's own label
// selection); the aggregation itself is kube-controller-manager's, which envtest does not run,
// so the tenant is bound to the chart's roles directly.
func TestTenantRoles(t *testing.T) {
	ctx := t.Context()
	objs := release{name: "tenants", namespace: testNamespace}.mustRender(t)
	var roles []*unstructured.Unstructured
	for _, o := range find(objs, "ClusterRole") {
		if o.GetLabels()["app.kubernetes.io/component"] == tenantAccessComponent {
			roles = append(roles, o)
		}
	}
	byName := map[string]*unstructured.Unstructured{}
	for _, o := range roles {
		byName[strings.TrimPrefix(o.GetName(), "tenants-cacheqos-")] = o
		if err := fixture.client.Patch(ctx, o.DeepCopy(), client.Apply, client.ForceOwnership, client.FieldOwner("chart-test")); err != nil {
			t.Fatalf("applying %s: %v", o.GetName(), err)
		}
	}
	if len(byName) != 3 || byName["tenantslo-edit"] == nil || byName["tenantslo-view"] == nil || byName["cachecluster-reader"] == nil {
		t.Fatalf("rendered roles for people %s, want tenantslo-edit, tenantslo-view and cachecluster-reader", describe(roles))
	}
	if off := find(operatorObjects(release{name: "tenants", namespace: testNamespace, values: values{"rbac.tenantRoles": "false"}}.mustRender(t)), "ClusterRole"); len(off) != 1 {
		t.Errorf("rbac.tenantRoles=false renders ClusterRoles %s, want only the operator's", describe(off))
	}

	// The built-in roles select the chart's roles.
	for builtin, want := range map[string][]string{
		"admin": {"tenantslo-edit", "tenantslo-view"},
		"edit":  {"tenantslo-edit", "tenantslo-view"},
		"view":  {"tenantslo-view"},
	} {
		var role rbacv1.ClusterRole
		if err := fixture.client.Get(ctx, client.ObjectKey{Name: builtin}, &role); err != nil {
			t.Fatal(err)
		}
		if role.AggregationRule == nil {
			t.Fatalf("the built-in %s role has no aggregationRule", builtin)
		}
		selected := map[string]bool{}
		for _, selector := range role.AggregationRule.ClusterRoleSelectors {
			var list rbacv1.ClusterRoleList
			if err := fixture.client.List(ctx, &list, client.MatchingLabels(selector.MatchLabels)); err != nil {
				t.Fatal(err)
			}
			for _, r := range list.Items {
				selected[strings.TrimPrefix(r.Name, "tenants-cacheqos-")] = true
			}
		}
		for _, name := range want {
			if !selected[name] {
				t.Errorf("the built-in %s role does not aggregate %s", builtin, name)
			}
		}
		if selected["cachecluster-reader"] {
			t.Errorf("the built-in %s role aggregates cachecluster-reader; the platform team binds it", builtin)
		}
	}

	// A tenant with edit in its namespace, view elsewhere, and the CacheCluster reader bound
	// in the platform's namespace.
	const user, own, other, platform = "tenant-alice", "rbac-tenant-own", "rbac-tenant-other", "rbac-platform"
	for _, b := range []struct{ namespace, role string }{
		{own, "tenantslo-edit"}, {own, "tenantslo-view"}, {other, "tenantslo-view"}, {platform, "cachecluster-reader"},
	} {
		ensureNamespace(ctx, t, b.namespace)
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.namespace, Name: user + "-" + b.role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: byName[b.role].GetName()},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}
		if err := fixture.client.Create(ctx, binding); err != nil {
			t.Fatalf("binding %s in %s: %v", b.role, b.namespace, err)
		}
	}
	tenantslos := func(verb string) permission { return permission{"cacheqos.io", "tenantslos", verb, ""} }
	waitUntilAllowed(ctx, t, user, tenantslos("create"), own)
	for _, c := range []struct {
		p         permission
		namespace string
		want      bool
	}{
		{tenantslos("create"), own, true},
		{tenantslos("update"), own, true},
		{tenantslos("patch"), own, true},
		{tenantslos("delete"), own, true},
		{tenantslos("list"), own, true},
		{permission{"cacheqos.io", "tenantslos/status", "get", ""}, own, true},
		{permission{"cacheqos.io", "tenantslos/status", "update", ""}, own, false},
		{permission{"cacheqos.io", "tenantslos/status", "patch", ""}, own, false},
		{tenantslos("get"), other, true},
		{tenantslos("create"), other, false},
		{tenantslos("update"), other, false},
		{permission{"cacheqos.io", "cacheclusters", "get", ""}, platform, true},
		{permission{"cacheqos.io", "cacheclusters", "list", ""}, platform, true},
		{permission{"cacheqos.io", "cacheclusters", "update", ""}, platform, false},
		{permission{"cacheqos.io", "cacheclusters", "get", ""}, own, false},
		{permission{"cacheqos.io", "cachenodeplans", "get", ""}, platform, false},
		{tenantslos("create"), platform, false},
	} {
		expectAccess(ctx, t, user, c.p, c.namespace, c.want)
	}
}
