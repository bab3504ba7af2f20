package memcache

import (
	"strconv"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

var crlf = []byte("\r\n")

// AppendError appends "ERROR", memcached's reply to an unknown command.
func AppendError(dst []byte) []byte { return append(dst, "ERROR\r\n"...) }

// AppendClientError appends "CLIENT_ERROR <msg>"; CR and LF in msg become spaces.
func AppendClientError(dst []byte, msg string) []byte {
	return protocol.AppendReplyLine(append(dst, "CLIENT_ERROR "...), msg)
}

// AppendServerError appends "SERVER_ERROR <msg>"; CR and LF in msg become spaces.
func AppendServerError(dst []byte, msg string) []byte {
	return protocol.AppendReplyLine(append(dst, "SERVER_ERROR "...), msg)
}

// AppendStatusLine appends a one-word reply line such as "STORED", "HD" or "MN".
func AppendStatusLine(dst []byte, status string) []byte {
	return protocol.AppendReplyLine(dst, status)
}

// AppendValue appends one retrieval item: "VALUE <key> <flags> <bytes>" and the data block.
func AppendValue(dst, key []byte, flags uint32, data []byte) []byte {
	dst = appendValueHeader(dst, key, flags, len(data))
	return appendBlock(append(dst, crlf...), data)
}

// AppendValueCas appends one gets/gats item, with its cas unique.
func AppendValueCas(dst, key []byte, flags uint32, cas uint64, data []byte) []byte {
	dst = appendValueHeader(dst, key, flags, len(data))
	dst = strconv.AppendUint(append(dst, ' '), cas, 10)
	return appendBlock(append(dst, crlf...), data)
}

func appendValueHeader(dst, key []byte, flags uint32, size int) []byte {
	dst = append(dst, "VALUE "...)
	dst = append(dst, key...)
	dst = strconv.AppendUint(append(dst, ' '), uint64(flags), 10)
	return strconv.AppendInt(append(dst, ' '), int64(size), 10)
}

func appendBlock(dst, data []byte) []byte {
	return append(append(dst, data...), crlf...)
}

// AppendEnd appends the END that closes a retrieval response.
func AppendEnd(dst []byte) []byte { return append(dst, "END\r\n"...) }

// AppendRetrieval appends a get, gets, gat or gats request for keys, as the proxy sends the
// per-node part of a split retrieval; exptime is used by gat and gats only.
func AppendRetrieval(dst []byte, cmd Command, exptime int64, keys [][]byte) []byte {
	dst = append(dst, cmd.String()...)
	if cmd == CmdGat || cmd == CmdGats {
		dst = strconv.AppendInt(append(dst, ' '), exptime, 10)
	}
	for _, k := range keys {
		dst = append(append(dst, ' '), k...)
	}
	return append(dst, crlf...)
}

// AppendStorage appends a set, add, replace, append, prepend or cas request with its data block;
// cas is used by CmdCas only.
func AppendStorage(dst []byte, cmd Command, key []byte, flags uint32, exptime int64, cas uint64, data []byte, noreply bool) []byte {
	dst = append(dst, cmd.String()...)
	dst = append(append(dst, ' '), key...)
	dst = strconv.AppendUint(append(dst, ' '), uint64(flags), 10)
	dst = strconv.AppendInt(append(dst, ' '), exptime, 10)
	dst = strconv.AppendInt(append(dst, ' '), int64(len(data)), 10)
	if cmd == CmdCas {
		dst = strconv.AppendUint(append(dst, ' '), cas, 10)
	}
	if noreply {
		dst = append(dst, " noreply"...)
	}
	return appendBlock(append(dst, crlf...), data)
}
