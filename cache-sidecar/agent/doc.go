// Package agent is the cache sidecar's node agent: it makes the node's engines and proxy
// enforce the node's CacheNodePlan and reports what it applied in the plan's status.
//
// One pass (Agent.Apply) is level-triggered and idempotent: it computes everything from the
// plan and the credentials as they are now. It
//   - reconciles the engine processes to the plan's partitions (engine.Manager.Reconcile): new
//     partitions start, changed ones resize live, removed ones drain and stop;
//   - gives the proxy its tenant table (proxy.Update): each tenant's credential hash from the
//     credentials Secret, its local engine endpoint, its routes and weights, its limits, and
//     the peer token the sidecars use among themselves;
//   - reads every partition's engine numbers and builds the status: appliedGeneration only
//     when every partition of spec.planGeneration was applied, per-partition state and memory,
//     and the conditions PlanApplied, Ready and Degraded naming the failing partitions.
//
// Two drivers run passes. In a cluster (RunKubernetes) a controller-runtime manager watches
// only the node's CacheNodePlan in its namespace (its cache is restricted by a metadata.name
// field selector) and, in a second cache, only the one Secret the plan names; a pass runs on
// every change of either, on every engine state change (a crash, a restart), and every
// RefreshInterval so used bytes stay current; each pass ends in at most one status patch.
// Standalone (RunStandalone) reads the plan and the credentials from YAML files, for local
// runs and benchmarks, and writes the status to a file.
//
// On its own shutdown the agent either leaves the engines running, for a restarted sidecar to
// adopt (standalone, where they outlive it), or, in a container, whose processes all die
// with it, stops them through SaveEngines so redis partitions come back from their saved
// snapshot (see the engine package). A plan that disappears from the API
// server leaves the node as it is, for the same reason: only a plan says what to remove.
//
// This is the only sidecar package that imports Kubernetes.
package agent
