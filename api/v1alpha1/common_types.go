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

// Notes on the schema markers in this package:
//   - metav1.Duration fields carry +kubebuilder:validation:Type=string, without which
//     controller-gen refuses string validations (MaxLength, Pattern) on them. Their CEL rules
//     skip values that fail the pattern, so a malformed duration yields one pattern error
//     rather than a CEL evaluation error.
//   - resource.Quantity fields are int-or-string in the schema, and CEL prices a rule on one as
//     if the value were as large as a whole request (maxLength does not bound it). quantity()
//     rules are therefore fine on single fields but not on list items (see PartitionPlan.Memory).
//   - Optional durations and quantities are pointers and optional sections are structs whose
//     fields are all omitempty, so an object built in Go and sent with unset fields gets the
//     schema defaults instead of zero values.

// Engine is the cache server every partition of a CacheCluster runs.
// +kubebuilder:validation:Enum=redis;memcached
type Engine string

const (
	// EngineRedis runs one redis-server per tenant partition, resized with CONFIG SET maxmemory.
	EngineRedis Engine = "redis"
	// EngineMemcached runs one memcached per tenant partition, resized with cache_memlimit.
	EngineMemcached Engine = "memcached"
)

// The smallest partition each engine runs: an empty redis 7.0 already uses about 1 MiB, and
// memcached gives every slab class in use at least one 1 MiB page. The sidecar refuses smaller
// partitions, and the operator never plans them.
const (
	MinRedisPartitionBytes     = 4 << 20
	MinMemcachedPartitionBytes = 8 << 20
)

// MinPartitionBytes is the smallest partition the engine runs.
func (e Engine) MinPartitionBytes() int64 {
	if e == EngineMemcached {
		return MinMemcachedPartitionBytes
	}
	return MinRedisPartitionBytes
}

// EvictionPolicy is how a full partition chooses what to evict.
// +kubebuilder:validation:Enum=lru;lfu
type EvictionPolicy string

const (
	// EvictionLRU evicts the least recently used keys (redis allkeys-lru, memcached's LRU).
	EvictionLRU EvictionPolicy = "lru"
	// EvictionLFU evicts the least frequently used keys (redis allkeys-lfu). memcached has no
	// LFU mode: the operator refuses to admit such a tenant on a memcached cluster.
	EvictionLFU EvictionPolicy = "lfu"
)
