package proxy

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// armReadDeadline sets the deadline of the reader's next wait for a request: the login
// deadline before the client authenticates, the idle timeout after (peer connections and
// IdleTimeout 0: none). Once Shutdown began it keeps the deadline Shutdown set, so the reader
// stops.
func (c *conn) armReadDeadline() {
	var d time.Time
	switch {
	case c.peer:
		return
	case c.tenant == nil:
		d = c.loginDeadline
	case c.p.opts.IdleTimeout > 0:
		d = time.Now().Add(c.p.opts.IdleTimeout)
		// A client waiting for a blocking command's reply is not idle (as in redis): its idle
		// time runs from when the block ends at the latest, never for a block without a timeout.
		switch {
		case !c.blocked():
		case c.blockForever:
			d = time.Time{}
		case c.blockUntil.Add(c.p.opts.IdleTimeout).After(d):
			d = c.blockUntil.Add(c.p.opts.IdleTimeout)
		}
	}
	if d.Equal(c.readDeadline) {
		return
	}
	c.readDeadline = d
	c.nc.SetReadDeadline(d)
	// Shutdown sets draining before it stops the readers: a reader that set its deadline after
	// that sees draining here and stops itself.
	if c.p.draining.Load() {
		c.stopReading()
	}
}

// sourceOf is the address a client's authentication failures are counted under: its IP for
// TCP, one source for all unix socket clients.
func sourceOf(nc net.Conn) netip.Addr {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// maxAuthSources bounds the sources the auth limiter remembers; when full, sources that are not
// backing off are forgotten first.
const maxAuthSources = 1 << 16

// authLimiter holds back sources that fail authentication again and again: after
// Options.AuthBackoffFailures failures in a row, a source's logins are refused unchecked for a
// backoff that doubles with each further failure, up to Options.AuthBackoffMax.
type authLimiter struct {
	failures         int
	backoff, maxWait time.Duration

	mu      sync.Mutex
	sources map[netip.Addr]*authSource
}

type authSource struct {
	failures int
	until    time.Time // logins are refused before this
}

func newAuthLimiter(o *Options) *authLimiter {
	return &authLimiter{
		failures: o.AuthBackoffFailures, backoff: o.AuthBackoff, maxWait: o.AuthBackoffMax,
		sources: make(map[netip.Addr]*authSource),
	}
}

// blocked reports whether src must wait before its next login is checked.
func (l *authLimiter) blocked(src netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	return s != nil && now.Before(s.until)
}

// failed records a failed login of src.
func (l *authLimiter) failed(src netip.Addr, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	if s == nil {
		if len(l.sources) >= maxAuthSources {
			l.forgetIdle(now)
		}
		s = &authSource{}
		l.sources[src] = s
	}
	s.failures++
	if over := s.failures - l.failures; over >= 0 {
		wait := l.maxWait
		if over < 32 {
			wait = min(l.backoff<<over, l.maxWait)
		}
		s.until = now.Add(wait)
	}
}

// succeeded forgets src's failures.
func (l *authLimiter) succeeded(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sources, src)
}

// forgetIdle drops the sources not backing off now; if all are, it drops them all rather than
// grow without bound (an attacker with that many addresses gets no backoff meanwhile).
func (l *authLimiter) forgetIdle(now time.Time) {
	for src, s := range l.sources {
		if !now.Before(s.until) {
			delete(l.sources, src)
		}
	}
	if len(l.sources) >= maxAuthSources {
		clear(l.sources)
	}
}

// admitClient counts a new client connection against Options.MaxClientConnections; over the
// cap it answers the client an error, as redis and memcached do, closes it and reports false.
func (p *Proxy) admitClient(nc net.Conn) bool {
	if p.clientConns.Add(1) <= int64(p.opts.MaxClientConnections) {
		return true
	}
	p.clientConns.Add(-1)
	p.stats.connectionsRejected.Add(1)
	reply := "-ERR max number of clients reached\r\n"
	if p.opts.Protocol == Memcached {
		reply = "SERVER_ERROR too many open connections\r\n"
	}
	// A fresh socket's buffer takes the line at once; the deadline only guards against a
	// broken one, and against a TLS client that never finishes the handshake the write runs.
	nc.SetDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write([]byte(reply))
	nc.Close()
	return false
}
