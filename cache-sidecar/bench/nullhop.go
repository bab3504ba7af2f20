package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"slices"
	"syscall"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// The null hop is the cheapest server a request can pass through: an epoll loop per core, on
// raw system calls, that answers every request at once without an engine (SET: stored, GET:
// a miss, anything else: an empty or error reply). Its CPU per request is a floor for the CPU
// any proxy spends on the client side of a request (one read and one write on loopback TCP,
// plus the parsing needed to frame it), which bounds what a proxy in front of an engine can
// reach on a machine whose cores are saturated (see boundShare).
//
//	bench null-hop redis|memcached 127.0.0.1:PORT

// nullHopProtocol frames requests of one protocol and appends their replies.
type nullHopProtocol func(buf, out []byte) (consumed int, reply []byte, err error)

// serveNullHop listens on addr and answers requests in protocol until the process ends.
func serveNullHop(protocol, addr string) error {
	var answer nullHopProtocol
	switch protocol {
	case "redis":
		answer = answerRESP
	case "memcached":
		answer = answerMemcache
	default:
		return fmt.Errorf("null hop: unknown protocol %q, want redis or memcached", protocol)
	}
	listenFD, err := listenNonblocking(addr)
	if err != nil {
		return fmt.Errorf("null hop: %w", err)
	}
	loops := runtime.NumCPU()
	errs := make(chan error, loops)
	for range loops {
		go func() { errs <- nullHopLoop(listenFD, answer) }()
	}
	return <-errs
}

// listenNonblocking returns a non-blocking listening TCP socket bound to addr.
func listenNonblocking(addr string) (int, error) {
	tcp, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return -1, err
	}
	sa := &syscall.SockaddrInet4{Port: tcp.Port}
	copy(sa.Addr[:], tcp.IP.To4())
	if err := syscall.Bind(fd, sa); err != nil {
		return -1, err
	}
	return fd, syscall.Listen(fd, 1024)
}

// readSize is the room a read into a connection's buffer has at least.
const readSize = 16 << 10

// nullHopConn is a client connection's unparsed requests and unwritten replies.
type nullHopConn struct {
	in, out        []byte
	waitingToWrite bool // EPOLLOUT is on
}

// nullHopLoop runs one event loop on its own thread: it accepts connections from the shared
// listening socket and serves them, level-triggered, until a system call fails.
func nullHopLoop(listenFD int, answer nullHopProtocol) error {
	runtime.LockOSThread()
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	const epollExclusive = 1 << 28 // one loop wakes per new connection
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, listenFD, &syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive, Fd: int32(listenFD)}); err != nil {
		return err
	}
	conns := map[int32]*nullHopConn{}
	closeConn := func(fd int32) {
		delete(conns, fd)
		syscall.Close(int(fd))
	}
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == listenFD {
				fd, _, err := syscall.Accept4(listenFD, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
				if err != nil {
					continue // another loop took it, or the client left
				}
				if err := errors.Join(
					syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1),
					syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}),
				); err != nil {
					syscall.Close(fd)
					continue
				}
				conns[int32(fd)] = &nullHopConn{}
				continue
			}
			c := conns[ev.Fd]
			if c == nil {
				continue
			}
			if ev.Events&syscall.EPOLLIN != 0 {
				c.in = slices.Grow(c.in, readSize)
				got, err := syscall.Read(int(ev.Fd), c.in[len(c.in):cap(c.in)])
				if got <= 0 && !errors.Is(err, syscall.EAGAIN) {
					closeConn(ev.Fd)
					continue
				}
				c.in = c.in[:len(c.in)+max(got, 0)]
				consumed := 0
				for consumed < len(c.in) {
					used, reply, err := answer(c.in[consumed:], c.out)
					if err != nil {
						closeConn(ev.Fd)
						break
					}
					if used == 0 {
						break // an incomplete request: wait for the rest
					}
					consumed, c.out = consumed+used, reply
				}
				c.in = c.in[:copy(c.in, c.in[consumed:])]
			}
			if conns[ev.Fd] != c || len(c.out) == 0 {
				continue
			}
			wrote, err := syscall.Write(int(ev.Fd), c.out)
			if err != nil && !errors.Is(err, syscall.EAGAIN) {
				closeConn(ev.Fd)
				continue
			}
			c.out = c.out[:copy(c.out, c.out[max(wrote, 0):])]
			// A client that reads slowly: write the rest when it can. The interest changes only
			// then, so the usual request costs no epoll_ctl.
			if waiting := len(c.out) > 0; waiting != c.waitingToWrite {
				c.waitingToWrite = waiting
				want := uint32(syscall.EPOLLIN)
				if waiting {
					want |= syscall.EPOLLOUT
				}
				if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_MOD, int(ev.Fd), &syscall.EpollEvent{Events: want, Fd: ev.Fd}); err != nil {
					closeConn(ev.Fd)
				}
			}
		}
	}
}

var crlf = []byte("\r\n")

// answerMemcache frames one memcached text request: a storage command's line and data block
// is answered STORED, a retrieval END (a miss), anything else ERROR. It allocates nothing, so
// the null hop stays a floor.
func answerMemcache(buf, out []byte) (int, []byte, error) {
	end := bytes.Index(buf, crlf)
	if end < 0 {
		return 0, out, nil
	}
	line := buf[:end]
	command, rest := nextField(line)
	switch string(command) { // a switch on string(b) does not allocate
	case "get", "gets":
		return end + 2, append(out, "END\r\n"...), nil
	case "set", "add", "replace", "append", "prepend", "cas":
		var sizeField []byte
		for range 4 { // key, flags, exptime, bytes
			sizeField, rest = nextField(rest)
		}
		if len(sizeField) == 0 {
			return 0, out, fmt.Errorf("storage command %q without a size", line)
		}
		parsed, ok := protocol.ParseUint(sizeField)
		if !ok || parsed > uint64(len(buf)) {
			if ok {
				return 0, out, nil // incomplete: wait for the data block
			}
			return 0, out, fmt.Errorf("storage command %q: bad size", line)
		}
		size := int(parsed)
		total := end + 2 + size + 2
		if len(buf) < total {
			return 0, out, nil
		}
		return total, append(out, "STORED\r\n"...), nil
	default:
		return end + 2, append(out, "ERROR\r\n"...), nil
	}
}

// nextField returns the first space-separated field of line and what follows it.
func nextField(line []byte) (field, rest []byte) {
	line = bytes.TrimLeft(line, " ")
	if i := bytes.IndexByte(line, ' '); i >= 0 {
		return line[:i], line[i:]
	}
	return line, nil
}

// answerRESP frames one RESP array of bulk strings: SET is answered +OK, GET a nil (a miss),
// PING +PONG and anything else (redis-benchmark's CONFIG GET) an empty array.
func answerRESP(buf, out []byte) (int, []byte, error) {
	count, pos, ok, err := respLength(buf, 0, '*')
	if !ok || err != nil {
		return 0, out, err
	}
	var name []byte // aliases buf: compared without case, not copied
	for i := range count {
		size, start, ok, err := respLength(buf, pos, '$')
		if !ok || err != nil {
			return 0, out, err
		}
		if size > len(buf) || len(buf) < start+size+2 { // incomplete; the first test keeps the sum from overflowing
			return 0, out, nil
		}
		if i == 0 {
			name = buf[start : start+size]
		}
		pos = start + size + 2
	}
	switch {
	case bytes.EqualFold(name, []byte("SET")):
		return pos, append(out, "+OK\r\n"...), nil
	case bytes.EqualFold(name, []byte("GET")):
		return pos, append(out, "$-1\r\n"...), nil
	case bytes.EqualFold(name, []byte("PING")):
		return pos, append(out, "+PONG\r\n"...), nil
	default:
		return pos, append(out, "*0\r\n"...), nil
	}
}

// respLength reads a "<kind><n>\r\n" header at pos: n, where what follows starts, and whether
// the header is complete.
func respLength(buf []byte, pos int, kind byte) (n, next int, ok bool, err error) {
	if pos >= len(buf) {
		return 0, 0, false, nil
	}
	if buf[pos] != kind {
		return 0, 0, false, fmt.Errorf("want %q at byte %d, got %q", kind, pos, buf[pos])
	}
	end := bytes.Index(buf[pos:], crlf)
	if end < 0 {
		return 0, 0, false, nil
	}
	parsed, ok := protocol.ParseUint(buf[pos+1 : pos+end])
	if !ok || parsed > math.MaxInt32 {
		return 0, 0, false, fmt.Errorf("bad length %q", buf[pos+1:pos+end])
	}
	return int(parsed), pos + end + 2, true, nil
}
