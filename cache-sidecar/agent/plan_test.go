package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

func TestEnginePartitions(t *testing.T) {
	plan := statusTestPlan("a/x", "b/y")
	plan.Spec.Partitions[1].EvictionPolicy = v1.EvictionLFU
	plan.Spec.Partitions[1].Memory = resource.MustParse("1.5Mi")
	plan.Spec.Partitions = append(plan.Spec.Partitions, v1.PartitionPlan{Tenant: "c/z", Memory: resource.MustParse("8Mi"), EvictionPolicy: "random"})
	specs, refused := enginePartitions(plan)
	want := []engine.PartitionSpec{{Tenant: "a/x", MemoryBytes: 64 << 20, EvictionPolicy: engine.LRU}, {Tenant: "b/y", MemoryBytes: 3 << 19, EvictionPolicy: engine.LFU}}
	if fmt.Sprint(specs) != fmt.Sprint(want) {
		t.Errorf("specs %+v, want %+v", specs, want)
	}
	if err := refused["c/z"]; err == nil || !strings.Contains(err.Error(), `unknown eviction policy "random"`) || len(refused) != 1 {
		t.Errorf("refused %v", refused)
	}
}

func TestPartitionErrors(t *testing.T) {
	into := map[string]error{"a/x": errors.New("refused earlier")}
	err := errors.Join(
		&engine.PartitionError{Tenant: "a/x", Err: errors.New("start failed")},
		&engine.PartitionError{Tenant: "b/y", Err: engine.ErrInvalidSpec},
		errors.New("state root unreadable"))
	rest := partitionErrors(err, into)
	if rest == nil || rest.Error() != "state root unreadable" {
		t.Errorf("plan-wide errors: %v", rest)
	}
	if !strings.Contains(into["a/x"].Error(), "refused earlier") || !strings.Contains(into["a/x"].Error(), "start failed") || !errors.Is(into["b/y"], engine.ErrInvalidSpec) {
		t.Errorf("by tenant: %v", into)
	}
	if partitionErrors(nil, into) != nil {
		t.Error("nil error")
	}
}

func TestTenantHashes(t *testing.T) {
	good, err := credentials.Hash("pw")
	if err != nil {
		t.Fatal(err)
	}
	plan := statusTestPlan("a/x", "b/y", "c/z")
	plan.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "d/w"}}) // remote tenants log in too
	data := map[string][]byte{"a.x": []byte(good), "b.y": []byte("plaintext"), "d.w": []byte(good)}
	hashes, tenantErrs, secretErr := tenantHashes(plan, Credentials{Secret: "creds", Data: data})
	if secretErr != nil || len(hashes) != 2 || hashes["a/x"] != good || hashes["d/w"] != good {
		t.Fatalf("hashes %v, secret error %v", hashes, secretErr)
	}
	if !strings.Contains(tenantErrs["b/y"].Error(), "creds key b.y is not a credential hash") ||
		!strings.Contains(tenantErrs["c/z"].Error(), "creds has no key c.z") {
		t.Errorf("tenant errors %v", tenantErrs)
	}
	_, _, secretErr = tenantHashes(plan, Credentials{Secret: "creds", Err: errors.New("not found")})
	if secretErr == nil || secretErr.Error() != "credentials Secret creds: not found" {
		t.Errorf("missing Secret: %v", secretErr)
	}
	if _, _, err := tenantHashes(statusTestPlan(), Credentials{Err: errors.New("none")}); err != nil {
		t.Errorf("a plan without partitions needs no credentials: %v", err)
	}
}

func TestProxyConfig(t *testing.T) {
	hash, err := credentials.Hash("pw")
	if err != nil {
		t.Fatal(err)
	}
	plan := statusTestPlan("a/x", "b/y", "c/z", "d/w")
	routes := []v1.TenantRoute{{NodeName: "node-a", Host: "10.0.0.1", Port: 7380, Weight: 2}, {NodeName: "node-b", Host: "10.0.0.2", Port: 7380, Weight: 1}}
	for i := range plan.Spec.Partitions {
		plan.Spec.Partitions[i].Routes = routes
	}
	plan.Spec.Partitions[0].BandwidthLimit = ptr.To(resource.MustParse("10Mi"))
	plan.Spec.Partitions[0].OpsLimit = ptr.To[int64](5000)
	// e/v has no partition here, only routes; a/x is also listed remote by mistake: its
	// partition wins.
	plan.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "e/v", Routes: routes[1:]}, {Tenant: "a/x", Routes: routes[1:]}})
	hashes := map[string]string{"a/x": hash, "b/y": hash, "d/w": hash, "e/v": hash} // c/z has no credentials
	local := map[string]localEngine{"a/x": {socket: "/s/a", bytes: 64 << 20}, "d/w": {socket: "/s/d", bytes: 1 << 20}}

	cfg, tenantErrs := proxyConfig("node-a", plan, hashes, "token", local)
	if len(tenantErrs) != 0 {
		t.Fatalf("tenant errors %v", tenantErrs)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the table does not validate: %v", err)
	}
	byID := map[string]proxy.Tenant{}
	for _, tn := range cfg.Tenants {
		byID[tn.ID] = tn
	}
	a := byID["a/x"]
	if a.LocalEngine != "/s/a" || a.LocalPartitionBytes != 64<<20 || a.BytesPerSecond != 10<<20 || a.OpsPerSecond != 5000 ||
		fmt.Sprint(a.Routes) != fmt.Sprint([]proxy.Route{{Node: "node-a", Weight: 2}, {Node: "node-b", Weight: 1, PeerAddress: "10.0.0.2:7380"}}) {
		t.Errorf("a/x: %+v", a)
	}
	// b/y has no local engine (the manager refused it): its keys go to node-b only.
	if b := byID["b/y"]; b.LocalEngine != "" || fmt.Sprint(b.Routes) != fmt.Sprint([]proxy.Route{{Node: "node-b", Weight: 1, PeerAddress: "10.0.0.2:7380"}}) {
		t.Errorf("b/y: %+v", b)
	}
	if _, ok := byID["c/z"]; ok {
		t.Error("a tenant without credentials is in the table")
	}
	// e/v, remote: known credentials, no local engine and no limits, every key to node-b.
	if e := byID["e/v"]; e.CredentialHash != hash || e.LocalEngine != "" || e.BytesPerSecond != 0 ||
		fmt.Sprint(e.Routes) != fmt.Sprint([]proxy.Route{{Node: "node-b", Weight: 1, PeerAddress: "10.0.0.2:7380"}}) {
		t.Errorf("e/v: %+v", e)
	}
	if len(cfg.Tenants) != 4 {
		t.Errorf("%d tenants in the table, want a/x, b/y, d/w and e/v once each", len(cfg.Tenants))
	}

	// Without a peer token the tenants with remote routes are refused one by one.
	cfg, tenantErrs = proxyConfig("node-a", plan, hashes, "", local)
	if len(cfg.Tenants) != 0 || len(tenantErrs) != 4 || !strings.Contains(tenantErrs["a/x"].Error(), "peer token is empty") {
		t.Errorf("without a peer token: %d tenants, errors %v", len(cfg.Tenants), tenantErrs)
	}
}

// TestProxyConfigRefusesBadRouteHosts: a route whose host is neither an IP address nor a DNS
// name (the schema checks only its length) costs its tenant alone, with a message naming the
// route and the host; the tenant next to it is served.
func TestProxyConfigRefusesBadRouteHosts(t *testing.T) {
	hash, err := credentials.Hash("pw")
	if err != nil {
		t.Fatal(err)
	}
	good := []v1.TenantRoute{{NodeName: "node-a", Host: "node-a", Port: 7380, Weight: 1}, {NodeName: "node-b", Host: "fd00::2", Port: 7380, Weight: 1}}
	bad := []v1.TenantRoute{{NodeName: "node-a", Host: "node-a", Port: 7380, Weight: 1}, {NodeName: "node-c", Host: "bad host!", Port: 7380, Weight: 1}}
	plan := statusTestPlan("a/x", "b/y")
	plan.Spec.Partitions[0].Routes, plan.Spec.Partitions[1].Routes = good, bad
	plan.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "c/z", Routes: bad[1:]}, {Tenant: "d/w", Routes: good[1:]}})
	hashes := map[string]string{"a/x": hash, "b/y": hash, "c/z": hash, "d/w": hash}
	local := map[string]localEngine{"a/x": {socket: "/s/a", bytes: 64 << 20}, "b/y": {socket: "/s/b", bytes: 64 << 20}}

	cfg, tenantErrs := proxyConfig("node-a", plan, hashes, "token", local)
	var served []string
	for _, tn := range cfg.Tenants {
		served = append(served, tn.ID)
	}
	if fmt.Sprint(served) != "[a/x d/w]" {
		t.Errorf("served %v, want a/x and d/w", served)
	}
	for _, id := range []string{"b/y", "c/z"} {
		if err := tenantErrs[id]; err == nil || !strings.Contains(err.Error(), `route to node-c: host "bad host!" is neither an IP address nor a DNS name`) {
			t.Errorf("%s: %v", id, err)
		}
	}
	if len(tenantErrs) != 2 {
		t.Errorf("tenant errors %v, want b/y and c/z", tenantErrs)
	}
}

func TestKeepTenants(t *testing.T) {
	table := proxy.Config{NodeID: "n", Tenants: []proxy.Tenant{{ID: "a/x"}, {ID: "b/y"}}}
	table.Tenants = append(table.Tenants, proxy.Tenant{ID: "d/w"})
	plan := statusTestPlan("b/y", "c/z")
	plan.Spec.SetRemoteTenants([]v1.RemoteTenant{{Tenant: "d/w"}})
	kept := keepTenants(table, plan)
	if len(kept.Tenants) != 2 || kept.Tenants[0].ID != "b/y" || kept.Tenants[1].ID != "d/w" || len(table.Tenants) != 3 {
		t.Errorf("kept %+v from %+v", kept, table)
	}
}

func TestPeerPlaintext(t *testing.T) {
	for _, tc := range []struct {
		data map[string][]byte
		want bool
	}{
		{map[string][]byte{PeerTokenKey: []byte("t")}, false},
		{map[string][]byte{PeerPlaintextKey: []byte("true")}, true},
		{map[string][]byte{PeerPlaintextKey: []byte("yes")}, false},
		{map[string][]byte{PeerPlaintextKey: nil}, false},
	} {
		if got := peerPlaintext(tc.data); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.data, got, tc.want)
		}
	}
}
