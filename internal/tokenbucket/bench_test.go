package tokenbucket

import (
	"context"
	"testing"
)

// BenchmarkWaitNoDelay is the request-path cost when the limit is not reached: one mutex
// round per bucket, no allocation.
func BenchmarkWaitNoDelay(b *testing.B) {
	bucket, err := New(Limit{Rate: 1e15, Burst: 1e12}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := bucket.Wait(ctx, 1000); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLimiterWaitNoDelay is the same for a bytes+ops Limiter.
func BenchmarkLimiterWaitNoDelay(b *testing.B) {
	l, err := NewLimiter(Limit{Rate: 1e15, Burst: 1e12}, Limit{Rate: 1e12, Burst: 1e9}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Wait(ctx, 1000); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLimiterWaitParallel: many connections of one tenant contending for its limiter.
func BenchmarkLimiterWaitParallel(b *testing.B) {
	l, err := NewLimiter(Limit{Rate: 1e15, Burst: 1e12}, Limit{Rate: 1e12, Burst: 1e9}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := l.Wait(ctx, 1000); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
