package planning

import (
	"strings"
	"testing"
)

const validYAML = `apiVersion: cacheqos.io/planning/v1
kind: PlanningSnapshot
cluster: demo
nodes:
- name: node-a
  memoryBytes: 1073741824
  bandwidthBytesPerSecond: 125000000
  opsPerSecond: 100000
  load: {opsPerSecond: 2000}
tenants:
- id: shop/orders
  class: strict
  priority: 10
  objective: {hitRatio: 0.9}
  memory: {minBytes: 1048576, maxBytes: 536870912}
  spread: {minNodes: 1}
  rates: [{node: node-a, requestsPerSecond: 1500, bytesPerSecond: 3000000}]
  observed: {hitRatio: 0.85, hitLatencySeconds: 0.0002, missLatencySeconds: 0.005}
  missRatioCurve: [{sizeBytes: 1048576, missRatio: 0.6}, {sizeBytes: 268435456, missRatio: 0.1}]
  current: {partitions: [{node: node-a, memoryBytes: 134217728}]}
`

func TestDecodeSnapshotYAMLAndJSONRoundTrip(t *testing.T) {
	s, err := DecodeSnapshot([]byte(validYAML))
	if err != nil {
		t.Fatalf("DecodeSnapshot: %v", err)
	}
	if got := s.Tenants[0]; got.ID != "shop/orders" || *got.Objective.HitRatio != 0.9 || got.Current.Partitions[0].MemoryBytes != 134217728 {
		t.Fatalf("decoded tenant = %+v", got)
	}
	for _, f := range []Format{FormatJSON, FormatYAML} {
		data, err := Encode(s, f)
		if err != nil {
			t.Fatalf("Encode %s: %v", f, err)
		}
		again, err := DecodeSnapshot(data)
		if err != nil {
			t.Fatalf("%s round trip: %v\n%s", f, err, data)
		}
		if again.Nodes[0].Load.OpsPerSecond != 2000 || *again.Tenants[0].Observed.HitRatio != 0.85 {
			t.Fatalf("%s round trip lost data: %+v", f, again)
		}
	}
	if _, err := Encode(s, "xml"); err == nil {
		t.Error("Encode accepted an unknown format")
	}
}

func TestDecodeSnapshotErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"unknown nested field", strings.Replace(validYAML, "minBytes: 1048576", "mniBytes: 1048576", 1),
			`tenants[0].memory: unknown field "mniBytes"`},
		{"unknown top-level field", validYAML + "extra: 1\n", `unknown field "extra"`},
		{"unknown field in list item", strings.Replace(validYAML, "missRatio: 0.6", "missRatio: 0.6, hit: 1", 1),
			`tenants[0].missRatioCurve[0]: unknown field "hit"`},
		{"wrong type", strings.Replace(validYAML, "memoryBytes: 1073741824", "memoryBytes: lots", 1),
			"nodes[0].memoryBytes: want an integer, got a string"},
		{"wrong kind", strings.Replace(validYAML, "kind: PlanningSnapshot", "kind: Plan", 1), `kind: got "Plan"`},
		{"wrong version", strings.Replace(validYAML, "planning/v1", "planning/v2", 1), `apiVersion: got "cacheqos.io/planning/v2"`},
		{"unknown node", strings.Replace(validYAML, "{node: node-a, requestsPerSecond", "{node: node-z, requestsPerSecond", 1),
			`tenants[0].rates[0].node: unknown node "node-z"`},
		{"min above max", strings.Replace(validYAML, "minBytes: 1048576", "minBytes: 1073741824", 1),
			"tenants[0].memory: minBytes 1073741824 is above maxBytes 536870912"},
		{"bad id", strings.Replace(validYAML, "shop/orders", "Shop_Orders", 1), `tenants[0].id: "Shop_Orders" is not <namespace>/<name>`},
		{"two objectives", strings.Replace(validYAML, "{hitRatio: 0.9}", "{hitRatio: 0.9, maxDegradation: 1.05}", 1),
			"tenants[0].objective: set exactly one"},
		{"ratio above one", strings.Replace(validYAML, "missRatio: 0.1", "missRatio: 1.1", 1), "tenants[0].missRatioCurve[1].missRatio: 1.1 is outside [0, 1]"},
		{"duplicate YAML key", strings.Replace(validYAML, "cluster: demo", "cluster: demo\ncluster: again", 1), "invalid YAML"},
		{"not an object", "[1, 2]", "the document is a list"},
		{"empty", "  \n", "empty document"},
		{"broken JSON", `{"apiVersion": `, "invalid JSON"},
		{"latency objective without latencies", strings.Replace(strings.Replace(validYAML, "{hitRatio: 0.9}", "{latencySeconds: 0.001}", 1),
			"hitLatencySeconds: 0.0002, ", "", 1), "a latency objective needs observed.hitLatencySeconds"},
		{"strict without objective", strings.Replace(validYAML, "  objective: {hitRatio: 0.9}\n", "", 1), "a strict tenant needs an objective"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeSnapshot([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := &Snapshot{APIVersion: APIVersion, Kind: KindSnapshot,
		Nodes:   []Node{{Name: "a", MemoryBytes: 0, BandwidthBytesPerSecond: 1, OpsPerSecond: 1}, {Name: "a", MemoryBytes: 1, BandwidthBytesPerSecond: 1, OpsPerSecond: 1}},
		Tenants: []Tenant{{ID: "ns/x", Priority: 5000}, {ID: "ns/x"}}}
	err := s.Validate()
	for _, want := range []string{"nodes[0].memoryBytes", `nodes[1].name: duplicate node "a"`, "tenants[0].priority", `tenants[1].id: duplicate tenant "ns/x"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestDecodePlan(t *testing.T) {
	p := &Plan{APIVersion: APIVersion, Kind: KindPlan, Policy: "equal",
		Tenants: []TenantPlan{{ID: "a/b", MemoryBytes: 5, Verdict: VerdictMeetsSLO, Partitions: []Partition{{Node: "n", MemoryBytes: 5, RoutingWeight: 1_000_000}}}}}
	for _, f := range []Format{FormatJSON, FormatYAML} {
		data, err := Encode(p, f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePlan(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got.Tenants[0].Partitions[0].RoutingWeight != 1_000_000 {
			t.Fatalf("%s: %+v", f, got)
		}
	}
	if _, err := DecodePlan([]byte(`{"apiVersion":"cacheqos.io/planning/v1","kind":"Plan","tenants":[{"id":"a/b","weight":1}]}`)); err == nil ||
		!strings.Contains(err.Error(), `tenants[0]: unknown field "weight"`) {
		t.Errorf("DecodePlan unknown field: %v", err)
	}
}

func TestValidTenantID(t *testing.T) {
	for id, want := range map[string]bool{
		"a/b": true, "team-1/orders.v2": true, "a/": false, "/b": false, "a/b/c": false, "A/b": false, "ab": false,
		strings.Repeat("a", 64) + "/b": false,
	} {
		if got := ValidTenantID(id); got != want {
			t.Errorf("ValidTenantID(%q) = %v, want %v", id, got, want)
		}
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte(validYAML))
	f.Add([]byte(`{"apiVersion":"cacheqos.io/planning/v1","kind":"PlanningSnapshot","nodes":[{"name":"n","memoryBytes":1,"bandwidthBytesPerSecond":1,"opsPerSecond":1}],"tenants":[]}`))
	f.Add([]byte("apiVersion: x\nkind: [1]\n"))
	f.Add([]byte("{\"nodes\": [[[[]]]]}"))
	f.Add([]byte("- a\n- b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same thing.
		out, err := Encode(s, FormatJSON)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if _, err := DecodeSnapshot(out); err != nil {
			t.Fatalf("re-decoding failed: %v\n%s", err, out)
		}
	})
}

func TestDecodeTypeErrorsNameTheIndexedField(t *testing.T) {
	cases := map[string]string{
		strings.Replace(validYAML, "priority: 10", "priority: 1.5", 1):         "tenants[0].priority: 1.5 is not an integer in the range of int32",
		strings.Replace(validYAML, "priority: 10", "priority: 99999999999", 1): "tenants[0].priority: 99999999999 is not an integer",
		strings.Replace(validYAML, "id: shop/orders", "id: [x]", 1):            "tenants[0].id: want a string, got a list",
		strings.Replace(validYAML, "hitRatio: 0.9}", "hitRatio: high}", 1):     "tenants[0].objective.hitRatio: want a number, got a string",
		strings.Replace(validYAML, "nodes:\n", "nodes: 3\nx:\n", 1):            "nodes: want a list, got a number",
	}
	for doc, want := range cases {
		if _, err := DecodeSnapshot([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want %q", err, want)
		}
	}
}

func FuzzDecodePlan(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"cacheqos.io/planning/v1","kind":"Plan","policy":"equal","tenants":[{"id":"a/b","partitions":[{"node":"n","memoryBytes":5,"routingWeight":1000000}]}]}`))
	f.Add([]byte("apiVersion: cacheqos.io/planning/v1\nkind: Plan\nsolver: {status: Optimal, gap: 0.1}\n"))
	f.Add([]byte("kind: Plan\nnodes: [{queueDelaySeconds: null}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(data)
		if err != nil {
			return
		}
		out, err := Encode(p, FormatYAML)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if _, err := DecodePlan(out); err != nil {
			t.Fatalf("re-decoding failed: %v\n%s", err, out)
		}
	})
}
