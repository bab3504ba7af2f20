// Package keyhash is the single 64-bit key hash that every cacheqos component uses when two
// processes must agree about a key: the proxy routing a key to its partition (rendezvous
// hashing) and the miss-ratio sampler deciding whether a key is sampled. Keeping it in one
// place guarantees that a key is placed and sampled the same way by every sidecar, the
// operator and the simulator, whatever their version.
//
// The base hash is XXH64 with seed 0, a published algorithm with fixed output (any language can
// reproduce it), fast on short keys. Go's hash/maphash is not usable here because its seeds are
// random per process. Derive turns one key hash into independent-looking variants (one per
// purpose or per node) with a cheap bijective finalizer, so the key bytes are hashed once per
// request no matter how many consumers need a hash.
package keyhash

import "github.com/cespare/xxhash/v2"

// Sum64 returns the stable 64-bit hash of key (XXH64, seed 0).
func Sum64(key []byte) uint64 { return xxhash.Sum64(key) }

// Sum64String is Sum64 for a string key, without copying it.
func Sum64String(key string) uint64 { return xxhash.Sum64String(key) }

// Salt returns the salt for a purpose or node name, for use with Derive.
func Salt(name string) uint64 { return Mix(Sum64String(name)) }

// Derive combines a key hash with a salt into a new, well-mixed 64-bit value. For a fixed salt
// it is a bijection of h (distinct key hashes stay distinct); different salts give unrelated
// functions, so selections made with one salt (which keys are sampled) are independent of
// selections made with another (which node owns a key).
func Derive(h, salt uint64) uint64 { return Mix(h ^ salt) }

// Mix is a bijective 64-bit finalizer (the splitmix64 output function): every input bit
// affects every output bit with probability close to one half.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
