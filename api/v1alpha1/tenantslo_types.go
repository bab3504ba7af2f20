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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults of TenantSLO fields, mirrored from the schema.
const (
	DefaultTenantPriority = 100
	DefaultMinNodes       = 1
	// MaxTenantNodes is the most nodes one tenant can spread over (routes per partition plan).
	MaxTenantNodes = 256
)

// TenantClass says whether a tenant's objective is a promise or a wish.
// +kubebuilder:validation:Enum=strict;bestEffort
type TenantClass string

const (
	// ClassStrict tenants are admitted only when their guarantees fit, and the allocator meets
	// their objectives first (weighted by priority).
	ClassStrict TenantClass = "strict"
	// ClassBestEffort tenants get no guarantees: leftover memory and bandwidth, shared by
	// expected benefit.
	ClassBestEffort TenantClass = "bestEffort"
)

// LatencyStatistic is the statistic a latency objective constrains.
// +kubebuilder:validation:Enum=mean;p99
type LatencyStatistic string

const (
	// LatencyMean constrains the mean request latency (the quantity the allocator's latency
	// model predicts directly from hit ratio and hit/miss service times).
	LatencyMean LatencyStatistic = "mean"
	// LatencyP99 constrains the 99th percentile of request latency.
	LatencyP99 LatencyStatistic = "p99"
)

// TenantSLOSpec is one tenant's objective and limits on one CacheCluster.
// +kubebuilder:validation:XValidation:rule="!has(self.class) || self.class != 'bestEffort' || !has(self.bandwidth) || !has(self.bandwidth.guaranteed)",fieldPath=".bandwidth.guaranteed",message="bandwidth.guaranteed is only allowed for class strict; bestEffort tenants get no guarantees"
// +kubebuilder:validation:XValidation:rule="!has(self.class) || self.class != 'bestEffort' || !has(self.memory) || !has(self.memory.min)",fieldPath=".memory.min",message="memory.min is only allowed for class strict; bestEffort tenants get no guarantees"
type TenantSLOSpec struct {
	// clusterRef names the CacheCluster that serves the tenant. Immutable: moving a tenant
	// means a new TenantSLO (its cache starts empty either way). Its namespace may be written
	// out later, as the namespace it resolves to (status.clusterNamespace).
	// +required
	ClusterRef ClusterReference `json:"clusterRef"`

	// objective is what the tenant needs: exactly one of hitRatio, latency, maxDegradation.
	// +required
	Objective Objective `json:"objective"`

	// memory bounds the tenant's total partition memory over all nodes.
	// +optional
	Memory MemoryRange `json:"memory,omitempty"`

	// bandwidth bounds the tenant's traffic over all nodes, bytes per second.
	// +optional
	Bandwidth BandwidthRange `json:"bandwidth,omitempty"`

	// opsLimit caps the tenant's requests per second over all nodes. Unset: no cap.
	// +optional
	// +kubebuilder:validation:Minimum=1
	OpsLimit *int64 `json:"opsLimit,omitempty"`

	// class: strict (guarantees are admitted and honoured first) or bestEffort.
	// +optional
	// +kubebuilder:default=strict
	Class TenantClass `json:"class,omitempty"`

	// priority weighs this tenant against other strict tenants when not every objective can be
	// met (1-1000, higher wins).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=100
	Priority int32 `json:"priority,omitempty"`

	// placement bounds how many nodes the tenant's partitions spread over.
	// +optional
	// +kubebuilder:default={}
	Placement Placement `json:"placement,omitempty"`

	// evictionPolicy of the tenant's partitions: lru or lfu (lfu needs engine redis).
	// +optional
	// +kubebuilder:default=lru
	EvictionPolicy EvictionPolicy `json:"evictionPolicy,omitempty"`
}

// ClusterReference points at a CacheCluster, usually in the platform team's namespace.
type ClusterReference struct {
	// name of the CacheCluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'clusterRef.name ' + self + ' is not a CacheCluster name: lower-case letters, digits, - and ., each dot-separated part starting and ending with a letter or digit'"
	Name string `json:"name"`

	// namespace of the CacheCluster. Empty: the TenantSLO's own namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",messageExpression="'clusterRef.namespace ' + self + ' is not a namespace name: lower-case letters, digits and -, starting and ending with a letter or digit'"
	Namespace string `json:"namespace,omitempty"`
}

// Objective is exactly one of the supported service-level objectives.
// +kubebuilder:validation:XValidation:rule="[has(self.hitRatio), has(self.latency), has(self.maxDegradation)].filter(x, x).size() == 1",message="exactly one of objective.hitRatio, objective.latency or objective.maxDegradation must be set"
type Objective struct {
	// hitRatio: the fraction of reads served from cache, over all of the tenant's partitions.
	// +optional
	HitRatio *HitRatioObjective `json:"hitRatio,omitempty"`

	// latency: the tenant's request latency as seen by the sidecar proxy.
	// +optional
	Latency *LatencyObjective `json:"latency,omitempty"`

	// maxDegradation: how much worse than a fair share (an equal split of the cluster) the
	// tenant's latency may be — Maxperf's delta.
	// +optional
	MaxDegradation *MaxDegradationObjective `json:"maxDegradation,omitempty"`
}

// HitRatioObjective asks for at least a given hit ratio.
type HitRatioObjective struct {
	// target hit ratio, a decimal in (0, 1] such as "0.95".
	// +required
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?$')",messageExpression="'objective.hitRatio.target ' + self + ' is not a decimal: write digits with an optional fraction, without sign, exponent or %, e.g. 0.95'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?$') || (double(self) > 0.0 && double(self) <= 1.0)",messageExpression="'objective.hitRatio.target ' + self + ' must be a decimal in (0, 1], e.g. 0.95'"
	Ratio string `json:"target"`
}

// Summary is the objective in one phrase: hit>=0.95, p99<=2ms, mean<=800µs or deg<=1.05x
// (the statistic defaults to mean, as the schema does).
func (o *Objective) Summary() string {
	switch {
	case o.HitRatio != nil:
		return "hit>=" + o.HitRatio.Ratio
	case o.Latency != nil:
		statistic := o.Latency.Statistic
		if statistic == "" {
			statistic = LatencyMean
		}
		return string(statistic) + "<=" + o.Latency.Target.Duration.String()
	case o.MaxDegradation != nil:
		return "deg<=" + o.MaxDegradation.Factor + "x"
	}
	return ""
}

// Target returns the target hit ratio as a number in (0, 1].
func (o *HitRatioObjective) Target() (float64, error) {
	return parseDecimalIn("objective.hitRatio.target", o.Ratio, ratioRange)
}

// LatencyObjective asks for at most a given latency.
type LatencyObjective struct {
	// target latency, a positive duration such as 800us or 2ms.
	// +kubebuilder:validation:Type=string
	// +required
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$')",messageExpression="'latency.target ' + self + ' is not a duration: write numbers of at most 5 digits with units ns, us, ms, s, m or h, e.g. 30s, 1m30s or 800us'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) > duration('0s')",messageExpression="'latency.target ' + self + ' is not a positive duration'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') || duration(self) <= duration('1m')",messageExpression="'latency.target ' + self + ' is above the maximum 1m'"
	Target metav1.Duration `json:"target"`

	// statistic the target applies to: mean or p99.
	// +optional
	// +kubebuilder:default=mean
	Statistic LatencyStatistic `json:"statistic,omitempty"`
}

// MaxDegradationObjective bounds the tenant's latency relative to what it would see with a
// fair share: latency <= target * latency at an equal split of the cluster.
type MaxDegradationObjective struct {
	// target factor, a decimal in [1, 10] such as "1.05" (at most 5% worse than fair share).
	// +required
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?$')",messageExpression="'objective.maxDegradation.target ' + self + ' is not a decimal: write digits with an optional fraction, without sign, exponent or %, e.g. 1.05'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?$') || (double(self) >= 1.0 && double(self) <= 10.0)",messageExpression="'objective.maxDegradation.target ' + self + ' must be a decimal in [1, 10], e.g. 1.05'"
	Factor string `json:"target"`
}

// Target returns the degradation factor as a number in [1, MaxDegradationLimit].
func (o *MaxDegradationObjective) Target() (float64, error) {
	return parseDecimalIn("objective.maxDegradation.target", o.Factor, degradationRange)
}

// MemoryRange bounds a tenant's total memory (bytes, over all nodes).
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || !self.min.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || !self.max.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self.min).compareTo(quantity(self.max)) <= 0",fieldPath=".min",message="memory.min must be less than or equal to memory.max"
type MemoryRange struct {
	// min memory the tenant is guaranteed (strict class only); admission fails when it does
	// not fit. Unset: no floor.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'memory.min ' + self + ' is not a quantity of bytes: ' + (self.matches('^[0-9.]+[kKMGTPE]i?[bB]$') ? 'drop the B: 10G or 10Gi, not 10GB' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 8Gi')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'memory.min ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('4Mi')) >= 0",messageExpression="'memory.min ' + self + ' is below the minimum 4Mi (the smallest partition an engine runs)'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",messageExpression="'memory.min ' + self + ' is above the maximum 1Pi'"
	Min *resource.Quantity `json:"min,omitempty"`

	// max memory the tenant may get. Unset: no ceiling beyond the cluster's capacity.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'memory.max ' + self + ' is not a quantity of bytes: ' + (self.matches('^[0-9.]+[kKMGTPE]i?[bB]$') ? 'drop the B: 10G or 10Gi, not 10GB' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 8Gi')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'memory.max ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('4Mi')) >= 0",messageExpression="'memory.max ' + self + ' is below the minimum 4Mi (the smallest partition an engine runs)'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",messageExpression="'memory.max ' + self + ' is above the maximum 1Pi'"
	Max *resource.Quantity `json:"max,omitempty"`
}

// BandwidthRange bounds a tenant's traffic in bytes per second over all nodes.
// +kubebuilder:validation:XValidation:rule="!has(self.guaranteed) || !has(self.limit) || !self.guaranteed.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || !self.limit.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self.guaranteed).compareTo(quantity(self.limit)) <= 0",fieldPath=".guaranteed",message="bandwidth.guaranteed must be less than or equal to bandwidth.limit"
type BandwidthRange struct {
	// guaranteed bytes per second (strict class only): admission reserves it on the nodes
	// that hold the tenant, and others are throttled first when a node is saturated.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'bandwidth.guaranteed ' + self + ' is not a quantity of bytes per second: ' + (self.matches('^[0-9.]+[kKMGTPE]?i?(bps|Bps|bit/s|b/s|B/s)$') ? 'write bytes per second: 12.5M for 100 Mbit/s, not 100Mbps' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 125M')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'bandwidth.guaranteed ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1k')) >= 0",messageExpression="'bandwidth.guaranteed ' + self + ' is below the minimum 1k bytes per second'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1P')) <= 0",messageExpression="'bandwidth.guaranteed ' + self + ' is above the maximum 1P'"
	Guaranteed *resource.Quantity `json:"guaranteed,omitempty"`

	// limit in bytes per second; requests above it wait in the sidecar (held, not dropped).
	// Unset: no cap beyond the nodes' capacity.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'bandwidth.limit ' + self + ' is not a quantity of bytes per second: ' + (self.matches('^[0-9.]+[kKMGTPE]?i?(bps|Bps|bit/s|b/s|B/s)$') ? 'write bytes per second: 12.5M for 100 Mbit/s, not 100Mbps' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 125M')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'bandwidth.limit ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1k')) >= 0",messageExpression="'bandwidth.limit ' + self + ' is below the minimum 1k bytes per second'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1P')) <= 0",messageExpression="'bandwidth.limit ' + self + ' is above the maximum 1P'"
	Limit *resource.Quantity `json:"limit,omitempty"`
}

// Placement bounds how many nodes hold the tenant's partitions. Keys are spread over the
// partitions in proportion to their size.
// +kubebuilder:validation:XValidation:rule="!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",fieldPath=".minNodes",message="placement.minNodes must be less than or equal to placement.maxNodes"
type Placement struct {
	// minNodes the tenant spreads over (more nodes: less lost on a node failure, and more
	// bandwidth).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +kubebuilder:default=1
	MinNodes int32 `json:"minNodes,omitempty"`

	// maxNodes the tenant spreads over. Unset: as many as the allocator finds useful (at most 256).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	MaxNodes int32 `json:"maxNodes,omitempty"`
}

// TenantSLOStatus is the tenant's allocation and what was observed.
type TenantSLOStatus struct {
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Admitted, SLOMet, Throttled, Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// allocation is what the current plan gives the tenant.
	// +optional
	Allocation *TenantAllocation `json:"allocation,omitempty"`

	// observed is the tenant's measured traffic and performance.
	// +optional
	Observed *TenantObservation `json:"observed,omitempty"`

	// predictedHitRatio is the hit ratio the tenant's miss-ratio curve predicts at the
	// allocated memory, a decimal in [0, 1].
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+([.][0-9]+)?$`
	PredictedHitRatio string `json:"predictedHitRatio,omitempty"`

	// credentialsSecret names the Secret, in the TenantSLO's namespace, that holds the
	// tenant's username and password for the cache endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// endpoint is the host:port clients connect to (the cluster's Service in front of the
	// sidecars; any node routes keys to the node that holds them).
	// +optional
	// +kubebuilder:validation:MaxLength=261
	Endpoint string `json:"endpoint,omitempty"`

	// clusterNamespace is the namespace spec.clusterRef resolves to (its own, or the TenantSLO's
	// when it names none). Once the operator wrote it, clusterRef.namespace may be set to it:
	// the same cluster, written out.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ClusterNamespace string `json:"clusterNamespace,omitempty"`

	// objective is spec.objective in one phrase, shown by `kubectl get`: hit>=0.95,
	// p99<=2ms, mean<=800µs or deg<=1.05x.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Objective string `json:"objective,omitempty"`
}

// TenantAllocation is a tenant's share of the cluster under the current plan.
type TenantAllocation struct {
	// memory summed over the tenant's partitions (bytes).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'allocation.memory ' + self + ' is not a quantity of bytes: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'allocation.memory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) <= 0",messageExpression="'allocation.memory ' + self + ' is above the maximum 8Pi of a status'"
	Memory resource.Quantity `json:"memory,omitempty"`

	// bandwidthLimit summed over nodes (bytes/s). Unset: unlimited.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'allocation.bandwidthLimit ' + self + ' is not a quantity of bytes per second: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'allocation.bandwidthLimit ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) <= 0",messageExpression="'allocation.bandwidthLimit ' + self + ' is above the maximum 8P of a status'"
	BandwidthLimit *resource.Quantity `json:"bandwidthLimit,omitempty"`

	// opsLimit summed over nodes (ops/s). Unset: unlimited.
	// +optional
	OpsLimit *int64 `json:"opsLimit,omitempty"`

	// nodeCount is how many nodes hold a partition of the tenant.
	// +optional
	NodeCount int32 `json:"nodeCount,omitempty"`

	// nodes lists the tenant's partitions.
	// +optional
	// +listType=map
	// +listMapKey=nodeName
	// +kubebuilder:validation:MaxItems=256
	Nodes []NodeAllocation `json:"nodes,omitempty"`

	// planGeneration of the allocation that produced these numbers.
	// +optional
	PlanGeneration int64 `json:"planGeneration,omitempty"`

	// decision says why the tenant's memory is what the last allocation made it: Placed (it
	// had none), Kept (unchanged), Moved (as much memory, but some of it on other nodes,
	// where its keys start cold), Protected (it met its objective and keeps at least the
	// memory that met it, or was just given memory for its objective and keeps it until that
	// memory is measured warm), Learning (a strict tenant whose miss-ratio curve is not learned yet
	// holds a fair share), RaisedForTarget (more memory to reach its target), Raised (spare
	// memory), LoweredForPriority (a higher-priority objective needed its memory), Lowered
	// (the memory meets another objective or earns more hits elsewhere). The Allocated
	// condition's message gives the numbers.
	// +optional
	// +kubebuilder:validation:Enum=Placed;Kept;Moved;Protected;Learning;RaisedForTarget;Raised;LoweredForPriority;Lowered
	Decision string `json:"decision,omitempty"`

	// isolated: under policy lacs the tenant is an elephant (its traffic exceeds a 1/K share
	// of the cluster): its cache is revoked and its bandwidth and ops are throttled to 1/K of
	// every node, so that it cannot slow the other tenants down.
	// +optional
	Isolated bool `json:"isolated,omitempty"`

	// demand of an isolated tenant: its traffic per node as measured before its limits held
	// it back. While throttled, its served traffic is its limit; the allocator plans it by
	// this demand instead, also after the operator restarts.
	// +optional
	// +listType=map
	// +listMapKey=nodeName
	// +kubebuilder:validation:MaxItems=256
	Demand []NodeTraffic `json:"demand,omitempty"`
}

// NodeTraffic is a tenant's traffic arriving at one node.
type NodeTraffic struct {
	// nodeName of the Node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// opsPerSecond arriving.
	// +optional
	OpsPerSecond int64 `json:"opsPerSecond,omitempty"`

	// bytesPerSecond arriving (requests plus responses).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'demand.bytesPerSecond ' + self + ' is not a quantity of bytes per second: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'demand.bytesPerSecond ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) <= 0",messageExpression="'demand.bytesPerSecond ' + self + ' is above the maximum 8P of a status'"
	BytesPerSecond resource.Quantity `json:"bytesPerSecond,omitempty"`
}

// NodeAllocation is the tenant's partition on one node.
type NodeAllocation struct {
	// nodeName of the Node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// memory of the partition (bytes).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'nodes.memory ' + self + ' is not a quantity of bytes: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'nodes.memory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8Pi')) <= 0",messageExpression="'nodes.memory ' + self + ' is above the maximum 8Pi of a status'"
	Memory resource.Quantity `json:"memory,omitempty"`

	// bandwidthLimit on this node (bytes/s). Unset: unlimited.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'nodes.bandwidthLimit ' + self + ' is not a quantity of bytes per second: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'nodes.bandwidthLimit ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) <= 0",messageExpression="'nodes.bandwidthLimit ' + self + ' is above the maximum 8P of a status'"
	BandwidthLimit *resource.Quantity `json:"bandwidthLimit,omitempty"`

	// opsLimit on this node (ops/s). Unset: unlimited.
	// +optional
	OpsLimit *int64 `json:"opsLimit,omitempty"`
}

// TenantObservation is measured over the last allocation interval.
type TenantObservation struct {
	// time the measurement window ended in which these values were first observed (unchanged
	// values keep it, so an unchanged observation does not rewrite the status).
	// +optional
	Time metav1.Time `json:"time,omitempty"`

	// objectiveValue is the measured value of the metric the objective constrains, in the
	// target's unit: a decimal ratio (hitRatio), a duration (latency), or a decimal factor
	// (maxDegradation). Shown next to the target in `kubectl get tenantslo`.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	ObjectiveValue string `json:"objectiveValue,omitempty"`

	// hitRatio of reads, a decimal in [0, 1].
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+([.][0-9]+)?$`
	HitRatio string `json:"hitRatio,omitempty"`

	// meanLatency of requests at the sidecar proxy.
	// +optional
	MeanLatency *metav1.Duration `json:"meanLatency,omitempty"`

	// p99Latency of requests at the sidecar proxy.
	// +optional
	P99Latency *metav1.Duration `json:"p99Latency,omitempty"`

	// opsPerSecond served.
	// +optional
	OpsPerSecond int64 `json:"opsPerSecond,omitempty"`

	// bytesPerSecond served (requests plus responses).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'observed.bytesPerSecond ' + self + ' is not a quantity of bytes per second: write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'observed.bytesPerSecond ' + self + ' is not a whole number of bytes per second: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('8P')) <= 0",messageExpression="'observed.bytesPerSecond ' + self + ' is above the maximum 8P of a status'"
	BytesPerSecond resource.Quantity `json:"bytesPerSecond,omitempty"`
}

// TenantSLO is one tenant's service-level objective on a shared CacheCluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=tslo,categories=cacheqos
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Objective",type=string,JSONPath=`.status.objective`
// +kubebuilder:printcolumn:name="Observed",type=string,JSONPath=`.status.observed.objectiveValue`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.allocation.memory`
// +kubebuilder:printcolumn:name="Curve",type=string,JSONPath=`.status.conditions[?(@.type=="CurveAccurate")].reason`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.allocation.nodeCount`,priority=1
// +kubebuilder:printcolumn:name="SLO",type=string,JSONPath=`.status.conditions[?(@.type=="SLOMet")].status`,priority=1
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`,priority=1
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.class`,priority=1
// +kubebuilder:printcolumn:name="Admitted",type=string,JSONPath=`.status.conditions[?(@.type=="Admitted")].reason`,priority=1
// +kubebuilder:printcolumn:name="Throttled",type=string,JSONPath=`.status.conditions[?(@.type=="Throttled")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec.clusterRef == oldSelf.spec.clusterRef || (self.spec.clusterRef.name == oldSelf.spec.clusterRef.name && !has(oldSelf.spec.clusterRef.__namespace__) && has(self.spec.clusterRef.__namespace__) && has(oldSelf.status) && has(oldSelf.status.clusterNamespace) && self.spec.clusterRef.__namespace__ == oldSelf.status.clusterNamespace)",fieldPath=".spec.clusterRef",message="clusterRef is immutable; create a new TenantSLO to move to another cluster (its namespace may only be written out as the one it resolves to, status.clusterNamespace, once the operator has set that)"
type TenantSLO struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TenantSLOSpec `json:"spec"`
	// +optional
	Status TenantSLOStatus `json:"status,omitempty"`
}

// TenantID is the tenant's identity everywhere outside its namespace (CacheNodePlan
// partitions, metrics labels, credentials): "<namespace>/<name>".
func (t *TenantSLO) TenantID() string {
	return t.Namespace + "/" + t.Name
}

// ClusterKey resolves spec.clusterRef, whose empty namespace means the TenantSLO's own.
func (t *TenantSLO) ClusterKey() types.NamespacedName {
	ns := t.Spec.ClusterRef.Namespace
	if ns == "" {
		ns = t.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: t.Spec.ClusterRef.Name}
}

// Guarantees returns the memory (bytes) and bandwidth (bytes/s) admitting the tenant reserves:
// memory.min and bandwidth.guaranteed of a strict tenant, nothing for bestEffort.
func (t *TenantSLO) Guarantees() (memory, bandwidth int64) {
	if t.Spec.Class == ClassBestEffort {
		return 0, 0
	}
	if m := t.Spec.Memory.Min; m != nil {
		memory = m.Value()
	}
	if b := t.Spec.Bandwidth.Guaranteed; b != nil {
		bandwidth = b.Value()
	}
	return memory, bandwidth
}

// TenantSLOList is a list of TenantSLOs.
//
// +kubebuilder:object:root=true
type TenantSLOList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantSLO `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TenantSLO{}, &TenantSLOList{})
}
