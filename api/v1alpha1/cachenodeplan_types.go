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
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Bounds of a CacheNodePlan, so a plan always fits in one API object and its CEL rules stay
// within the API server's cost budget.
const (
	MaxPartitionsPerNode = 1024
	MaxRoutesPerTenant   = MaxTenantNodes
)

// PartitionState is a partition's lifecycle on a node, as the sidecar reports it.
// +kubebuilder:validation:Enum=Starting;Running;Resizing;Draining;Failed
type PartitionState string

const (
	// PartitionStarting: the engine process is being started.
	PartitionStarting PartitionState = "Starting"
	// PartitionRunning: serving at the planned size.
	PartitionRunning PartitionState = "Running"
	// PartitionResizing: the engine's memory limit is being changed live.
	PartitionResizing PartitionState = "Resizing"
	// PartitionDraining: the partition left the plan; its engine is being stopped.
	PartitionDraining PartitionState = "Draining"
	// PartitionFailed: the partition cannot run; message says why.
	PartitionFailed PartitionState = "Failed"
)

// CacheNodePlanSpec is everything one node's sidecar must enforce. The operator writes it; the
// sidecar only reads it and reports in status.
// +kubebuilder:validation:XValidation:rule="!has(self.partitionCount) || self.partitionCount == (has(self.partitions) ? size(self.partitions) : 0)",fieldPath=".partitionCount",message="partitionCount must equal the number of entries in partitions"
// +kubebuilder:validation:XValidation:rule="self.engine == 'redis' || !has(self.partitions) || self.partitions.all(p, p.evictionPolicy != 'lfu')",fieldPath=".partitions",message="evictionPolicy lfu needs engine redis: memcached has no LFU mode"
// +kubebuilder:validation:XValidation:rule="!has(self.partitions) || self.partitions.all(p, !p.memory.matches('^[1-9][0-9]*(Ki|Mi)?$') || quantity(p.memory).compareTo(quantity(self.engine == 'memcached' ? '8Mi' : '4Mi')) >= 0)",fieldPath=".partitions",messageExpression="'every partition of a ' + self.engine + ' plan needs at least ' + (self.engine == 'memcached' ? '8Mi' : '4Mi') + ', the smallest partition the engine runs'"
// +kubebuilder:validation:XValidation:rule="!has(self.partitions) || self.partitions.all(p, has(p.routes) && size(p.routes) > 0 && p.routes[0].nodeName == self.nodeName)",fieldPath=".partitions",messageExpression="'the routes of every partition must start with ' + self.nodeName + ', the node of the plan: its sidecar serves that route from the local engine'"
type CacheNodePlanSpec struct {
	// clusterName is the owning CacheCluster (same namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterName is immutable"
	ClusterName string `json:"clusterName"`

	// nodeName is the Node whose sidecar enforces the plan.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// engine of the cluster (copied so the sidecar needs no access to the CacheCluster).
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine is immutable"
	Engine Engine `json:"engine"`

	// planGeneration increases with every change of the plan; the sidecar reports the one it
	// applied in status.appliedGeneration. Never decreases.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="planGeneration must not decrease"
	PlanGeneration int64 `json:"planGeneration"`

	// credentialsSecret names a Secret in the plan's namespace with salted hashes of the
	// credentials of every tenant in the plan; the sidecar authenticates clients against it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// partitionCount is the number of partitions (shown by `kubectl get cachenodeplans`).
	// When set it must equal the length of partitions; SetPartitions keeps them in step.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PartitionCount *int32 `json:"partitionCount,omitempty"`

	// partitions the node must run, one per tenant.
	// +optional
	// +listType=map
	// +listMapKey=tenant
	// +kubebuilder:validation:MaxItems=1024
	Partitions []PartitionPlan `json:"partitions,omitempty"`

	// remoteTenants are the cluster's tenants with no partition on this node. Clients reach
	// any node's sidecar, so the sidecar authenticates them too and forwards every request by
	// the routes. A tenant is either here or in partitions, never both (the operator's
	// guarantee; the sidecar lets the partition win).
	// +optional
	// +listType=map
	// +listMapKey=tenant
	// +kubebuilder:validation:MaxItems=4096
	RemoteTenants []RemoteTenant `json:"remoteTenants,omitempty"`
}

// RemoteTenant is a tenant whose partitions are all on other nodes: only its routes.
type RemoteTenant struct {
	// tenant is the TenantSLO's ID, "<namespace>/<name>". The rule's pattern is a DNS label, /,
	// and a DNS subdomain written as alphanumeric runs joined by runs of - or by single dots:
	// the shortest form found, as CEL prices matches() by the pattern's length and 4096 remote
	// tenants of the longer usual form are over the budget.
	// +required
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+(-+[a-z0-9]+)*/[a-z0-9]+((-+|[.])[a-z0-9]+)*$')",messageExpression="'tenant ' + self + ' is not a tenant ID: the TenantSLO namespace/name'"
	Tenant string `json:"tenant"`

	// routes are the tenant's partitions on the nodes whose sidecar has an address.
	// +required
	// +listType=map
	// +listMapKey=nodeName
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:XValidation:rule="self.exists(r, r.weight > 0)",message="at least one route needs a positive weight, or no key has a partition"
	Routes []TenantRoute `json:"routes"`
}

// SetPartitions replaces the plan's partitions, sorted by tenant so that unchanged plans
// serialize identically (no spurious updates), and sets partitionCount to match.
func (s *CacheNodePlanSpec) SetPartitions(partitions []PartitionPlan) {
	sorted := append([]PartitionPlan(nil), partitions...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Tenant < sorted[j].Tenant })
	s.Partitions = sorted
	n := int32(len(sorted))
	s.PartitionCount = &n
}

// SetRemoteTenants replaces the plan's remote tenants, sorted by tenant as SetPartitions sorts
// partitions.
func (s *CacheNodePlanSpec) SetRemoteTenants(remote []RemoteTenant) {
	sorted := append([]RemoteTenant(nil), remote...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Tenant < sorted[j].Tenant })
	s.RemoteTenants = sorted
}

// PartitionPlan is one tenant's partition on the node.
type PartitionPlan struct {
	// tenant is the TenantSLO's ID, "<namespace>/<name>".
	// +required
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+(-+[a-z0-9]+)*/[a-z0-9]+((-+|[.])[a-z0-9]+)*$')",messageExpression="'tenant ' + self + ' is not a tenant ID: the TenantSLO namespace/name'"
	Tenant string `json:"tenant"`

	// memory limit of the partition's engine (bytes): a quantity string such as 1Gi.
	// PlanQuantityPattern through matches(), not quantity(): 1024 partitions of quantity()
	// exceed the CEL budget.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,15}$|^[1-9][0-9]{0,12}(Ki|k)$|^[1-9][0-9]{0,9}(Mi|M)$|^[1-9][0-9]{0,6}(Gi|G)$|^[1-9][0-9]{0,3}(Ti|T)$|^[1-9](Pi|P)$')",messageExpression="'memory ' + self + ' is not a plan quantity: a positive integer below 10Pi with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, and no fraction or exponent'"
	Memory resource.Quantity `json:"memory"`

	// evictionPolicy of the partition's engine.
	// +required
	EvictionPolicy EvictionPolicy `json:"evictionPolicy"`

	// bandwidthLimit of the tenant on this node (bytes/s), positive. Unset: unlimited.
	// PlanQuantityPattern, as for memory.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,15}$|^[1-9][0-9]{0,12}(Ki|k)$|^[1-9][0-9]{0,9}(Mi|M)$|^[1-9][0-9]{0,6}(Gi|G)$|^[1-9][0-9]{0,3}(Ti|T)$|^[1-9](Pi|P)$')",messageExpression="'bandwidthLimit ' + self + ' is not a plan quantity: a positive integer below 10Pi with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, and no fraction or exponent'"
	BandwidthLimit *resource.Quantity `json:"bandwidthLimit,omitempty"`

	// opsLimit of the tenant on this node (ops/s). Unset: unlimited.
	// +optional
	// +kubebuilder:validation:Minimum=1
	OpsLimit *int64 `json:"opsLimit,omitempty"`

	// routes are the tenant's partitions on all nodes, so the proxy can route each key to the
	// node that owns it (weighted rendezvous hashing). The first is the plan's own node (a
	// rule of CacheNodePlanSpec): checking the first route is within the CEL cost budget at
	// 1024 partitions, searching all 256 of them is not. The order of the others does not
	// matter.
	// +optional
	// +listType=map
	// +listMapKey=nodeName
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:XValidation:rule="self.exists(r, r.weight > 0)",message="at least one route needs a positive weight, or no key has a partition"
	Routes []TenantRoute `json:"routes,omitempty"`
}

// TenantRoute is one of a tenant's partitions, as seen by the proxies.
type TenantRoute struct {
	// nodeName holding the partition.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// host is the address of that node's sidecar: its pod IP (IPv4 or IPv6, without
	// brackets). For the plan's own node, which its sidecar serves locally and never dials,
	// it is the node name until that sidecar has an address. Host and port are separate
	// fields so that each is checked without a pattern or CEL: 1024 partitions of 256 routes
	// put any rule that reads a string over the CEL cost budget (85x for host:port), and a
	// pattern's message prints the pattern.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`

	// port is the sidecar's peer port on host.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// weight is the share of the tenant's keys this partition owns, proportional to its size.
	// 0 keeps the partition reachable while it drains but gives it no new keys.
	// +required
	// +kubebuilder:validation:Minimum=0
	Weight int32 `json:"weight"`
}

// Address is the route's host:port, as a dialer takes it ([host]:port for IPv6).
func (r TenantRoute) Address() string {
	return net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
}

// Validate checks what the schema does not, for the sidecar that dials the route (a rule
// reading every route's host is over the CEL cost budget): the host is an IP address or a
// DNS name, and the port is in range.
func (r TenantRoute) Validate() error {
	if net.ParseIP(r.Host) == nil {
		if errs := validation.IsDNS1123Subdomain(r.Host); len(errs) > 0 {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name: %s", r.Host, strings.Join(errs, "; "))
		}
	}
	if r.Port < 1 || r.Port > 65535 {
		return fmt.Errorf("port %d is not in 1-65535", r.Port)
	}
	return nil
}

// CacheNodePlanStatus is written by the node's sidecar.
type CacheNodePlanStatus struct {
	// appliedGeneration is the spec.planGeneration the sidecar last applied completely.
	// +optional
	AppliedGeneration int64 `json:"appliedGeneration,omitempty"`

	// observedGeneration is the object generation the sidecar last read.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, PlanApplied.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// partitions the node runs now (including draining ones no longer in spec).
	// +optional
	// +listType=map
	// +listMapKey=tenant
	// +kubebuilder:validation:MaxItems=1024
	Partitions []PartitionStatus `json:"partitions,omitempty"`

	// lastAppliedTime is when appliedGeneration last changed.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`
}

// PartitionStatus is one partition as the sidecar sees it.
type PartitionStatus struct {
	// tenant ID, "<namespace>/<name>".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Tenant string `json:"tenant"`

	// memoryLimitBytes currently configured in the engine.
	// +optional
	MemoryLimitBytes int64 `json:"memoryLimitBytes,omitempty"`

	// usedBytes the engine reports for stored data (redis used_memory, memcached bytes).
	// +optional
	UsedBytes int64 `json:"usedBytes,omitempty"`

	// rssBytes of the engine process (includes fragmentation and buffers).
	// +optional
	RSSBytes int64 `json:"rssBytes,omitempty"`

	// evictions since the engine started.
	// +optional
	Evictions int64 `json:"evictions,omitempty"`

	// state of the partition.
	// +optional
	State PartitionState `json:"state,omitempty"`

	// message explains a Failed state or the last error.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// CacheNodePlan is the partitions and limits one node must enforce. The operator keeps one
// per node of a CacheCluster (owned by it); the node's sidecar acknowledges it in status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=cnplan,categories=cacheqos
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.spec.partitionCount`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.spec.planGeneration`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.appliedGeneration`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CacheNodePlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheNodePlanSpec `json:"spec"`
	// +optional
	Status CacheNodePlanStatus `json:"status,omitempty"`
}

// CacheNodePlanList is a list of CacheNodePlans.
//
// +kubebuilder:object:root=true
type CacheNodePlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheNodePlan `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CacheNodePlan{}, &CacheNodePlanList{})
}
