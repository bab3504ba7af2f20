package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// socketReader is what a client connection's buffered reader reads from. Outside
// pollRequests it reads through Go's netpoller (net.Conn.Read), which tries a read first
// and, when it fails with EAGAIN, waits for the socket and reads again. Inside, it makes one
// read system call that never waits and notes whether it emptied the socket.
type socketReader struct {
	nc      net.Conn
	fd      int  // the socket, while polling
	polling bool // inside pollRequests' raw read
	// drained: the last polling read emptied the socket (it took less than it asked for).
	drained bool
}

// errWouldBlock ends a polling read that found the socket empty.
var errWouldBlock = errors.New("no bytes to read yet")

func (s *socketReader) Read(p []byte) (int, error) {
	if !s.polling {
		return s.nc.Read(p)
	}
	n, err := rawRead(s.fd, p)
	switch {
	case errors.Is(err, syscall.EAGAIN):
		s.drained = true
		return 0, errWouldBlock
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	s.drained = n < len(p)
	return n, nil
}

// readRequests reads and handles the client's requests until the connection ends. On a
// socket, requests are read by pollRequests as long as each fits the buffer, else by the
// handler's next, which reads as it parses.
func (c *conn) readRequests() error {
	for !c.closing {
		if c.sock != nil {
			if done, err := c.pollRequests(); done {
				return err
			}
		}
		if err := c.handler.next(); err != nil {
			return err
		}
	}
	return nil
}

// pollRequests handles requests as long as each is whole in the read buffer once read, inside
// one raw read of the socket, which reads once each time it starts or the socket becomes
// readable. A read that empties the socket is followed, once its requests are handled, by a
// wait for the socket, without the read that Go's own Read makes first and that would find
// the socket empty: one system call less per request of a client that waits for each reply.
// (No readiness is lost meanwhile: a raw read forgets the socket's earlier readiness only
// when it starts, and checks its deadline and whether the connection was closed before each
// wait.) It reports done with the error to return once the reader must stop. It returns
// without being done, for next to read the next request as it parses it, when that request
// is not known to be whole (Undecided, or larger than the buffer) or when a read did not
// empty the socket (a client that sends faster than it is served reads the usual way).
func (c *conn) pollRequests() (done bool, err error) {
	s, h := c.sock, c.handler
	rerr := c.raw.Read(func(fd uintptr) bool {
		s.fd, s.polling = int(fd), true
		defer func() { s.polling = false }()
		read := false
		for {
			framing := h.completeness()
			for framing == protocol.Complete && !c.closing {
				if err = h.next(); err != nil {
					done = true
					return true
				}
				framing = h.completeness()
			}
			switch {
			case c.closing:
				done = true
				return true
			case framing == protocol.Undecided || c.br.Buffered() == c.br.Size():
				return true
			case read && !s.drained:
				return true
			}
			// As next does before a read, a wait for a new request gets the reader's deadline
			// (login, idle); a request's remaining bytes are awaited under the deadline armed
			// before its first ones.
			if c.br.Buffered() == 0 {
				c.armReadDeadline()
			}
			if read {
				return false
			}
			_, err = c.br.Peek(c.br.Buffered() + 1)
			switch {
			case err == nil:
				c.readStart = now()
			case !errors.Is(err, errWouldBlock):
				done = true
				return true
			}
			err, read = nil, true
		}
	})
	if rerr != nil {
		return true, rerr
	}
	return done, err
}
