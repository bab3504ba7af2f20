package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/cache-sidecar/proxy"
	"github.com/cacheqos/cacheqos/internal/credentials"
)

// PeerTokenKey is the credentials Secret's data key holding the token sidecars present to
// each other's peer listeners. It contains no '.', so it never collides with a tenant's key
// (credentials.SecretKey).
const PeerTokenKey = "peer-token"

// PeerPlaintextKey is the credentials Secret's data key that, set to "true", lets sidecars
// with peer TLS also talk to peers without it (proxy.Config.PeerPlaintext): the operator sets
// it while a rollout replaces sidecars of a version without peer TLS.
const PeerPlaintextKey = "peer-plaintext"

// peerPlaintext reads PeerPlaintextKey: only "true" allows plaintext peers.
func peerPlaintext(data map[string][]byte) bool { return string(data[PeerPlaintextKey]) == "true" }

// Credentials is what the agent knows of the plan's credentials Secret.
type Credentials struct {
	// Secret names the Secret, for messages.
	Secret string
	// Data is the Secret's data: a credentials.Hash per tenant key and the peer token.
	Data map[string][]byte
	// Err says why there are no credentials (no Secret named, or it cannot be read); Data is
	// then empty.
	Err error
}

// enginePartitions translates the plan's partitions for the engine manager. Partitions the
// agent refuses before the engine sees them are returned as errors by tenant.
func enginePartitions(plan *v1.CacheNodePlan) ([]engine.PartitionSpec, map[string]error) {
	specs := make([]engine.PartitionSpec, 0, len(plan.Spec.Partitions))
	errs := make(map[string]error)
	for _, p := range plan.Spec.Partitions {
		policy, err := evictionPolicy(p.EvictionPolicy)
		if err != nil {
			errs[p.Tenant] = err
			continue
		}
		specs = append(specs, engine.PartitionSpec{Tenant: p.Tenant, MemoryBytes: p.Memory.Value(), EvictionPolicy: policy})
	}
	return specs, errs
}

func evictionPolicy(p v1.EvictionPolicy) (engine.EvictionPolicy, error) {
	switch p {
	case v1.EvictionLRU:
		return engine.LRU, nil
	case v1.EvictionLFU:
		return engine.LFU, nil
	default:
		return "", fmt.Errorf("unknown eviction policy %q (want %q or %q)", p, v1.EvictionLRU, v1.EvictionLFU)
	}
}

// engineKind maps the plan's engine to the engine manager's.
func engineKind(e v1.Engine) (engine.Engine, error) {
	switch e {
	case v1.EngineRedis:
		return engine.Redis, nil
	case v1.EngineMemcached:
		return engine.Memcached, nil
	default:
		return "", fmt.Errorf("unknown engine %q (want %q or %q)", e, v1.EngineRedis, v1.EngineMemcached)
	}
}

// partitionErrors splits the engine manager's joined Reconcile error by tenant. An error that
// names no partition fails the whole pass.
func partitionErrors(err error, into map[string]error) error {
	if err == nil {
		return nil
	}
	var planErrs []error
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		var pe *engine.PartitionError
		if errors.As(e, &pe) {
			into[pe.Tenant] = errors.Join(into[pe.Tenant], pe.Err)
			continue
		}
		planErrs = append(planErrs, e)
	}
	return errors.Join(planErrs...)
}

// tenantHashes reads every tenant's credential hash from the Secret's data. Tenants without a
// valid one are returned as errors by tenant; the whole Secret missing is one error.
func tenantHashes(plan *v1.CacheNodePlan, creds Credentials) (hashes map[string]string, tenantErrs map[string]error, secretErr error) {
	ids := planTenants(plan)
	hashes = make(map[string]string, len(ids))
	tenantErrs = make(map[string]error)
	if len(ids) == 0 {
		return hashes, tenantErrs, nil
	}
	if creds.Err != nil {
		if creds.Secret == "" {
			return hashes, tenantErrs, creds.Err
		}
		return hashes, tenantErrs, fmt.Errorf("credentials Secret %s: %w", creds.Secret, creds.Err)
	}
	for _, id := range ids {
		key, err := credentials.SecretKey(id)
		if err != nil {
			tenantErrs[id] = err
			continue
		}
		hash, ok := creds.Data[key]
		switch {
		case !ok:
			tenantErrs[id] = fmt.Errorf("credentials Secret %s has no key %s", creds.Secret, key)
		case !credentials.Valid(string(hash)):
			tenantErrs[id] = fmt.Errorf("credentials Secret %s key %s is not a credential hash", creds.Secret, key)
		default:
			hashes[id] = string(hash)
		}
	}
	return hashes, tenantErrs, nil
}

// planTenants lists the tenants the plan names: its partitions' and its remote tenants (a
// remote tenant that also has a partition is named once).
func planTenants(plan *v1.CacheNodePlan) []string {
	ids := make([]string, 0, len(plan.Spec.Partitions)+len(plan.Spec.RemoteTenants))
	for _, p := range plan.Spec.Partitions {
		ids = append(ids, p.Tenant)
	}
	for _, r := range plan.Spec.RemoteTenants {
		ids = append(ids, r.Tenant)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// localEngine is where the proxy reaches a tenant's engine on this node.
type localEngine struct {
	socket   string
	password string // engine.RedisLinkUser's, for a redis engine
	bytes    int64
}

// proxyConfig is the proxy's tenant table for the plan: every tenant with a credential hash,
// its local engine, its routes and its limits. A tenant whose local partition the engine
// manager does not run (it refused the spec) loses its route to this node, so its keys on
// other nodes stay reachable; that partition is reported failed anyway. A remote tenant has
// no local engine and no limits here (they apply where its partitions are): the proxy
// forwards every request by its routes. Each tenant is validated on its own, so one bad entry
// costs only that tenant: it is left out and returned in tenantErrs.
func proxyConfig(nodeName string, plan *v1.CacheNodePlan, hashes map[string]string, peerToken string, local map[string]localEngine) (cfg proxy.Config, tenantErrs map[string]error) {
	cfg = proxy.Config{NodeID: nodeName, PeerToken: peerToken}
	tenantErrs = make(map[string]error)
	add := func(t proxy.Tenant) {
		single := proxy.Config{NodeID: nodeName, PeerToken: peerToken, Tenants: []proxy.Tenant{t}}
		if err := single.Validate(); err != nil {
			tenantErrs[t.ID] = fmt.Errorf("proxy: %w", err)
			return
		}
		cfg.Tenants = append(cfg.Tenants, t)
	}
	for _, p := range plan.Spec.Partitions {
		hash, ok := hashes[p.Tenant]
		if !ok {
			continue
		}
		t := proxy.Tenant{ID: p.Tenant, CredentialHash: hash}
		if eng, ok := local[p.Tenant]; ok {
			t.LocalEngine, t.LocalEnginePassword, t.LocalPartitionBytes = eng.socket, eng.password, eng.bytes
		}
		var routeErr error
		for _, r := range p.Routes {
			if r.NodeName == nodeName && t.LocalEngine == "" {
				continue
			}
			route := proxy.Route{Node: r.NodeName, Weight: float64(r.Weight)}
			if r.NodeName != nodeName {
				route.PeerAddress, routeErr = peerAddress(r)
			}
			if routeErr != nil {
				break
			}
			t.Routes = append(t.Routes, route)
		}
		if routeErr != nil {
			tenantErrs[p.Tenant] = routeErr
			continue
		}
		if p.BandwidthLimit != nil {
			t.BytesPerSecond = max(0, p.BandwidthLimit.AsApproximateFloat64())
		}
		if p.OpsLimit != nil {
			t.OpsPerSecond = float64(max(0, *p.OpsLimit))
		}
		add(t)
	}
	for _, r := range plan.Spec.RemoteTenants {
		hash, ok := hashes[r.Tenant]
		if !ok || slices.ContainsFunc(cfg.Tenants, func(t proxy.Tenant) bool { return t.ID == r.Tenant }) {
			continue
		}
		t := proxy.Tenant{ID: r.Tenant, CredentialHash: hash}
		var routeErr error
		for _, route := range r.Routes {
			var addr string
			if addr, routeErr = peerAddress(route); routeErr != nil {
				break
			}
			t.Routes = append(t.Routes, proxy.Route{Node: route.NodeName, PeerAddress: addr, Weight: float64(route.Weight)})
		}
		if routeErr != nil {
			tenantErrs[r.Tenant] = routeErr
			continue
		}
		add(t)
	}
	slices.SortFunc(cfg.Tenants, func(a, b proxy.Tenant) int { return strings.Compare(a.ID, b.ID) })
	return cfg, tenantErrs
}

// peerAddress is the address of route r's sidecar, checked as the schema cannot afford to.
func peerAddress(r v1.TenantRoute) (string, error) {
	if err := r.Validate(); err != nil {
		return "", fmt.Errorf("route to %s: %w", r.NodeName, err)
	}
	return r.Address(), nil
}

// keepTenants is table without the tenants that are no longer in the plan.
func keepTenants(table proxy.Config, plan *v1.CacheNodePlan) proxy.Config {
	inPlan := make(map[string]bool, len(plan.Spec.Partitions)+len(plan.Spec.RemoteTenants))
	for _, id := range planTenants(plan) {
		inPlan[id] = true
	}
	out := table
	out.Tenants = slices.DeleteFunc(slices.Clone(table.Tenants), func(t proxy.Tenant) bool { return !inPlan[t.ID] })
	return out
}
