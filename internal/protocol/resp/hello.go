package resp

import (
	"bytes"
	"fmt"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Hello holds the options of a HELLO command, which the proxy answers itself.
type Hello struct {
	// Proto is the requested protocol version, 0 when HELLO came without one (keep the current).
	Proto Proto
	// HasAuth reports an AUTH option; User and Password then hold its arguments.
	HasAuth        bool
	User, Password []byte
	// ClientName is the SETNAME option's argument, nil without one.
	ClientName []byte
}

// ParseHello parses HELLO [protover [AUTH username password] [SETNAME clientname]] with redis 7's
// rules and error texts. args[0] is the command name. The slices alias args.
func ParseHello(args [][]byte) (Hello, error) {
	var h Hello
	if len(args) < 2 {
		return h, nil
	}
	ver, ok := protocol.ParseInt(args[1])
	if !ok {
		return h, &CommandError{Msg: "ERR Protocol version is not an integer or out of range"}
	}
	if ver != 2 && ver != 3 {
		return h, &CommandError{Msg: "NOPROTO unsupported protocol version"}
	}
	h.Proto = Proto(ver)
	for i := 2; i < len(args); i++ {
		more := len(args) - 1 - i
		switch {
		case bytes.EqualFold(args[i], []byte("auth")) && more >= 2:
			h.HasAuth, h.User, h.Password = true, args[i+1], args[i+2]
			i += 2
		case bytes.EqualFold(args[i], []byte("setname")) && more >= 1:
			h.ClientName = args[i+1]
			i++
		default:
			return Hello{}, &CommandError{Msg: fmt.Sprintf("ERR Syntax error in HELLO option '%s'", truncate(args[i], 128))}
		}
	}
	return h, nil
}

// ParseAuth parses AUTH [username] password. A missing username is redis' "default" user,
// returned as nil.
func ParseAuth(args [][]byte) (user, password []byte, err error) {
	switch len(args) {
	case 2:
		return nil, args[1], nil
	case 3:
		return args[1], args[2], nil
	default:
		return nil, nil, &CommandError{Msg: "ERR syntax error"}
	}
}

// HelloInfo is what the proxy reports about itself in its HELLO reply.
type HelloInfo struct {
	Server  string // "redis", so clients that check it keep working
	Version string // the engine version the tenant's partitions run
	ID      int64  // the proxy's id for the client connection
}

// AppendHelloReply appends redis' HELLO reply (server, version, proto, id, mode, role, modules)
// as a map in RESP3 or a flat array in RESP2.
func AppendHelloReply(dst []byte, proto Proto, info HelloInfo) []byte {
	dst = AppendMapHeader(dst, 7, proto)
	dst = AppendBulkString(dst, "server")
	dst = AppendBulkString(dst, info.Server)
	dst = AppendBulkString(dst, "version")
	dst = AppendBulkString(dst, info.Version)
	dst = AppendBulkString(dst, "proto")
	dst = AppendInteger(dst, int64(proto))
	dst = AppendBulkString(dst, "id")
	dst = AppendInteger(dst, info.ID)
	dst = AppendBulkString(dst, "mode")
	dst = AppendBulkString(dst, "standalone")
	dst = AppendBulkString(dst, "role")
	dst = AppendBulkString(dst, "master")
	dst = AppendBulkString(dst, "modules")
	return AppendArrayHeader(dst, 0)
}
