package resp

import (
	"strconv"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Proto is the RESP version a connection speaks, chosen by the client with HELLO.
type Proto int

// Protocol versions.
const (
	RESP2 Proto = 2
	RESP3 Proto = 3
)

var crlf = []byte("\r\n")

// AppendSimpleString appends a simple string reply ("+OK"). CR and LF in s become spaces, since a
// simple string cannot contain them.
func AppendSimpleString(dst []byte, s string) []byte {
	return protocol.AppendReplyLine(append(dst, '+'), s)
}

// AppendError appends an error reply. msg should start with an error code ("ERR ...",
// "NOPROTO ..."), as redis clients parse the first word as the code. CR and LF become spaces,
// as redis does.
func AppendError(dst []byte, msg string) []byte {
	return protocol.AppendReplyLine(append(dst, '-'), msg)
}

// AppendInteger appends an integer reply.
func AppendInteger(dst []byte, n int64) []byte {
	return appendHeader(dst, ':', n)
}

// AppendBulk appends a bulk string reply or command argument.
func AppendBulk(dst []byte, b []byte) []byte {
	dst = appendHeader(dst, '$', int64(len(b)))
	dst = append(dst, b...)
	return append(dst, crlf...)
}

// AppendBulkString is AppendBulk for a string.
func AppendBulkString(dst []byte, s string) []byte {
	dst = appendHeader(dst, '$', int64(len(s)))
	dst = append(dst, s...)
	return append(dst, crlf...)
}

// AppendNull appends a missing value: the null bulk string "$-1" in RESP2, "_" in RESP3.
func AppendNull(dst []byte, proto Proto) []byte {
	if proto == RESP3 {
		return append(dst, "_\r\n"...)
	}
	return append(dst, "$-1\r\n"...)
}

// AppendNullArray appends a missing aggregate: "*-1" in RESP2, "_" in RESP3.
func AppendNullArray(dst []byte, proto Proto) []byte {
	if proto == RESP3 {
		return append(dst, "_\r\n"...)
	}
	return append(dst, "*-1\r\n"...)
}

// AppendArrayHeader appends the header of an n-element array; the elements follow.
func AppendArrayHeader(dst []byte, n int) []byte {
	return appendHeader(dst, '*', int64(n))
}

// AppendMapHeader appends the header of a map of n key/value pairs: "%n" in RESP3, and in RESP2
// the flat array of 2n elements redis sends instead.
func AppendMapHeader(dst []byte, n int, proto Proto) []byte {
	if proto == RESP3 {
		return appendHeader(dst, '%', int64(n))
	}
	return appendHeader(dst, '*', 2*int64(n))
}

// AppendCommand appends a command as a RESP array of bulk strings, as clients send it (used by
// the proxy for the per-node parts of a split command).
func AppendCommand(dst []byte, args [][]byte) []byte {
	dst = AppendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendCommandStrings is AppendCommand for string arguments.
func AppendCommandStrings(dst []byte, args ...string) []byte {
	dst = AppendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = AppendBulkString(dst, a)
	}
	return dst
}

func appendHeader(dst []byte, t byte, n int64) []byte {
	dst = append(dst, t)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, crlf...)
}
