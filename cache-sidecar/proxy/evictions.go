package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Reconnect delays of an eviction watcher whose engine connection failed.
const (
	minWatchBackoff = 100 * time.Millisecond
	maxWatchBackoff = 10 * time.Second
	// watchHealthy: a watch that lasted this long resets the backoff.
	watchHealthy = 30 * time.Second
	// maxEvictionLine bounds one line of memcached's eviction log.
	maxEvictionLine = 4 << 10
)

// watchPartition follows the local engine until the returned function is called: its
// evictions into the partition's ghost list (redis reports them as keyspace events, "evicted",
// turned on by the watcher; memcached on a "watch evictions" log stream), and its memory per
// object into the curve's engine model.
func (p *Proxy) watchPartition(t *tenant, ps *partitionState) context.CancelFunc {
	ctx, cancel := context.WithCancel(p.ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return cancel
	}
	p.wg.Add(2)
	go p.retrying(ctx, t, ps, "eviction watch", p.followEvictions)
	go p.retrying(ctx, t, ps, "calibration", p.calibrateEvery)
	return cancel
}

// retrying runs follow until ctx ends, again after each failure with a growing delay.
func (p *Proxy) retrying(ctx context.Context, t *tenant, ps *partitionState, what string,
	follow func(context.Context, *tenant, *partitionState) error) {
	defer p.wg.Done()
	backoff := minWatchBackoff
	for {
		began := time.Now()
		err := follow(ctx, t, ps)
		if ctx.Err() != nil {
			return
		}
		p.log.Debug(what+" ended; retrying", "tenant", t.id, "engine", ps.engine, "err", err)
		if time.Since(began) > watchHealthy {
			backoff = minWatchBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// followEvictions records evictions until the connection fails or ctx ends.
func (p *Proxy) followEvictions(ctx context.Context, t *tenant, ps *partitionState) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", ps.engine)
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	br := bufio.NewReader(nc)
	if p.opts.Protocol == Redis {
		return followRedisEvictions(nc, br, t, ps)
	}
	return followMemcachedEvictions(nc, br, ps)
}

// evictedChannel is redis' keyevent channel for evictions in database 0.
const evictedChannel = "__keyevent@0__:evicted"

func followRedisEvictions(nc net.Conn, br *bufio.Reader, t *tenant, ps *partitionState) error {
	rr := resp.NewReplyReader(br, resp.ReplyLimits{})
	call := func(args ...string) (resp.Value, error) {
		if _, err := nc.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
			return resp.Value{}, err
		}
		reply, err := rr.ReadReply()
		if err != nil {
			return resp.Value{}, err
		}
		v, err := reply.Decode()
		if err == nil && v.IsError() {
			err = fmt.Errorf("%s: %s", args[0], v.Str)
		}
		return v, err
	}
	v, err := call("CONFIG", "GET", "notify-keyspace-events")
	if err != nil {
		return err
	}
	if len(v.Elems) != 2 {
		return errors.New("unexpected CONFIG GET notify-keyspace-events reply")
	}
	// Add keyevent notifications (E) for evictions (e, or A, which includes it), keeping
	// whatever else is on.
	flags := string(v.Elems[1].Str)
	wanted := flags
	if !strings.Contains(wanted, "E") {
		wanted += "E"
	}
	if !strings.ContainsAny(wanted, "eA") {
		wanted += "e"
	}
	if wanted != flags {
		if _, err := call("CONFIG", "SET", "notify-keyspace-events", wanted); err != nil {
			return err
		}
	}
	if _, err := call("SUBSCRIBE", evictedChannel); err != nil {
		return err
	}
	for {
		if err := recordRedisEviction(rr, t, ps); err != nil {
			return err
		}
	}
}

// recordRedisEviction reads one pub/sub message of evictedChannel and records the evicted key
// in the ghost list.
func recordRedisEviction(rr *resp.ReplyReader, t *tenant, ps *partitionState) error {
	reply, err := rr.ReadReply()
	if err != nil {
		return err
	}
	if key, ok := messagePayload(reply.Raw()); ok {
		ps.ghost.RecordEvictionHash(keyhash.Sum64(key), t.meanValueSize())
	}
	return nil
}

// messagePayload returns the payload of a pub/sub message, ["message", channel, payload] in
// RESP2, read in place: a watcher reads one per eviction, and decoding it into values would
// allocate.
func messagePayload(raw []byte) (payload []byte, ok bool) {
	rest, ok := bytes.CutPrefix(raw, []byte("*3\r\n"))
	if !ok {
		return nil, false
	}
	var elems [3][]byte
	for i := range elems {
		if len(rest) == 0 || rest[0] != '$' {
			return nil, false
		}
		header, body, found := bytes.Cut(rest[1:], []byte("\r\n"))
		n, valid := protocol.ParseUint(header)
		if !found || !valid || n > uint64(len(body)) || len(body)-int(n) < 2 {
			return nil, false
		}
		elems[i], rest = body[:n], body[n+2:]
	}
	return elems[2], len(rest) == 0 && string(elems[0]) == "message"
}

func followMemcachedEvictions(nc net.Conn, br *bufio.Reader, ps *partitionState) error {
	if _, err := nc.Write([]byte("watch evictions\r\n")); err != nil {
		return err
	}
	line, err := protocol.AppendLine(br, nil, maxEvictionLine)
	if err != nil {
		return err
	}
	if reply := string(protocol.TrimEOL(line)); reply != "OK" {
		return fmt.Errorf("watch evictions answered %q", reply)
	}
	for {
		if line, err = recordMemcachedEviction(br, line[:0], ps); err != nil {
			return err
		}
	}
}

// recordMemcachedEviction reads one line of memcached's eviction log into buf and records an
// evicted key in the ghost list. It returns the line read, to reuse as the next buf.
func recordMemcachedEviction(br *bufio.Reader, buf []byte, ps *partitionState) ([]byte, error) {
	line, err := protocol.AppendLine(br, buf, maxEvictionLine)
	if err != nil {
		return line, err
	}
	if key, size, ok := parseEvictionLine(protocol.TrimEOL(line)); ok {
		ps.ghost.RecordEvictionHash(keyhash.Sum64(key), size)
	}
	return line, nil
}

// parseEvictionLine reads the key and size of a memcached eviction log line
// ("ts=... gid=... type=eviction key=<uri-encoded key> ... size=<bytes>"), decoding the key
// in place in line: a watcher reads one per eviction, and allocating would cost more than
// the rest of its work.
func parseEvictionLine(line []byte) (key []byte, size int64, ok bool) {
	var isEviction bool
	for len(line) > 0 {
		var field []byte
		field, line, _ = bytes.Cut(line, []byte(" "))
		name, value, found := bytes.Cut(field, []byte("="))
		if !found {
			continue
		}
		switch string(name) {
		case "type":
			isEviction = string(value) == "eviction"
		case "key":
			decoded, err := engine.AppendDecodedKey(value[:0], value)
			if err != nil {
				return nil, 0, false
			}
			key = decoded
		case "size":
			n, valid := protocol.ParseInt(value)
			if !valid {
				return nil, 0, false
			}
			size = n
		}
	}
	return key, size, isEviction && len(key) > 0
}
