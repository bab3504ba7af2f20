package mrc

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// BenchmarkTrackerAccess measures the hot-path cost per access at several sampling rates, on a
// Zipf 0.9 stream over 100k keys whose hashes are precomputed (the proxy hashes each key once
// for routing and sampling). Unsampled accesses cost a hash mix, a compare and two atomic adds;
// the "sampled" metric is the fraction of accesses that took the O(log n) path.
func BenchmarkTrackerAccess(b *testing.B) {
	tb := newTraceBuilder(50, 100000, spreadSizes)
	trace := tb.trace(1<<16, tb.zipf(0, 100000, 0.9))
	sizes, err := GeometricSizes(1<<20, 1<<32, 32)
	if err != nil {
		b.Fatal(err)
	}
	for _, rate := range []float64{0.001, 0.01, 0.1, 1} {
		b.Run("rate="+strconv.FormatFloat(rate, 'g', -1, 64), func(b *testing.B) {
			// A budget large enough that the rate stays fixed for the whole run.
			tr, err := NewTracker(Config{Sizes: sizes, SampleRate: rate, MaxBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				a := &trace[i&(len(trace)-1)]
				tr.AccessHash(a.hash, a.size)
				i++
			}
			c := tr.Snapshot()
			b.ReportMetric(c.SampledAccesses/float64(c.Requests), "sampled")
		})
	}
}

// BenchmarkTrackerAccessKey includes hashing the key bytes (a 20-byte key).
func BenchmarkTrackerAccessKey(b *testing.B) {
	sizes, err := GeometricSizes(1<<20, 1<<32, 32)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTracker(Config{Sizes: sizes, SampleRate: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1<<12)
	for i := range keys {
		keys[i] = []byte("tenant:object:" + strconv.Itoa(100000+i))
	}
	i := 0
	for b.Loop() {
		tr.Access(keys[i&(len(keys)-1)], 1000)
		i++
	}
}

// BenchmarkTrackerAccessParallel shows the cost when many connections of one tenant access
// the tracker at once (shared counters, sampled path under a mutex).
func BenchmarkTrackerAccessParallel(b *testing.B) {
	tb := newTraceBuilder(51, 100000, spreadSizes)
	trace := tb.trace(1<<16, tb.zipf(0, 100000, 0.9))
	sizes, err := GeometricSizes(1<<20, 1<<32, 32)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTracker(Config{Sizes: sizes, SampleRate: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	var worker atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919 // each connection at its own place in the stream
		for pb.Next() {
			a := &trace[i&(len(trace)-1)]
			tr.AccessHash(a.hash, a.size)
			i++
		}
	})
}

// BenchmarkExactLRUAccess is the reference stack simulation's cost per access.
func BenchmarkExactLRUAccess(b *testing.B) {
	tb := newTraceBuilder(52, 100000, unitSize)
	trace := tb.trace(1<<16, tb.zipf(0, 100000, 0.9))
	e, err := NewExactLRU([]int64{1000, 10000, 100000})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		a := &trace[i&(len(trace)-1)]
		e.Access(a.key, a.size)
		i++
	}
}

// BenchmarkLookAsidePair is the accounting the sidecar does for one look-aside pair (a read
// that hits, then a write of the same key): the recorder's read and write and the ghost
// list's two accesses, at the default sampling rate of 0.1, on keys the tracker does not
// sample and on keys it does, with a ghost list that remembers evictions of other keys. Run
// with -benchmem: the unsampled path, which most requests take, must not allocate. On a
// loaded machine "cpu-ns/op", the CPU time per pair, is steadier than ns/op, which counts the
// time the benchmark waits for a core.
func BenchmarkLookAsidePair(b *testing.B) {
	models := map[string]func() (*EngineModel, error){
		"redis":     func() (*EngineModel, error) { return NewRedisModel(), nil },
		"memcached": func() (*EngineModel, error) { return NewMemcachedModel(DefaultMemcachedSettings) },
	}
	for _, engine := range []string{"redis", "memcached"} {
		for _, sampled := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/sampled=%t", engine, sampled), func(b *testing.B) {
				model, err := models[engine]()
				if err != nil {
					b.Fatal(err)
				}
				r, err := NewRecorder(Config{Sizes: []int64{1 << 20}, SampleRate: 0.1}, model)
				if err != nil {
					b.Fatal(err)
				}
				g, err := NewGhost(GhostConfig{WindowBytes: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				for i := range 1024 {
					g.RecordEvictionHash(keyhash.Sum64String("evicted:"+strconv.Itoa(i)), 200)
				}
				limit := r.Tracker().limit.Load()
				var hashes []uint64
				for i := 0; len(hashes) < 1024; i++ {
					h := keyhash.Sum64String("key:" + strconv.Itoa(i))
					if keyhash.Derive(h, samplingSalt) <= limit == sampled {
						hashes = append(hashes, h)
					}
				}
				i := 0
				cpu0 := processCPU(b)
				for b.Loop() {
					h := hashes[i&(len(hashes)-1)]
					g.AccessHash(h, r.Read(h, true, 12, 100))
					g.AccessHash(h, r.Write(h, 12, 100))
					i++
				}
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
