package tokenbucket

import (
	"context"
	"fmt"
	"time"
)

// Limiter limits one tenant's bandwidth and operations together: a request of n bytes costs n
// tokens of the bytes bucket and one of the ops bucket, and waits until both allow it, in one
// bounded wait. Safe for concurrent use.
type Limiter struct {
	bytes, ops *Bucket
	clock      Clock
	maxWait    time.Duration
	stats      counters
}

// NewLimiter returns a limiter with full buckets. opts.Name is ignored: the buckets are named
// "bytes" and "ops" in errors.
func NewLimiter(bytes, ops Limit, opts Options) (*Limiter, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	opts.Name = "bytes"
	b, err := New(bytes, opts)
	if err != nil {
		return nil, fmt.Errorf("bytes limit: %w", err)
	}
	opts.Name = "ops"
	o, err := New(ops, opts)
	if err != nil {
		return nil, fmt.Errorf("ops limit: %w", err)
	}
	return &Limiter{bytes: b, ops: o, clock: opts.Clock, maxWait: opts.MaxWait}, nil
}

// Wait blocks until a request of n bytes may proceed (see Bucket.Wait).
func (l *Limiter) Wait(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("tokenbucket: negative request of %d bytes", n)
	}
	return waitAll(ctx, l.clock, l.maxWait, &l.stats, claim{l.bytes, n}, claim{l.ops, 1})
}

// TryReserve is Wait for callers that keep their own clock (the simulator): it never blocks.
// When a request of n bytes may proceed within the maximum wait, it takes the tokens and
// returns how long the request must be held first; otherwise it takes nothing and reports
// false, where Wait would return a *ThrottledError.
func (l *Limiter) TryReserve(n int64) (time.Duration, bool) {
	l.stats.requests.Add(1)
	claims := []claim{{l.bytes, max(n, 0)}, {l.ops, 1}}
	var tickets [maxClaims]ticket
	wait, _, _ := reserveAll(l.clock.Now(), claims, tickets[:])
	if wait > l.maxWait {
		releaseAll(claims, tickets[:])
		l.stats.throttled.Add(1)
		return wait, false
	}
	if wait > 0 {
		l.stats.delayed.Add(1)
		l.stats.waitedNanos.Add(int64(wait))
	}
	return wait, true
}

// Charge takes n bytes from the bytes bucket now, allowing debt (see Bucket.Charge): for
// bytes known only after a request went through, such as its reply's.
func (l *Limiter) Charge(n int64) { l.bytes.Charge(n) }

// PaceBytes takes n bytes from the bytes bucket whatever it holds and returns how long the
// caller must wait before moving them (see Bucket.Reserve): for a transfer sent in chunks, each
// chunk taking its tokens just before it goes, so the transfer moves at the limit instead of
// leaving the bucket in debt after it went at full speed.
func (l *Limiter) PaceBytes(n int64) time.Duration { return l.bytes.Reserve(n) }

// SetLimits changes both limits (see Bucket.SetLimit). Both are validated before either
// changes.
func (l *Limiter) SetLimits(bytes, ops Limit) error {
	if err := bytes.validate(); err != nil {
		return fmt.Errorf("bytes limit: %w", err)
	}
	if err := ops.validate(); err != nil {
		return fmt.Errorf("ops limit: %w", err)
	}
	if err := l.bytes.SetLimit(bytes); err != nil {
		return err
	}
	return l.ops.SetLimit(ops)
}

// Limits returns the current bytes and ops limits.
func (l *Limiter) Limits() (bytes, ops Limit) { return l.bytes.Limit(), l.ops.Limit() }

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats { return l.stats.snapshot() }
