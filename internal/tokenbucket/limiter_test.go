package tokenbucket

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func newManualLimiter(t *testing.T, bytes, ops Limit, maxWait time.Duration) (*Limiter, *ManualClock) {
	t.Helper()
	clock := NewManualClock(epoch)
	l, err := NewLimiter(bytes, ops, Options{Clock: clock, MaxWait: maxWait})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// TestLimiterRate: small requests are paced by the ops limit, large ones by the bytes limit.
func TestLimiterRate(t *testing.T) {
	tests := []struct {
		name         string
		requestBytes int64
		wantPerSec   float64 // requests per second
	}{
		{"ops bound", 10, 50},        // 500 B/s of 100 KB/s; 50 ops/s binds
		{"bytes bound", 10000, 10.0}, // 100 KB/s / 10 KB = 10 requests/s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock := newManualLimiter(t, Limit{Rate: 100000, Burst: 10000}, Limit{Rate: 50, Burst: 5}, time.Minute)
			var running atomic.Int64
			var requests atomic.Int64
			stop := epoch.Add(20 * time.Second)
			for range 3 {
				running.Add(1)
				go func() {
					defer running.Add(-1)
					for clock.Now().Before(stop) {
						if err := l.Wait(context.Background(), tt.requestBytes); err != nil {
							t.Error(err)
							return
						}
						requests.Add(1)
					}
				}()
			}
			drive(clock, func() int { return int(running.Load()) })
			got := float64(requests.Load()) / clock.Now().Sub(epoch).Seconds()
			// The first requests ride on the initial bursts; over 20 s that is a few percent.
			if got < tt.wantPerSec || got > tt.wantPerSec*1.06 {
				t.Errorf("%.2f requests/s, want %.1f (+bursts)", got, tt.wantPerSec)
			}
		})
	}
}

func TestLimiterThrottle(t *testing.T) {
	tests := []struct {
		name      string
		drain     int64 // bytes of a first request that empties buckets
		request   int64
		wantLimit string
	}{
		{"ops exhausted", 1, 1, "ops"},
		{"bytes exhausted", 1000, 1000, "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newManualLimiter(t, Limit{Rate: 1000, Burst: 1000}, Limit{Rate: 1, Burst: 1}, 100*time.Millisecond)
			if err := l.Wait(context.Background(), tt.drain); err != nil {
				t.Fatal(err)
			}
			err := l.Wait(context.Background(), tt.request)
			var te *ThrottledError
			if !errors.As(err, &te) || !errors.Is(err, ErrThrottled) || te.Limit != tt.wantLimit {
				t.Fatalf("got %v, want throttled by %s", err, tt.wantLimit)
			}
			// Neither bucket kept the refused request's tokens.
			if l.bytes.Reserve(0) != 0 && tt.wantLimit == "ops" {
				t.Error("bytes bucket kept a refused request's tokens")
			}
			if s := l.Stats(); s.Requests != 2 || s.Throttled != 1 {
				t.Errorf("stats %+v, want 2 requests, 1 throttled", s)
			}
		})
	}
}

func TestLimiterSetLimits(t *testing.T) {
	l, clock := newManualLimiter(t, Limit{Rate: 10, Burst: 10}, Limit{Rate: 1, Burst: 1}, time.Minute)
	if err := l.SetLimits(Limit{Rate: 100, Burst: 100}, Limit{Rate: -1}); err == nil {
		t.Fatal("invalid ops limit accepted")
	}
	if b, o := l.Limits(); b != (Limit{Rate: 10, Burst: 10}) || o != (Limit{Rate: 1, Burst: 1}) {
		t.Fatalf("a rejected SetLimits changed the limits to %+v, %+v", b, o)
	}
	if err := l.Wait(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() { result <- l.Wait(context.Background(), 10) }() // 1 s at the old rates
	waitTimers(t, clock, 1)
	if err := l.SetLimits(Limit{}, Limit{}); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil || clock.Now() != epoch {
		t.Errorf("after lifting the limits: %v at %v", err, clock.Now().Sub(epoch))
	}
	if err := l.Wait(context.Background(), -1); err == nil {
		t.Error("negative request accepted")
	}
}

// TestLimiterCharge: Charge takes bytes only, so a later request waits for the bytes debt but
// not for an ops token.
func TestLimiterCharge(t *testing.T) {
	l, clock := newManualLimiter(t, Limit{Rate: 1000, Burst: 1000}, Limit{Rate: 1, Burst: 1}, time.Minute)
	l.Charge(1499) // the 1-byte request below then misses 500 bytes: half a second
	result := make(chan error, 1)
	go func() { result <- l.Wait(context.Background(), 1) }()
	waitTimers(t, clock, 1)
	clock.Advance(500 * time.Millisecond)
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	if got := clock.Now().Sub(epoch); got != 500*time.Millisecond {
		t.Errorf("request after a 499-byte debt proceeded at %v, want 500ms", got)
	}
	if s := l.Stats(); s.Requests != 1 || s.Delayed != 1 {
		t.Errorf("stats %+v, want 1 request, delayed", s)
	}
}

// TestLimiterPaceBytes: chunks paced one after the other wait for the tokens of every chunk
// before them, so the transfer moves at the bytes limit once the burst is spent; the ops
// bucket is not touched.
func TestLimiterPaceBytes(t *testing.T) {
	tests := []struct {
		name   string
		chunks []int64
		want   []time.Duration
	}{
		{name: "within the burst", chunks: []int64{400, 600}, want: []time.Duration{0, 0}},
		{name: "past the burst", chunks: []int64{1000, 500, 500}, want: []time.Duration{0, 500 * time.Millisecond, time.Second}},
		{name: "one chunk over the burst", chunks: []int64{3000}, want: []time.Duration{0}},
		{name: "after a chunk over the burst", chunks: []int64{3000, 1000}, want: []time.Duration{0, 3 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newManualLimiter(t, Limit{Rate: 1000, Burst: 1000}, Limit{Rate: 1, Burst: 1}, time.Minute)
			for i, n := range tc.chunks {
				if got := l.PaceBytes(n); got != tc.want[i] {
					t.Errorf("chunk %d (%d bytes): wait %v, want %v", i, n, got, tc.want[i])
				}
			}
			if _, ok := l.TryReserve(0); !ok {
				t.Error("the ops bucket was charged by paced bytes")
			}
		})
	}
}
