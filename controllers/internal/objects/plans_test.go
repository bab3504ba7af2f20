package objects

import (
	"testing"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// TestCompactPlanKeepsTheDigest: a plan compacted by the cache (once or twice) has the digest
// of the list it was read with, the same a plan read from the API server gives, and a
// different list gives a different digest.
func TestCompactPlanKeepsTheDigest(t *testing.T) {
	route := []v1.TenantRoute{{NodeName: "b", Host: "10.0.0.2", Port: 7380, Weight: 1_000_000}}
	listed := []v1.RemoteTenant{{Tenant: "ns/x", Routes: route}, {Tenant: "ns/y", Routes: route}}
	other := []v1.RemoteTenant{{Tenant: "ns/x", Routes: route}}
	for _, tc := range []struct {
		name   string
		remote []v1.RemoteTenant
	}{{"no remote tenants", nil}, {"empty list", []v1.RemoteTenant{}}, {"two remote tenants", listed}} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &v1.CacheNodePlan{Spec: v1.CacheNodePlanSpec{RemoteTenants: tc.remote}}
			want := RemoteTenantsDigest(tc.remote)
			if got := PlanRemoteTenantsDigest(plan); got != want {
				t.Fatalf("digest of the plan from the API server %s, want %s", got, want)
			}
			for range 2 {
				out, err := CompactPlan(plan)
				if err != nil {
					t.Fatal(err)
				}
				plan = out.(*v1.CacheNodePlan)
				if plan.Spec.RemoteTenants != nil {
					t.Fatalf("the compacted plan keeps %d remote tenants", len(plan.Spec.RemoteTenants))
				}
				if got := PlanRemoteTenantsDigest(plan); got != want {
					t.Fatalf("digest of the compacted plan %s, want %s", got, want)
				}
			}
			if RemoteTenantsDigest(other) == want {
				t.Fatalf("a different list has the same digest %s", want)
			}
		})
	}
}
