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
//     controller-gen refuses string validations (MaxLength) on them, and one shared rule set
//     like quantities: DurationForm, then a floor and a ceiling, each a messageExpression
//     naming the field and echoing the value. The floor and ceiling skip values that fail
//     DurationForm, so a malformed duration yields one message rather than a CEL evaluation
//     error.
//   - resource.Quantity fields are int-or-string in the schema, and CEL prices a rule on one as
//     if the value were as large as a whole request (maxLength does not bound it). quantity()
//     rules are therefore fine on single fields but not on a plan's partitions (see
//     PartitionPlan.Memory); three of them on each status list item (at most 1000) fit.
//   - Quantity fields of spec carry one shared rule set (QuantityForm, then whole bytes, a
//     floor and a ceiling, each its own messageExpression naming the field and echoing the
//     value) and no type pattern, so `10GB` gets a hint rather than the regex. The later rules
//     evaluate quantity() only on strings that match QuantityForm: that form always parses,
//     and it excludes the exponents that cost the API server seconds to parse (1e-10000000).
//     Whole bytes compares the value with the integer its float truncates to, exact up to
//     2^53, so it is skipped above the ceiling (isInteger() cannot serve: it is false for any
//     value resource.Quantity holds as a decimal, such as 1.5Gi or 1Pi).
//     TestQuantityFieldsShareOneRule holds every quantity field of every spec to it, and
//     every status quantity to the same rules without a floor (0 is a valid observation)
//     under the status ceilings, so a bad status cannot poison the lists either.
//   - Optional durations and quantities are pointers and optional sections are structs whose
//     fields are all omitempty, so an object built in Go and sent with unset fields gets the
//     schema defaults instead of zero values.

// Quantity rules shared by every quantity field of a spec.
const (
	// QuantityForm is a non-negative decimal with an optional binary or decimal suffix, or an
	// exponent of at most two digits: no milli, micro or nano, no sign, and nothing
	// resource.ParseQuantity refuses. (Fractions that do not come to whole bytes are refused
	// by the rule after it.)
	QuantityForm = `^[0-9]+([.][0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][0-9]{1,2})?$`
	// MaxBytes and MaxBytesPerSecond are ceilings far below int64 overflow (about 8Ei), so
	// that sums over 256 nodes and thousands of tenants still fit in an int64.
	MaxBytes          = "1Pi"
	MaxBytesPerSecond = "1P"
	// MinBytesPerSecond is the smallest bandwidth a tenant or node may declare: below it a
	// single request waits seconds for tokens.
	MinBytesPerSecond = "1k"
	// MaxStatusBytes and MaxStatusBytesPerSecond bound single status quantities, which sum
	// over nodes: 2^53 bytes (and 8e15 bytes/s), the largest values the whole-bytes rule
	// checks exactly, still three orders below int64 overflow.
	MaxStatusBytes          = "8Pi"
	MaxStatusBytesPerSecond = "8P"
	// PlanQuantityPattern is the form the operator writes plan quantities in (a positive
	// integer, binary suffix for memory, decimal for bandwidth), with digit counts that keep
	// it below 10Pi. A pattern, not CEL: the budget does not allow quantity() on 1024 items.
	PlanQuantityPattern = `^[1-9][0-9]{0,15}$|^[1-9][0-9]{0,12}(Ki|k)$|^[1-9][0-9]{0,9}(Mi|M)$|^[1-9][0-9]{0,6}(Gi|G)$|^[1-9][0-9]{0,3}(Ti|T)$|^[1-9](Pi|P)$`
)

// DurationForm is the form every duration of a spec must have: at most four parts, each a
// number of at most five digits (nine decimals) and a unit. Unlike the unbounded form
// time.ParseDuration accepts, it never overflows (4 x 99999h is far below the 2562047h a Go
// duration holds), so the rules after it can call duration() safely and the field gets a
// message instead of a type conversion error. Every duration rule repeats it; the schema test
// TestDurationFieldsShareOneRule holds them to it.
const DurationForm = `^([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$`

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
