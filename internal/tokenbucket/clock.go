package tokenbucket

import (
	"context"
	"sync"
	"time"
)

// Clock is the time source of a Bucket: real time in production, a ManualClock in tests and
// in the simulator, which runs buckets in simulated time.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer a Bucket uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock is the real clock. Its Now reads the monotonic clock only, once, where
// time.Now reads the wall clock too (a bucket takes two readings per request): its wall time
// is the process start's plus the monotonic time since, which is all a bucket needs, since it
// only subtracts readings.
var SystemClock Clock = systemClock{}

type systemClock struct{}

// systemClockStart anchors SystemClock's readings.
var systemClockStart = time.Now()

func (systemClock) Now() time.Time { return systemClockStart.Add(time.Since(systemClockStart)) }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// ManualClock is a clock that moves only when Advance is called. Timers fire during Advance,
// in deadline order, once the clock reaches their deadline.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*manualTimer]struct{}
	changed chan struct{} // closed and replaced whenever the set of timers changes
}

// NewManualClock returns a manual clock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, timers: make(map[*manualTimer]struct{}), changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock has advanced by d.
func (c *ManualClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{clock: c, deadline: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t
	}
	c.timers[t] = struct{}{}
	c.notifyLocked()
	return t
}

// Advance moves the clock forward by d, firing the timers that come due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.deadline.After(c.now) {
			t.c <- t.deadline
			delete(c.timers, t)
		}
	}
	c.notifyLocked()
}

// NextDeadline returns the earliest pending timer's deadline; ok is false without timers.
func (c *ManualClock) NextDeadline() (deadline time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.timers {
		if !ok || t.deadline.Before(deadline) {
			deadline, ok = t.deadline, true
		}
	}
	return deadline, ok
}

// Pending returns the number of timers not yet fired or stopped.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are pending or ctx ends, so that a test knows
// its goroutines are parked before it advances the clock.
func (c *ManualClock) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		pending, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if pending >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *ManualClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type manualTimer struct {
	clock    *ManualClock
	deadline time.Time
	c        chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, pending := t.clock.timers[t]
	delete(t.clock.timers, t)
	if pending {
		t.clock.notifyLocked()
	}
	return pending
}
