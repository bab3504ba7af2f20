// Package engine runs one cache engine process (redis-server or memcached) per tenant partition
// on a node and keeps the set of running engines equal to a desired set of partitions.
//
// A Manager owns a state root directory. Each partition gets its own directory under it (named
// after the tenant, made filesystem-safe and suffixed with a short hash of the tenant so distinct
// tenants never share one), holding the engine's unix socket, a pidfile, a log file and a record
// of the applied spec. Engines listen only on that socket; Endpoint gives its address to the
// proxy. A redis partition's directory also holds its ACL file and the password of
// RedisLinkUser, the restricted user the proxy's links log in as (RedisLinkPassword).
//
// Reconcile starts missing partitions, resizes existing ones live (never by restarting them),
// drains and stops removed ones and deletes their directories. A crashed engine is restarted
// with capped exponential backoff; its cache content is soft state and starts empty.
//
// Restarts of the manager keep caches in two ways, and only these:
//   - Close leaves the engines running and a new Manager on the same root adopts those still
//     running (matched by pidfile and /proc/<pid>/cmdline). That holds where the engines
//     outlive the manager's process: standalone, not in a container, whose processes all
//     die with it.
//   - Shutdown stops the engines after saving their data into their partition directory, for
//     the next engine started there. redis writes an RDB snapshot (SHUTDOWN SAVE), which it
//     loads before it answers (StartTimeout does not run while redis answers LOADING). A
//     memcached partition's live items (value, client flags, expiry) are written by the
//     manager (lru_crawler metadump and mg, itemsdump.go's format) and stored back with ms
//     after the next engine answers, before the partition is Running; a file that is not
//     complete and intact is refused and the partition starts empty. memcached's own
//     restartable cache (-e, a memory file) is not used: with it memcached 1.6 refuses to
//     change cache_memlimit live (MEMLIMIT_ADJUST_FAILED), which resizing depends on. Either
//     way the partition comes back with its keys, then resized to the spec it is started
//     with. Saved data is deleted once loaded, or when loading it failed, so a later crash
//     starts empty instead of bringing back overwritten or deleted keys.
//
// Resizing:
//   - redis: CONFIG SET maxmemory. Redis 7.0 evicts on the CONFIG SET itself and keeps evicting
//     in its eviction timer (and before every command), so a shrink waits until used_memory,
//     counted as Redis counts it for eviction, is at or below the new limit, then MEMORY PURGE
//     returns freed jemalloc pages to the OS.
//   - memcached: cache_memlimit. memcached evicts nothing already stored when the limit drops,
//     so a shrink deletes the coldest items itself (ranked from lru_crawler metadump, see
//     shrinkMemcached) and then moves emptied slab pages to the global page pool with
//     "slabs reassign <class> 0", where memcached frees them while it is above its limit.
//
// What "used" means differs by engine and is reported as such in Stats: for redis it is
// used_memory (everything the allocator holds for the dataset and overhead, which maxmemory
// bounds); for memcached it is total_malloced (slab pages held, which -m / cache_memlimit
// bounds), while the sum of stored item sizes (the "bytes" stat) is reported as DataBytes.
//
// Eviction policies: "lru" and "lfu" map to redis' allkeys-lru and allkeys-lfu and switch live.
// memcached has only its segmented LRU, so "lfu" is rejected for memcached partitions with
// ErrUnsupportedPolicy rather than silently meaning something else.
//
// The package talks to the engines with the small clients in resp.go and memcache.go and has
// no Kubernetes dependencies.
package engine
