/*
Copyright 2026 The cacheqos Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// Condition types. The operator, the allocator and the sidecar share these strings, so a
// `kubectl wait --for=condition=...` written against one keeps working for all.
const (
	// ConditionReady: the object is doing its job. CacheCluster: every selected node runs a
	// sidecar that applied the current plan. TenantSLO: admitted, partitions running, credentials
	// issued. CacheNodePlan: every partition of the plan runs at its planned size.
	ConditionReady = "Ready"
	// ConditionProgressing (CacheCluster): a rollout or a new plan is on its way to the nodes.
	ConditionProgressing = "Progressing"
	// ConditionDegraded (CacheCluster): serving, but something needs attention (metrics missing,
	// solver fell back to the heuristic, some nodes not ready).
	ConditionDegraded = "Degraded"
	// ConditionPlanApplied: CacheCluster: every node acknowledged the latest plan generation.
	// CacheNodePlan: this node's sidecar applied spec.planGeneration.
	ConditionPlanApplied = "PlanApplied"
	// ConditionAdmitted (TenantSLO): the cluster has room for the tenant's guarantees
	// (memory.min, bandwidth.guaranteed) and the tenant got partitions.
	ConditionAdmitted = "Admitted"
	// ConditionSLOMet (TenantSLO): the observed value of the objective meets its target.
	ConditionSLOMet = "SLOMet"
	// ConditionThrottled (TenantSLO): the tenant's traffic is being held by its bandwidth or
	// ops limit on at least one node.
	ConditionThrottled = "Throttled"
	// ConditionAllocated (TenantSLO): why the last allocation gave the tenant the memory it
	// has; the reason is status.allocation.decision, the message gives the numbers. False
	// (MinimumsUnpackable) when no plan can hold its memory.min beside other tenants'.
	ConditionAllocated = "Allocated"
	// ConditionGuaranteesFit (CacheCluster): the memory.min and bandwidth.guaranteed of the
	// tenants admitted or waiting for room fit in the cluster's capacity. False after a capacity
	// shrink below what admitted tenants were guaranteed, or when waiting tenants ask for more
	// than is left; the message gives both totals and the capacity.
	ConditionGuaranteesFit = "GuaranteesFit"
	// ConditionCurveAccurate (TenantSLO): the tenant's miss-ratio curve, read at its partitions'
	// current sizes, predicts the hit ratio they achieve within the tolerance (0.05, or three
	// standard deviations of the sampling noise when larger). False (CurveOff) names both
	// values: the allocator plans on the curve, so an off curve means plans on a wrong premise
	// until the control loop has corrected it.
	ConditionCurveAccurate = "CurveAccurate"
)

// Condition reasons (CamelCase, as metav1.Condition requires).
const (
	// ReasonReconciling: the controller has seen the change and is acting on it.
	ReasonReconciling = "Reconciling"
	// ReasonAllNodesReady (CacheCluster Ready=True): every selected node runs a ready sidecar.
	ReasonAllNodesReady = "AllNodesReady"
	// ReasonNodesNotReady (CacheCluster Ready=False or Degraded=True): some sidecars are not ready.
	ReasonNodesNotReady = "NodesNotReady"
	// ReasonNoMatchingNodes: spec.nodeSelector and tolerations select no schedulable node.
	ReasonNoMatchingNodes = "NoMatchingNodes"
	// ReasonPrometheusUnavailable (Degraded=True): metrics could not be read; the allocator keeps
	// the last plan.
	ReasonPrometheusUnavailable = "PrometheusUnavailable"
	// ReasonSolverFallback (Degraded=True): the solver failed or timed out without a solution and
	// the plan came from the greedy warm start.
	ReasonSolverFallback = "SolverFallback"

	// ReasonPlanApplied (PlanApplied=True): the plan generation was applied.
	ReasonPlanApplied = "Applied"
	// ReasonPlanPending (PlanApplied=False): a newer plan generation is not applied yet.
	ReasonPlanPending = "PlanPending"
	// ReasonApplyFailed (PlanApplied=False): the sidecar could not apply some partition; the
	// partition's status message says why.
	ReasonApplyFailed = "ApplyFailed"

	// ReasonAdmitted (Admitted=True).
	ReasonAdmitted = "Admitted"
	// ReasonInsufficientCapacity (Admitted=False): the cluster cannot fit the tenant's guarantees
	// next to those already admitted.
	ReasonInsufficientCapacity = "InsufficientCapacity"
	// ReasonClusterNotFound (Admitted=False): spec.clusterRef names no CacheCluster.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonNamespaceNotAllowed (Admitted=False): the cluster's tenants.namespaceSelector does
	// not select the tenant's namespace.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonPriorityAboveLimit (Admitted=False): spec.priority exceeds the cluster's
	// tenants.maxPriority.
	ReasonPriorityAboveLimit = "PriorityAboveLimit"
	// ReasonNamespaceQuotaExceeded (Admitted=False): admitting the tenant would exceed the
	// cluster's tenants.maxTenantsPerNamespace or maxGuaranteedMemoryPerNamespace.
	ReasonNamespaceQuotaExceeded = "NamespaceQuotaExceeded"
	// ReasonUnsupportedEvictionPolicy (Admitted=False): the cluster's engine has no such policy
	// (lfu on memcached).
	ReasonUnsupportedEvictionPolicy = "UnsupportedEvictionPolicy"
	// ReasonTargetUnreachable (SLOMet=False): even memory.max (or the whole cluster) cannot meet
	// the target according to the tenant's miss-ratio curve; the tenant is served best effort.
	ReasonTargetUnreachable = "TargetUnreachable"

	// ReasonMinimumsUnpackable (Allocated=False): the tenant's memory.min cannot be placed
	// together with those of the other tenants the message names, within the nodes' memory and
	// the tenants' placement; no new plan is made and the plan in force is kept.
	ReasonMinimumsUnpackable = "MinimumsUnpackable"

	// ReasonWithinCapacity (GuaranteesFit=True).
	ReasonWithinCapacity = "WithinCapacity"
	// ReasonGuaranteesExceedCapacity (GuaranteesFit=False): the guarantees of the tenants
	// admitted or refused for capacity exceed nodes x partitionable memory (or bandwidth);
	// admitted tenants beyond it lose admission (InsufficientCapacity). A Warning event of this
	// reason marks the change.
	ReasonGuaranteesExceedCapacity = "GuaranteesExceedCapacity"

	// ReasonTargetMet (SLOMet=True).
	ReasonTargetMet = "TargetMet"
	// ReasonTargetMissed (SLOMet=False): observed value is worse than the target.
	ReasonTargetMissed = "TargetMissed"
	// ReasonCurveMatches (CurveAccurate=True).
	ReasonCurveMatches = "CurveMatches"
	// ReasonCurveOff (CurveAccurate=False): the curve's prediction and the achieved hit ratio
	// differ by more than the tolerance.
	ReasonCurveOff = "CurveOff"
	// ReasonTooFewSamples (CurveAccurate=Unknown): the curve rests on too few sampled reads.
	ReasonTooFewSamples = "TooFewSamples"
	// ReasonAwaitingMetrics (SLOMet=Unknown, CurveAccurate=Unknown): not enough traffic observed
	// yet to judge.
	ReasonAwaitingMetrics = "AwaitingMetrics"

	// ReasonBandwidthLimited (Throttled=True): requests waited for the bytes/s token bucket.
	ReasonBandwidthLimited = "BandwidthLimited"
	// ReasonOpsLimited (Throttled=True): requests waited for the ops/s token bucket.
	ReasonOpsLimited = "OpsLimited"
	// ReasonWithinLimits (Throttled=False).
	ReasonWithinLimits = "WithinLimits"
)
