package tokenbucket

import (
	"context"
	"time"
)

// claim is a number of tokens wanted from one bucket.
type claim struct {
	bucket *Bucket
	n      int64
}

// maxClaims is the most buckets one wait spans (a Limiter's bytes and ops).
const maxClaims = 2

// waitAll takes every claim's tokens, waiting (up to maxWait in total) until every bucket lets
// the request proceed. Buckets are locked one at a time, so concurrent multi-bucket waits
// cannot deadlock.
func waitAll(ctx context.Context, clock Clock, maxWait time.Duration, stats *counters, claims ...claim) error {
	stats.requests.Add(1)
	if err := ctx.Err(); err != nil {
		stats.cancelled.Add(1)
		return err
	}
	start := clock.Now()
	var ticketArray [maxClaims]ticket
	tickets := ticketArray[:len(claims)]
	wait, worst, changed := reserveAll(start, claims, tickets)
	if wait > maxWait {
		releaseAll(claims, tickets)
		stats.throttled.Add(1)
		return throttled(claims[worst], wait, maxWait)
	}
	if wait == 0 {
		return nil
	}
	stats.delayed.Add(1)
	defer func() { stats.waitedNanos.Add(int64(clock.Now().Sub(start))) }()
	for {
		timer := clock.NewTimer(wait)
		select {
		case <-timer.C():
		case <-changed[0]:
		case <-changed[1]:
		case <-ctx.Done():
			timer.Stop()
			releaseAll(claims, tickets)
			stats.cancelled.Add(1)
			return ctx.Err()
		}
		timer.Stop()
		now := clock.Now()
		wait, worst, changed = timeLeft(now, claims, tickets)
		if wait == 0 {
			return nil
		}
		if total := now.Sub(start) + wait; total > maxWait {
			// A limit was lowered while we waited: the bound can no longer be kept.
			releaseAll(claims, tickets)
			stats.throttled.Add(1)
			return throttled(claims[worst], total, maxWait)
		}
	}
}

// reserveAll takes a ticket for every claim at now, one bucket locked at a time, and returns
// the longest wait they impose, the claim imposing it, and the buckets' limit-change channels.
func reserveAll(now time.Time, claims []claim, tickets []ticket) (wait time.Duration, worst int, changed [maxClaims]<-chan struct{}) {
	for i, c := range claims {
		b := c.bucket
		b.mu.Lock()
		tickets[i] = b.reserve(now, c.n)
		if d := b.delay(tickets[i]); d > wait {
			wait, worst = d, i
		}
		changed[i] = b.changed
		b.mu.Unlock()
	}
	return wait, worst, changed
}

func throttled(c claim, wait, maxWait time.Duration) error {
	return &ThrottledError{Limit: c.bucket.name, Tokens: c.n, Wait: wait, MaxWait: maxWait}
}

// timeLeft returns the longest remaining wait over the tickets, the index of the claim that
// imposes it, and the buckets' limit-change channels (nil past the last claim: a nil channel
// never fires in a select).
func timeLeft(now time.Time, claims []claim, tickets []ticket) (wait time.Duration, worst int, changed [maxClaims]<-chan struct{}) {
	for i, c := range claims {
		b := c.bucket
		b.mu.Lock()
		b.refill(now)
		if d := b.delay(tickets[i]); d > wait {
			wait, worst = d, i
		}
		changed[i] = b.changed
		b.mu.Unlock()
	}
	return wait, worst, changed
}

func releaseAll(claims []claim, tickets []ticket) {
	for i, c := range claims {
		c.bucket.mu.Lock()
		c.bucket.release(tickets[i])
		c.bucket.mu.Unlock()
	}
}
