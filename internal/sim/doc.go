// Package sim is cacheqos' trace-driven cluster simulator: it replays deterministic workloads
// (internal/workload) against simulated cache nodes under each allocation policy, with the
// project's real parts wherever they are pure logic, and measures what tenants get.
//
// A Scenario is nodes (memory, ops/s and bytes/s capacity), tenants (a workload, a request
// rate, an objective, a class) and a number of allocation intervals. Run simulates one policy:
//
//   - Each interval, every active tenant's requests arrive as a Poisson process; keys are routed
//     to nodes by weighted rendezvous hashing (internal/rendezvous) with the plan's weights, and
//     served by the tenant's partition there: an exact LRU (mrc.LRUCache) or a Redis-like
//     sampled LRU (NewCache) whose objects take the bytes the scenario's engine allocates for
//     them (mrc.EngineModel, redis or memcached). Partitions with bandwidth or ops limits pass
//     requests through the real token buckets (internal/tokenbucket) on simulated time.
//   - Each partition feeds a real SHARDS tracker (internal/mrc) with the sidecar's defaults,
//     recording a look-aside client's GETs and SETs through the proxy's own mrc.Recorder, and is read at the
//     sidecar's per-partition size grid.
//     At the end of the interval a planning snapshot is built the way the operator builds it
//     from Prometheus (per-node rates, observed hit ratio, merged miss-ratio curve, history,
//     partitions in force), the policy plans with internal/allocator, and the plan is applied:
//     partitions resized, created or dropped, keys re-routed. Moved or new space starts cold.
//   - Latency is the hit or miss service time, plus any token-bucket hold, plus each node's
//     M/M/1 queueing delay at the load it saw in the interval (curve.QueueDelayAtUtilization).
//
// The "shared" policy is the baseline without partitions: one LRU per node for everyone.
// Scenario.PoolBestEffort (cacheqos-sim -pool) is an experiment the operator does not run:
// the best-effort tenants on a node share one cache sized to their shares (pool.go).
// Results depend only on the scenario and the seed, except plan wall times and the plans of
// optimal solves that run into the solver's wall-clock limit. RunScenario runs every policy,
// Summarize turns runs into SLO attainment, hit ratios, latencies and movement, and
// WriteReport and WritePlots render the evaluation report (docs/evaluation.md) with each
// paper's headline claim next to our result for the same kind of scenario (Scenarios lists
// the built-in ones).
package sim
