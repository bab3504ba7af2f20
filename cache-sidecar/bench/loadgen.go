package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
)

// memcacheTarget is where the memcached load generator connects; user is set when the target
// wants memcached's -Y authentication (a first "set" whose value is "<user> <password>").
type memcacheTarget struct {
	name, addr     string
	user, password string
}

// runMemcacheLoad measures SET then GET against target the way redis-benchmark does for
// redis: load.clients connections share load.requests requests of random keys from the key
// space, each connection sending load.pipeline requests before reading their replies. A
// request's latency runs from the write of its batch to the read of its reply.
func runMemcacheLoad(ctx context.Context, target memcacheTarget, load load) ([]result, error) {
	var out []result
	for _, op := range []memcache.Command{memcache.CmdSet, memcache.CmdGet} {
		res, err := memcacheTest(ctx, target, load, op)
		if err != nil {
			return nil, fmt.Errorf("%s against %s: %w", op, target.name, err)
		}
		out = append(out, res)
	}
	return out, nil
}

func memcacheTest(ctx context.Context, target memcacheTarget, load load, op memcache.Command) (result, error) {
	perClient := load.requests / load.clients
	latencies := make([][]time.Duration, load.clients)
	errs := make([]error, load.clients)
	conns := make([]*memcacheLoadConn, load.clients)
	for i := range conns {
		c, err := dialMemcacheLoad(ctx, target)
		if err != nil {
			for _, open := range conns[:i] {
				open.nc.Close()
			}
			return result{}, err
		}
		conns[i] = c
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.nc.Close()
			latencies[i], errs[i] = c.run(op, perClient, load.pipeline, rand.New(rand.NewPCG(uint64(i), uint64(op))))
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	all := slices.Concat(latencies...)
	slices.Sort(all)
	return result{
		Test: op.String(),
		RPS:  float64(len(all)) / elapsed.Seconds(),
		P50:  percentileMillis(all, 0.50),
		P99:  percentileMillis(all, 0.99),
	}, nil
}

// percentileMillis is the q-quantile of sorted durations, in milliseconds.
func percentileMillis(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)-1, int(q*float64(len(sorted))))
	return float64(sorted[i]) / float64(time.Millisecond)
}

type memcacheLoadConn struct {
	nc    net.Conn
	buf   []byte // the batch of requests being built
	r     *memcache.ResponseReader
	value []byte
}

func dialMemcacheLoad(ctx context.Context, target memcacheTarget) (*memcacheLoadConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", target.addr)
	if err != nil {
		return nil, err
	}
	c := &memcacheLoadConn{
		nc:    nc,
		r:     memcache.NewResponseReader(bufio.NewReaderSize(nc, 64<<10), memcache.ResponseLimits{}),
		value: make([]byte, valueSize),
	}
	for i := range c.value {
		c.value[i] = 'x'
	}
	if target.user != "" {
		c.appendSet([]byte("auth"), []byte(target.user+" "+target.password))
		if err := c.flush(); err != nil {
			nc.Close()
			return nil, err
		}
		resp, err := c.r.ReadResponse(memcache.Expect{Command: memcache.CmdSet})
		if err == nil && resp.Status != memcache.StatusStored {
			err = fmt.Errorf("answered %s", respText(resp))
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("authenticating as %s: %w", target.user, err)
		}
	}
	return c, nil
}

func respText(r *memcache.Response) string {
	if r == nil {
		return ""
	}
	return r.Status.String() + " " + string(r.Text)
}

func (c *memcacheLoadConn) appendSet(key, value []byte) {
	c.buf = append(c.buf, "set "...)
	c.buf = append(c.buf, key...)
	c.buf = append(c.buf, " 0 0 "...)
	c.buf = strconv.AppendInt(c.buf, int64(len(value)), 10)
	c.buf = append(c.buf, "\r\n"...)
	c.buf = append(c.buf, value...)
	c.buf = append(c.buf, "\r\n"...)
}

func (c *memcacheLoadConn) appendGet(key []byte) {
	c.buf = append(c.buf, "get "...)
	c.buf = append(c.buf, key...)
	c.buf = append(c.buf, "\r\n"...)
}

// flush sends the batch built so far.
func (c *memcacheLoadConn) flush() error {
	_, err := c.nc.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// run sends n requests in batches of pipeline and returns each one's latency.
func (c *memcacheLoadConn) run(op memcache.Command, n, pipeline int, rng *rand.Rand) ([]time.Duration, error) {
	c.nc.SetDeadline(time.Now().Add(5 * time.Minute))
	out := make([]time.Duration, 0, n)
	key := make([]byte, 0, 32)
	for sent := 0; sent < n; {
		batch := min(pipeline, n-sent)
		for range batch {
			key = append(key[:0], "key:"...)
			key = strconv.AppendInt(key, int64(rng.IntN(keyspace)), 10)
			if op == memcache.CmdSet {
				c.appendSet(key, c.value)
			} else {
				c.appendGet(key)
			}
		}
		start := time.Now()
		if err := c.flush(); err != nil {
			return nil, err
		}
		for range batch {
			resp, err := c.r.ReadResponse(memcache.Expect{Command: op})
			if err != nil {
				return nil, err
			}
			if want := wantStatus(op); resp.Status != want {
				return nil, fmt.Errorf("%s answered %s, want %s", op, respText(resp), want)
			}
			out = append(out, time.Since(start))
		}
		sent += batch
	}
	return out, nil
}

func wantStatus(op memcache.Command) memcache.Status {
	if op == memcache.CmdSet {
		return memcache.StatusStored
	}
	return memcache.StatusEnd
}
