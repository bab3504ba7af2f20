// Package mrc estimates per-tenant LRU miss-ratio curves on the cache sidecar's hot path.
//
// A Tracker samples keys spatially (SHARDS, Waldspurger et al., FAST'15): a key is sampled when
// its derived 64-bit hash falls below a threshold, so a key is either always or never sampled
// and the sampled keys form a uniform random subset of the key space. For each sampled access
// the Tracker computes the byte-weighted LRU reuse distance — the bytes of distinct keys
// touched since the previous access to the same key, scaled by 1/rate, plus the object's own
// size — which is exactly the smallest LRU byte capacity at which the access would have hit.
// Distances are counted into a histogram whose buckets are the candidate partition sizes, so
// the curve is read directly at a small, fixed set of sizes (bounded Prometheus cardinality).
//
// State is bounded: when more than a configured number of keys are tracked, the key with the
// largest hash is dropped and the threshold lowered to it (the fixed-size SHARDS variant), so a
// tenant's tracker never exceeds its memory budget whatever its key space.
//
// ExactLRU computes the same curve without sampling (Mattson's stack algorithm) and LRUCache is
// a real byte-capacity LRU cache; both serve as references in tests and in the simulator.
// Ghost remembers fingerprints of recently evicted keys so the sidecar can count accesses that
// a somewhat larger partition would have served.
package mrc
