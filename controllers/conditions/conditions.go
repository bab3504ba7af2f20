// Package conditions holds the condition types and reasons the cacheqos controllers set
// beyond those of api/v1alpha1, so tests and tools can match them by name.
package conditions

// Condition types.
const (
	// MetricsAvailable (CacheCluster): the allocation loop read fresh metrics from Prometheus
	// for its last plan. False keeps the plan in force; the message carries the error.
	MetricsAvailable = "MetricsAvailable"
	// MonitoringReady (CacheCluster): the ServiceMonitor and PrometheusRule that
	// spec.monitoring asks for exist. False when the prometheus-operator CRDs are not served.
	MonitoringReady = "MonitoringReady"
	// SidecarOverridesApplied (CacheCluster): the sidecar pods carry spec.sidecar's resources.
	// False when an override would starve the engines or is invalid; the derived values are
	// used instead and the message names the field.
	SidecarOverridesApplied = "SidecarOverridesApplied"
)

// Reasons.
const (
	// ReasonMetricsRead (MetricsAvailable=True).
	ReasonMetricsRead = "MetricsRead"
	// ReasonPrometheusNotConfigured (MetricsAvailable=False): neither the cluster nor the
	// operator names a Prometheus; plans are made without measurements.
	ReasonPrometheusNotConfigured = "PrometheusNotConfigured"
	// ReasonPrometheusHTTPConfigInvalid (MetricsAvailable=False): the Secret that
	// spec.monitoring.prometheusHTTPConfig names is missing, unreadable or holds no valid
	// configuration; the message says which.
	ReasonPrometheusHTTPConfigInvalid = "PrometheusHTTPConfigInvalid"
	// ReasonMetricsStale (MetricsAvailable=False): Prometheus answered, but no sidecar of the
	// cluster was scraped recently.
	ReasonMetricsStale = "MetricsStale"

	// ReasonPrometheusOperatorMissing (MonitoringReady=False).
	ReasonPrometheusOperatorMissing = "PrometheusOperatorMissing"
	// ReasonMonitoringNotRequested (MonitoringReady=True): spec.monitoring enables nothing.
	ReasonMonitoringNotRequested = "NotRequested"
	// ReasonMonitoringCreated (MonitoringReady=True).
	ReasonMonitoringCreated = "Created"

	// ReasonOverridesApplied (SidecarOverridesApplied=True): every spec.sidecar field is in
	// the pod template (also when there is none).
	ReasonOverridesApplied = "OverridesApplied"
	// ReasonUnsafeResources (SidecarOverridesApplied=False): a spec.sidecar.resources value
	// was not applied; the message says which and why.
	ReasonUnsafeResources = "UnsafeResources"

	// ReasonUpToDate (Progressing=False): nothing is rolling out and every plan is applied.
	ReasonUpToDate = "UpToDate"
	// ReasonRollingOut (Progressing=True): the sidecar DaemonSet is being updated.
	ReasonRollingOut = "RollingOut"
	// ReasonReconcileError (Progressing=True): the last reconcile failed; the message says how.
	ReasonReconcileError = "ReconcileError"

	// ReasonAsExpected (Degraded=False).
	ReasonAsExpected = "AsExpected"
	// ReasonPlanNotApplied (Degraded=True): a sidecar has not applied its plan within the
	// allowed number of allocation intervals; the message names the nodes.
	ReasonPlanNotApplied = "PlanNotApplied"
	// ReasonNodesOutOfService (Degraded=True): nodes with a sidecar are cordoned, not
	// Ready or gone; the plans place no partition there. The message names them.
	ReasonNodesOutOfService = "NodesOutOfService"
	// ReasonPlanInfeasible (Degraded=True): the allocator found no plan satisfying the hard
	// constraints; the plan in force is kept.
	ReasonPlanInfeasible = "PlanInfeasible"
	// ReasonTooManyRemoteTenants (Degraded=True): a node's plan cannot list every tenant
	// without a partition there; the message names the nodes and the tenants left out.
	ReasonTooManyRemoteTenants = "TooManyRemoteTenants"

	// ReasonPartitionsRunning (TenantSLO Ready=True).
	ReasonPartitionsRunning = "PartitionsRunning"
	// ReasonPartitionsPending (TenantSLO Ready=False): some partition is not running yet.
	ReasonPartitionsPending = "PartitionsPending"
	// ReasonAwaitingPlan (TenantSLO Ready=False): admitted, but no plan holds a partition yet.
	ReasonAwaitingPlan = "AwaitingPlan"
	// ReasonCredentialsPending (TenantSLO Ready=False): the credentials are not issued yet.
	ReasonCredentialsPending = "CredentialsPending"
)
