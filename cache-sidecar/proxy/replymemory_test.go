package proxy

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestLargeReplyMemoryIsReleased probes the proxy (in this process) with one request whose
// reply is ~64 MiB, the "get big big ..." (memcached) and "MGET big ..." (redis) on
// real engines, reads the reply to its end and checks that once the link is idle the heap is
// back within 20% (plus 4 MiB of slack for the test's own allocations) of what it was before:
// no reader, link or pipeline slot keeps the large reply. It logs the peak heap during the
// probe, which replies held whole in memory still make a few times the reply's size.
func TestLargeReplyMemoryIsReleased(t *testing.T) {
	const valueLen = 1000 * 1000
	const copies = 64
	value := strings.Repeat("v", valueLen)
	for _, proto := range []Protocol{Memcached, Redis} {
		t.Run(string(proto), func(t *testing.T) {
			acct := newAccount(t, "team-a/app")
			n, _ := singleNode(t, proto, acct, Options{})
			var request []byte
			var read func() int64
			if proto == Memcached {
				c := loginMC(t, n, acct)
				c.set("big", value)
				request = []byte("get" + strings.Repeat(" big", copies) + "\r\n")
				read = func() int64 {
					var total int64
					for range copies {
						line := c.line()
						if line != fmt.Sprintf("VALUE big 0 %d", valueLen) {
							t.Fatalf("line %q", line)
						}
						m, err := io.CopyN(io.Discard, c.br, valueLen+2)
						if err != nil {
							t.Fatal(err)
						}
						total += m
					}
					if got := c.line(); got != "END" {
						t.Fatalf("after the values: %q", got)
					}
					return total
				}
				defer c.nc.Close()
				probe(t, c.nc.Write, request, read, copies*valueLen)
				return
			}
			c := loginRESP(t, n, acct)
			if got := c.do("SET", "big", value); got != "+OK\r\n" {
				t.Fatalf("SET: %q", got)
			}
			args := []string{"MGET"}
			for range copies {
				args = append(args, "big")
			}
			request = resp.AppendCommandStrings(nil, args...)
			read = func() int64 {
				if line, err := c.br.ReadString('\n'); err != nil || line != fmt.Sprintf("*%d\r\n", copies) {
					t.Fatalf("MGET header %q, %v", line, err)
				}
				var total int64
				for range copies {
					if line, err := c.br.ReadString('\n'); err != nil || line != fmt.Sprintf("$%d\r\n", valueLen) {
						t.Fatalf("bulk header %q, %v", line, err)
					}
					m, err := io.CopyN(io.Discard, c.br, valueLen+2)
					if err != nil {
						t.Fatal(err)
					}
					total += m
				}
				return total
			}
			probe(t, c.nc.Write, request, read, copies*valueLen)
		})
	}
}

// probe measures the heap before, during and after one request whose reply read consumes.
func probe(t *testing.T, write func([]byte) (int, error), request []byte, read func() int64, want int64) {
	t.Helper()
	before := settledHeap()
	peak := sampleHeapPeak()
	if _, err := write(request); err != nil {
		t.Fatal(err)
	}
	if got := read(); got < want {
		t.Fatalf("read %d reply bytes, want %d", got, want)
	}
	peakHeap := peak()
	after := settledHeap()
	t.Logf("heap in use: %.1f MiB before, peak %.1f MiB during a %.1f MiB reply, %.1f MiB after",
		mib(before), mib(peakHeap), float64(want)/(1<<20), mib(after))
	checkHeapReturned(t, before, after)
}

// checkHeapReturned fails the test unless the heap after a probe is within 20% (plus 4 MiB of
// slack for the test's own allocations) of what it was before.
func checkHeapReturned(t *testing.T, before, after uint64) {
	t.Helper()
	if limit := before + before/5 + 4<<20; after > limit {
		t.Errorf("heap in use after the probe: %.1f MiB, want at most %.1f MiB (before: %.1f MiB)", mib(after), mib(limit), mib(before))
	}
}

// sampleHeapPeak samples the heap in use every 5ms until the returned function is called,
// which returns the largest sample.
func sampleHeapPeak() func() uint64 {
	var peak atomic.Uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak.Load()
	}
}

// settledHeap is the heap in use once garbage is collected (twice: sync.Pool keeps objects
// through one collection).
func settledHeap() uint64 {
	var ms runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond) // let the link's reader reach its wait
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
