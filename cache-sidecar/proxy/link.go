package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Buffer sizes of client connections and links: large enough for deep pipelines to move in few
// system calls, small enough for thousands of connections.
const ioBufferSize = 16 << 10

// linkKey identifies interchangeable backend connections.
type linkKey struct {
	address string // engine socket path, or peer "host:port"
	tenant  string // peer links are bound to one tenant by their handshake
	peer    bool
	proto   resp.Proto // the RESP version the link speaks (0 for memcached)
}

// link is a connection from the proxy to an engine or a peer sidecar, used by one client
// connection at a time: its reader goroutine writes requests (bw) and its writer goroutine
// reads the replies (br) in the same order (the reader too, while the writer is idle: see
// conn.push).
type link struct {
	key   linkKey
	node  string
	local bool
	nc    net.Conn

	bw            *bufio.Writer
	writeDeadline time.Time

	br           *bufio.Reader
	replies      *resp.ReplyReader
	responses    *memcache.ResponseReader
	readDeadline time.Time

	// forwarded counts requests sent on a peer link, by tenant and peer (a metrics series).
	forwarded *atomic.Uint64
	// broken: the link failed; it is closed and never reused.
	broken atomic.Bool
	idleAt time.Time
}

func newLink(key linkKey, nc net.Conn, br *bufio.Reader, protocol Protocol) *link {
	l := &link{key: key, nc: nc, br: br, bw: bufio.NewWriterSize(nc, ioBufferSize)}
	if protocol == Redis {
		l.replies = resp.NewReplyReader(br, resp.ReplyLimits{})
	} else {
		l.responses = memcache.NewResponseReader(br, memcache.ResponseLimits{})
	}
	return l
}

// fail marks the link broken and closes it.
func (l *link) fail() {
	l.broken.Store(true)
	l.nc.Close()
}

// write queues request bytes, refreshing the write deadline when half of it has passed.
func (l *link) write(b []byte, now time.Time, timeout time.Duration) {
	if now.Add(timeout / 2).After(l.writeDeadline) {
		l.writeDeadline = now.Add(timeout)
		l.nc.SetWriteDeadline(l.writeDeadline)
	}
	if _, err := l.bw.Write(b); err != nil {
		l.fail()
	}
}

func (l *link) flush() {
	if l.bw.Buffered() > 0 {
		if err := l.bw.Flush(); err != nil {
			l.fail()
		}
	}
}

// prepareRead refreshes the read deadline, when half of it has passed, before a read that
// may block.
func (l *link) prepareRead(timeout time.Duration) {
	if l.br.Buffered() > 0 {
		return
	}
	if now := time.Now(); now.Add(timeout / 2).After(l.readDeadline) {
		l.readDeadline = now.Add(timeout)
		l.nc.SetReadDeadline(l.readDeadline)
	}
}

// alive checks, without blocking, that an idle link was not closed by the other side and has
// no stray bytes waiting.
func (l *link) alive() bool {
	if l.broken.Load() || l.br.Buffered() > 0 {
		return false
	}
	l.nc.SetReadDeadline(time.Now())
	_, err := l.br.Peek(1)
	l.readDeadline = time.Time{}
	l.nc.SetReadDeadline(time.Time{})
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// linkPool keeps idle links for reuse by later client connections, so a new client does not
// pay for a dial and, to a peer, a handshake.
type linkPool struct {
	max  int
	ttl  time.Duration
	mu   sync.Mutex
	idle map[linkKey][]*link
}

// idleLinkTTL drops links idle this long: the other side may have forgotten them.
const idleLinkTTL = 5 * time.Minute

func newLinkPool(maxIdle int) *linkPool {
	return &linkPool{max: maxIdle, ttl: idleLinkTTL, idle: make(map[linkKey][]*link)}
}

func (p *linkPool) get(key linkKey) *link {
	for {
		p.mu.Lock()
		list := p.idle[key]
		if len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		l := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.mu.Unlock()
		if time.Since(l.idleAt) < p.ttl && l.alive() {
			return l
		}
		l.fail()
	}
}

// put keeps a healthy link whose replies were all read, or closes it.
func (p *linkPool) put(l *link) {
	if l.broken.Load() || l.bw.Buffered() > 0 || l.br.Buffered() > 0 {
		l.fail()
		return
	}
	l.idleAt = time.Now()
	p.mu.Lock()
	if list := p.idle[l.key]; len(list) < p.max && p.idle != nil {
		p.idle[l.key] = append(list, l)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	l.fail()
}

// drop closes the idle links that match.
func (p *linkPool) drop(match func(linkKey) bool) {
	p.mu.Lock()
	var closing []*link
	for key, list := range p.idle {
		if match(key) {
			closing = append(closing, list...)
			delete(p.idle, key)
		}
	}
	p.mu.Unlock()
	for _, l := range closing {
		l.fail()
	}
}

// closeAll closes every idle link and refuses later ones.
func (p *linkPool) closeAll() {
	p.drop(func(linkKey) bool { return true })
	p.mu.Lock()
	p.idle = nil
	p.mu.Unlock()
}

// The peer protocol. A sidecar forwarding a tenant's requests to another node's peer listener
// opens a TCP connection and sends one line
//
//	CQPEER 1 <peer token> <tenant ID>\r\n
//
// The peer answers "OK\r\n" and from then on the connection carries the engine protocol
// exactly as a client connection authenticated as that tenant would, except that everything
// is served by the peer's local partition (the sender already chose the node). Any other
// answer is "ERR <reason>\r\n", after which the peer closes the connection.
const (
	peerHello      = "CQPEER"
	peerVersion    = "1"
	peerOK         = "OK"
	maxPeerLineLen = 1024
)

// appendPeerHello appends the handshake line.
func appendPeerHello(dst []byte, token, tenant string) []byte {
	return append(dst, peerHello+" "+peerVersion+" "+token+" "+tenant+"\r\n"...)
}

// parsePeerHello checks a handshake line against the expected token digest and returns the
// tenant it names.
func parsePeerHello(line []byte, tokenDigest [sha256.Size]byte) (string, error) {
	fields := strings.Fields(string(protocol.TrimEOL(line)))
	if len(fields) != 4 || fields[0] != peerHello {
		return "", errors.New("expected CQPEER <version> <token> <tenant>")
	}
	if fields[1] != peerVersion {
		return "", fmt.Errorf("unsupported peer protocol version %q, want %s", fields[1], peerVersion)
	}
	got := sha256.Sum256([]byte(fields[2]))
	if subtle.ConstantTimeCompare(got[:], tokenDigest[:]) != 1 {
		return "", errors.New("wrong peer token")
	}
	return fields[3], nil
}

// dialLink connects a new link: to the local engine's socket, or to a peer's listener with the
// handshake. A redis link then switches to the client's RESP version with HELLO.
func (p *Proxy) dialLink(ctx context.Context, key linkKey, peerToken string) (*link, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	network := "unix"
	if key.peer {
		network = "tcp"
	}
	nc, err := d.DialContext(ctx, network, key.address)
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		nc.SetDeadline(deadline)
	}
	br := bufio.NewReaderSize(nc, ioBufferSize)
	if err := p.linkHandshake(nc, br, key, peerToken); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return newLink(key, nc, br, p.opts.Protocol), nil
}

func (p *Proxy) linkHandshake(nc net.Conn, br *bufio.Reader, key linkKey, peerToken string) error {
	if key.peer {
		if _, err := nc.Write(appendPeerHello(nil, peerToken, key.tenant)); err != nil {
			return err
		}
		line, err := protocol.AppendLine(br, nil, maxPeerLineLen)
		if err != nil {
			return fmt.Errorf("peer handshake: %w", err)
		}
		if reply := string(protocol.TrimEOL(line)); reply != peerOK {
			return fmt.Errorf("peer refused the handshake: %q", reply)
		}
	}
	if key.proto == resp.RESP3 {
		if _, err := nc.Write(resp.AppendCommandStrings(nil, "HELLO", "3")); err != nil {
			return err
		}
		reply, err := resp.NewReplyReader(br, resp.ReplyLimits{}).ReadReply()
		if err != nil {
			return fmt.Errorf("HELLO 3: %w", err)
		}
		if reply.IsError() {
			return fmt.Errorf("HELLO 3: %s", protocol.TrimEOL(reply.Raw()))
		}
	}
	return nil
}
