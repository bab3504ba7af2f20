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

// Package v1alpha1 holds the cacheqos.io/v1alpha1 API: CacheCluster (a shared cache fleet and
// its per-node capacity), TenantSLO (one tenant's objective and limits on a cluster) and
// CacheNodePlan (what the sidecar on one node must enforce). Validation lives in the CRD schema
// (OpenAPI bounds and CEL rules), so the API server rejects bad objects before any controller
// sees them; the Go helpers here parse the string-encoded decimals so callers never do.
//
// +kubebuilder:object:generate=true
// +groupName=cacheqos.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// The operator's permissions on this API group; controller-gen merges them with the
// controllers' own markers into the cacheqos-operator ClusterRole. Tenants create TenantSLOs and
// platform teams CacheClusters, so the operator only updates those (finalizers, status); it
// owns CacheNodePlans outright, whose status only the sidecars write.
//
// +kubebuilder:rbac:groups=cacheqos.io,resources=cacheclusters;tenantslos,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cacheqos.io,resources=cacheclusters/status;tenantslos/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cacheqos.io,resources=cacheclusters/finalizers;tenantslos/finalizers,verbs=update
// +kubebuilder:rbac:groups=cacheqos.io,resources=cachenodeplans,verbs=get;list;watch;create;update;patch;delete

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "cacheqos.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
