package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// hostLoadRate is each host client's requests per second: low enough that a few clients do
// not take a core of the shared machine, high enough that every second of an outage shows.
const hostLoadRate = 50

// hostLoadTimeout is how long a host client waits for a reply before it counts a hang.
const hostLoadTimeout = 3 * time.Second

// loadCounts are the outcomes of a host client's requests in one second. A miss is followed
// by a SET of the key; the SET's own outcome counts only when it fails.
type loadCounts struct {
	hits, misses int
	errors       int // error replies (after a successful login)
	readErrors   int // of those, replies to GET (the rest: AUTH and the SET after a miss)
	resets       int // connections that failed or were closed under a request, and refused dials
	hangs        int // requests without a reply within hostLoadTimeout
	// retried: requests answered on a new connection after theirs broke under them (with
	// hostLoad.retry; the outcome counts as a hit or miss). Only a broken connection is
	// retried, as redis clients do: the request was not answered, and reading or writing a
	// key again is harmless.
	retried int
}

func (c *loadCounts) add(o loadCounts) {
	c.hits += o.hits
	c.misses += o.misses
	c.errors += o.errors
	c.readErrors += o.readErrors
	c.resets += o.resets
	c.hangs += o.hangs
	c.retried += o.retried
}

func (c loadCounts) requests() int { return c.hits + c.misses + c.errors + c.resets + c.hangs }

func (c loadCounts) failures() int { return c.errors + c.resets + c.hangs }

func (c loadCounts) hitRatio() float64 {
	if c.hits+c.misses == 0 {
		return 0
	}
	return float64(c.hits) / float64(c.hits+c.misses)
}

// hostLoad is a tenant's clients on this host: each one logged in to one address, reading
// keys of a fixed key space at hostLoadRate and writing each key it misses, reconnecting after
// a failure. It keeps per-second counts and events (what the test did when) for the table.
type hostLoad struct {
	// retry: a request whose connection breaks under it is sent once more on a new connection
	// (the reconnect and retry of a redis client), and counts as a reset only if that fails.
	retry  bool
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	seconds []loadCounts // by second since start
	events  map[int][]string
	samples []string // the first failures, for the log
	// moved is, by second since start, the memory the plans moved for the tenant whose
	// partitions watchPlans samples.
	moved []int64
}

// startHostLoad starts one client per address of targets (label -> host:port), as user, over
// keys prefix-0 .. prefix-(keys-1), retrying requests whose connection broke if retry. It
// stops at the end of the test at the latest.
func startHostLoad(t *testing.T, targets map[string]string, user, password, prefix string, keys int, retry bool, watch *planWatch) *hostLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &hostLoad{retry: retry, start: time.Now(), cancel: cancel, events: map[int][]string{}}
	if watch != nil {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.watchPlans(ctx, watch.cluster, watch.tenant)
		}()
	}
	for _, label := range slices.Sorted(maps.Keys(targets)) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.client(ctx, label, targets[label], user, password, prefix, keys)
		}()
	}
	t.Cleanup(l.stop)
	return l
}

func (l *hostLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// event records what the test did now, for the table.
func (l *hostLoad) event(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := int(time.Since(l.start) / time.Second)
	l.events[s] = append(l.events[s], fmt.Sprintf(format, args...))
}

func (l *hostLoad) record(o loadCounts, sample string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := int(time.Since(l.start) / time.Second)
	for len(l.seconds) <= s {
		l.seconds = append(l.seconds, loadCounts{})
	}
	l.seconds[s].add(o)
	if sample != "" && len(l.samples) < 10 {
		l.samples = append(l.samples, fmt.Sprintf("%ds: %s", s, sample))
	}
}

// since sums the counts of the seconds from t's (rounded down) to now.
func (l *hostLoad) since(t time.Time) loadCounts {
	return l.between(t, time.Now())
}

// between sums the counts of the seconds from a to b.
func (l *hostLoad) between(a, b time.Time) loadCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sum loadCounts
	from, to := int(a.Sub(l.start)/time.Second), int(b.Sub(l.start)/time.Second)
	for s := max(0, from); s <= to && s < len(l.seconds); s++ {
		sum.add(l.seconds[s])
	}
	return sum
}

// table prints one row per second: the counts and what the test did in that second.
func (l *hostLoad) table() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%4s %6s %6s %6s %6s %6s %6s %6s %7s  %s\n", "sec", "hits", "misses", "hit%", "errors", "of GET", "resets", "hangs", "retried", "event")
	var total loadCounts
	for s, c := range l.seconds {
		total.add(c)
		fmt.Fprintf(&b, "%4d %6d %6d %5.1f%% %6d %6d %6d %6d %7d  %s\n", s, c.hits, c.misses, 100*c.hitRatio(), c.errors, c.readErrors, c.resets, c.hangs, c.retried, strings.Join(l.events[s], "; "))
	}
	fmt.Fprintf(&b, "%4s %6d %6d %5.1f%% %6d %6d %6d %6d %7d\n", "all", total.hits, total.misses, 100*total.hitRatio(), total.errors, total.readErrors, total.resets, total.hangs, total.retried)
	if len(l.samples) > 0 {
		fmt.Fprintf(&b, "first failures:\n  %s\n", strings.Join(l.samples, "\n  "))
	}
	return b.String()
}

// planWatch names a tenant whose partitions a host load samples (watchPlans).
type planWatch struct {
	cluster *v1.CacheCluster
	tenant  string
}

// watchPlans reads the tenant's partitions in the cluster's plans once a second until ctx
// ends, and records by second the memory they moved since the last reading (a failed read
// is skipped).
func (l *hostLoad) watchPlans(ctx context.Context, c *v1.CacheCluster, tenant string) {
	var previous map[string]int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var list v1.CacheNodePlanList
		if err := cluster.kube.List(ctx, &list, ctrlclient.InNamespace(c.Namespace)); err == nil {
			current := map[string]int64{}
			for k, m := range partitionMemory(list.Items) {
				if strings.HasSuffix(k, "/"+tenant) {
					current[k] = m
				}
			}
			if previous != nil {
				moved, _ := movement(previous, current)
				l.mu.Lock()
				s := int(time.Since(l.start) / time.Second)
				for len(l.moved) <= s {
					l.moved = append(l.moved, 0)
				}
				l.moved[s] += moved
				l.mu.Unlock()
			}
			previous = current
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// intervalTable prints one row per allocation interval (of the given length, from the
// load's start) for the watched tenant: requests, hit ratio, failures, the memory its plans
// moved, and what the test did then.
func (l *hostLoad) intervalTable(interval time.Duration, tenant string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	per := int(interval / time.Second)
	var b strings.Builder
	fmt.Fprintf(&b, "tenant %s, per allocation interval of %s:\n", tenant, interval)
	fmt.Fprintf(&b, "%9s %8s %6s %8s %8s  %s\n", "seconds", "requests", "hit%", "failures", "moved", "events")
	for from := 0; from < len(l.seconds); from += per {
		var c loadCounts
		var moved int64
		var events []string
		for s := from; s < from+per; s++ {
			if s < len(l.seconds) {
				c.add(l.seconds[s])
			}
			if s < len(l.moved) {
				moved += l.moved[s]
			}
			events = append(events, l.events[s]...)
		}
		fmt.Fprintf(&b, "%4d-%-4d %8d %5.1f%% %8d %8s  %s\n", from, from+per-1, c.requests(), 100*c.hitRatio(), c.failures(), mib(moved), strings.Join(events, "; "))
	}
	return b.String()
}

// client is one host client's loop.
func (l *hostLoad) client(ctx context.Context, label, addr, user, password, prefix string, keys int) {
	var conn net.Conn
	var reader *resp.ReplyReader
	closeConn := func() {
		if conn != nil {
			conn.Close()
			conn = nil
		}
	}
	defer closeConn()
	// send sends one command on the open connection and reads its reply.
	send := func(args ...string) (resp.Value, error) {
		if err := conn.SetDeadline(time.Now().Add(hostLoadTimeout)); err != nil {
			return resp.Value{}, err
		}
		_, err := conn.Write(resp.AppendCommandStrings(nil, args...))
		var reply resp.Reply
		if err == nil {
			reply, err = reader.ReadReply()
		}
		if err != nil {
			return resp.Value{}, err
		}
		return reply.Decode()
	}
	// transportFailure closes the connection and counts a request it failed.
	transportFailure := func(err error, what string) {
		closeConn()
		if isTimeout(err) {
			l.record(loadCounts{hangs: 1}, fmt.Sprintf("%s: %s %v", label, what, err))
		} else {
			l.record(loadCounts{resets: 1}, fmt.Sprintf("%s: %s %v", label, what, err))
		}
	}
	// connect opens a connection and logs in; a failure is counted.
	connect := func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			l.record(loadCounts{resets: 1}, label+": "+err.Error())
			return false
		}
		conn, reader = c, resp.NewReplyReader(bufio.NewReader(c), resp.ReplyLimits{})
		v, err := send("AUTH", user, password)
		switch {
		case err != nil:
			transportFailure(err, "AUTH")
			return false
		case v.IsError():
			l.record(loadCounts{errors: 1}, fmt.Sprintf("%s: AUTH: %s", label, v.Str))
			closeConn()
			return false
		}
		return true
	}
	// do sends one command. When the connection breaks under it (not a timeout) and l.retry
	// is set, it is sent once more on a new connection; a failure that stays is counted.
	do := func(args ...string) (resp.Value, bool) {
		v, err := send(args...)
		if err != nil && l.retry && !isTimeout(err) {
			closeConn()
			if !connect() {
				return v, false
			}
			if v, err = send(args...); err == nil {
				l.record(loadCounts{retried: 1}, "")
			}
		}
		if err != nil {
			transportFailure(err, args[0])
			return v, false
		}
		return v, true
	}
	tick := time.NewTicker(time.Second / hostLoadRate)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if conn == nil && !connect() {
			continue
		}
		key := fmt.Sprintf("%s-%d", prefix, rand.IntN(keys))
		v, ok := do("GET", key)
		switch {
		case !ok:
		case v.IsError():
			l.record(loadCounts{errors: 1, readErrors: 1}, fmt.Sprintf("%s: GET: %s", label, v.Str))
		case v.Null:
			l.record(loadCounts{misses: 1}, "")
			if v, ok := do("SET", key, "v-"+key); ok && v.IsError() {
				l.record(loadCounts{errors: 1}, fmt.Sprintf("%s: SET: %s", label, v.Str))
			}
		default:
			l.record(loadCounts{hits: 1}, "")
		}
	}
}

// isTimeout reports whether err is a network timeout: a request that got no reply in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// warmKeys writes every key of the host load's key space through addr, so the load starts
// from a warm cache.
func warmKeys(t *testing.T, addr, user, password, prefix string, keys int) {
	t.Helper()
	c := login(t, addr, user, password)
	for i := range keys {
		key := fmt.Sprintf("%s-%d", prefix, i)
		c.expect("OK", "SET", key, "v-"+key)
	}
}

// localClusterOnly skips a test that changes the local cluster's nodes or images itself.
func localClusterOnly(t *testing.T) {
	t.Helper()
	if os.Getenv(kubeconfigEnv) != "" {
		t.Skipf("needs the local cluster of hack/local-cluster.sh (%s is set)", kubeconfigEnv)
	}
}
