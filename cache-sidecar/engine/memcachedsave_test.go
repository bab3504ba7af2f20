package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/enginetest"
)

// metaClient is a test client speaking memcached's meta commands on one connection.
type metaClient struct {
	t *testing.T
	c memcacheClient
}

func dialMeta(t *testing.T, socket string) metaClient {
	t.Helper()
	c, err := dialMemcache(context.Background(), socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return metaClient{t: t, c: c}
}

// set stores key (base64 with the b flag when it is not a text key) with flags and a TTL in
// memcached's own terms (0: never; above 30 days: a unix time).
func (m metaClient) set(key, value []byte, flags uint32, ttl int64) {
	m.t.Helper()
	token, flag := metaKey(key)
	reply, err := m.c.command(fmt.Sprintf("ms %s %d%s F%d T%d\r\n%s", token, len(value), flag, flags, ttl, value))
	if err != nil || reply != "HD" {
		m.t.Fatalf("ms %q: %q %v", key, reply, err)
	}
}

// get returns key's value, flags and remaining TTL (-1: none); ok is false on a miss.
func (m metaClient) get(key []byte) (value []byte, flags uint32, ttl int64, ok bool) {
	m.t.Helper()
	var got *savedItem
	if err := m.c.metaGet([][]byte{key}, func(it savedItem) error {
		got = &savedItem{key: it.key, flags: it.flags, expiry: it.expiry, value: bytes.Clone(it.value)}
		return nil
	}); err != nil {
		m.t.Fatal(err)
	}
	if got == nil {
		return nil, 0, 0, false
	}
	ttl = -1
	if got.expiry != 0 {
		ttl = got.expiry - time.Now().Unix()
	}
	return got.value, got.flags, ttl, true
}

// savedItemCase is one item TestMemcachedSavesItems stores before the shutdown.
type savedItemCase struct {
	key   []byte
	flags uint32
	ttl   int64 // as given to ms
	// wantTTL bounds the remaining TTL after the restore (-1: none); gone: the item expired.
	wantTTL [2]int64
	gone    bool
}

// TestMemcachedSavesItems: a memcached partition saved on Shutdown comes back at the next
// start with every item's value and client flags and its remaining TTL (relative, and absolute
// beyond memcached's 30 days), binary keys included; items that expired while it was down stay
// gone; the restored partition still resizes live. An engine that crashed (no save) starts
// empty.
func TestMemcachedSavesItems(t *testing.T) {
	const plain = 2000
	cfg := testConfig(t, Memcached)
	spec := PartitionSpec{Tenant: "t/items", MemoryBytes: 64 * mib, EvictionPolicy: LRU}
	first := startManager(t, cfg)
	mustReconcile(t, first, spec)
	mc := dialMeta(t, mustSocket(t, first, spec.Tenant))

	// A crash saves nothing: the restarted engine is empty.
	mc.set([]byte("before-crash"), []byte("v"), 0, 0)
	pid := mustStatus(t, first, spec.Tenant).PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crashed engine's restart", func() bool {
		st := mustStatus(t, first, spec.Tenant)
		return st.State == Running && st.PID != pid
	})
	mc = dialMeta(t, mustSocket(t, first, spec.Tenant))
	if _, _, _, ok := mc.get([]byte("before-crash")); ok {
		t.Fatal("an item survived a crash without a save")
	}

	farFuture := time.Now().Add(40 * 24 * time.Hour).Unix()
	cases := []savedItemCase{
		{key: []byte("no-ttl"), flags: 7, ttl: 0, wantTTL: [2]int64{-1, -1}},
		{key: []byte("hour"), flags: 1 << 31, ttl: 3600, wantTTL: [2]int64{3590, 3600}},
		{key: []byte("forty-days"), flags: 3, ttl: farFuture, wantTTL: [2]int64{40*24*3600 - 60, 40 * 24 * 3600}},
		{key: []byte("bin\x00ary key\r\n"), flags: 9, ttl: 0, wantTTL: [2]int64{-1, -1}},
		{key: []byte("short"), flags: 5, ttl: 1, gone: true},
	}
	value := func(key []byte) []byte { return []byte("value of " + base64.StdEncoding.EncodeToString(key)) }
	for _, c := range cases {
		mc.set(c.key, value(c.key), c.flags, c.ttl)
	}
	big := make([]byte, 100<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	mc.set([]byte("big"), big, 0, 0)
	newWorkload(t, Memcached, mustSocket(t, first, spec.Tenant)).set("k", 0, plain, 1000)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // "short" expires while the partition is down

	second := startManager(t, cfg)
	mustReconcile(t, second, spec)
	mc = dialMeta(t, mustSocket(t, second, spec.Tenant))
	for _, c := range cases {
		got, flags, ttl, ok := mc.get(c.key)
		switch {
		case c.gone && ok:
			t.Errorf("%q expired while the partition was down and came back", c.key)
		case c.gone:
		case !ok:
			t.Errorf("%q is missing after the restore", c.key)
		case !bytes.Equal(got, value(c.key)) || flags != c.flags || ttl < c.wantTTL[0] || ttl > c.wantTTL[1]:
			t.Errorf("%q after the restore: value %q flags %d ttl %d, want %q %d ttl in %v", c.key, got, flags, ttl, value(c.key), c.flags, c.wantTTL)
		}
	}
	if got, _, _, ok := mc.get([]byte("big")); !ok || !bytes.Equal(got, big) {
		t.Errorf("the 100 KiB value came back %v, %d bytes", ok, len(got))
	}
	if hits := newWorkload(t, Memcached, mustSocket(t, second, spec.Tenant)).read("k", 0, plain); hits != plain {
		t.Errorf("%d of %d keys after the restore", hits, plain)
	}

	// Still resizable: memcached's restartable cache would refuse both.
	for _, memory := range []int64{16 * mib, 128 * mib} {
		spec.MemoryBytes = memory
		mustReconcile(t, second, spec)
		if st := mustStats(t, second, spec.Tenant); st.LimitBytes != memory || st.UsedBytes > memory {
			t.Errorf("restored partition resized to %d MiB: limit %d, used %d", memory>>20, st.LimitBytes, st.UsedBytes)
		}
	}
}

// TestMemcachedRefusesDamagedItems: a saved items file that is truncated, altered, or not one
// at all is refused with a log that names the file and the fault, and the partition starts
// empty and serves; the file is removed.
func TestMemcachedRefusesDamagedItems(t *testing.T) {
	const keys = 500
	cfg := testConfig(t, Memcached)
	spec := PartitionSpec{Tenant: "t/damaged", MemoryBytes: 16 * mib, EvictionPolicy: LRU}
	paths := pathsFor(cfg.Root, spec.Tenant)
	first := startManager(t, cfg)
	mustReconcile(t, first, spec)
	newWorkload(t, Memcached, mustSocket(t, first, spec.Tenant)).set("k", 0, keys, 100)
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(paths.savedItems)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		data  []byte
		fault string
	}{
		{"truncated", good[:len(good)*2/3], "truncated"},
		{"without its checksum", good[:len(good)-2], "truncated checksum"},
		{"a byte changed", flipByte(good, len(good)/2), ""},
		{"not an items file", []byte("REDIS0011 whatever"), "does not start with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(paths.savedItems, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			logs := &enginetest.LockedBuffer{}
			cfg := cfg
			cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
			m := startManager(t, cfg)
			mustReconcile(t, m, spec)
			if st := mustStats(t, m, spec.Tenant); st.Items != 0 {
				t.Errorf("%d items loaded from a damaged file", st.Items)
			}
			rec, ok := logs.LogRecord("the saved items are refused; the partition starts empty")
			if !ok || rec["file"] != paths.savedItems || !strings.Contains(fmt.Sprint(rec["err"]), tc.fault) {
				t.Errorf("log %v, want the refusal naming %s and %q:\n%s", rec, paths.savedItems, tc.fault, logs)
			}
			if _, err := os.Stat(paths.savedItems); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the damaged file is still there: %v", err)
			}
			if err := m.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func flipByte(b []byte, i int) []byte {
	out := bytes.Clone(b)
	out[i] ^= 0x20
	return out
}

// encodeItems writes items as a saved items file.
func encodeItems(t testing.TB, items []savedItem) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := newItemsDumpWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if err := w.write(it); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decodeItems(data []byte) ([]savedItem, error) {
	var out []savedItem
	_, err := readItemsDump(bytes.NewReader(data), func(it savedItem) error {
		out = append(out, savedItem{key: bytes.Clone(it.key), flags: it.flags, expiry: it.expiry, value: bytes.Clone(it.value)})
		return nil
	})
	return out, err
}

// FuzzItemsDump: any input either reads as a complete, intact file or fails with
// errItemsDump, never panicking nor allocating what it does not hold; items written read back
// equal, and every strict prefix of a written file fails.
func FuzzItemsDump(f *testing.F) {
	f.Add(encodeItems(f, nil), []byte("k"), []byte("v"), uint32(1), int64(0))
	f.Add(encodeItems(f, []savedItem{{key: []byte("a"), flags: 2, expiry: 1700000000, value: []byte("xyz")}}), []byte("\x00\xff"), []byte{}, uint32(0), int64(5))
	f.Add([]byte(itemsDumpMagic+"I\xff\xff\xff\xff\x0f"), []byte("key"), bytes.Repeat([]byte("v"), 300), uint32(1<<31), int64(1<<40))
	f.Fuzz(func(t *testing.T, data, key, value []byte, flags uint32, expiry int64) {
		if _, err := decodeItems(data); err != nil && !errors.Is(err, errItemsDump) {
			t.Fatalf("an error that is not errItemsDump: %v", err)
		}
		if len(key) == 0 || len(key) > maxTextKeyLength || expiry < 0 {
			return
		}
		items := []savedItem{{key: key, flags: flags, expiry: expiry, value: value}, {key: []byte("second"), value: data}}
		encoded := encodeItems(t, items)
		got, err := decodeItems(encoded)
		if err != nil || len(got) != 2 || !bytes.Equal(got[0].key, key) || got[0].flags != flags || got[0].expiry != expiry ||
			!bytes.Equal(got[0].value, value) || !bytes.Equal(got[1].value, data) {
			t.Fatalf("round trip: %+v, %v", got, err)
		}
		for _, cut := range []int{0, len(encoded) / 2, len(encoded) - 1} {
			if _, err := decodeItems(encoded[:cut]); !errors.Is(err, errItemsDump) {
				t.Fatalf("the first %d of %d bytes read with %v", cut, len(encoded), err)
			}
		}
	})
}

// BenchmarkMemcachedSaveLoad saves a memcached partition holding 128 MiB of 4 KiB random
// values and loads it into a fresh engine, reporting each direction's rate in MiB/s of keys
// and values (go test -run '^$' -bench MemcachedSaveLoad -benchtime 1x ./cache-sidecar/engine/).
func BenchmarkMemcachedSaveLoad(b *testing.B) {
	const valueSize, keys = 4096, 32 * 1024
	for range b.N {
		cfg := testConfig(b, Memcached)
		spec := PartitionSpec{Tenant: "t/bench", MemoryBytes: 512 * mib, EvictionPolicy: LRU}
		m, err := NewManager(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Reconcile(context.Background(), []PartitionSpec{spec}); err != nil {
			b.Fatal(err)
		}
		_, socket, _ := m.Endpoint(spec.Tenant)
		c, err := dialMemcache(context.Background(), socket)
		if err != nil {
			b.Fatal(err)
		}
		value := make([]byte, valueSize)
		for start := 0; start < keys; start += memcachedSaveBatch {
			for i := start; i < start+memcachedSaveBatch; i++ {
				_, _ = rand.Read(value)
				_, _ = fmt.Fprintf(c.w, "ms k:%d %d q\r\n%s\r\n", i, valueSize, value)
			}
			var res itemsLoad
			if err := c.quietRoundTrip(&res); err != nil || res.refused != 0 {
				b.Fatalf("storing: %v, %d refused", err, res.refused)
			}
		}
		c.Close()
		began := time.Now()
		if err := m.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		saved := time.Since(began)
		info, err := os.Stat(pathsFor(cfg.Root, spec.Tenant).savedItems)
		if err != nil {
			b.Fatal(err)
		}
		m2, err := NewManager(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		began = time.Now()
		if err := m2.Reconcile(context.Background(), []PartitionSpec{spec}); err != nil {
			b.Fatal(err)
		}
		loaded := time.Since(began)
		st, err := m2.Stats(context.Background(), spec.Tenant)
		if err != nil || st.Items != keys {
			b.Fatalf("after the load: %d items (%v), want %d", st.Items, err, keys)
		}
		if err := m2.Reconcile(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
		m2.Close()
		mibs := float64(keys*(valueSize+len("k:00000"))) / (1 << 20)
		b.ReportMetric(mibs/saved.Seconds(), "save-MiB/s")
		b.ReportMetric(mibs/loaded.Seconds(), "load-MiB/s")
		b.Logf("%.0f MiB (file %d MiB): saved (with the engine stopping) in %v, started and loaded in %v", mibs, info.Size()>>20, saved, loaded)
	}
}
