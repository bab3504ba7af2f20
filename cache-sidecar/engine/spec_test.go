package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPartitionDirName(t *testing.T) {
	tests := []struct {
		tenant     string
		wantPrefix string
	}{
		{"team-a/orders", "team-a_orders-"},
		{"team-a_orders", "team-a_orders-"},
		{"../etc", "_._etc-"},
		{".hidden", "_hidden-"},
		{"a very long tenant name that goes on and on/cart", "a_very_long_tena-"},
		{"Ünïcode/x", "__n__code_x-"},
	}
	seen := make(map[string]string)
	for _, tt := range tests {
		got := partitionDirName(tt.tenant)
		if !strings.HasPrefix(got, tt.wantPrefix) || len(got) != len(tt.wantPrefix)+dirHashLength {
			t.Errorf("partitionDirName(%q) = %q, want %q + %d hex digits", tt.tenant, got, tt.wantPrefix, dirHashLength)
		}
		if len(got) > maxDirNameLength || strings.ContainsAny(got, "/\x00") {
			t.Errorf("partitionDirName(%q) = %q is not a short safe path component", tt.tenant, got)
		}
		if got != partitionDirName(tt.tenant) {
			t.Errorf("partitionDirName(%q) is not deterministic", tt.tenant)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("tenants %q and %q share directory %q", other, tt.tenant, got)
		}
		seen[got] = tt.tenant
	}
}

func TestValidateSpec(t *testing.T) {
	redis, memcached := redisDriver{}, memcachedDriver{}
	tests := []struct {
		name    string
		drv     driver
		spec    PartitionSpec
		wantErr error
		wantMsg string
	}{
		{"redis lru", redis, PartitionSpec{"t/a", 16 << 20, LRU}, nil, ""},
		{"redis lfu", redis, PartitionSpec{"t/a", 16 << 20, LFU}, nil, ""},
		{"memcached lru", memcached, PartitionSpec{"t/a", 16 << 20, LRU}, nil, ""},
		{"memcached lfu", memcached, PartitionSpec{"t/a", 16 << 20, LFU}, ErrUnsupportedPolicy, "segmented LRU"},
		{"empty tenant", redis, PartitionSpec{"", 16 << 20, LRU}, ErrInvalidSpec, "empty tenant"},
		{"control character", redis, PartitionSpec{"t/\n", 16 << 20, LRU}, ErrInvalidSpec, "non-printable"},
		{"invalid utf-8", redis, PartitionSpec{"t/\xff", 16 << 20, LRU}, ErrInvalidSpec, "invalid character"},
		{"tenant too long", redis, PartitionSpec{strings.Repeat("x", maxTenantLength+1), 16 << 20, LRU}, ErrInvalidSpec, "at most"},
		{"zero memory", redis, PartitionSpec{"t/a", 0, LRU}, ErrInvalidSpec, "must be positive"},
		{"negative memory", memcached, PartitionSpec{"t/a", -1, LRU}, ErrInvalidSpec, "must be positive"},
		{"redis below minimum", redis, PartitionSpec{"t/a", 1 << 20, LRU}, ErrInvalidSpec, "redis's minimum"},
		{"memcached below minimum", memcached, PartitionSpec{"t/a", 7 << 20, LRU}, ErrInvalidSpec, "memcached's minimum of 8388608 bytes (8 MiB)"},
		{"absurd memory", redis, PartitionSpec{"t/a", 1 << 62, LRU}, ErrInvalidSpec, "exceeds the maximum"},
		{"unknown policy", redis, PartitionSpec{"t/a", 16 << 20, "fifo"}, ErrInvalidSpec, `unknown eviction policy "fifo"`},
		{"empty policy", memcached, PartitionSpec{"t/a", 16 << 20, ""}, ErrInvalidSpec, "unknown eviction policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateSpec(tt.spec, tt.drv)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("validateSpec = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", err, tt.wantMsg)
			}
		})
	}
}

func TestMemcachedEffectiveMemoryIsWholeMiB(t *testing.T) {
	d := memcachedDriver{}
	for in, want := range map[int64]int64{16 << 20: 16 << 20, 16<<20 + 1: 16 << 20, 17<<20 - 1: 16 << 20} {
		if got := d.effectiveMemory(in); got != want {
			t.Errorf("effectiveMemory(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestBackoffDelayDoublesUpToTheCap(t *testing.T) {
	initial, limit := 100*time.Millisecond, time.Second
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := backoffDelay(i+1, initial, limit); got != w*time.Millisecond {
			t.Errorf("backoffDelay(%d) = %s, want %s", i+1, got, w*time.Millisecond)
		}
	}
	if got := backoffDelay(1000, initial, limit); got != limit {
		t.Errorf("backoffDelay(1000) = %s, want the cap %s", got, limit)
	}
}

func TestMaxRootLengthMatchesTheDocumentedLimit(t *testing.T) {
	if maxRootLength != 76 {
		t.Fatalf("maxRootLength = %d; update Config.Root's doc comment", maxRootLength)
	}
}
