package memcache

// ErrorKind is which of memcached's three error replies an error is.
type ErrorKind uint8

// Error kinds.
const (
	// KindError is "ERROR": a command name or form memcached does not know.
	KindError ErrorKind = iota
	// KindClientError is "CLIENT_ERROR <message>": the request is malformed.
	KindClientError
	// KindServerError is "SERVER_ERROR <message>": the request cannot be carried out.
	KindServerError
)

// ProtocolError is a request (or response) that cannot be accepted. Error returns the reply line
// to send, without CRLF.
type ProtocolError struct {
	Kind ErrorKind
	Msg  string
	// Fatal: the stream cannot be resynchronised after this error; reply, then close the
	// connection. When false the reader has consumed the bad request and can go on.
	Fatal bool
}

func (e *ProtocolError) Error() string {
	switch e.Kind {
	case KindClientError:
		return "CLIENT_ERROR " + e.Msg
	case KindServerError:
		return "SERVER_ERROR " + e.Msg
	default:
		return "ERROR"
	}
}

// AppendReply appends the error's reply line, CRLF included.
func (e *ProtocolError) AppendReply(dst []byte) []byte {
	switch e.Kind {
	case KindClientError:
		return AppendClientError(dst, e.Msg)
	case KindServerError:
		return AppendServerError(dst, e.Msg)
	default:
		return AppendError(dst)
	}
}

// The request errors, worded as memcached words them. They are shared values: do not modify.
var (
	errUnknownCommand = &ProtocolError{Kind: KindError}
	errBadFormat      = &ProtocolError{Kind: KindClientError, Msg: "bad command line format"}
	errBadDelete      = &ProtocolError{Kind: KindClientError, Msg: "bad command line format.  Usage: delete <key> [noreply]"}
	errBadExptime     = &ProtocolError{Kind: KindClientError, Msg: "invalid exptime argument"}
	errBadDelta       = &ProtocolError{Kind: KindClientError, Msg: "invalid numeric delta argument"}
	errBadDataChunk   = &ProtocolError{Kind: KindClientError, Msg: "bad data chunk"}
	errTooLarge       = &ProtocolError{Kind: KindServerError, Msg: "object too large for cache"}
	errInvalidFlag    = &ProtocolError{Kind: KindClientError, Msg: "invalid flag"}
	errDuplicateFlag  = &ProtocolError{Kind: KindClientError, Msg: "duplicate flag"}
	errOpaqueTooLong  = &ProtocolError{Kind: KindClientError, Msg: "opaque token too long"}
	errBadBase64Key   = &ProtocolError{Kind: KindClientError, Msg: "error decoding key"}
	errLineTooLong    = &ProtocolError{Kind: KindClientError, Msg: "line too long", Fatal: true}
)

// Authentication replies of memcached's -Y convention, for AppendClientError.
const (
	// AuthFailureMessage answers a failed authentication set.
	AuthFailureMessage = "authentication failure"
	// UnauthenticatedMessage answers any other command before authentication.
	UnauthenticatedMessage = "unauthenticated"
)
