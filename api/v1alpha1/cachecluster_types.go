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

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults the schema applies; exported so Go callers that build objects by hand (tests,
// simulators) see the same values the API server would store.
const (
	DefaultAllocationInterval     = 30 * time.Second
	DefaultSolverTimeLimit        = 10 * time.Second
	DefaultMaxChurnPercent        = 25
	DefaultHeadroomPercent        = 10
	DefaultMRCSamplingRate        = "0.1"
	DefaultMRCMaxTrackedKeys      = 8192
	DefaultMRCCurvePoints         = 16
	DefaultServiceMonitorInterval = 30 * time.Second
	// MinAllocationInterval is the shortest allocation interval the schema accepts: metrics
	// need a few scrapes per interval to say anything, and every interval may move memory.
	MinAllocationInterval = 5 * time.Second
)

// AllocationPolicy selects the algorithm that sizes and places tenant partitions.
// +kubebuilder:validation:Enum=optimal;maxperf;softqos;lacs;equal
type AllocationPolicy string

const (
	// PolicyOptimal: CP-SAT over discrete size levels, warm-started from the greedy plan;
	// meets as many strict SLOs as possible (weighted by priority), then maximizes hits, then
	// minimizes movement.
	PolicyOptimal AllocationPolicy = "optimal"
	// PolicyMaxperf: Maxperf's two stages (size from interpolated latency curves, then split
	// across servers), with maxDegradation as its delta.
	PolicyMaxperf AllocationPolicy = "maxperf"
	// PolicySoftQoS: Soft-QoS minimum sizes from monotone piecewise-linear hit-ratio fits,
	// spare memory to the tenants that gain the most.
	PolicySoftQoS AllocationPolicy = "softqos"
	// PolicyLACS: load-aware sharing with LACS' isolation guarantee (cache and bandwidth).
	PolicyLACS AllocationPolicy = "lacs"
	// PolicyEqual: every admitted tenant gets the same share of every node (the baseline).
	PolicyEqual AllocationPolicy = "equal"
)

// Solver outcomes written to CacheCluster status.lastPlan.solverStatus.
const (
	// SolverStatusOptimal: the solver proved its plan optimal.
	SolverStatusOptimal = "Optimal"
	// SolverStatusFeasible: the time limit ended the search with a plan that is not proven optimal.
	SolverStatusFeasible = "Feasible"
	// SolverStatusInfeasible: no plan satisfies the hard constraints; nothing was changed.
	SolverStatusInfeasible = "Infeasible"
	// SolverStatusFallback: the solver failed or found nothing in time; the greedy plan was used.
	SolverStatusFallback = "Fallback"
	// SolverStatusNotUsed: the policy is a heuristic (equal, softqos, maxperf, lacs) without a solver.
	SolverStatusNotUsed = "NotUsed"
)

// CacheClusterSpec describes a fleet of cache nodes and how its capacity is shared.
// +kubebuilder:validation:XValidation:rule="(has(self.nodeSelector) && size(self.nodeSelector) > 0) != (has(self.allNodes) && self.allNodes)",fieldPath=".nodeSelector",message="name the nodes with nodeSelector, or set allNodes: true to run on every schedulable node (not both)"
// +kubebuilder:validation:XValidation:rule="self.engine != 'memcached' || !self.capacity.memory.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self.capacity.memory).compareTo(quantity('8Mi')) >= 0",fieldPath=".capacity.memory",message="a memcached node needs at least 8Mi, the smallest memcached partition"
type CacheClusterSpec struct {
	// engine is the cache server every partition runs. Immutable: tenants' data and clients
	// depend on it; create a new CacheCluster to switch engines.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine is immutable; create a new CacheCluster to change it"
	Engine Engine `json:"engine"`

	// images of the node pod. Empty fields take the operator's defaults.
	// +optional
	// +kubebuilder:default={}
	Images CacheClusterImages `json:"images,omitempty"`

	// nodeSelector picks the nodes that run a cache sidecar (every matching node gets one).
	// Required unless allNodes is true.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",messageExpression="'nodeSelector key ' + self.filter(k, !(size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')))[0] + ' is not a label key: an optional DNS subdomain prefix and /, then at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric'"
	NodeSelector map[string]LabelValue `json:"nodeSelector,omitempty"`

	// allNodes runs a sidecar, and reserves capacity, on every schedulable node. It must be
	// said explicitly: a CacheCluster without a nodeSelector is refused unless allNodes is true.
	// +optional
	AllNodes bool `json:"allNodes,omitempty"`

	// tolerations let the sidecar run on tainted (for example dedicated) cache nodes. Keys have
	// a label key's form and values a label value's (the rules of TaintKey and LabelValue).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])",message="toleration operator must be Exists or Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="toleration effect must be NoSchedule, PreferNoSchedule or NoExecute (or empty for all effects)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="a toleration with operator Exists takes no value"
	// +kubebuilder:validation:XValidation:rule="self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",message="a toleration without a key must use operator Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",message="tolerationSeconds needs effect NoExecute"
	Tolerations []Toleration `json:"tolerations,omitempty"`

	// sidecar shapes the sidecar DaemonSet's pods: pull secrets, priority class, affinity,
	// labels, annotations, resources and security contexts. Unset fields take the operator's
	// defaults (the Helm chart's sidecar values).
	// +optional
	Sidecar SidecarPodSettings `json:"sidecar,omitempty"`

	// updateStrategy says how the sidecar pods take a new image or pod template
	// (docs/operations.md, Upgrades).
	// +optional
	UpdateStrategy UpdateStrategy `json:"updateStrategy,omitempty"`

	// capacity is what each selected node gives to tenant partitions.
	// +required
	Capacity NodeCapacity `json:"capacity"`

	// tenants is the platform team's say over which namespaces use the cluster and how much
	// each may claim. Unset: every namespace, without per-namespace limits.
	// +optional
	Tenants TenantGovernance `json:"tenants,omitempty"`

	// allocation controls how often and how partitions are recomputed.
	// +optional
	// +kubebuilder:default={}
	Allocation AllocationSettings `json:"allocation,omitempty"`

	// monitoring says where metrics are read from and which monitoring objects to create.
	// +optional
	Monitoring MonitoringSettings `json:"monitoring,omitempty"`

	// missRatioCurve tunes the sidecar's sampled miss-ratio curves (SHARDS).
	// +optional
	// +kubebuilder:default={}
	MissRatioCurve MissRatioCurveSettings `json:"missRatioCurve,omitempty"`

	// tls serves tenants' clients over TLS, with certificates the operator issues and rotates.
	// +optional
	TLS ClientTLS `json:"tls,omitempty"`
}

// TenantGovernance limits the TenantSLOs a CacheCluster admits. A tenant that breaks a rule is
// not admitted (Admitted=False with the rule's reason), whatever its creation time.
type TenantGovernance struct {
	// namespaceSelector picks the namespaces whose TenantSLOs may use the cluster. Unset: every
	// namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// maxPriority is the highest spec.priority a tenant of the cluster may ask for.
	// Unset: 1000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxPriority int32 `json:"maxPriority,omitempty"`

	// maxTenantsPerNamespace is how many TenantSLOs of one namespace the cluster admits.
	// Unset: no limit.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTenantsPerNamespace int32 `json:"maxTenantsPerNamespace,omitempty"`

	// maxGuaranteedMemoryPerNamespace bounds the memory.min summed over one namespace's
	// admitted TenantSLOs. Unset: no limit beyond the cluster's capacity.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'tenants.maxGuaranteedMemoryPerNamespace ' + self + ' is not a quantity of bytes: ' + (self.matches('^[0-9.]+[kKMGTPE]i?[bB]$') ? 'drop the B: 10G or 10Gi, not 10GB' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 8Gi')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'tenants.maxGuaranteedMemoryPerNamespace ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('4Mi')) >= 0",messageExpression="'tenants.maxGuaranteedMemoryPerNamespace ' + self + ' is below the minimum 4Mi (the smallest partition an engine runs)'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",messageExpression="'tenants.maxGuaranteedMemoryPerNamespace ' + self + ' is above the maximum 1Pi'"
	MaxGuaranteedMemoryPerNamespace *resource.Quantity `json:"maxGuaranteedMemoryPerNamespace,omitempty"`
}

// CacheClusterImages are the container images of the node pod.
type CacheClusterImages struct {
	// engine is an image that provides the engine binary (redis-server or memcached) the
	// sidecar starts once per partition. Empty: the operator's default for spec.engine.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",messageExpression="'images.engine ' + self + ' is not an image reference: write [registry[:port]/]path[:tag][@sha256:digest] with a lower-case registry and path, e.g. redis:7.2'"
	Engine string `json:"engine,omitempty"`

	// sidecar is the cacheqos node agent and proxy image. Empty: the operator's own version.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",messageExpression="'images.sidecar ' + self + ' is not an image reference: write [registry[:port]/]path[:tag][@sha256:digest] with a lower-case registry and path, e.g. redis:7.2'"
	Sidecar string `json:"sidecar,omitempty"`

	// pullPolicy of both images.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +kubebuilder:default=IfNotPresent
	PullPolicy corev1.PullPolicy `json:"pullPolicy,omitempty"`
}

// NodeCapacity is the share of one node that tenant partitions may use. Every selected node
// offers the same capacity; put differently sized nodes in different CacheClusters.
type NodeCapacity struct {
	// memory each node gives to the cache (bytes, a quantity such as 64Gi), before headroom.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'capacity.memory ' + self + ' is not a quantity of bytes: ' + (self.matches('^[0-9.]+[kKMGTPE]i?[bB]$') ? 'drop the B: 10G or 10Gi, not 10GB' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 8Gi')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'capacity.memory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('4Mi')) >= 0",messageExpression="'capacity.memory ' + self + ' is below the minimum 4Mi (the smallest partition an engine runs)'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",messageExpression="'capacity.memory ' + self + ' is above the maximum 1Pi'"
	Memory resource.Quantity `json:"memory"`

	// bandwidth is the node's network budget for cache traffic, bytes per second
	// (a quantity: 1250M is 10 Gbit/s).
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'capacity.bandwidth ' + self + ' is not a quantity of bytes per second: ' + (self.matches('^[0-9.]+[kKMGTPE]?i?(bps|Bps|bit/s|b/s|B/s)$') ? 'write bytes per second: 12.5M for 100 Mbit/s, not 100Mbps' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 125M')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'capacity.bandwidth ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1k')) >= 0",messageExpression="'capacity.bandwidth ' + self + ' is below the minimum 1k bytes per second'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1P')) <= 0",messageExpression="'capacity.bandwidth ' + self + ' is above the maximum 1P'"
	Bandwidth resource.Quantity `json:"bandwidth"`

	// opsPerSecond is how many requests per second a node serves at acceptable latency.
	// +required
	// +kubebuilder:validation:Minimum=1
	OpsPerSecond int64 `json:"opsPerSecond"`

	// headroomPercent of memory is kept free for the engine's own overhead (fragmentation,
	// replication and client buffers, allocator slack): partitions share
	// memory * (100 - headroomPercent) / 100.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=90
	// +kubebuilder:default=10
	HeadroomPercent *int32 `json:"headroomPercent,omitempty"`
}

// PartitionableMemory returns the bytes of a node that tenant partitions share: memory minus
// the headroom (DefaultHeadroomPercent when unset).
func (c *NodeCapacity) PartitionableMemory() int64 {
	headroom := int64(DefaultHeadroomPercent)
	if c.HeadroomPercent != nil {
		headroom = int64(*c.HeadroomPercent)
	}
	// Divide first: memory*(100-h) can overflow int64 for exabyte quantities, and losing
	// less than 100 bytes of precision does not matter for a cache.
	total := c.Memory.Value()
	return total/100*(100-headroom) + total%100*(100-headroom)/100
}

// AllocationSettings control the allocator loop.
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || !has(self.solverTimeLimit) || !self.interval.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || !self.solverTimeLimit.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self.solverTimeLimit) < duration(self.interval)",fieldPath=".solverTimeLimit",message="solverTimeLimit must be shorter than allocation.interval"
type AllocationSettings struct {
	// interval between allocations (a duration such as 30s, at least 5s). A change of a
	// TenantSLO or of the cluster also triggers one.
	// +kubebuilder:validation:Type=string
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$')",messageExpression="'allocation.interval ' + self + ' is not a duration: write numbers of at most 5 digits with units ns, us, ms, s, m or h, e.g. 30s, 1m30s or 800us'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) >= duration('5s')",messageExpression="'allocation.interval ' + self + ' is below the minimum 5s'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) <= duration('24h')",messageExpression="'allocation.interval ' + self + ' is above the maximum 24h'"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// policy is the allocation algorithm.
	// +optional
	// +kubebuilder:default=optimal
	Policy AllocationPolicy `json:"policy,omitempty"`

	// solverTimeLimit bounds one solve (policy optimal); a timed-out solve keeps its best plan
	// or falls back to greedy. Must be shorter than interval.
	// +kubebuilder:validation:Type=string
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$')",messageExpression="'allocation.solverTimeLimit ' + self + ' is not a duration: write numbers of at most 5 digits with units ns, us, ms, s, m or h, e.g. 30s, 1m30s or 800us'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) > duration('0s')",messageExpression="'allocation.solverTimeLimit ' + self + ' is not a positive duration'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) <= duration('1h')",messageExpression="'allocation.solverTimeLimit ' + self + ' is above the maximum 1h'"
	SolverTimeLimit *metav1.Duration `json:"solverTimeLimit,omitempty"`

	// maxChurnPercent caps how much partition memory one allocation may move, as a percent of
	// the cluster's partitionable memory (sum over tenants and nodes of |new - old| / 2).
	// Moving memory empties caches, so large moves happen over several intervals.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=25
	MaxChurnPercent int32 `json:"maxChurnPercent,omitempty"`
}

// IntervalOrDefault returns interval, or DefaultAllocationInterval when unset.
func (a *AllocationSettings) IntervalOrDefault() time.Duration {
	if a.Interval == nil {
		return DefaultAllocationInterval
	}
	return a.Interval.Duration
}

// SolverTimeLimitOrDefault returns solverTimeLimit, or DefaultSolverTimeLimit when unset.
func (a *AllocationSettings) SolverTimeLimitOrDefault() time.Duration {
	if a.SolverTimeLimit == nil {
		return DefaultSolverTimeLimit
	}
	return a.SolverTimeLimit.Duration
}

// MonitoringSettings say where per-tenant metrics come from.
// +kubebuilder:validation:XValidation:rule="!has(self.prometheusHTTPConfig) || (has(self.prometheusURL) && size(self.prometheusURL) > 0)",fieldPath=".prometheusHTTPConfig",message="monitoring.prometheusHTTPConfig needs monitoring.prometheusURL: the Secret's credentials are for the cluster's own Prometheus, not the operator's"
type MonitoringSettings struct {
	// prometheusURL is the Prometheus HTTP API the allocator queries (http or https).
	// Empty: the operator's --prometheus-url flag. Another URL is queried with the credentials
	// of prometheusHTTPConfig, or none: never with the operator's.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^\\\\s]+$')",messageExpression="'monitoring.prometheusURL ' + self + ' is not an http:// or https:// URL without spaces'"
	PrometheusURL string `json:"prometheusURL,omitempty"`

	// prometheusHTTPConfig names a Secret in the CacheCluster's namespace holding the HTTP
	// client configuration (credentials, TLS, headers) for prometheusURL, in place of the
	// operator's --prometheus-http-config. Requires prometheusURL.
	// +optional
	PrometheusHTTPConfig *PrometheusHTTPConfigSecret `json:"prometheusHTTPConfig,omitempty"`

	// serviceMonitor makes the operator create a prometheus-operator ServiceMonitor that
	// scrapes every sidecar.
	// +optional
	ServiceMonitor ServiceMonitorSettings `json:"serviceMonitor,omitempty"`

	// prometheusRule makes the operator create a prometheus-operator PrometheusRule with the
	// cluster's alerts (SLO missed, tenant throttled, plan not applied).
	// +optional
	PrometheusRule PrometheusRuleSettings `json:"prometheusRule,omitempty"`

	// sidecarMetrics says how the sidecars serve /metrics. Secure (the default): HTTPS with a
	// certificate from the cluster's CA (Secret <cluster>-metrics-tls), to bearer tokens the
	// API server authenticates and authorizes to get /metrics (the chart's metrics-reader
	// ClusterRole). Insecure: plain HTTP to anyone, for a migration while the scraper is not
	// yet given a token and the CA.
	// +optional
	// +kubebuilder:default=Secure
	// +kubebuilder:validation:Enum=Secure;Insecure
	SidecarMetrics SidecarMetricsAccess `json:"sidecarMetrics,omitempty"`
}

// SidecarMetricsAccess is how the sidecars serve their metrics.
type SidecarMetricsAccess string

// The values of monitoring.sidecarMetrics.
const (
	SidecarMetricsSecure   SidecarMetricsAccess = "Secure"
	SidecarMetricsInsecure SidecarMetricsAccess = "Insecure"
)

// SidecarMetricsSecure reports whether the sidecars serve their metrics over HTTPS to
// authorized scrapers only: unless sidecarMetrics says Insecure (empty is the default, Secure,
// where the API server did not default it: a cluster without spec.monitoring).
func (m *MonitoringSettings) SidecarMetricsSecure() bool {
	return m.SidecarMetrics != SidecarMetricsInsecure
}

// DefaultPrometheusHTTPConfigKey is the Secret key read when prometheusHTTPConfig.key is empty.
const DefaultPrometheusHTTPConfigKey = "http-config.yaml"

// PrometheusHTTPConfigSecret is a key of a Secret in the CacheCluster's namespace holding
// prometheus/common's HTTP client configuration (authorization, basic_auth, oauth2,
// tls_config, http_headers, proxy_url). Credentials are inline or name other keys of the same
// Secret through the *_ref fields (password_ref, credentials_ref, ca_ref, cert_ref, key_ref,
// client_secret_ref); *_file fields are refused, as they would read the operator's own files.
type PrometheusHTTPConfigSecret struct {
	// secretName is the Secret's name, in the CacheCluster's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'monitoring.prometheusHTTPConfig.secretName ' + self + ' is not a Secret name: lower-case letters, digits, - and ., starting and ending with a letter or digit'"
	SecretName string `json:"secretName"`

	// key of the Secret that holds the configuration (YAML).
	// +optional
	// +kubebuilder:default="http-config.yaml"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",messageExpression="'monitoring.prometheusHTTPConfig.key ' + self + ' is not a Secret key: letters, digits, -, _ and .'"
	Key string `json:"key,omitempty"`
}

// KeyOrDefault returns key, or DefaultPrometheusHTTPConfigKey when empty.
func (s *PrometheusHTTPConfigSecret) KeyOrDefault() string {
	if s.Key == "" {
		return DefaultPrometheusHTTPConfigKey
	}
	return s.Key
}

// ServiceMonitorSettings toggle and label the ServiceMonitor.
type ServiceMonitorSettings struct {
	// enabled creates the ServiceMonitor (needs the prometheus-operator CRDs).
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// interval between scrapes.
	// +kubebuilder:validation:Type=string
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$')",messageExpression="'serviceMonitor.interval ' + self + ' is not a duration: write numbers of at most 5 digits with units ns, us, ms, s, m or h, e.g. 30s, 1m30s or 800us'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) >= duration('1s')",messageExpression="'serviceMonitor.interval ' + self + ' is below the minimum 1s'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) <= duration('1h')",messageExpression="'serviceMonitor.interval ' + self + ' is above the maximum 1h'"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// labels added to the ServiceMonitor so a Prometheus' serviceMonitorSelector picks it up.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",messageExpression="'monitoring.serviceMonitor.labels key ' + self.filter(k, !(size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')))[0] + ' is not a label key: an optional DNS subdomain prefix and /, then at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric'"
	Labels map[string]LabelValue `json:"labels,omitempty"`
}

// PrometheusRuleSettings toggle and label the PrometheusRule.
type PrometheusRuleSettings struct {
	// enabled creates the PrometheusRule (needs the prometheus-operator CRDs).
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// labels added to the PrometheusRule so a Prometheus' ruleSelector picks it up.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",messageExpression="'monitoring.prometheusRule.labels key ' + self.filter(k, !(size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')))[0] + ' is not a label key: an optional DNS subdomain prefix and /, then at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric'"
	Labels map[string]LabelValue `json:"labels,omitempty"`
}

// MissRatioCurveSettings tune the sampled miss-ratio curve each sidecar keeps per partition
// (spatially hashed sampling, SHARDS). They bound both the sidecar's memory and the number of
// Prometheus series per partition.
type MissRatioCurveSettings struct {
	// samplingRate is the initial fraction of keys tracked, a decimal in (0, 1], e.g. "0.01"
	// (1%); the sidecar lowers it by itself once maxTrackedKeys are tracked.
	// +optional
	// +kubebuilder:default="0.1"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?$')",messageExpression="'missRatioCurve.samplingRate ' + self + ' is not a decimal: write digits with an optional fraction, without sign, exponent or %, e.g. 0.01'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?$') || (double(self) > 0.0 && double(self) <= 1.0)",messageExpression="'missRatioCurve.samplingRate ' + self + ' must be a decimal in (0, 1], e.g. 0.01'"
	SamplingRate string `json:"samplingRate,omitempty"`

	// maxTrackedKeys caps the sampled keys per partition, about 112 bytes of sidecar memory
	// each; the sampling rate is lowered adaptively when a partition would track more
	// (fixed-size SHARDS).
	// +optional
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=1048576
	// +kubebuilder:default=8192
	MaxTrackedKeys int32 `json:"maxTrackedKeys,omitempty"`

	// curvePoints is how many cache sizes each curve is reported at (one Prometheus series
	// each), on a grid around the partition's size and its tenant's footprint; the
	// allocator's size levels come from these points.
	// +optional
	// +kubebuilder:validation:Minimum=3
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=16
	CurvePoints int32 `json:"curvePoints,omitempty"`
}

// Rate returns samplingRate as a number in (0, 1]; DefaultMRCSamplingRate when unset.
func (m *MissRatioCurveSettings) Rate() (float64, error) {
	s := m.SamplingRate
	if s == "" {
		s = DefaultMRCSamplingRate
	}
	return parseDecimalIn("missRatioCurve.samplingRate", s, ratioRange)
}

// CacheClusterStatus is what the operator observed and decided for the cluster.
type CacheClusterStatus struct {
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, Progressing, Degraded, PlanApplied, MetricsAvailable, MonitoringReady,
	// GuaranteesFit.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// nodeCount is how many nodes the cluster currently runs on.
	// +optional
	NodeCount int32 `json:"nodeCount,omitempty"`

	// nodes lists per-node capacity, allocation and load (at most 1000 entries; counts above
	// stay exact when the list is capped).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Nodes []NodeStatus `json:"nodes,omitempty"`

	// lastPlan summarizes the most recent allocation.
	// +optional
	LastPlan *PlanSummary `json:"lastPlan,omitempty"`

	// tenants counts the TenantSLOs that reference this cluster.
	// +optional
	Tenants TenantCounts `json:"tenants,omitempty"`
}

// NodeStatus is one node's view in CacheCluster status.
type NodeStatus struct {
	// name of the Node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// capacity partitions may use on this node (after headroom).
	// +optional
	Capacity NodeResources `json:"capacity,omitempty"`

	// allocated is the sum over this node's partitions of planned memory and limits.
	// +optional
	Allocated NodeResources `json:"allocated,omitempty"`

	// observed is measured: memory used by the engines, bytes/s and ops/s served.
	// +optional
	Observed NodeResources `json:"observed,omitempty"`

	// partitions is how many tenant partitions the node runs.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// planGeneration of the node's CacheNodePlan, and the generation its sidecar applied.
	// +optional
	PlanGeneration int64 `json:"planGeneration,omitempty"`
	// +optional
	AppliedGeneration int64 `json:"appliedGeneration,omitempty"`
}

// NodeResources is memory (bytes), bandwidth (bytes/s) and request rate (ops/s) on one node.
type NodeResources struct {
	// memory in bytes.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'memory ' + self + ' is not a quantity of bytes: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'memory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) <= 0",messageExpression="'memory ' + self + ' is above the maximum 8Pi of a status'"
	Memory resource.Quantity `json:"memory,omitempty"`
	// bandwidth in bytes per second.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'bandwidth ' + self + ' is not a quantity of bytes per second: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'bandwidth ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) <= 0",messageExpression="'bandwidth ' + self + ' is above the maximum 8P of a status'"
	Bandwidth resource.Quantity `json:"bandwidth,omitempty"`
	// opsPerSecond in requests per second.
	// +optional
	OpsPerSecond int64 `json:"opsPerSecond,omitempty"`
}

// PlanSummary describes one allocation run.
type PlanSummary struct {
	// time the allocation finished.
	// +required
	Time metav1.Time `json:"time"`

	// policy that produced the plan.
	// +required
	Policy AllocationPolicy `json:"policy"`

	// solverStatus: Optimal, Feasible, Infeasible, Fallback or NotUsed (see SolverStatus*).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SolverStatus string `json:"solverStatus,omitempty"`

	// objective value of the plan as a decimal string (may be negative), in the policy's units
	// (policy optimal: expected hits per second over all tenants).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^-?[0-9]+([.][0-9]+)?$`
	Objective string `json:"objective,omitempty"`

	// duration of the whole allocation (metrics, curves, solve).
	// +optional
	Duration metav1.Duration `json:"duration,omitempty"`

	// movedMemory is the partition memory this plan moved between tenants (bytes).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'lastPlan.movedMemory ' + self + ' is not a quantity of bytes: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'lastPlan.movedMemory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) <= 0",messageExpression="'lastPlan.movedMemory ' + self + ' is above the maximum 8Pi of a status'"
	MovedMemory resource.Quantity `json:"movedMemory,omitempty"`

	// message explains a fallback or an infeasible model.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// TenantCounts count the TenantSLOs of a cluster.
type TenantCounts struct {
	// total TenantSLOs referencing the cluster.
	// +optional
	Total int32 `json:"total,omitempty"`
	// admitted tenants (Admitted=True).
	// +optional
	Admitted int32 `json:"admitted,omitempty"`
	// meetingSLO tenants (SLOMet=True).
	// +optional
	MeetingSLO int32 `json:"meetingSLO,omitempty"`
	// throttled tenants (Throttled=True).
	// +optional
	Throttled int32 `json:"throttled,omitempty"`
}

// CacheCluster is a fleet of cache nodes shared by tenants, each with its own partition and
// limits on every node it uses.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ccl,categories=cacheqos
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodeCount`
// +kubebuilder:printcolumn:name="Tenants",type=integer,JSONPath=`.status.tenants.admitted`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.allocation.policy`,priority=1
// +kubebuilder:printcolumn:name="Meeting SLO",type=integer,JSONPath=`.status.tenants.meetingSLO`,priority=1
// +kubebuilder:printcolumn:name="Solver",type=string,JSONPath=`.status.lastPlan.solverStatus`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CacheCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheClusterSpec `json:"spec"`
	// +optional
	Status CacheClusterStatus `json:"status,omitempty"`
}

// CacheClusterList is a list of CacheClusters.
//
// +kubebuilder:object:root=true
type CacheClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CacheCluster{}, &CacheClusterList{})
}
