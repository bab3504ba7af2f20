package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Engine names a cache engine.
type Engine string

// The engines a Manager can run.
const (
	Redis     Engine = "redis"
	Memcached Engine = "memcached"
)

// EvictionPolicy is how a partition chooses what to evict when it is full.
type EvictionPolicy string

// The eviction policies a partition can ask for.
const (
	LRU EvictionPolicy = "lru"
	LFU EvictionPolicy = "lfu"
)

// PartitionSpec is one tenant's partition on this node.
type PartitionSpec struct {
	// Tenant identifies the tenant, for example "team-a/orders".
	Tenant string
	// MemoryBytes is the partition's memory limit. memcached takes whole MiB, so it is rounded
	// down to a MiB multiple there.
	MemoryBytes int64
	// EvictionPolicy is LRU or LFU (LFU only for redis).
	EvictionPolicy EvictionPolicy
}

// State is where a partition is in its life cycle.
type State string

// Partition states. Only Running and Resizing partitions serve traffic.
const (
	Starting State = "Starting"
	Running  State = "Running"
	Resizing State = "Resizing"
	Draining State = "Draining"
	Failed   State = "Failed"
)

// Serving reports whether the proxy may route to a partition in this state.
func (s State) Serving() bool { return s == Running || s == Resizing }

// Errors a caller can test for with errors.Is. Each is wrapped with the details and, for
// partition-level failures, in a *PartitionError naming the tenant.
var (
	ErrInvalidSpec        = errors.New("invalid partition spec")
	ErrUnsupportedPolicy  = errors.New("eviction policy not supported by this engine")
	ErrDuplicateTenant    = errors.New("tenant listed more than once")
	ErrBinaryNotFound     = errors.New("engine binary not found")
	ErrUnknownPartition   = errors.New("no such partition")
	ErrPartitionNotActive = errors.New("partition has no running engine")
	ErrClosed             = errors.New("engine manager closed")
)

// PartitionError is a failure of one partition; Reconcile joins one per failed partition.
type PartitionError struct {
	Tenant string
	Err    error
}

func (e *PartitionError) Error() string { return fmt.Sprintf("partition %q: %v", e.Tenant, e.Err) }

func (e *PartitionError) Unwrap() error { return e.Err }

func partitionError(tenant string, err error) error {
	return &PartitionError{Tenant: tenant, Err: err}
}

// maxTenantLength bounds tenant IDs ("<namespace>/<name>" of Kubernetes names fits easily).
const maxTenantLength = 512

// maxMemoryBytes bounds a partition far above any node's memory, so the MiB and byte
// conversions for the engines' command lines cannot overflow.
const maxMemoryBytes = 1 << 50

// validateTenant checks what every engine needs from a tenant ID.
func validateTenant(tenant string) error {
	if tenant == "" {
		return fmt.Errorf("%w: empty tenant", ErrInvalidSpec)
	}
	if len(tenant) > maxTenantLength {
		return fmt.Errorf("%w: tenant is %d bytes long, at most %d allowed", ErrInvalidSpec, len(tenant), maxTenantLength)
	}
	for _, r := range tenant {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: tenant contains a non-printable or invalid character %q", ErrInvalidSpec, r)
		}
	}
	return nil
}

// validateSpec checks a spec against the engine that would run it.
func validateSpec(spec PartitionSpec, drv driver) error {
	if err := validateTenant(spec.Tenant); err != nil {
		return err
	}
	switch {
	case spec.MemoryBytes <= 0:
		return fmt.Errorf("%w: memory must be positive, got %d bytes", ErrInvalidSpec, spec.MemoryBytes)
	case spec.MemoryBytes < drv.minMemoryBytes():
		return fmt.Errorf("%w: memory %d bytes is below %s's minimum of %d bytes (%d MiB)",
			ErrInvalidSpec, spec.MemoryBytes, drv.kind(), drv.minMemoryBytes(), drv.minMemoryBytes()>>20)
	case spec.MemoryBytes > maxMemoryBytes:
		return fmt.Errorf("%w: memory %d bytes exceeds the maximum of %d bytes", ErrInvalidSpec, spec.MemoryBytes, int64(maxMemoryBytes))
	}
	switch spec.EvictionPolicy {
	case LRU, LFU:
		return drv.checkPolicy(spec.EvictionPolicy)
	default:
		return fmt.Errorf("%w: unknown eviction policy %q (want %q or %q)", ErrInvalidSpec, spec.EvictionPolicy, LRU, LFU)
	}
}

// Directory names: the tenant made safe for a path component, cut to a length that keeps the
// socket path short (unix socket paths are limited to 107 bytes), plus a hash of the whole
// tenant ID so tenants that sanitize to the same text still get distinct directories.
const (
	maxSanitizedNameLength = 16
	dirHashLength          = 8 // hex digits
	maxDirNameLength       = maxSanitizedNameLength + 1 + dirHashLength
)

// partitionDirName is the directory name of a tenant's partition under the state root.
func partitionDirName(tenant string) string {
	var b strings.Builder
	for i := 0; i < len(tenant) && b.Len() < maxSanitizedNameLength; i++ {
		c := tenant[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.' && b.Len() > 0: // never a leading dot: no hidden names, no "." or ".."
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(tenant))
	return b.String() + "-" + hex.EncodeToString(sum[:])[:dirHashLength]
}
