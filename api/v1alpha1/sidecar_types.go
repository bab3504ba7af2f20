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
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ReservedPodLabels are the labels the operator puts on every sidecar pod: the DaemonSet's
// selector, the Services' selector and the operator's informer filter depend on them, so
// spec.sidecar.podLabels may not set them.
var ReservedPodLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"}

// ReservedPrefix is the operator's own label and annotation prefix, refused in
// spec.sidecar.podLabels and podAnnotations.
const ReservedPrefix = "cacheqos.io/"

// SidecarPodSettings shape the pods of the sidecar DaemonSet. Every field is optional; the
// operator's defaults (the Helm chart's sidecar values) fill the gaps as documented per field.
// Placement stays in spec.nodeSelector and spec.tolerations, which also decide the nodes that
// get a plan.
type SidecarPodSettings struct {
	// imagePullSecrets name Secrets in the cluster's namespace with credentials for the
	// sidecar and engine images. Added to the operator's defaults.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []SecretReference `json:"imagePullSecrets,omitempty"`

	// priorityClassName of the sidecar pods (a PriorityClass that must exist), so a cluster that
	// evicts or preempts low-priority pods keeps the caches. Replaces the operator's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'sidecar.priorityClassName ' + self + ' is not a PriorityClass name: lower-case letters, digits, - and ., each dot-separated part starting and ending with a letter or digit'"
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// affinity of the sidecar pods. A required node affinity narrows the nodes that
	// spec.nodeSelector picks: nodes it excludes get neither a sidecar nor a plan. Replaces the
	// operator's default.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// podLabels are added to the sidecar pods (merged over the operator's defaults). The
	// operator's own labels (app.kubernetes.io/name, instance, managed-by) and the cacheqos.io/
	// prefix are refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",messageExpression="'sidecar.podLabels key ' + self.filter(k, !(size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')))[0] + ' is not a label key: an optional DNS subdomain prefix and /, then at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by']) && !k.startsWith('cacheqos.io/'))",message="app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/managed-by and cacheqos.io/ labels are the operator's own (its selectors use them)"
	PodLabels map[string]LabelValue `json:"podLabels,omitempty"`

	// podAnnotations are added to the sidecar pods (merged over the operator's defaults); the
	// cacheqos.io/ prefix is the operator's own.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",messageExpression="'sidecar.podAnnotations key ' + self.filter(k, !(size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')))[0] + ' is not an annotation key: an optional DNS subdomain prefix and /, then at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('cacheqos.io/'))",message="cacheqos.io/ annotations are the operator's own"
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// resources of the sidecar container, per resource over what the operator derives from
	// spec.capacity (memory: capacity.memory plus the sidecar's overhead, requested and limited
	// alike; CPU: from opsPerSecond, no limit). A memory value below the derived one, or a
	// request above its limit, is not applied: the derived value stays and the
	// SidecarOverridesApplied condition says why.
	// +optional
	Resources *SidecarResources `json:"resources,omitempty"`

	// podSecurityContext replaces the operator's pod security context (non-root user and
	// group 65532, fsGroup 65532, RuntimeDefault seccomp), e.g. on OpenShift, whose restricted
	// SCC assigns the user itself.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`

	// securityContext replaces the operator's container security context (no privilege
	// escalation, read-only root filesystem, non-root, every capability dropped) on the sidecar
	// and its init container.
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
}

// LabelValue is a Kubernetes label value. As a map's value type it puts its rules on the
// schema's additionalProperties, where the maxLength bounds their CEL cost (a rule over the
// values of a map[string]string, whose values have no maxLength, costs 6 to 12 times the
// budget). The maxLength is far above a label value's 63 characters because the API server
// answers a value over it with a bare "Too long" and skips every CEL rule of the object; up
// to it, the length rule's message echoes the value. The error's path names the map and the
// key.
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule="size(self) <= 63",messageExpression="'label value ' + self + ' is too long: a label value has at most 63 characters'"
// +kubebuilder:validation:XValidation:rule="self.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')",messageExpression="'label value ' + self + ' is invalid: at most 63 of A-Z a-z 0-9 - _ ., starting and ending alphanumeric (or empty)'"
type LabelValue string

// TaintKey is a taint's key, which has a label key's form: an optional DNS subdomain prefix
// and /, then a name. Its rule matches the label maps' key rule (TestTaintKeyRuleIsLabelKeyRule
// holds them together). Empty is allowed: a toleration without a key (and operator Exists)
// tolerates every taint. The maxLength is far above 317 for LabelValue's reason.
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule="size(self) == 0 || (size(self) <= 317 && self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",messageExpression="'toleration key ' + self + ' is not a taint key: an optional DNS subdomain prefix and /, then at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric'"
type TaintKey string

// Toleration is the core API's toleration with bounded key and value, so that CEL rules can
// check them: over core/v1 Toleration's unbounded strings such rules cost 24 to 58 times the
// API server's budget. CoreTolerations converts for the pod template.
type Toleration struct {
	// key of the taint tolerated; empty with operator Exists tolerates every taint.
	// +optional
	Key TaintKey `json:"key,omitempty"`
	// operator is Exists or Equal (the default).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	Operator corev1.TolerationOperator `json:"operator,omitempty"`
	// value the taint must have (operator Equal), a label value.
	// +optional
	Value LabelValue `json:"value,omitempty"`
	// effect tolerated: NoSchedule, PreferNoSchedule or NoExecute; empty for all effects.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	Effect corev1.TaintEffect `json:"effect,omitempty"`
	// tolerationSeconds a NoExecute taint is tolerated before eviction. Unset: forever.
	// +optional
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// CoreTolerations returns tolerations as the core API's.
func CoreTolerations(tolerations []Toleration) []corev1.Toleration {
	if tolerations == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(tolerations))
	for i, t := range tolerations {
		out[i] = corev1.Toleration{Key: string(t.Key), Operator: t.Operator, Value: string(t.Value), Effect: t.Effect, TolerationSeconds: t.TolerationSeconds}
	}
	return out
}

// LabelStrings returns labels as the core API's map[string]string.
func LabelStrings(labels map[string]LabelValue) map[string]string {
	if labels == nil {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[k] = string(v)
	}
	return out
}

// SecretReference names a Secret in the object's namespace.
type SecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'Secret name ' + self + ' is invalid: lower-case letters, digits, - and ., each dot-separated part starting and ending with a letter or digit'"
	Name string `json:"name"`
}

// SidecarResources are requests and limits of the sidecar container: CPU and memory, the
// only resources that are the sidecar's to claim.
type SidecarResources struct {
	// requests of the sidecar container.
	// +optional
	Requests *SidecarRequests `json:"requests,omitempty"`
	// limits of the sidecar container.
	// +optional
	Limits *SidecarLimits `json:"limits,omitempty"`
}

// SidecarRequests are the sidecar container's requests (their messages name requests).
type SidecarRequests struct {
	// cpu in cores: 2, 1.5 or 500m.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([1-9][0-9]{0,5}([.][0-9]{1,3})?|0[.][0-9]{0,2}[1-9]|[1-9][0-9]{0,8}m)$')",messageExpression="'requests.cpu ' + self + ' is not a CPU quantity: write cores with at most 3 decimals (2, 1.5, 0.25) or millicores (500m)'"
	CPU string `json:"cpu,omitempty"`

	// memory in bytes, e.g. 9Gi.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'requests.memory ' + self + ' is not a quantity of bytes: ' + (self.matches('^[0-9.]+[kKMGTPE]i?[bB]$') ? 'drop the B: 10G or 10Gi, not 10GB' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 8Gi')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'requests.memory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('4Mi')) >= 0",messageExpression="'requests.memory ' + self + ' is below the minimum 4Mi (the smallest partition an engine runs)'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",messageExpression="'requests.memory ' + self + ' is above the maximum 1Pi'"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// ResourceList converts the requests into the core API's form.
func (l *SidecarRequests) ResourceList() (corev1.ResourceList, error) {
	if l == nil {
		return corev1.ResourceList{}, nil
	}
	return resourceList(l.CPU, l.Memory)
}

// SidecarLimits are the sidecar container's limits (their messages name limits).
type SidecarLimits struct {
	// cpu in cores: 2, 1.5 or 500m.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([1-9][0-9]{0,5}([.][0-9]{1,3})?|0[.][0-9]{0,2}[1-9]|[1-9][0-9]{0,8}m)$')",messageExpression="'limits.cpu ' + self + ' is not a CPU quantity: write cores with at most 3 decimals (2, 1.5, 0.25) or millicores (500m)'"
	CPU string `json:"cpu,omitempty"`

	// memory in bytes, e.g. 9Gi.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') && isQuantity(self)",messageExpression="'limits.memory ' + self + ' is not a quantity of bytes: ' + (self.matches('^[0-9.]+[kKMGTPE]i?[bB]$') ? 'drop the B: 10G or 10Gi, not 10GB' : 'write a number with an optional suffix Ki, Mi, Gi, Ti, Pi or k, M, G, T, P, e.g. 8Gi')"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) > 0 || quantity(self).sub(int(quantity(self).asApproximateFloat())).compareTo(quantity('0')) == 0",messageExpression="'limits.memory ' + self + ' is not a whole number of bytes: a byte has no fraction'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('4Mi')) >= 0",messageExpression="'limits.memory ' + self + ' is below the minimum 4Mi (the smallest partition an engine runs)'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",messageExpression="'limits.memory ' + self + ' is above the maximum 1Pi'"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// ResourceList converts the limits into the core API's form.
func (l *SidecarLimits) ResourceList() (corev1.ResourceList, error) {
	if l == nil {
		return corev1.ResourceList{}, nil
	}
	return resourceList(l.CPU, l.Memory)
}

// resourceList converts cpu and memory; cpu went through the schema's pattern, so it parses
// (an error names it for values that did not pass the API server, the chart's defaults).
func resourceList(cpu string, memory *resource.Quantity) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	if cpu != "" {
		q, err := resource.ParseQuantity(cpu)
		if err != nil {
			return nil, fmt.Errorf("cpu %q: %w", cpu, err)
		}
		out[corev1.ResourceCPU] = q
	}
	if memory != nil {
		out[corev1.ResourceMemory] = memory.DeepCopy()
	}
	return out, nil
}

// Validate checks what the CRD schema checks for spec.sidecar, for settings that reach the
// operator without the API server (the Helm chart's defaults): label and annotation keys,
// label values and the operator's reserved keys.
func (s *SidecarPodSettings) Validate() error {
	var errs []string
	for k, v := range s.PodLabels {
		errs = append(errs, keyErrors("podLabels", k)...)
		for _, e := range validation.IsValidLabelValue(string(v)) {
			errs = append(errs, fmt.Sprintf("podLabels[%s]: %s", k, e))
		}
		for _, reserved := range ReservedPodLabels {
			if k == reserved {
				errs = append(errs, fmt.Sprintf("podLabels[%s]: the operator's own label (its selectors use it)", k))
			}
		}
	}
	for k := range s.PodAnnotations {
		errs = append(errs, keyErrors("podAnnotations", k)...)
	}
	for i, secret := range s.ImagePullSecrets {
		for _, e := range validation.IsDNS1123Subdomain(secret.Name) {
			errs = append(errs, fmt.Sprintf("imagePullSecrets[%d].name %q: %s", i, secret.Name, e))
		}
	}
	if s.PriorityClassName != "" {
		for _, e := range validation.IsDNS1123Subdomain(s.PriorityClassName) {
			errs = append(errs, fmt.Sprintf("priorityClassName %q: %s", s.PriorityClassName, e))
		}
	}
	if r := s.Resources; r != nil {
		if _, err := r.Requests.ResourceList(); err != nil {
			errs = append(errs, fmt.Sprintf("resources.requests.%v", err))
		}
		if _, err := r.Limits.ResourceList(); err != nil {
			errs = append(errs, fmt.Sprintf("resources.limits.%v", err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("sidecar settings: %s", strings.Join(errs, "; "))
	}
	return nil
}

// TolerationErrors checks tolerations as the CRD's rules on spec.tolerations do, for
// tolerations that reach the operator without the API server (the Helm chart's defaults).
func TolerationErrors(field string, tolerations []corev1.Toleration) []string {
	var errs []string
	for i, t := range tolerations {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case t.Operator != "" && t.Operator != corev1.TolerationOpExists && t.Operator != corev1.TolerationOpEqual:
			errs = append(errs, fmt.Sprintf("%s: operator %q, want Exists or Equal", at, t.Operator))
		case t.Operator == corev1.TolerationOpExists && t.Value != "":
			errs = append(errs, fmt.Sprintf("%s: a toleration with operator Exists takes no value", at))
		case t.Key == "" && t.Operator != corev1.TolerationOpExists:
			errs = append(errs, fmt.Sprintf("%s: a toleration without a key must use operator Exists", at))
		}
		if t.Effect != "" && t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectPreferNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, fmt.Sprintf("%s: effect %q, want NoSchedule, PreferNoSchedule or NoExecute (or empty for all effects)", at, t.Effect))
		}
		if t.Key != "" {
			for _, e := range validation.IsQualifiedName(t.Key) {
				errs = append(errs, fmt.Sprintf("%s: key %q: %s", at, t.Key, e))
			}
		}
		for _, e := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, fmt.Sprintf("%s: value %q: %s", at, t.Value, e))
		}
	}
	return errs
}

func keyErrors(field, key string) []string {
	var errs []string
	for _, e := range validation.IsQualifiedName(key) {
		errs = append(errs, fmt.Sprintf("%s key %q: %s", field, key, e))
	}
	if strings.HasPrefix(key, ReservedPrefix) {
		errs = append(errs, fmt.Sprintf("%s key %q: the %s prefix is the operator's own", field, key, ReservedPrefix))
	}
	return errs
}

// UpdateStrategyType is how the sidecar pods are updated.
// +kubebuilder:validation:MaxLength=64
type UpdateStrategyType string

const (
	// UpdateInPlace: the operator updates the pods one node at a time (maxUnavailable at
	// once); a pod whose only change is the sidecar's or the engine's image gets the new image
	// patched in, so the kubelet restarts its containers and the pod's volumes, with the
	// engines' saved data, stay; a pod with any other change is deleted and recreated.
	UpdateInPlace UpdateStrategyType = "InPlace"
	// UpdateRollingUpdate: the DaemonSet's RollingUpdate replaces every changed pod, with new
	// volumes: the caches start empty.
	UpdateRollingUpdate UpdateStrategyType = "RollingUpdate"
)

// DefaultMaxUnavailable is updateStrategy.maxUnavailable's default.
const DefaultMaxUnavailable = 1

// UpdateStrategy is how the sidecar pods take a new image or pod template.
type UpdateStrategy struct {
	// type is InPlace (default) or RollingUpdate.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self in ['InPlace', 'RollingUpdate']",messageExpression="'updateStrategy.type ' + self + ' is neither InPlace nor RollingUpdate'"
	Type UpdateStrategyType `json:"type,omitempty"`
	// maxUnavailable is how many nodes' sidecar pods may be updating at once (default 1).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 1000",message="updateStrategy.maxUnavailable must be between 1 and 1000"
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
}

// TypeOrDefault is the strategy's type, InPlace when unset.
func (s UpdateStrategy) TypeOrDefault() UpdateStrategyType {
	if s.Type == "" {
		return UpdateInPlace
	}
	return s.Type
}

// MaxUnavailableOrDefault is maxUnavailable, DefaultMaxUnavailable when unset.
func (s UpdateStrategy) MaxUnavailableOrDefault() int32 {
	if s.MaxUnavailable == nil {
		return DefaultMaxUnavailable
	}
	return *s.MaxUnavailable
}
