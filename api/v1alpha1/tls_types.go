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

// ClientTLS says whether tenants' clients reach the sidecars over TLS.
// +kubebuilder:validation:XValidation:rule="!has(self.extraDNSNames) || size(self.extraDNSNames) == 0 || (has(self.enabled) && self.enabled)",fieldPath=".extraDNSNames",message="tls.extraDNSNames needs tls.enabled: true"
type ClientTLS struct {
	// enabled makes the client port speak TLS only: redis clients connect with rediss:// (or
	// their TLS option), memcached clients with TLS on the same text and meta protocol. The
	// operator keeps a CA for the cluster (Secret <cluster>-tls-ca), issues the sidecars'
	// serving certificate from it (Secret <cluster>-tls, which the sidecars mount and reload
	// on change), rotates both before they expire, and writes the CA bundle into every
	// tenant's credentials Secret as ca.crt. Turning it on or off changes the sidecars'
	// arguments, so their pods are replaced.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// extraDNSNames are names clients reach the sidecars by besides the client Service's own
	// (<cluster>, <cluster>.<namespace>, <cluster>.<namespace>.svc and
	// <cluster>.<namespace>.svc.cluster.local), an external load balancer's say; the serving
	// certificate carries them too.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(n, n.matches('^(\\\\*[.])?[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'))",message="every tls.extraDNSNames entry must be a lower-case DNS name (a leading *. for a wildcard), e.g. cache.example.com"
	ExtraDNSNames []string `json:"extraDNSNames,omitempty"`
}
