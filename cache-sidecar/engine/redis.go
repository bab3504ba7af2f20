package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// redisMinMemoryBytes is the API's contract with the operator, which never plans less.
const redisMinMemoryBytes = v1.MinRedisPartitionBytes

type redisDriver struct {
	binaryPath string // empty: redis-server from PATH
}

func (redisDriver) kind() Engine          { return Redis }
func (redisDriver) processName() string   { return "redis-server" }
func (redisDriver) minMemoryBytes() int64 { return redisMinMemoryBytes }

func (d redisDriver) binary() (string, error) { return resolveBinary(d.binaryPath, d.processName()) }

func (redisDriver) effectiveMemory(requested int64) int64 { return requested }

func (redisDriver) checkPolicy(EvictionPolicy) error { return nil }

func (redisDriver) prepareDir(dir string) error {
	_, err := WriteRedisACL(dir)
	return err
}

// redisPolicy maps a policy to redis' maxmemory-policy: every key is a candidate, since cache
// tenants rarely set TTLs on all keys.
func redisPolicy(p EvictionPolicy) string { return "allkeys-" + string(p) }

func (redisDriver) args(spec PartitionSpec, paths partitionPaths) []string {
	return []string{
		"--port", "0", // no TCP listener: the unix socket is the only way in
		"--unixsocket", paths.socket,
		"--unixsocketperm", "700",
		"--save", "", // no periodic RDB snapshots: only Shutdown saves one...
		"--appendonly", "no", // ...and no AOF
		"--daemonize", "no",
		"--dir", paths.dir, // where redis loads the snapshot from at start
		"--dbfilename", filepath.Base(paths.saved),
		"--logfile", "", // stdout, which the manager appends to the partition's log file
		"--maxmemory", strconv.FormatInt(spec.MemoryBytes, 10),
		"--maxmemory-policy", redisPolicy(spec.EvictionPolicy),
		"--aclfile", filepath.Join(paths.dir, RedisACLFile),
	}
}

// save is SHUTDOWN SAVE: redis writes its RDB snapshot to --dir/--dbfilename, then exits,
// closing the connection without a reply; a reply is the error that kept it running. redis
// loads the snapshot itself at its next start.
func (redisDriver) save(ctx context.Context, paths partitionPaths) error {
	c, err := dialRedis(ctx, paths.socket)
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.do("SHUTDOWN", "SAVE")
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	default:
		return protocolErrorf("SHUTDOWN SAVE: %s", v.describe())
	}
}

func (redisDriver) exitsAfterSave() bool { return true }

func (redisDriver) ping(ctx context.Context, socket string) error {
	c, err := dialRedis(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.do("PING")
	if err != nil {
		return err
	}
	if v.kind != '+' || v.str != "PONG" {
		return protocolErrorf("PING: expected +PONG, got %s", v.describe())
	}
	return nil
}

// configure turns on active defragmentation, which returns memory fragmented by evictions to
// the allocator over time. Builds without redis' bundled jemalloc (Debian's, for one) refuse
// it with an error reply; that is expected and ignored.
func (redisDriver) configure(ctx context.Context, socket string) error {
	c, err := dialRedis(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	var reply *redisError
	if err := c.doOK("CONFIG", "SET", "activedefrag", "yes"); err != nil && !errors.As(err, &reply) {
		return err
	}
	return nil
}

// restrict gives an adopted engine today's link user (restrictRedisLink); one this driver
// starts loads it from its ACL file.
func (redisDriver) restrict(ctx context.Context, socket string) error {
	c, err := dialRedis(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return restrictRedisLink(c, socket)
}

func (redisDriver) liveSpec(ctx context.Context, socket string) (PartitionSpec, error) {
	c, err := dialRedis(ctx, socket)
	if err != nil {
		return PartitionSpec{}, err
	}
	defer c.Close()
	limit, policy, err := redisLimits(c)
	if err != nil {
		return PartitionSpec{}, err
	}
	// A policy other than allkeys-lru/lfu comes back as-is and so never equals a wanted one.
	p := EvictionPolicy(policy)
	if trimmed, ok := strings.CutPrefix(policy, "allkeys-"); ok {
		p = EvictionPolicy(trimmed)
	}
	return PartitionSpec{MemoryBytes: limit, EvictionPolicy: p}, nil
}

func redisLimits(c redisClient) (limit int64, policy string, err error) {
	raw, err := c.configGet("maxmemory")
	if err != nil {
		return 0, "", err
	}
	limit, err = strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, "", protocolErrorf("maxmemory %q is not a number", raw)
	}
	policy, err = c.configGet("maxmemory-policy")
	return limit, policy, err
}

// apply sets the policy first, so a shrink evicts by the new policy, then maxmemory. Redis
// evicts towards a lower limit on CONFIG SET and keeps going in its eviction timer and before
// every command, so apply polls INFO until the memory redis counts for eviction fits, then
// asks jemalloc to return the freed pages (MEMORY PURGE).
func (redisDriver) apply(ctx context.Context, socket string, spec PartitionSpec) error {
	c, err := dialRedis(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	oldLimit, oldPolicy, err := redisLimits(c)
	if err != nil {
		return err
	}
	if want := redisPolicy(spec.EvictionPolicy); oldPolicy != want {
		if err := c.doOK("CONFIG", "SET", "maxmemory-policy", want); err != nil {
			return err
		}
	}
	if oldLimit != spec.MemoryBytes {
		if err := c.doOK("CONFIG", "SET", "maxmemory", strconv.FormatInt(spec.MemoryBytes, 10)); err != nil {
			return err
		}
	}
	evicted, err := waitRedisFits(ctx, c, spec.MemoryBytes)
	if err != nil {
		return err
	}
	if evicted {
		var reply *redisError
		if err := c.doOK("MEMORY", "PURGE"); err != nil && !errors.As(err, &reply) {
			return err
		}
	}
	return nil
}

// waitRedisFits waits until redis' eviction-counted memory is at most limit and reports
// whether it had to wait for evictions.
func waitRedisFits(ctx context.Context, c redisClient, limit int64) (evicted bool, err error) {
	for {
		info, err := c.info("memory", "keyspace")
		if err != nil {
			return evicted, err
		}
		used, err := infoInt(info, "used_memory")
		if err != nil {
			return evicted, err
		}
		notCounted, err := infoInt(info, "mem_not_counted_for_evict")
		if err != nil {
			return evicted, err
		}
		if used-notCounted <= limit {
			return evicted, nil
		}
		keys, err := keyspaceKeys(info)
		if err != nil {
			return evicted, err
		}
		if keys == 0 {
			return evicted, fmt.Errorf("redis uses %d bytes with no keys left, above the %d-byte limit", used-notCounted, limit)
		}
		evicted = true
		select {
		case <-ctx.Done():
			return evicted, fmt.Errorf("redis still uses %d bytes (%d keys) above the %d-byte limit: %w", used-notCounted, keys, limit, context.Cause(ctx))
		case <-time.After(pollEvery):
		}
	}
}

func (redisDriver) stats(ctx context.Context, socket string) (Stats, error) {
	c, err := dialRedis(ctx, socket)
	if err != nil {
		return Stats{}, err
	}
	defer c.Close()
	info, err := c.info("memory", "stats", "keyspace")
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	var notCounted, startup, clients int64
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"maxmemory", &s.LimitBytes},
		{"used_memory", &s.UsedBytes},
		{"mem_not_counted_for_evict", &notCounted},
		{"used_memory_startup", &startup},
		{"mem_clients_normal", &clients},
		{"used_memory_dataset", &s.DataBytes},
		{"evicted_keys", &s.Evictions},
		{"keyspace_hits", &s.Hits},
		{"keyspace_misses", &s.Misses},
	} {
		if *f.dst, err = infoInt(info, f.name); err != nil {
			return Stats{}, err
		}
	}
	// Redis evicts before each command, so the buffers of the connection asking are counted
	// in used_memory but were allocated after the last eviction: leave them out.
	own, err := ownClientMemory(c)
	if err != nil {
		return Stats{}, err
	}
	s.UsedBytes -= notCounted + own
	s.BaselineBytes = min(startup+max(clients-own, 0), s.UsedBytes)
	if s.Items, err = keyspaceKeys(info); err != nil {
		return Stats{}, err
	}
	return s, nil
}

func infoInt(info map[string]string, name string) (int64, error) {
	raw, ok := info[name]
	if !ok {
		return 0, protocolErrorf("INFO has no %s", name)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, protocolErrorf("INFO %s=%q is not an integer", name, raw)
	}
	return n, nil
}

// ownClientMemory is what redis holds for this connection (CLIENT INFO's tot-mem).
func ownClientMemory(c redisClient) (int64, error) {
	v, err := c.do("CLIENT", "INFO")
	if err != nil {
		return 0, fmt.Errorf("CLIENT INFO: %w", err)
	}
	if v.kind != '$' || v.null {
		return 0, protocolErrorf("CLIENT INFO: expected a bulk string, got %s", v.describe())
	}
	for field := range strings.FieldsSeq(v.str) {
		if raw, ok := strings.CutPrefix(field, "tot-mem="); ok {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || n < 0 {
				return 0, protocolErrorf("CLIENT INFO: bad tot-mem %q", raw)
			}
			return n, nil
		}
	}
	return 0, protocolErrorf("CLIENT INFO has no tot-mem: %q", v.str)
}
