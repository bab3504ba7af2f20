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

package v1alpha1_test

import (
	"encoding/json"
	"sync"
	"testing"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

const mixedList = `{"apiVersion":"cacheqos.io/v1alpha1","kind":"TenantSLOList","metadata":{"resourceVersion":"7"},"items":[
{"apiVersion":"cacheqos.io/v1alpha1","kind":"TenantSLO","metadata":{"name":"good","namespace":"a"},"spec":{"memory":{"max":"1Gi"}}},
{"apiVersion":"cacheqos.io/v1alpha1","kind":"TenantSLO","metadata":{"name":"bad","namespace":"b","uid":"u-1"},"spec":{"memory":{"max":"1e1.5"}}}]}`

// TestListsLeaveOutUndecodableItems: the good item and the list metadata survive, the bad item
// is reported with its identity.
func TestListsLeaveOutUndecodableItems(t *testing.T) {
	var mu sync.Mutex
	var skipped []v1.Undecodable
	v1.SetUndecodableHandler(func(u v1.Undecodable) { mu.Lock(); skipped = append(skipped, u); mu.Unlock() })
	defer v1.SetUndecodableHandler(nil)

	var list v1.TenantSLOList
	if err := json.Unmarshal([]byte(mixedList), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "good" || list.Items[0].Spec.Memory.Max.String() != "1Gi" {
		t.Errorf("items %+v, want only good with memory.max 1Gi", list.Items)
	}
	if list.ResourceVersion != "7" || list.Kind != "TenantSLOList" {
		t.Errorf("list metadata %+v %+v lost", list.TypeMeta, list.ListMeta)
	}
	if len(skipped) != 1 {
		t.Fatalf("reported %d items, want 1", len(skipped))
	}
	got := skipped[0].Object
	if got.Kind != "TenantSLO" || got.Namespace != "b" || got.Name != "bad" || got.UID != "u-1" || skipped[0].Err == nil {
		t.Errorf("reported %+v (err %v)", got, skipped[0].Err)
	}
}

// FuzzListDecode: no input panics, and whatever decodes holds only items that decode alone.
func FuzzListDecode(f *testing.F) {
	f.Add([]byte(mixedList))
	f.Add([]byte(`{"items":null}`))
	f.Add([]byte(`{"items":[1,"x",{}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var list v1.CacheClusterList
		if err := json.Unmarshal(data, &list); err != nil {
			return
		}
		for _, item := range list.Items {
			raw, err := json.Marshal(item)
			if err != nil {
				t.Fatal(err)
			}
			var again v1.CacheCluster
			if err := json.Unmarshal(raw, &again); err != nil {
				t.Fatalf("a kept item does not decode again: %v", err)
			}
		}
	})
}
