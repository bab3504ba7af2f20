package chart

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cacheqos/cacheqos/controllers/cachecluster"
)

const (
	testNamespace = "cacheqos-system"
	keepPolicy    = "helm.sh/resource-policy"
)

// renderCase is one combination of values: what it must render, and that the API server
// accepts all of it.
type renderCase struct {
	name   string
	values values
	check  func(t *testing.T, objs []*unstructured.Unstructured)
}

// kindCounts counts the rendered objects by kind.
func kindCounts(objs []*unstructured.Unstructured) map[string]int {
	counts := map[string]int{}
	for _, o := range objs {
		counts[o.GetKind()]++
	}
	return counts
}

// wantKinds checks how many objects of each named kind were rendered (0: none).
func wantKinds(t *testing.T, objs []*unstructured.Unstructured, want map[string]int) {
	t.Helper()
	got := kindCounts(objs)
	for kind, n := range want {
		if got[kind] != n {
			t.Errorf("rendered %d %s, want %d: %s", got[kind], kind, n, describe(find(objs, kind)))
		}
	}
}

var renderCases = []renderCase{
	{
		name: "defaults",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			wantKinds(t, objs, map[string]int{
				"CustomResourceDefinition": 3, "Deployment": 1, "ServiceAccount": 1, "Service": 1,
				"ClusterRole": 5, "ClusterRoleBinding": 1, "Role": 0, "RoleBinding": 0,
				"NetworkPolicy": 2, "ServiceMonitor": 0, "PrometheusRule": 0, "ConfigMap": 0, "Secret": 0,
			})
			for _, crd := range find(objs, "CustomResourceDefinition") {
				if got := crd.GetAnnotations()[keepPolicy]; got != "keep" {
					t.Errorf("CRD %s: %s is %q, want keep", crd.GetName(), keepPolicy, got)
				}
			}
			args := operatorArgs(t, objs)
			for flag, want := range map[string]string{
				"leader-elect":              "true",
				"metrics-bind-address":      ":8080",
				"metrics-secure":            "true",
				"health-probe-bind-address": ":8081",
				"prometheus-url":            "http://prometheus-operated.monitoring.svc:9090",
				"sidecar-image":             "cacheqos/cache-sidecar:0.1.0",
				"redis-image":               "cacheqos/cache-sidecar:0.1.0",
				"memcached-image":           "cacheqos/cache-sidecar:0.1.0",
			} {
				if args[flag] != want {
					t.Errorf("--%s=%q, want %q", flag, args[flag], want)
				}
			}
			if _, ok := args["watch-namespaces"]; ok {
				t.Error("a cluster-scoped operator got --watch-namespaces")
			}
			if got, ok := args["sidecar-defaults"]; ok {
				t.Errorf("--sidecar-defaults=%s without sidecar values or pull secrets", got)
			}
			container := operatorContainer(t, objs)
			if got := nested[string](t, container, "image"); got != "cacheqos/operator:0.1.0" {
				t.Errorf("operator image %q, want cacheqos/operator:0.1.0 (the appVersion)", got)
			}
			checkRestricted(t, findOne(t, objs, "Deployment"))
		},
	},
	{
		name: "rbac scope namespace",
		values: values{
			"rbac.scope":      `"namespace"`,
			"rbac.namespaces": `["cache-platform", "tenant-a", "cacheqos-system"]`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			wantKinds(t, objs, map[string]int{"Role": 3, "RoleBinding": 3})
			objs = operatorObjects(objs)
			if len(find(objs, "ClusterRole")) > 1 || len(find(objs, "ClusterRole")) != len(find(objs, "ClusterRoleBinding")) {
				t.Errorf("namespace scope rendered %s and %s, want at most one bound ClusterRole (for cluster-scoped resources)",
					describe(find(objs, "ClusterRole")), describe(find(objs, "ClusterRoleBinding")))
			}
			var namespaces []string
			for _, r := range find(objs, "Role") {
				namespaces = append(namespaces, r.GetNamespace())
			}
			slices.Sort(namespaces)
			if want := []string{"cache-platform", "cacheqos-system", "tenant-a"}; !slices.Equal(namespaces, want) {
				t.Errorf("Roles in %v, want one in each of %v (the release namespace once)", namespaces, want)
			}
			if got := operatorArgs(t, objs)["watch-namespaces"]; got != "cache-platform,cacheqos-system,tenant-a" {
				t.Errorf("--watch-namespaces=%q, want the Roles' namespaces", got)
			}
		},
	},
	{
		name:   "crds disabled",
		values: values{"crds.enabled": `false`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			wantKinds(t, objs, map[string]int{"CustomResourceDefinition": 0})
		},
	},
	{
		name:   "crds without keep",
		values: values{"crds.keep": `false`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			for _, crd := range find(objs, "CustomResourceDefinition") {
				if _, ok := crd.GetAnnotations()[keepPolicy]; ok {
					t.Errorf("CRD %s has %s with crds.keep=false", crd.GetName(), keepPolicy)
				}
			}
			wantKinds(t, objs, map[string]int{"CustomResourceDefinition": 3})
		},
	},
	{
		name:   "service monitor",
		values: values{"serviceMonitor.enabled": `true`, "serviceMonitor.labels": `{"release": "prometheus"}`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			sm := findOne(t, objs, "ServiceMonitor")
			if sm.GetLabels()["release"] != "prometheus" {
				t.Errorf("ServiceMonitor labels %v lack release=prometheus", sm.GetLabels())
			}
			service := findOne(t, objs, "Service")
			selector := nested[map[string]any](t, sm.Object, "spec", "selector", "matchLabels")
			for k, v := range selector {
				if service.GetLabels()[k] != v {
					t.Errorf("the ServiceMonitor selects %s=%v, which the metrics Service does not carry", k, v)
				}
			}
			endpoint := nested[[]any](t, sm.Object, "spec", "endpoints")[0].(map[string]any)
			if endpoint["port"] != "metrics" {
				t.Errorf("ServiceMonitor port %v, want the Service's port metrics", endpoint["port"])
			}
			// The operator serves HTTPS and wants the scraper's ServiceAccount token.
			if endpoint["scheme"] != "https" || endpoint["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
				t.Errorf("ServiceMonitor endpoint %v does not scrape over HTTPS with the ServiceAccount token", endpoint)
			}
		},
	},
	{
		name:   "metrics readers",
		values: values{"operator.metricsReaders": `[{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var reader *unstructured.Unstructured
			for _, role := range find(objs, "ClusterRole") {
				if strings.HasSuffix(role.GetName(), "-metrics-reader") {
					reader = role
				}
			}
			if reader == nil {
				t.Fatal("no metrics-reader ClusterRole")
			}
			rule := nested[[]any](t, reader.Object, "rules")[0].(map[string]any)
			if fmt.Sprint(rule["nonResourceURLs"]) != "[/metrics]" || fmt.Sprint(rule["verbs"]) != "[get]" {
				t.Errorf("metrics-reader rule %v, want get /metrics", rule)
			}
			bound := false
			for _, binding := range find(objs, "ClusterRoleBinding") {
				if nested[string](t, binding.Object, "roleRef", "name") != reader.GetName() {
					continue
				}
				subject := nested[[]any](t, binding.Object, "subjects")[0].(map[string]any)
				bound = subject["name"] == "prometheus" && subject["namespace"] == "monitoring"
			}
			if !bound {
				t.Error("the Prometheus ServiceAccount is not bound to the metrics-reader ClusterRole")
			}
		},
	},
	{
		name:   "plain metrics",
		values: values{"operator.metricsSecure": `false`, "serviceMonitor.enabled": `true`, "operator.metricsReaders": `[{"kind": "User", "name": "x"}]`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if args := operatorArgs(t, objs); args["metrics-secure"] != "false" {
				t.Errorf("--metrics-secure=%q, want false", args["metrics-secure"])
			}
			endpoint := nested[[]any](t, findOne(t, objs, "ServiceMonitor").Object, "spec", "endpoints")[0].(map[string]any)
			if _, ok := endpoint["scheme"]; ok {
				t.Errorf("a plain-HTTP operator is scraped with %v", endpoint)
			}
			// The metrics-reader role and its binding stay: the sidecars' metrics are secure.
			wantKinds(t, objs, map[string]int{"ClusterRole": 5, "ClusterRoleBinding": 2})
		},
	},
	{
		name:   "prometheus rule",
		values: values{"prometheusRule.enabled": `true`, "prometheusRule.additionalAlertLabels": `{"team": "platform"}`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			rules := alertRules(t, findOne(t, objs, "PrometheusRule"))
			if len(rules) != len(allAlerts) {
				t.Errorf("rendered %d alerts, want %d", len(rules), len(allAlerts))
			}
			for _, r := range rules {
				if r.Labels["team"] != "platform" || r.Labels["severity"] == "" {
					t.Errorf("alert %s has labels %v, want severity and team=platform", r.Alert, r.Labels)
				}
			}
		},
	},
	{
		name: "prometheus rule with some alerts off",
		values: values{
			"prometheusRule.enabled": `true`, "prometheusRule.sloBurn.enabled": `false`,
			"prometheusRule.throttling.enabled": `false`, "prometheusRule.operatorDown.enabled": `false`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var names []string
			for _, r := range alertRules(t, findOne(t, objs, "PrometheusRule")) {
				names = append(names, r.Alert)
			}
			want := []string{"CacheQoSPlanFailing", "CacheQoSPlanInfeasible", "CacheQoSSidecarDown", "CacheQoSSidecarMetricsStale"}
			if !slices.Equal(names, want) {
				t.Errorf("alerts %v, want %v", names, want)
			}
		},
	},
	{
		name:   "grafana dashboard",
		values: values{"grafanaDashboard.enabled": `true`, "grafanaDashboard.namespace": `"monitoring"`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			cm := findOne(t, objs, "ConfigMap")
			if cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap in %q with labels %v, want namespace monitoring and grafana_dashboard=1", cm.GetNamespace(), cm.GetLabels())
			}
			if got := nested[string](t, cm.Object, "data", "cacheqos.json"); got != strings.TrimSpace(string(readRepoFile(t, "charts/cacheqos/dashboards/cacheqos.json"))) {
				t.Error("the ConfigMap's cacheqos.json is not dashboards/cacheqos.json")
			}
		},
	},
	{
		name:   "prometheus auth",
		values: prometheusAuthValues,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			wantKinds(t, objs, map[string]int{"Secret": 1})
			vol := renderedPrometheusAuth(t, objs)
			if vol.configFile != "/etc/cacheqos/prometheus/prometheus-http.yaml" || vol.mountPath != "/etc/cacheqos/prometheus" {
				t.Errorf("--prometheus-http-config=%q mounted at %q", vol.configFile, vol.mountPath)
			}
			if len(vol.secrets) != 2 || vol.secrets[1] != "prom-creds" {
				t.Errorf("projected Secrets %v, want the chart's and prom-creds", vol.secrets)
			}
			if vol.token["path"] != "token" || vol.token["audience"] != "prometheus" || fmt.Sprint(vol.token["expirationSeconds"]) != "3600" {
				t.Errorf("projected token %v", vol.token)
			}
			annotations := nested[map[string]any](t, findOne(t, objs, "Deployment").Object, "spec", "template", "metadata", "annotations")
			if annotations["checksum/prometheus-http"] == nil {
				t.Error("a change of the configuration does not restart the operator, which reads it at start")
			}
		},
	},
	{
		name:   "network policy off",
		values: values{"networkPolicy.enabled": `false`},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			wantKinds(t, objs, map[string]int{"NetworkPolicy": 0})
		},
	},
	{
		name: "network policy in cache namespaces",
		values: values{
			"networkPolicy.namespaces":            `["cache-platform", "cache-batch"]`,
			"networkPolicy.tenantNamespaceLabels": `{"cacheqos.io/tenant": null, "team-kind": "tenant"}`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			checkNetworkPolicies(t, objs, []string{"cache-batch", "cache-platform"}, map[string]any{"team-kind": "tenant"})
		},
	},
	{
		name: "local images",
		values: values{
			"images.operator.repository": `"localhost/cacheqos/operator"`, "images.operator.tag": `"local"`,
			"images.sidecar.repository": `"localhost/cacheqos/cache-sidecar"`, "images.sidecar.tag": `"local"`,
			"images.memcached.repository": `"localhost/cacheqos/memcached"`, "images.memcached.tag": `"local"`,
			"images.pullPolicy": `"Never"`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			container := operatorContainer(t, objs)
			if got := nested[string](t, container, "imagePullPolicy"); got != "Never" {
				t.Errorf("imagePullPolicy %q, want Never", got)
			}
			if got := nested[string](t, container, "image"); got != "localhost/cacheqos/operator:local" {
				t.Errorf("operator image %q", got)
			}
			args := operatorArgs(t, objs)
			for flag, want := range map[string]string{
				"sidecar-image":   "localhost/cacheqos/cache-sidecar:local",
				"redis-image":     "localhost/cacheqos/cache-sidecar:local",
				"memcached-image": "localhost/cacheqos/memcached:local",
			} {
				if args[flag] != want {
					t.Errorf("--%s=%q, want %q", flag, args[flag], want)
				}
			}
		},
	},
	{
		name: "digests, no leader election, operator tuning",
		values: values{
			"images.operator.digest":                     `"sha256:` + strings.Repeat("ab", 32) + `"`,
			"operator.leaderElection.enabled":            `false`,
			"operator.prometheusURL":                     `""`,
			"operator.allocation.solverWorkers":          `4`,
			"operator.allocation.solverMemoryLimit":      `"700Mi"`,
			"operator.allocation.debounce":               `"500ms"`,
			"operator.allocation.applyDeadlineIntervals": `5`,
			"operator.extraArgs":                         `["--leader-election-namespace=kube-system"]`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if got := nested[string](t, operatorContainer(t, objs), "image"); got != "cacheqos/operator@sha256:"+strings.Repeat("ab", 32) {
				t.Errorf("operator image %q, want the digest", got)
			}
			args := operatorArgs(t, objs)
			for flag, want := range map[string]string{
				"leader-elect": "false", "solver-workers": "4", "solver-memory-limit": "700Mi", "allocation-debounce": "500ms", "apply-deadline-intervals": "5",
				"leader-election-namespace": "kube-system",
			} {
				if args[flag] != want {
					t.Errorf("--%s=%q, want %q", flag, args[flag], want)
				}
			}
			if _, ok := args["prometheus-url"]; ok {
				t.Error("--prometheus-url given although operator.prometheusURL is empty")
			}
		},
	},
	{
		name: "sidecar defaults",
		values: values{
			"images.pullSecrets":         `["registry-a", "registry-b"]`,
			"sidecar.priorityClassName":  `"caches"`,
			"sidecar.podAnnotations":     `{"team": "platform", "note": "a: b"}`,
			"sidecar.podLabels":          `{"team": "platform"}`,
			"sidecar.resources.requests": `{"cpu": "500m"}`,
			"sidecar.resources.limits":   `{"memory": "40Gi"}`,
			"sidecar.affinity":           `{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "cache", "operator": "Exists"}]}]}}}`,
			"sidecar.podSecurityContext": `{"runAsNonRoot": true}`,
			"sidecar.tolerations":        `[{"key": "dedicated", "operator": "Equal", "value": "cache", "effect": "NoSchedule"}]`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			// The operator decodes the flag strictly and validates it (cmd/operator); the same here.
			var got cachecluster.SidecarDefaults
			dec := json.NewDecoder(strings.NewReader(operatorArgs(t, objs)["sidecar-defaults"]))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("--sidecar-defaults: %v", err)
			}
			if err := got.Validate(); err != nil {
				t.Fatal(err)
			}
			if len(got.ImagePullSecrets) != 2 || got.ImagePullSecrets[1].Name != "registry-b" || got.PriorityClassName != "caches" ||
				got.PodAnnotations["note"] != "a: b" || got.PodLabels["team"] != "platform" || got.Resources.Requests.CPU != "500m" ||
				got.Resources.Limits.Memory.String() != "40Gi" || got.Resources.Limits.CPU != "" ||
				got.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "cache" ||
				!*got.PodSecurityContext.RunAsNonRoot || got.SecurityContext != nil || len(got.Tolerations) != 1 || got.Tolerations[0].Value != "cache" {
				t.Errorf("--sidecar-defaults decodes to %+v", got)
			}
		},
	},
	{
		name: "everything on",
		values: values{
			"serviceMonitor.enabled": `true`, "prometheusRule.enabled": `true`, "grafanaDashboard.enabled": `true`,
			"rbac.scope": `"namespace"`, "operator.replicas": `2`,
		},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			wantKinds(t, objs, map[string]int{"ServiceMonitor": 1, "PrometheusRule": 1, "ConfigMap": 1, "Role": 1, "NetworkPolicy": 2})
		},
	},
}

func TestLint(t *testing.T) {
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", fixture.chartDir, "--namespace", testNamespace, "--kube-version", fixture.kubeVersion}, c.values.args()...)
			if _, err := helm(args...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRenderedManifestsAreAccepted renders every case, checks what it must contain, and
// applies every object to the API server as a server-side dry run.
func TestRenderedManifestsAreAccepted(t *testing.T) {
	for i, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			r := release{name: fmt.Sprintf("case%d", i), namespace: testNamespace, values: c.values}
			objs := r.mustRender(t)
			c.check(t, objs)
			dryRunApply(t, objs)
		})
	}
}

// TestNotesSayWhatToApplyNext checks that NOTES.txt names the next steps for the settings.
func TestNotesSayWhatToApplyNext(t *testing.T) {
	cases := []struct {
		name   string
		values values
		want   []string
		absent []string
	}{
		{
			name: "defaults",
			want: []string{"kind: CacheCluster", "kubectl label namespace <tenant-namespace> cacheqos.io/tenant=true", "get tenantslo", "rollout status deployment/notes-cacheqos-operator"},
		},
		{
			name:   "local images, no network policy, no Prometheus URL",
			values: values{"images.pullPolicy": `"Never"`, "networkPolicy.enabled": `false`, "operator.prometheusURL": `""`},
			want:   []string{"spec.images.pullPolicy: Never", "any pod can reach", "every CacheCluster must set spec.monitoring.prometheusURL"},
			absent: []string{"kubectl label namespace"},
		},
		{
			name:   "namespace scope, no CRDs",
			values: values{"rbac.scope": `"namespace"`, "rbac.namespaces": `["tenant-a"]`, "crds.enabled": `false`},
			want:   []string{"only sees namespaces cacheqos-system,tenant-a", "install the cacheqos.io CRDs yourself"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			notes := release{name: "notes", namespace: testNamespace, values: c.values}.notes(t)
			for _, w := range c.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES.txt lacks %q:\n%s", w, notes)
				}
			}
			for _, a := range c.absent {
				if strings.Contains(notes, a) {
					t.Errorf("NOTES.txt says %q although it does not apply:\n%s", a, notes)
				}
			}
		})
	}
}

// checkRestricted checks the operator pod against what the chart promises: non-root, read-only
// root filesystem, seccomp RuntimeDefault, every capability dropped, probes and resources.
// (The API server's PodSecurity admission checks the restricted profile too: dryRunApply.)
func checkRestricted(t *testing.T, deployment *unstructured.Unstructured) {
	t.Helper()
	pod := nested[map[string]any](t, deployment.Object, "spec", "template", "spec")
	if nested[string](t, pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Error("the operator pod's seccomp profile is not RuntimeDefault")
	}
	if !nested[bool](t, pod, "securityContext", "runAsNonRoot") {
		t.Error("the operator pod may run as root")
	}
	container := nested[[]any](t, pod, "containers")[0].(map[string]any)
	for _, field := range []string{"readOnlyRootFilesystem", "runAsNonRoot"} {
		if !nested[bool](t, container, "securityContext", field) {
			t.Errorf("operator container securityContext.%s is not true", field)
		}
	}
	if nested[bool](t, container, "securityContext", "allowPrivilegeEscalation") {
		t.Error("the operator container allows privilege escalation")
	}
	if drop := nested[[]any](t, container, "securityContext", "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("the operator container drops capabilities %v, want [ALL]", drop)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		nested[map[string]any](t, container, probe, "httpGet")
	}
	nested[map[string]any](t, container, "resources", "requests")
	nested[map[string]any](t, container, "resources", "limits")
}
