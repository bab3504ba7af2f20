package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The subset of RESP2 the manager needs to run INFO, CONFIG and MEMORY commands on redis.

// Limits on replies: the manager's commands return small replies, so these only stop a broken
// stream from making us allocate without bound.
const (
	maxBulkLength  = 4 << 20
	maxArrayLength = 1 << 20
	maxReplyDepth  = 4
)

// respValue is one RESP2 reply other than an error reply.
type respValue struct {
	kind  byte // '+' simple string, ':' integer, '$' bulk string, '*' array
	str   string
	num   int64
	null  bool // null bulk string or null array
	array []respValue
}

// redisError is an error reply ("-ERR ...").
type redisError struct{ msg string }

func (e *redisError) Error() string { return "redis: " + e.msg }

// readRESP reads one reply. An error reply is returned as a *redisError after the whole reply
// has been consumed, so the connection stays usable.
func readRESP(r *bufio.Reader) (respValue, error) {
	return readRESPDepth(r, 0)
}

func readRESPDepth(r *bufio.Reader, depth int) (respValue, error) {
	if depth > maxReplyDepth {
		return respValue{}, protocolErrorf("reply nested deeper than %d levels", maxReplyDepth)
	}
	line, err := readLine(r)
	if err != nil {
		return respValue{}, err
	}
	if len(line) == 0 {
		return respValue{}, protocolErrorf("empty reply line")
	}
	kind, rest := line[0], string(line[1:])
	switch kind {
	case '+':
		return respValue{kind: kind, str: rest}, nil
	case '-':
		return respValue{}, &redisError{msg: rest}
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return respValue{}, protocolErrorf("bad integer reply %q", rest)
		}
		return respValue{kind: kind, num: n}, nil
	case '$':
		n, err := parseLength(rest, maxBulkLength)
		if err != nil {
			return respValue{}, err
		}
		if n < 0 {
			return respValue{kind: kind, null: true}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return respValue{}, fmt.Errorf("reading %d-byte bulk reply: %w", n, err)
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return respValue{}, protocolErrorf("bulk reply of %d bytes not terminated by CRLF", n)
		}
		return respValue{kind: kind, str: string(buf[:n])}, nil
	case '*':
		n, err := parseLength(rest, maxArrayLength)
		if err != nil {
			return respValue{}, err
		}
		if n < 0 {
			return respValue{kind: kind, null: true}, nil
		}
		v := respValue{kind: kind, array: make([]respValue, 0, min(n, 1024))}
		var firstErr error
		for range n {
			elem, err := readRESPDepth(r, depth+1)
			var reply *redisError
			if err != nil && !errors.As(err, &reply) {
				return respValue{}, err
			}
			if err != nil && firstErr == nil {
				firstErr = err // an error reply inside an array: keep reading so the stream stays in sync
			}
			v.array = append(v.array, elem)
		}
		return v, firstErr
	default:
		return respValue{}, protocolErrorf("unknown reply type %q", kind)
	}
}

// parseLength parses a bulk or array length: -1 means null, anything else must be in [0, limit].
func parseLength(s string, limit int) (int, error) {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, protocolErrorf("bad length %q", s)
	case n == -1:
		return -1, nil
	case n < 0 || n > limit:
		return 0, protocolErrorf("length %d out of range [0, %d]", n, limit)
	}
	return n, nil
}

// appendRESPCommand encodes a command as an array of bulk strings.
func appendRESPCommand(buf []byte, args ...string) []byte {
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// redisClient runs commands on one redis connection.
type redisClient struct{ *engineConn }

func dialRedis(ctx context.Context, socket string) (redisClient, error) {
	c, err := dialEngine(ctx, socket)
	return redisClient{c}, err
}

// do sends one command and reads its reply.
func (c redisClient) do(args ...string) (respValue, error) {
	if _, err := c.w.Write(appendRESPCommand(nil, args...)); err != nil {
		return respValue{}, err
	}
	if err := c.w.Flush(); err != nil {
		return respValue{}, err
	}
	return readRESP(c.r)
}

// doOK runs a command that must answer +OK.
func (c redisClient) doOK(args ...string) error {
	v, err := c.do(args...)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(args[:min(len(args), 2)], " "), err)
	}
	if v.kind != '+' || v.str != "OK" {
		return protocolErrorf("%s: expected +OK, got %s", strings.Join(args[:min(len(args), 2)], " "), v.describe())
	}
	return nil
}

// info runs INFO for the given sections and returns its fields.
func (c redisClient) info(sections ...string) (map[string]string, error) {
	v, err := c.do(append([]string{"INFO"}, sections...)...)
	if err != nil {
		return nil, fmt.Errorf("INFO: %w", err)
	}
	if v.kind != '$' || v.null {
		return nil, protocolErrorf("INFO: expected a bulk string, got %s", v.describe())
	}
	return parseRedisInfo(v.str), nil
}

// configGet returns one configuration parameter's value.
func (c redisClient) configGet(name string) (string, error) {
	v, err := c.do("CONFIG", "GET", name)
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s: %w", name, err)
	}
	if v.kind != '*' || len(v.array) != 2 || v.array[1].kind != '$' {
		return "", protocolErrorf("CONFIG GET %s: expected a name/value pair, got %s", name, v.describe())
	}
	return v.array[1].str, nil
}

func (v respValue) describe() string {
	switch {
	case v.null:
		return "null"
	case v.kind == ':':
		return "integer " + strconv.FormatInt(v.num, 10)
	case v.kind == '*':
		return fmt.Sprintf("array of %d", len(v.array))
	default:
		s := v.str
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return fmt.Sprintf("%q", s)
	}
}

// parseRedisInfo reads "field:value" lines, skipping "# Section" headers and blank lines.
// The keyspace section's "db0:keys=1,expires=0" lines come back as field "db0".
func parseRedisInfo(text string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if name, value, ok := strings.Cut(line, ":"); ok {
			fields[name] = value
		}
	}
	return fields
}

// keyspaceKeys sums the keys of every database in INFO keyspace fields.
func keyspaceKeys(info map[string]string) (int64, error) {
	var total int64
	for name, value := range info {
		if !strings.HasPrefix(name, "db") {
			continue
		}
		if _, err := strconv.Atoi(name[2:]); err != nil {
			continue
		}
		found := false
		for part := range strings.SplitSeq(value, ",") {
			if k, v, ok := strings.Cut(part, "="); ok && k == "keys" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 || n > math.MaxInt64-total {
					return 0, protocolErrorf("INFO keyspace %s: bad key count %q", name, v)
				}
				total += n
				found = true
			}
		}
		if !found {
			return 0, protocolErrorf("INFO keyspace %s: no key count in %q", name, value)
		}
	}
	return total, nil
}
