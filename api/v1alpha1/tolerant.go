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
	"encoding/json"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// The lists of this package decode item by item and drop the items their Go types cannot
// hold, so that one stored object the schema should have refused (written before a stricter
// schema, or with validation off) does not fail every list and stall the operator for all
// tenants. A watch event carrying such an object still fails to decode; the informer then
// lists again, and the list skips it.

// Undecodable is a stored object a list left out. It is no API type: no deep copy.
// +kubebuilder:object:generate=false
type Undecodable struct {
	// Object carries the kind, name, namespace and UID of the skipped object, as far as its
	// metadata decodes.
	Object metav1.PartialObjectMetadata
	// Err is why it does not decode.
	Err error
}

var undecodableHandler atomic.Pointer[func(Undecodable)]

// SetUndecodableHandler sets the function told about every list item left out (the operator
// counts, logs and reports them). Lists decode in client goroutines, so it must be safe for
// concurrent use. nil: items are left out silently.
func SetUndecodableHandler(handle func(Undecodable)) {
	if handle == nil {
		undecodableHandler.Store(nil)
		return
	}
	undecodableHandler.Store(&handle)
}

// rawList is a list whose items are not decoded yet.
type rawList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []json.RawMessage `json:"items"`
}

// decodeList decodes a list into its metadata and the items that decode as T.
func decodeList[T any](data []byte, kind string, typeMeta *metav1.TypeMeta, listMeta *metav1.ListMeta) ([]T, error) {
	var raw rawList
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &raw); err != nil {
		return nil, err
	}
	*typeMeta, *listMeta = raw.TypeMeta, raw.ListMeta
	if raw.Items == nil {
		return nil, nil
	}
	items := make([]T, 0, len(raw.Items))
	for _, item := range raw.Items {
		var obj T
		if err := kjson.UnmarshalCaseSensitivePreserveInts(item, &obj); err != nil {
			reportUndecodable(item, kind, err)
			continue
		}
		items = append(items, obj)
	}
	return items, nil
}

func reportUndecodable(item []byte, kind string, err error) {
	handle := undecodableHandler.Load()
	if handle == nil {
		return
	}
	u := Undecodable{Err: err}
	// Metadata is plain strings: it decodes whenever the API server stored the object.
	_ = kjson.UnmarshalCaseSensitivePreserveInts(item, &u.Object)
	if u.Object.Kind == "" {
		u.Object.Kind = kind
	}
	if u.Object.APIVersion == "" {
		u.Object.APIVersion = GroupVersion.String()
	}
	(*handle)(u)
}

// UnmarshalJSON decodes the items that decode and reports the others (SetUndecodableHandler).
func (l *TenantSLOList) UnmarshalJSON(data []byte) error {
	items, err := decodeList[TenantSLO](data, "TenantSLO", &l.TypeMeta, &l.ListMeta)
	l.Items = items
	return err
}

// UnmarshalJSON decodes the items that decode and reports the others (SetUndecodableHandler).
func (l *CacheClusterList) UnmarshalJSON(data []byte) error {
	items, err := decodeList[CacheCluster](data, "CacheCluster", &l.TypeMeta, &l.ListMeta)
	l.Items = items
	return err
}

// UnmarshalJSON decodes the items that decode and reports the others (SetUndecodableHandler).
func (l *CacheNodePlanList) UnmarshalJSON(data []byte) error {
	items, err := decodeList[CacheNodePlan](data, "CacheNodePlan", &l.TypeMeta, &l.ListMeta)
	l.Items = items
	return err
}
