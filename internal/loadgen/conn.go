package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// Reconnection backoff: a refused connection or authentication is retried after minBackoff,
// doubling up to maxBackoff; a connection that fails after authenticating is reopened after
// minBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// maxLag is how late an access may be sent; accesses scheduled earlier are skipped, so a stall
// (a reconnection, a starved machine) is not followed by a burst of its whole backlog.
const maxLag = time.Second

// valueByte fills SET values.
const valueByte = 'v'

// request is one request in flight on a connection.
type request struct {
	kind opKind
	key  string
	size int64
	sent time.Time
}

// pacer schedules one connection's accesses: access k is due at origin + k*period.
type pacer struct {
	unpaced bool
	period  float64 // nanoseconds between accesses
	origin  time.Time
	issued  int64
}

func newPacer(rate float64, now time.Time) pacer {
	if rate <= 0 {
		return pacer{unpaced: true}
	}
	return pacer{period: float64(time.Second) / rate, origin: now}
}

// next returns when the next access is due, after skipping those more than maxLag late.
func (p *pacer) next(now time.Time) time.Time {
	due := p.origin.Add(time.Duration(float64(p.issued) * p.period))
	if lag := now.Sub(due); lag > maxLag {
		p.issued += int64(float64(lag-maxLag) / p.period)
		due = p.origin.Add(time.Duration(float64(p.issued) * p.period))
	}
	return due
}

// due reports whether an access is due at now.
func (p *pacer) due(now time.Time) bool {
	return p.unpaced || !p.next(now).After(now)
}

// worker is one connection of a tenant, reopened whenever it fails.
type worker struct {
	tr    *tenantRun
	pacer pacer
	rng   *rand.Rand // draws the write fraction
	value []byte     // SET values, grown to the largest size so far
	out   []byte     // requests not yet written
	enc   encoder    // of the open connection
}

// newWorker makes connection index of the tenant. The connections' schedules are staggered
// by the tenant's period, so together they send evenly spaced accesses.
func newWorker(tr *tenantRun, index int, now time.Time) *worker {
	seed := keyhash.Derive(tr.seed, uint64(index)+1)
	var offset time.Duration
	if tr.rate > 0 {
		offset = time.Duration(float64(index) * float64(time.Second) / tr.rate)
	}
	return &worker{
		tr:    tr,
		pacer: newPacer(tr.rate/float64(tr.connections), now.Add(offset)),
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// run keeps the connection open and loaded until ctx ends.
func (w *worker) run(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		c, kind, err := w.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.tr.fail(kind, err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		w.tr.stats.connections.Add(1)
		w.enc = c.enc
		err = w.session(ctx, c.nc, c.dec)
		w.tr.stats.connections.Add(-1)
		c.nc.Close()
		if err != nil && ctx.Err() == nil {
			w.tr.logError(errIO, fmt.Errorf("connection lost: %w", err))
			sleep(ctx, minBackoff)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// conn is an open, authenticated connection.
type conn struct {
	nc  net.Conn
	enc encoder
	dec decoder
}

// connect dials and authenticates; on failure it says which kind of error it was.
func (w *worker) connect(ctx context.Context) (conn, errorKind, error) {
	timeout := w.tr.timeout
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, w.tr.network, w.tr.addr)
	if err != nil {
		return conn{}, errConnect, err
	}
	c := conn{nc: nc}
	c.enc, c.dec = newCodec(w.tr.engine, nc)
	kind, err := w.authenticate(c)
	if err != nil {
		nc.Close()
		return conn{}, kind, err
	}
	return c, 0, nil
}

// authenticate sends the tenant's credentials, if it has a password.
func (w *worker) authenticate(c conn) (errorKind, error) {
	password, err := w.tr.password()
	if err != nil {
		return errAuth, fmt.Errorf("reading the password: %w", err)
	}
	if password == "" {
		return 0, nil
	}
	c.nc.SetDeadline(time.Now().Add(w.tr.timeout))
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.nc.Write(c.enc.appendAuth(nil, w.tr.user, password)); err != nil {
		return errIO, fmt.Errorf("authenticating: %w", err)
	}
	r, err := c.dec.read(opAuth)
	if err != nil {
		return errIO, fmt.Errorf("authenticating: %w", err)
	}
	if r.outcome != outStored {
		return errAuth, fmt.Errorf("authenticating as %s: %s", w.tr.user, r.text)
	}
	return 0, nil
}

// session runs one open connection until ctx ends (then it finishes the accesses in flight,
// fills included, so every counted miss has its SET) or the connection fails. The sender (this goroutine) writes requests, the receiver reads
// replies in order; slots bounds the requests in flight. A fill after a miss takes over the
// slot of its GET, so the receiver never waits for a slot (which only it could free).
func (w *worker) session(ctx context.Context, nc net.Conn, dec decoder) error {
	inflight := w.tr.inflight
	pending := make(chan request, inflight)
	fills := make(chan request, inflight)
	slots := make(chan struct{}, inflight)
	released := make(chan struct{}, 1)
	var recvErr error
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		recvErr = w.receive(nc, dec, pending, fills, slots, released)
	}()

	sendErr := w.send(ctx, nc, pending, fills, slots, recvDone)
	if sendErr == nil {
		sendErr = w.finish(nc, pending, fills, slots, released, recvDone)
	}
	close(pending)
	if sendErr != nil {
		nc.Close() // the receiver need not wait for replies that will not come
	}
	<-recvDone
	// Requests whose replies were not read are lost with the connection.
	cause := errors.Join(recvErr, sendErr)
	for req := range pending {
		w.tr.lose(req, cause)
	}
	return cause
}

// send writes fills and due accesses until ctx ends, the receiver stops or a write fails.
func (w *worker) send(ctx context.Context, nc net.Conn, pending chan<- request, fills <-chan request, slots chan struct{}, recvDone <-chan struct{}) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		// Fills first: they finish accesses already under way.
		for more := true; more; {
			select {
			case f := <-fills:
				w.write(f, pending)
			default:
				more = false
			}
		}
		for issued := true; issued && w.pacer.due(time.Now()); {
			select {
			case slots <- struct{}{}:
				w.issue(pending)
			default:
				issued = false
			}
		}
		if err := w.flush(nc); err != nil {
			return err
		}

		var slotCh chan struct{}
		var timerC <-chan time.Time
		if now := time.Now(); w.pacer.due(now) {
			slotCh = slots // due, but every slot is taken: wait for one
		} else {
			timer.Reset(w.pacer.next(now).Sub(now))
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-recvDone:
			return nil
		case f := <-fills:
			w.write(f, pending)
		case slotCh <- struct{}{}:
			w.issue(pending)
		case <-timerC:
		}
	}
}

// finish writes the fills of the accesses in flight until none is left (every slot is
// released) or the receiver stops.
func (w *worker) finish(nc net.Conn, pending chan<- request, fills <-chan request, slots, released <-chan struct{}, recvDone <-chan struct{}) error {
	for len(slots) > 0 {
		select {
		case <-recvDone:
			return nil
		case f := <-fills:
			w.write(f, pending)
			if err := w.flush(nc); err != nil {
				return err
			}
		case <-released:
		}
	}
	return nil
}

// issue starts the next access; the caller holds a slot for it.
func (w *worker) issue(pending chan<- request) {
	w.pacer.issued++
	a := w.tr.next()
	kind := opGet
	if w.tr.writeFraction > 0 && w.rng.Float64() < w.tr.writeFraction {
		kind = opWrite
	}
	w.write(request{kind: kind, key: a.Key, size: a.Size}, pending)
}

// write appends req to the output and queues it for the receiver.
func (w *worker) write(req request, pending chan<- request) {
	if req.kind == opGet {
		w.out = w.enc.appendGet(w.out, req.key)
	} else {
		w.out = w.enc.appendSet(w.out, req.key, w.valueOf(req.size))
	}
	req.sent = time.Now()
	pending <- req // never blocks: at most inflight requests hold slots
}

func (w *worker) flush(nc net.Conn) error {
	if len(w.out) == 0 {
		return nil
	}
	nc.SetWriteDeadline(time.Now().Add(w.tr.timeout))
	_, err := nc.Write(w.out)
	w.out = w.out[:0]
	return err
}

// valueOf returns a value of size bytes.
func (w *worker) valueOf(size int64) []byte {
	if size <= 0 {
		return nil
	}
	if int64(len(w.value)) < size {
		w.value = make([]byte, max(size, 2*int64(len(w.value))))
		for i := range w.value {
			w.value[i] = valueByte
		}
	}
	return w.value[:size]
}

// receive reads the reply to each pending request in order, until pending is closed and empty
// or the connection fails.
func (w *worker) receive(nc net.Conn, dec decoder, pending <-chan request, fills chan<- request, slots <-chan struct{}, released chan<- struct{}) error {
	for req := range pending {
		nc.SetReadDeadline(req.sent.Add(w.tr.timeout))
		r, err := dec.read(req.kind)
		if err != nil {
			nc.Close() // the sender's next write fails at once
			w.tr.lose(req, err)
			return err
		}
		w.tr.record(req, r, time.Since(req.sent))
		if req.kind == opGet && r.outcome == outMiss {
			fills <- request{kind: opFill, key: req.key, size: req.size} // keeps the GET's slot
			continue
		}
		<-slots
		select {
		case released <- struct{}{}: // wakes a sender waiting for the last access in flight
		default:
		}
	}
	return nil
}
