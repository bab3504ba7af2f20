package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ErrProtocol marks a reply the engine clients could not make sense of.
var ErrProtocol = errors.New("engine protocol error")

func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// maxReplyLine bounds one line of an engine reply (it is the read buffer's size); INFO lines and
// metadump lines are far shorter, so anything longer means the stream is not what we think it is.
const maxReplyLine = 64 << 10

// engineConn is one connection to an engine's unix socket whose I/O follows a context: the
// context's deadline becomes the connection deadline and cancelling the context fails any
// blocked read or write.
type engineConn struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	stop func() bool
}

func dialEngine(ctx context.Context, socket string) (*engineConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return &engineConn{conn: conn, r: bufio.NewReaderSize(conn, maxReplyLine), w: bufio.NewWriterSize(conn, 64<<10), stop: stop}, nil
}

func (c *engineConn) Close() error {
	c.stop()
	return c.conn.Close()
}

// readLine reads one line ending in "\n" and returns it without "\n" or "\r\n".
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, protocolErrorf("reply line longer than %d bytes", maxReplyLine)
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, protocolErrorf("reply truncated: %q", line)
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}
