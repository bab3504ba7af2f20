package chart

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestSchemaRejectsBadValues feeds values.schema.json (and the templates' own checks) bad
// values: helm must refuse to render, naming the value.
func TestSchemaRejectsBadValues(t *testing.T) {
	cases := []struct {
		name   string
		values values
		want   []string // every one must appear in helm's error
	}{
		{"unknown top-level value", values{"replicaCount": `2`}, []string{"Additional property replicaCount is not allowed"}},
		{"unknown operator value", values{"operator.image": `"x"`}, []string{"operator", "Additional property image is not allowed"}},
		{"rbac scope", values{"rbac.scope": `"everything"`}, []string{"rbac.scope", `"cluster", "namespace"`}},
		{"namespace name", values{"rbac.namespaces": `["Tenant_A"]`}, []string{"rbac.namespaces.0", "pattern"}},
		{"duplicate namespaces", values{"rbac.namespaces": `["a", "a"]`}, []string{"rbac.namespaces", "unique"}},
		{"pull policy", values{"images.pullPolicy": `"Sometimes"`}, []string{"images.pullPolicy", "Never"}},
		{"empty operator repository", values{"images.operator.repository": `""`}, []string{"images.operator.repository"}},
		{"repository with a tag", values{"images.sidecar.repository": `"cacheqos/cache-sidecar:v1"`}, []string{"images.sidecar.repository", "pattern"}},
		{"tag with a space", values{"images.sidecar.tag": `"v 1"`}, []string{"images.sidecar.tag"}},
		{"digest", values{"images.operator.digest": `"md5:abc"`}, []string{"images.operator.digest", "sha256"}},
		{"no replicas", values{"operator.replicas": `0`}, []string{"operator.replicas", "greater than or equal to 1"}},
		{"replicas without leader election", values{"operator.replicas": `2`, "operator.leaderElection.enabled": `false`}, []string{"operator.leaderElection.enabled"}},
		{"log level", values{"operator.logLevel": `"verbose"`}, []string{"operator.logLevel", `"debug", "info", "warn", "error"`}},
		{"Prometheus URL", values{"operator.prometheusURL": `"prometheus:9090"`}, []string{"operator.prometheusURL", "pattern"}},
		{"privileged metrics port", values{"operator.metricsPort": `80`}, []string{"operator.metricsPort", "1024"}},
		{"port as a string", values{"operator.healthPort": `"8081"`}, []string{"operator.healthPort", "Invalid type"}},
		{"debounce", values{"operator.allocation.debounce": `"2 seconds"`}, []string{"operator.allocation.debounce"}},
		{"negative solver workers", values{"operator.allocation.solverWorkers": `-1`}, []string{"operator.allocation.solverWorkers"}},
		{"solver memory limit without a number", values{"operator.allocation.solverMemoryLimit": `"lots"`}, []string{"operator.allocation.solverMemoryLimit"}},
		{"extra arg without dashes", values{"operator.extraArgs": `["-v"]`}, []string{"operator.extraArgs.0"}},
		{"keep as a string", values{"crds.keep": `"yes"`}, []string{"crds.keep", "boolean"}},
		{"scrape interval", values{"serviceMonitor.interval": `"30"`}, []string{"serviceMonitor.interval"}},
		{"label value", values{"serviceMonitor.labels": `{"release": "my prometheus"}`}, []string{"serviceMonitor.labels.release"}},
		{"SLO objective", values{"prometheusRule.sloBurn.objective": `1`}, []string{"prometheusRule.sloBurn.objective", "less than 1"}},
		{"throttling ratio", values{"prometheusRule.throttling.ratio": `0`}, []string{"prometheusRule.throttling.ratio"}},
		{"stale after, two units", values{"prometheusRule.staleMetrics.after": `"5m30s"`}, []string{"prometheusRule.staleMetrics.after"}},
		{"alert duration", values{"prometheusRule.sidecarDown.for": `"five minutes"`}, []string{"prometheusRule.sidecarDown.for"}},
		{"dashboard without labels", values{"grafanaDashboard.labels": `{"grafana_dashboard": null}`}, []string{"grafanaDashboard.labels", "Must have at least 1 properties"}},
		{"dashboard namespace", values{"grafanaDashboard.namespace": `"Monitoring"`}, []string{"grafanaDashboard.namespace"}},
		{"no tenant labels", values{"networkPolicy.tenantNamespaceLabels": `{"cacheqos.io/tenant": null}`}, []string{"networkPolicy.tenantNamespaceLabels", "Must have at least 1 properties"}},
		{"metrics open to nobody", values{"networkPolicy.metricsFrom": `[]`}, []string{"networkPolicy.metricsFrom", "Array must have at least 1 items"}},
		{"no ServiceAccount name", values{"serviceAccount.create": `false`}, []string{"serviceAccount.name is required"}},
		{"Prometheus HTTP config key", values{"operator.prometheusAuth.httpConfig": `{"basicauth": {"username": "a"}}`}, []string{"operator.prometheusAuth.httpConfig", `"basicauth"`}},
		{"Prometheus credentials without a config", values{"operator.prometheusAuth.secretName": `"prom-creds"`}, []string{"operator.prometheusAuth.secretName", "operator.prometheusAuth.httpConfig"}},
		{"Prometheus token without a config", values{"operator.prometheusAuth.serviceAccountToken.enabled": `true`}, []string{"operator.prometheusAuth.serviceAccountToken", "operator.prometheusAuth.httpConfig"}},
		{"short token lifetime", values{"operator.prometheusAuth.serviceAccountToken.expirationSeconds": `60`}, []string{"operator.prometheusAuth.serviceAccountToken.expirationSeconds", "600"}},
		{"sidecar label of the operator's", values{"sidecar.podLabels": `{"app.kubernetes.io/instance": "x"}`}, []string{"sidecar.podLabels"}},
		{"sidecar annotation of the operator's", values{"sidecar.podAnnotations": `{"cacheqos.io/spec-hash": "x"}`}, []string{"sidecar.podAnnotations"}},
		{"sidecar memory in milli", values{"sidecar.resources.limits": `{"memory": "512m"}`}, []string{"sidecar.resources.limits.memory", "pattern"}},
		{"sidecar ephemeral storage", values{"sidecar.resources.requests": `{"ephemeral-storage": "1Gi"}`}, []string{"sidecar.resources.requests", "Additional property ephemeral-storage is not allowed"}},
		{"sidecar toleration operator", values{"sidecar.tolerations": `[{"key": "a", "operator": "Equals"}]`}, []string{"sidecar.tolerations.0.operator", "Exists"}},
		{"sidecar priority class", values{"sidecar.priorityClassName": `"High_Priority"`}, []string{"sidecar.priorityClassName", "pattern"}},
		{"Prometheus credentials Secret name", values{"operator.prometheusAuth.secretName": `"Prom_Creds"`}, []string{"operator.prometheusAuth.secretName", "pattern"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := release{name: "bad", namespace: testNamespace, values: c.values}.render()
			if err == nil {
				t.Fatalf("helm rendered the chart with %v", c.values)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// valueLeaf is one documented value: its dotted path and its default as JSON.
type valueLeaf struct {
	path, defaultJSON string
}

// valueLeaves walks values.yaml along values.schema.json: an object whose schema lists
// properties is descended into, anything else (scalars, lists, free-form maps such as
// labels) is one value. It fails on a value the schema does not know and on a schema
// property values.yaml does not set.
func valueLeaves(t *testing.T) []valueLeaf {
	t.Helper()
	var vals map[string]any
	if err := yaml.Unmarshal(readRepoFile(t, "charts/cacheqos/values.yaml"), &vals); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(readRepoFile(t, "charts/cacheqos/values.schema.json"), &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var leaves []valueLeaf
	var walk func(path string, value any, schema map[string]any)
	walk = func(path string, value any, schema map[string]any) {
		props, hasProps := schema["properties"].(map[string]any)
		object, isObject := value.(map[string]any)
		if !hasProps || !isObject {
			encoded, err := json.Marshal(value)
			if err != nil {
				t.Fatal(err)
			}
			leaves = append(leaves, valueLeaf{path, string(encoded)})
			return
		}
		for _, k := range sortedKeys(props) {
			if _, set := object[k]; !set {
				t.Errorf("values.schema.json has %s, values.yaml does not set it", strings.TrimPrefix(path+"."+k, "."))
			}
		}
		for _, k := range sortedKeys(object) {
			sub, known := props[k].(map[string]any)
			if !known {
				t.Errorf("values.yaml sets %s, values.schema.json does not know it", strings.TrimPrefix(path+"."+k, "."))
				continue
			}
			walk(strings.TrimPrefix(path+"."+k, "."), object[k], sub)
		}
	}
	walk("", vals, schema)
	return leaves
}

// readmeRow matches a row of the README's values table: | `path` | type | `default` | ... |
var readmeRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\| [^|]+ \\| `([^`]*)` \\| [^|]*[^ |][^|]* \\|$")

// TestReadmeDocumentsEveryValue checks that the README's values table has one row per value
// of values.yaml, with its default, and nothing else.
func TestReadmeDocumentsEveryValue(t *testing.T) {
	rows := map[string]string{}
	for _, m := range readmeRow.FindAllStringSubmatch(string(readRepoFile(t, "charts/cacheqos/README.md")), -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("README.md documents %s twice", m[1])
		}
		rows[m[1]] = m[2]
	}
	leaves := valueLeaves(t)
	if len(leaves) < 50 {
		t.Fatalf("found only %d values in values.yaml", len(leaves))
	}
	documented := map[string]bool{}
	for _, leaf := range leaves {
		documented[leaf.path] = true
		got, ok := rows[leaf.path]
		if !ok {
			t.Errorf("README.md has no row for %s (a row is | `%s` | type | `default` | description |)", leaf.path, leaf.path)
			continue
		}
		if jsonDiff(decodeJSON(t, leaf.defaultJSON), decodeJSON(t, got)) != "" {
			t.Errorf("README.md gives %s the default %s, values.yaml has %s", leaf.path, got, leaf.defaultJSON)
		}
	}
	for path := range rows {
		if !documented[path] {
			t.Errorf("README.md documents %s, which values.yaml does not have", path)
		}
	}
}

func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "invalid JSON " + s
	}
	return v
}
