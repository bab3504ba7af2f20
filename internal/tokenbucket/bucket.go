// Package tokenbucket limits a tenant's bandwidth (bytes/s) and operations (ops/s) on the
// cache sidecar's request path.
//
// Semantics (LACS: hold, don't drop; depth at least the largest object):
//   - A request for n tokens is queued in arrival order behind the tokens already promised to
//     earlier requests, and may proceed once the bucket has accrued min(n, depth) tokens for
//     it. A request larger than the depth therefore never deadlocks: it proceeds when the
//     bucket is full and leaves the bucket in debt, which later requests pay off, so the
//     long-run rate is exact whatever the request sizes.
//   - Wait blocks until its request may proceed. If that would take longer than the bucket's
//     maximum wait it returns a *ThrottledError at once (matching ErrThrottled) that says how
//     long the wait would have been, without taking any tokens; nothing is ever dropped
//     silently. A cancelled context also returns without the tokens.
//   - Because a request's place in the queue is a position in the token stream, a live limit
//     change (SetLimit) re-times every waiter without reordering them: waiters are never
//     overtaken, and none starves.
//   - Rate 0 means unlimited.
//
// A bucket is one mutex and a few words: no goroutine per bucket, no allocation per request
// that does not wait.
package tokenbucket

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// tokenEpsilon is the token fraction below which float rounding is ignored.
const tokenEpsilon = 1e-9

// DefaultMaxWait is the longest a request waits when Options.MaxWait is 0.
const DefaultMaxWait = time.Second

// ErrThrottled is matched (errors.Is) by every *ThrottledError.
var ErrThrottled = errors.New("tokenbucket: throttled")

// ThrottledError reports a request refused because it would have waited too long.
type ThrottledError struct {
	Limit   string        // the bucket's name ("bytes", "ops", ...)
	Tokens  int64         // tokens requested
	Wait    time.Duration // how long the request would have had to wait in total
	MaxWait time.Duration // the bound it exceeded
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("tokenbucket: %s limit: %d tokens would wait %v, more than the %v allowed",
		e.Limit, e.Tokens, e.Wait.Round(time.Microsecond), e.MaxWait)
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// Limit is a token rate and bucket depth.
type Limit struct {
	Rate  float64 // tokens per second; 0 means unlimited
	Burst int64   // bucket depth in tokens: how many may be spent at once after idling
}

func (l Limit) validate() error {
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate < 0 {
		return fmt.Errorf("tokenbucket: rate %v must be a finite number >= 0", l.Rate)
	}
	if l.Burst < 0 {
		return fmt.Errorf("tokenbucket: burst %d must be >= 0", l.Burst)
	}
	return nil
}

// Options configures a Bucket or Limiter.
type Options struct {
	// MaxWait bounds how long a request waits; 0 means DefaultMaxWait.
	MaxWait time.Duration
	// Clock is the time source; nil means SystemClock.
	Clock Clock
	// Name labels the bucket in errors (the Limiter names its buckets "bytes" and "ops").
	Name string
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxWait < 0 {
		return o, fmt.Errorf("tokenbucket: max wait %v is negative", o.MaxWait)
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	return o, nil
}

// Stats are counters for metrics, since creation.
type Stats struct {
	Requests      uint64  // requests made (Wait, Allow, Reserve)
	Delayed       uint64  // requests that waited before proceeding
	Throttled     uint64  // requests refused with ErrThrottled (or false from Allow)
	Cancelled     uint64  // waits ended by their context
	WaitedSeconds float64 // total time requests spent waiting, granted or not
}

// counters are Stats kept with atomics, so reading them never contends with requests.
type counters struct {
	requests, delayed, throttled, cancelled atomic.Uint64
	waitedNanos                             atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Requests:      c.requests.Load(),
		Delayed:       c.delayed.Load(),
		Throttled:     c.throttled.Load(),
		Cancelled:     c.cancelled.Load(),
		WaitedSeconds: time.Duration(c.waitedNanos.Load()).Seconds(),
	}
}

// Bucket is a token bucket. Safe for concurrent use.
type Bucket struct {
	name    string
	clock   Clock
	maxWait time.Duration
	stats   counters

	mu    sync.Mutex
	limit Limit
	// Token accounting as positions in one token stream, so that a waiter's place never
	// changes: granted counts tokens promised to requests, accrued counts tokens the rate has
	// produced (plus frac, a fraction of the next), never more than burst ahead of granted.
	granted, accrued int64
	frac             float64
	last             time.Time
	changed          chan struct{} // closed and replaced by SetLimit so waiters re-time
}

// New returns a full bucket.
func New(limit Limit, opts Options) (*Bucket, error) {
	if err := limit.validate(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Bucket{
		name:    opts.Name,
		clock:   opts.Clock,
		maxWait: opts.MaxWait,
		limit:   limit,
		accrued: limit.Burst,
		last:    opts.Clock.Now(),
		changed: make(chan struct{}),
	}, nil
}

// Limit returns the current limit.
func (b *Bucket) Limit() Limit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit
}

// SetLimit changes the rate and depth from now on. Tokens already accrued are kept up to the
// new depth, debt is kept, and waiters keep their places and are re-timed at the new rate.
// Going from unlimited to limited starts with a full bucket.
func (b *Bucket) SetLimit(limit Limit) error {
	if err := limit.validate(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.refill(now)
	if b.limit.Rate == 0 {
		b.accrued, b.frac = b.granted+limit.Burst, 0
	}
	b.limit = limit
	if b.accrued > b.granted+limit.Burst {
		b.accrued, b.frac = b.granted+limit.Burst, 0
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return nil
}

// Stats returns the bucket's counters.
func (b *Bucket) Stats() Stats { return b.stats.snapshot() }

// Allow takes n tokens if the request may proceed right now (see the package comment) and
// reports whether it did.
func (b *Bucket) Allow(n int64) bool {
	b.stats.requests.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(b.clock.Now())
	if b.limit.Rate == 0 || n <= 0 || b.accrued >= b.granted+min(n, b.limit.Burst) {
		b.granted += max(n, 0)
		return true
	}
	b.stats.throttled.Add(1)
	return false
}

// Reserve takes n tokens (n < 0 counts as 0) unconditionally and returns how long the caller
// must wait before acting on them. The simulator uses it to pace simulated requests; servers
// use Wait.
func (b *Bucket) Reserve(n int64) time.Duration {
	n = max(n, 0)
	b.stats.requests.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	t := b.reserve(now, n)
	d := b.delay(t)
	if d > 0 {
		b.stats.delayed.Add(1)
		b.stats.waitedNanos.Add(int64(d))
	}
	return d
}

// Charge takes n tokens now, without waiting and whatever the bucket holds (n <= 0 takes
// none). It is for costs known only after the fact, such as a reply's size: the bucket may go
// into debt, which requests queued later pay off by waiting longer. Charges are not requests,
// so they do not count in Stats.
func (b *Bucket) Charge(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.refill(b.clock.Now())
	b.granted += n
	b.mu.Unlock()
}

// Wait blocks until n tokens may be used, the maximum wait would be exceeded
// (*ThrottledError) or ctx ends (its error). Only a nil return takes the tokens.
func (b *Bucket) Wait(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("tokenbucket: %s: negative request of %d tokens", b.name, n)
	}
	return waitAll(ctx, b.clock, b.maxWait, &b.stats, claim{b, n})
}

// ticket is a request's place in a bucket's token stream.
type ticket struct {
	ready int64 // the request may proceed once accrued reaches ready
	end   int64 // granted right after this request: if still so, its tokens can be returned
	n     int64
}

// refill accrues tokens for the time since the last refill; b.mu is held.
func (b *Bucket) refill(now time.Time) {
	elapsed := now.Sub(b.last)
	if elapsed <= 0 {
		return
	}
	b.last = now
	if b.limit.Rate == 0 {
		return
	}
	room := b.granted + b.limit.Burst - b.accrued
	if room <= 0 {
		b.frac = 0
		return
	}
	add := b.frac + b.limit.Rate*elapsed.Seconds()
	if add >= float64(room) {
		b.accrued, b.frac = b.accrued+room, 0
		return
	}
	// The epsilon absorbs float rounding of rate*elapsed, so a waiter woken exactly at its
	// computed time finds its tokens there.
	whole := math.Floor(add + tokenEpsilon)
	b.accrued += int64(whole)
	b.frac = max(add-whole, 0)
}

// reserve queues a request of n tokens; b.mu is held.
func (b *Bucket) reserve(now time.Time, n int64) ticket {
	b.refill(now)
	t := ticket{ready: b.granted + min(n, b.limit.Burst), end: b.granted + n, n: n}
	b.granted = t.end
	return t
}

// delay returns how long until t may proceed at the current rate; b.mu is held.
func (b *Bucket) delay(t ticket) time.Duration {
	if b.limit.Rate == 0 {
		return 0
	}
	missing := float64(t.ready-b.accrued) - b.frac
	if missing <= tokenEpsilon {
		return 0
	}
	nanos := missing / b.limit.Rate * 1e9
	if nanos > math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return max(time.Duration(math.Ceil(nanos-1e-3)), 1)
}

// release gives a request's tokens back if no later request has queued behind it (returning
// them otherwise would let later requests overtake earlier ones); b.mu is held.
func (b *Bucket) release(t ticket) {
	if b.granted == t.end {
		b.granted -= t.n
	}
}
