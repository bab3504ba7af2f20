package engine

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/mrc"
)

const (
	// memcachedPageSize is memcached 1.6's slab page size (fixed at 1 MiB); its memory limit
	// counts whole pages.
	memcachedPageSize = 1 << 20
	// memcachedMinMemoryBytes: every slab class in use holds at least one 1 MiB page whatever
	// the limit, so a few MiB would be overrun by the first few value sizes. The API's contract
	// with the operator, which never plans less.
	memcachedMinMemoryBytes = v1.MinMemcachedPartitionBytes
)

type memcachedDriver struct {
	binaryPath string // empty: memcached from PATH
	// user is who memcached runs as when the manager runs as root (memcached refuses to run
	// as root without -u); empty otherwise.
	user           string
	threads        int
	maxConnections int
}

func (memcachedDriver) kind() Engine          { return Memcached }
func (memcachedDriver) processName() string   { return "memcached" }
func (memcachedDriver) minMemoryBytes() int64 { return memcachedMinMemoryBytes }

func (d memcachedDriver) binary() (string, error) {
	return resolveBinary(d.binaryPath, d.processName())
}

// effectiveMemory: memcached takes its limit in whole MiB.
func (memcachedDriver) effectiveMemory(requested int64) int64 { return requested &^ (1<<20 - 1) }

func (memcachedDriver) checkPolicy(p EvictionPolicy) error {
	if p != LRU {
		return fmt.Errorf("%w: memcached evicts only by its segmented LRU; ask for %q, not %q", ErrUnsupportedPolicy, LRU, p)
	}
	return nil
}

// prepareDir hands the directory to the engine user, who creates the socket in it, and checks
// that user can reach it at all.
func (d memcachedDriver) prepareDir(dir string) error {
	if d.user == "" {
		return nil
	}
	u, err := user.Lookup(d.user)
	if err != nil {
		return fmt.Errorf("memcached must run as a non-root user when the manager runs as root: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("user %s has a non-numeric uid %q or gid %q", d.user, u.Uid, u.Gid)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	return checkSearchable(filepath.Dir(dir), d.user, uid, gid)
}

// checkSearchable verifies that uid/gid may traverse every directory from path up to "/", so
// an engine running as that user can create its socket below path. Only the primary group is
// considered, which can only make the check stricter than the kernel's.
func checkSearchable(path, userName string, uid, gid int) error {
	for dir := path; ; dir = filepath.Dir(dir) {
		info, err := os.Stat(dir)
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("cannot read the owner of %s", dir)
		}
		var bit os.FileMode = 0o001
		switch {
		case int(st.Uid) == uid:
			bit = 0o100
		case int(st.Gid) == gid:
			bit = 0o010
		}
		if info.Mode().Perm()&bit == 0 {
			return fmt.Errorf("memcached runs as %s (uid %d), who cannot enter %s (mode %#o, owner %d:%d); make the state root and its parents searchable (o+x)",
				userName, uid, dir, info.Mode().Perm(), st.Uid, st.Gid)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

func (d memcachedDriver) args(spec PartitionSpec, paths partitionPaths) []string {
	args := []string{
		"-s", paths.socket, // a unix socket disables the TCP and UDP listeners
		"-a", "0700",
		"-m", strconv.FormatInt(d.effectiveMemory(spec.MemoryBytes)>>20, 10),
		"-c", strconv.Itoa(d.maxConnections),
		"-t", strconv.Itoa(d.threads),
	}
	if d.user != "" {
		args = append(args, "-u", d.user)
	}
	return args
}

func (memcachedDriver) ping(ctx context.Context, socket string) error {
	c, err := dialMemcache(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.version()
	return err
}

func (memcachedDriver) configure(context.Context, string) error { return nil }

func (memcachedDriver) liveSpec(ctx context.Context, socket string) (PartitionSpec, error) {
	c, err := dialMemcache(ctx, socket)
	if err != nil {
		return PartitionSpec{}, err
	}
	defer c.Close()
	st, err := c.stats("")
	if err != nil {
		return PartitionSpec{}, err
	}
	limit, err := statInt(st, "limit_maxbytes")
	if err != nil {
		return PartitionSpec{}, err
	}
	return PartitionSpec{MemoryBytes: limit, EvictionPolicy: LRU}, nil
}

// apply sets cache_memlimit and, when memcached then holds more than the limit, shrinks it
// (see shrinkMemcached): a lower cache_memlimit alone frees nothing already stored.
func (d memcachedDriver) apply(ctx context.Context, socket string, spec PartitionSpec) error {
	c, err := dialMemcache(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.stats("")
	if err != nil {
		return err
	}
	current, err := statInt(st, "limit_maxbytes")
	if err != nil {
		return err
	}
	limit := d.effectiveMemory(spec.MemoryBytes)
	if current != limit {
		if err := c.setMemoryLimit(limit >> 20); err != nil {
			return err
		}
	}
	return shrinkMemcached(ctx, socket, c, limit)
}

func (memcachedDriver) stats(ctx context.Context, socket string) (Stats, error) {
	c, err := dialMemcache(ctx, socket)
	if err != nil {
		return Stats{}, err
	}
	defer c.Close()
	st, err := c.stats("")
	if err != nil {
		return Stats{}, err
	}
	slabs, err := c.stats("slabs")
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	for _, f := range []struct {
		fields map[string]string
		name   string
		dst    *int64
	}{
		{st, "limit_maxbytes", &s.LimitBytes},
		{slabs, "total_malloced", &s.UsedBytes},
		{st, "bytes", &s.DataBytes},
		{st, "curr_items", &s.Items},
		{st, "evictions", &s.Evictions},
		{st, "get_hits", &s.Hits},
		{st, "get_misses", &s.Misses},
	} {
		if *f.dst, err = statInt(f.fields, f.name); err != nil {
			return Stats{}, err
		}
	}
	settings, err := c.stats("settings")
	if err != nil {
		return Stats{}, err
	}
	if s.Slabs, err = slabSettings(settings); err != nil {
		return Stats{}, err
	}
	return s, nil
}

// slabSettings reads what memcached sizes its slab classes from.
func slabSettings(settings map[string]string) (*mrc.MemcachedSettings, error) {
	var out mrc.MemcachedSettings
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"chunk_size", &out.ChunkSize},
		{"slab_chunk_max", &out.SlabChunkMax},
		{"item_size_max", &out.PageSize},
	} {
		var err error
		if *f.dst, err = statInt(settings, f.name); err != nil {
			return nil, err
		}
	}
	factor, err := strconv.ParseFloat(settings["growth_factor"], 64)
	if err != nil {
		return nil, protocolErrorf("stat growth_factor=%q is not a number", settings["growth_factor"])
	}
	out.GrowthFactor = factor
	out.CASEnabled = settings["cas_enabled"] == "yes"
	// Slab pages are item_size_max, but never smaller than memcached's 1 MiB page.
	out.PageSize = max(out.PageSize, memcachedPageSize)
	return &out, nil
}

func statInt(fields map[string]string, name string) (int64, error) {
	raw, ok := fields[name]
	if !ok {
		return 0, protocolErrorf("stats have no %s", name)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, protocolErrorf("stat %s=%q is not an integer", name, raw)
	}
	return n, nil
}
