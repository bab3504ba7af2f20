package resp

import "fmt"

// ProtocolError reports bytes that break RESP framing. After one the stream cannot be
// resynchronised: answer with AppendError(dst, "ERR "+err.Error()) and close the connection.
type ProtocolError struct {
	// Msg says what was wrong, in redis' words where redis has words for it.
	Msg string
}

// Error returns "Protocol error: " + Msg, the text redis sends after "-ERR ".
func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

func protocolErrorf(format string, args ...any) *ProtocolError {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// describeByte renders a byte for an error message without letting control bytes (CR, LF) into
// the one-line error reply.
func describeByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("'%c'", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// CommandError is a well-formed command the proxy must answer with an error instead of
// forwarding: unknown command, wrong number of arguments, refused command, bad key count.
// Error returns the reply text without the leading '-' ("ERR unknown command ...").
type CommandError struct {
	Msg string
}

func (e *CommandError) Error() string { return e.Msg }
