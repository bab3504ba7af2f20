package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/cacheqos/cacheqos/internal/mrc"
)

// driver is what differs between engines: how to start one, talk to it, resize it and read
// its numbers.
type driver interface {
	kind() Engine
	// processName is the engine's binary name, also used to recognise its processes.
	processName() string
	// binary resolves the engine executable at start time, so installing it later works.
	binary() (string, error)
	minMemoryBytes() int64
	// effectiveMemory is the limit the engine really applies for a requested one.
	effectiveMemory(requested int64) int64
	checkPolicy(EvictionPolicy) error
	// prepareDir makes a partition directory usable by the engine process.
	prepareDir(dir string) error
	args(spec PartitionSpec, paths partitionPaths) []string
	// ping succeeds once the engine answers on its socket.
	ping(ctx context.Context, socket string) error
	// configure applies settings that are not command-line arguments, after ping succeeded
	// and to an adopted engine, which an older sidecar may have started without them.
	configure(ctx context.Context, socket string) error
	// liveSpec reads the memory limit and eviction policy the engine runs with.
	liveSpec(ctx context.Context, socket string) (PartitionSpec, error)
	// apply changes a running engine's memory limit and eviction policy to spec, live; a
	// shrink returns only once the engine uses no more than the new limit.
	apply(ctx context.Context, socket string, spec PartitionSpec) error
	stats(ctx context.Context, socket string) (Stats, error)
}

// Stats are one partition's engine numbers.
type Stats struct {
	Tenant string
	Engine Engine
	PID    int
	// LimitBytes is the memory limit the engine applies (maxmemory / limit_maxbytes).
	LimitBytes int64
	// UsedBytes is the memory the engine counts against LimitBytes: redis used_memory minus
	// what redis excludes from eviction accounting and minus the connection reading the stats
	// (its buffers were allocated after redis last evicted), memcached total_malloced (slab
	// pages held).
	UsedBytes int64
	// DataBytes is the stored data: redis used_memory_dataset, memcached bytes (item sizes).
	DataBytes int64
	// RSSBytes is the process's resident memory; it may stay above UsedBytes after a shrink
	// because allocators keep freed pages.
	RSSBytes int64
	// BaselineBytes is the part of UsedBytes that holds no objects: redis' startup memory and
	// its clients' buffers; 0 for memcached, whose limit counts only slab pages.
	BaselineBytes int64
	// Slabs are memcached's slab settings (`stats settings`), nil for redis.
	Slabs     *mrc.MemcachedSettings
	Items     int64
	Evictions int64
	Hits      int64
	Misses    int64
}

// restricter is a driver whose engines restrict the proxy's links (redis' link user): an
// engine an older sidecar started, and this one adopts, may predate the restriction.
type restricter interface {
	// restrict applies the restriction to a running engine.
	restrict(ctx context.Context, socket string) error
}

// saver is a driver whose engine's data can be saved into its partition directory as it
// stops, for the next engine started there.
type saver interface {
	// save writes the engine's data; nil once it is written. A redis engine exits after
	// saving (exitsAfterSave); a memcached one keeps running for the caller to stop.
	save(ctx context.Context, paths partitionPaths) error
	exitsAfterSave() bool
}

// loader is a saver whose engine does not load its saved data by itself: the partition
// stores it into the engine after it answers and before it serves.
type loader interface {
	load(ctx context.Context, socket, path string) (itemsLoad, error)
}

// Saved data's files in the partition directory: redis' RDB snapshot, memcached's items.
const (
	savedFileName      = "dump.rdb"
	savedItemsFileName = "items.dump"
)

// partitionPaths are the files of one partition's state directory.
type partitionPaths struct {
	dir     string
	socket  string
	pidfile string
	logfile string
	record  string // the partition's tenant, engine and applied spec, for adoption
	// saved is where redis writes its snapshot on Shutdown and reads it at its next start;
	// savedItems where memcached's items are saved and loaded from (itemsdump.go).
	saved      string
	savedItems string
}

func pathsFor(root, tenant string) partitionPaths {
	dir := filepath.Join(root, partitionDirName(tenant))
	return partitionPaths{
		dir:     dir,
		socket:  filepath.Join(dir, "sock"),
		pidfile: filepath.Join(dir, "pid"),
		logfile: filepath.Join(dir, "engine.log"),
		record:  filepath.Join(dir, "partition.json"),
		saved:   filepath.Join(dir, savedFileName),

		savedItems: filepath.Join(dir, savedItemsFileName),
	}
}

// maxSocketPathLength is the longest unix socket path Linux accepts (sun_path minus its NUL).
const maxSocketPathLength = 107

// maxRootLength is the longest state root whose partition sockets all fit.
const maxRootLength = maxSocketPathLength - len("/") - maxDirNameLength - len("/sock")

// resolveBinary finds an engine executable: the configured path, or name in PATH.
func resolveBinary(configured, name string) (string, error) {
	if configured == "" {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%w: %s is not in PATH", ErrBinaryNotFound, name)
		}
		return path, nil
	}
	info, err := os.Stat(configured)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBinaryNotFound, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrBinaryNotFound, configured)
	}
	return configured, nil
}

// pollEvery is how often readiness and resize progress are checked.
const pollEvery = 20 * time.Millisecond
