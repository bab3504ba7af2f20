package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// opKind is what a request does.
type opKind uint8

const (
	opGet   opKind = iota // read the key
	opFill                // SET after a miss (cache-aside)
	opWrite               // SET for the write fraction
	opAuth                // authenticate
)

// outcome is what a reply said.
type outcome uint8

const (
	outHit outcome = iota
	outMiss
	outStored // SET or authentication succeeded
	outThrottled
	outAuthError  // refused credentials, or the server demands authentication
	outReplyError // any other error reply
)

// reply is a classified reply; text is the error message for error outcomes.
type reply struct {
	outcome outcome
	text    string
}

// The sidecar proxy's replies to a request it refuses as throttled (cache-sidecar/proxy):
// redis "-ERR cacheqos: throttled: <which limit>", memcached "SERVER_ERROR throttled: <which
// limit>".
const (
	redisThrottledPrefix    = "ERR cacheqos: throttled"
	memcacheThrottledPrefix = "throttled"
)

// authKey is the key of memcached's authentication set (-Y ignores it).
const authKey = "auth"

// encoder appends requests to a buffer; used by one goroutine (the sender).
type encoder interface {
	appendGet(dst []byte, key string) []byte
	appendSet(dst []byte, key string, value []byte) []byte
	appendAuth(dst []byte, user, password string) []byte
}

// decoder reads the reply to each request in order; used by one goroutine (the receiver). An
// error means the connection is unusable (I/O failure, timeout, malformed or unexpected reply).
type decoder interface {
	read(op opKind) (reply, error)
}

// replyBufferSize is the read buffer of a connection.
const replyBufferSize = 64 << 10

func newCodec(engine string, r io.Reader) (encoder, decoder) {
	br := bufio.NewReaderSize(r, replyBufferSize)
	if engine == EngineMemcached {
		return &memcacheEncoder{}, &memcacheDecoder{r: memcache.NewResponseReader(br, memcache.ResponseLimits{})}
	}
	return redisEncoder{}, &redisDecoder{r: resp.NewReplyReader(br, resp.ReplyLimits{})}
}

// redis (RESP2).

type redisEncoder struct{}

func (redisEncoder) appendGet(dst []byte, key string) []byte {
	dst = resp.AppendArrayHeader(dst, 2)
	dst = resp.AppendBulkString(dst, "GET")
	return resp.AppendBulkString(dst, key)
}

func (redisEncoder) appendSet(dst []byte, key string, value []byte) []byte {
	dst = resp.AppendArrayHeader(dst, 3)
	dst = resp.AppendBulkString(dst, "SET")
	dst = resp.AppendBulkString(dst, key)
	return resp.AppendBulk(dst, value)
}

func (redisEncoder) appendAuth(dst []byte, user, password string) []byte {
	return resp.AppendCommandStrings(dst, "AUTH", user, password)
}

type redisDecoder struct {
	r *resp.ReplyReader
}

func (d *redisDecoder) read(op opKind) (reply, error) {
	raw, err := d.r.ReadReply()
	if err != nil {
		return reply{}, err
	}
	v, err := raw.Decode()
	if err != nil {
		return reply{}, err
	}
	if v.IsError() {
		return classifyRedisError(op, string(v.Str)), nil
	}
	switch {
	case op == opGet && v.Type == resp.TypeBulkString:
		if v.Null {
			return reply{outcome: outMiss}, nil
		}
		return reply{outcome: outHit}, nil
	case op != opGet && v.Type == resp.TypeSimpleString && string(v.Str) == "OK":
		return reply{outcome: outStored}, nil
	}
	return reply{}, fmt.Errorf("unexpected %s reply %q to %s", v.Type, truncate(string(v.Raw)), op.command())
}

func classifyRedisError(op opKind, msg string) reply {
	switch {
	case strings.HasPrefix(msg, redisThrottledPrefix):
		return reply{outcome: outThrottled, text: msg}
	case op == opAuth, strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"):
		return reply{outcome: outAuthError, text: msg}
	}
	return reply{outcome: outReplyError, text: msg}
}

// memcached (text protocol).

type memcacheEncoder struct {
	key  []byte
	keys [1][]byte
}

func (e *memcacheEncoder) appendGet(dst []byte, key string) []byte {
	e.key = append(e.key[:0], key...)
	e.keys[0] = e.key
	return memcache.AppendRetrieval(dst, memcache.CmdGet, 0, e.keys[:])
}

func (e *memcacheEncoder) appendSet(dst []byte, key string, value []byte) []byte {
	e.key = append(e.key[:0], key...)
	return memcache.AppendStorage(dst, memcache.CmdSet, e.key, 0, 0, 0, value, false)
}

func (e *memcacheEncoder) appendAuth(dst []byte, user, password string) []byte {
	return memcache.AppendStorage(dst, memcache.CmdSet, []byte(authKey), 0, 0, 0, []byte(user+" "+password), false)
}

type memcacheDecoder struct {
	r *memcache.ResponseReader
}

func (d *memcacheDecoder) read(op opKind) (reply, error) {
	cmd := memcache.CmdSet
	if op == opGet {
		cmd = memcache.CmdGet
	}
	r, err := d.r.ReadResponse(memcache.Expect{Command: cmd})
	if err != nil {
		return reply{}, err
	}
	switch {
	case r.IsError():
		return classifyMemcacheError(op, r), nil
	case op == opGet && r.Status == memcache.StatusEnd:
		if len(r.Values) > 0 {
			return reply{outcome: outHit}, nil
		}
		return reply{outcome: outMiss}, nil
	case op != opGet && r.Status == memcache.StatusStored:
		return reply{outcome: outStored}, nil
	}
	// The stream is still in step (the reader framed a whole response); only this request
	// failed, as with an error reply.
	return reply{outcome: outReplyError, text: fmt.Sprintf("%s answered %s", op.command(), r.Status)}, nil
}

func classifyMemcacheError(op opKind, r *memcache.Response) reply {
	msg := r.Status.String()
	if len(r.Text) > 0 {
		msg += " " + string(r.Text)
	}
	text := string(r.Text)
	switch {
	case r.Status == memcache.StatusServerError && strings.HasPrefix(text, memcacheThrottledPrefix):
		return reply{outcome: outThrottled, text: msg}
	case op == opAuth, r.Status == memcache.StatusClientError &&
		(text == memcache.UnauthenticatedMessage || text == memcache.AuthFailureMessage):
		return reply{outcome: outAuthError, text: msg}
	}
	return reply{outcome: outReplyError, text: msg}
}

func (op opKind) command() string {
	switch op {
	case opGet:
		return "GET"
	case opAuth:
		return "authentication"
	}
	return "SET"
}

// truncate shortens a reply quoted in an error message.
func truncate(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
