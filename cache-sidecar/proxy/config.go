package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/pki"
	"github.com/cacheqos/cacheqos/internal/sidecarmem"
)

// Protocol is the engine protocol the proxy speaks on its client and peer listeners.
type Protocol string

// Protocols.
const (
	// Redis is RESP2 and RESP3 in front of redis-server engines.
	Redis Protocol = "redis"
	// Memcached is memcached's text protocol with meta commands in front of memcached engines.
	Memcached Protocol = "memcached"
)

// Config is the part of the proxy's configuration that changes while it runs: Update swaps it
// atomically.
type Config struct {
	// NodeID is this node's name in tenants' Routes.
	NodeID string
	// PeerToken authenticates sidecars to each other's peer listeners. Every node has the same
	// token; it is needed as soon as any tenant has a route to another node.
	PeerToken string
	// PeerPlaintext, with Options.PeerTLS, also accepts peers that send the token without TLS
	// and dials without TLS a peer that does not take TLS: sidecars of an older version, while
	// an upgrade replaces them. Without Options.PeerTLS peers always talk plaintext.
	PeerPlaintext bool
	// Tenants are every tenant this node serves or forwards for.
	Tenants []Tenant
}

// Tenant is one tenant's entry in the tenant table.
type Tenant struct {
	// ID is "<namespace>/<name>", also the user name clients authenticate with.
	ID string
	// CredentialHash is credentials.Hash of the tenant's password.
	CredentialHash string
	// LocalEngine is the unix socket of this node's engine for the tenant's partition; empty
	// when the tenant has no partition here.
	LocalEngine string
	// LocalEnginePassword is engine.RedisLinkUser's password on a local redis engine, which
	// the links log in with; empty: the links do not log in.
	LocalEnginePassword string
	// LocalPartitionBytes is the memory of the local partition. It sizes the ghost list's
	// window (accesses a partition a quarter larger would have served); 0 leaves the window
	// bounded by the ghost list's entry count only.
	LocalPartitionBytes int64
	// Routes are the nodes holding the tenant's partitions, with rendezvous weights
	// proportional to partition size. A key is served by the node that wins it.
	Routes []Route
	// BytesPerSecond limits the bytes in and out of the local partition; 0 is unlimited.
	BytesPerSecond float64
	// OpsPerSecond limits the requests the local partition serves; 0 is unlimited.
	OpsPerSecond float64
}

// Route is one node holding a partition of a tenant.
type Route struct {
	Node   string
	Weight float64
	// PeerAddress is "host:port" of the node's peer listener; unused for this node.
	PeerAddress string
}

// Validate checks the configuration and returns every problem found, joined.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("node ID is empty"))
	}
	seen := make(map[string]bool, len(c.Tenants))
	needToken := false
	for i := range c.Tenants {
		t := &c.Tenants[i]
		if seen[t.ID] {
			errs = append(errs, fmt.Errorf("tenant %q is listed twice", t.ID))
		}
		seen[t.ID] = true
		for _, err := range t.validate(c.NodeID) {
			errs = append(errs, fmt.Errorf("tenant %q: %w", t.ID, err))
		}
		for _, r := range t.Routes {
			needToken = needToken || r.Node != c.NodeID
		}
	}
	if needToken && c.PeerToken == "" {
		errs = append(errs, errors.New("peer token is empty but tenants have routes to other nodes"))
	}
	if strings.ContainsAny(c.PeerToken, " \r\n") {
		errs = append(errs, errors.New("peer token contains a space or line break"))
	}
	return errors.Join(errs...)
}

func (t *Tenant) validate(nodeID string) []error {
	var errs []error
	if _, _, err := credentials.SplitTenantID(t.ID); err != nil {
		errs = append(errs, err)
	}
	if !credentials.Valid(t.CredentialHash) {
		errs = append(errs, errors.New("credential hash is not a credentials.Hash encoding"))
	}
	if t.LocalPartitionBytes < 0 {
		errs = append(errs, fmt.Errorf("local partition size %d is negative", t.LocalPartitionBytes))
	}
	for name, rate := range map[string]float64{"bytes per second": t.BytesPerSecond, "ops per second": t.OpsPerSecond} {
		if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
			errs = append(errs, fmt.Errorf("%s limit %v is not a finite number >= 0", name, rate))
		}
	}
	nodes := make(map[string]bool, len(t.Routes))
	for _, r := range t.Routes {
		switch {
		case r.Node == "":
			errs = append(errs, errors.New("a route has an empty node"))
		case nodes[r.Node]:
			errs = append(errs, fmt.Errorf("node %q is routed twice", r.Node))
		case math.IsNaN(r.Weight) || math.IsInf(r.Weight, 0) || r.Weight < 0:
			errs = append(errs, fmt.Errorf("node %q has weight %v, want a finite number >= 0", r.Node, r.Weight))
		case r.Node == nodeID && t.LocalEngine == "":
			errs = append(errs, fmt.Errorf("route to this node (%q) but no local engine socket", r.Node))
		case r.Node != nodeID && r.PeerAddress == "":
			errs = append(errs, fmt.Errorf("route to node %q has no peer address", r.Node))
		}
		nodes[r.Node] = true
	}
	return errs
}

// Options are the proxy's settings that are fixed for its lifetime. Zero fields take the
// defaults named on each.
type Options struct {
	// Protocol is the engine protocol. Required.
	Protocol Protocol
	// Registry receives the proxy's metrics and serves them on Handler's /metrics. Required.
	Registry *prometheus.Registry
	// NodeName, when set, labels every proxy series `node`, so series from many sidecars stay
	// apart however they are scraped (docs/metrics.md).
	NodeName string
	// Logger logs connection-level problems; nil discards them.
	Logger *slog.Logger

	// MaxRequestBytes bounds one request (a redis command, a memcached data block), and so a
	// connection's read buffer (default: 64 MiB for redis, 1 MiB for memcached, which is
	// memcached's own default item size limit).
	MaxRequestBytes int
	// MaxPipeline bounds the requests a connection may have in flight; a client pipelining
	// more is read no further until replies go out (default 1024).
	MaxPipeline int
	// MaxAuthFailures closes a connection after this many failed authentications (default 3).
	MaxAuthFailures int
	// MaxConnectionReplyBytes bounds the reply bytes the proxy holds for one connection (read
	// from engines or peers, not yet taken by the client): while a connection holds this much,
	// its requests are read no further and the links serving it read no further replies for it
	// (default 4 MiB). A reply that is not streamed (see the package documentation) is read
	// whole: it is under 64 KiB or whole in a link's 16 KiB read buffer. So a connection holds
	// at most this plus the replies being read, 64 KiB each at most.
	MaxConnectionReplyBytes int64
	// MaxReplyBytesInFlight bounds the reply bytes the proxy holds for all its connections: over
	// it, links read no further replies for connections that hold some already (default 64
	// MiB).
	MaxReplyBytesInFlight int64

	// PreAuthMaxRequestBytes bounds a request before the client authenticates: redis'
	// arguments and whole commands (and at most preAuthMaxArgs arguments, as redis-server
	// allows), memcached's data blocks (default 16 KiB, redis' own pre-authentication bulk limit).
	PreAuthMaxRequestBytes int
	// LoginTimeout closes a client connection that has not authenticated this long after it
	// was accepted, or after RESET logged it out (default 10s).
	LoginTimeout time.Duration
	// IdleTimeout closes an authenticated client connection that sends no request for this long
	// (default 0: never, as redis' and memcached's own default).
	IdleTimeout time.Duration
	// MaxClientConnections caps the client connections open at once on this sidecar, across
	// its client listeners and tenants; one more is answered an error and closed (default
	// 10000, redis' maxclients).
	MaxClientConnections int
	// AuthBackoffFailures is how many failed authentications in a row from one source address
	// (successes reset it) make the next ones wait: for AuthBackoff, doubling with every
	// further failure up to AuthBackoffMax, that source's logins are refused without checking
	// the password (defaults 10, 1s, 1 minute).
	AuthBackoffFailures int
	AuthBackoff         time.Duration
	AuthBackoffMax      time.Duration

	// ThrottleMaxWait is the longest a request waits for its tenant's tokens before it is
	// refused as throttled (default 1s).
	ThrottleMaxWait time.Duration
	// BurstWindow sizes the token buckets: depth is the rate times this window, and at least
	// MaxValueBytes bytes and 1 operation (default 100ms).
	BurstWindow time.Duration
	// MaxValueBytes is the smallest bytes-bucket depth, so a value this large passes a full
	// bucket at once (default 1 MiB). Larger requests pass when the bucket is full and leave it
	// in debt, so the rate still holds.
	MaxValueBytes int64

	// DialTimeout bounds connecting to an engine or a peer sidecar (default 2s).
	DialTimeout time.Duration
	// PeerRetryWindow is how long the requests for a peer sidecar that is restarting in place
	// wait while the proxy redials it (every 50 ms at first, backing off to 250 ms), counted
	// from the first dial of it that failed (default 5s); then they are answered: a plain read
	// (redis GET, MGET; memcached get, gets, mg that only reads) as a miss when the peer could
	// not be reached on the network, everything else with the dial's error. A sidecar that
	// stops gracefully (Shutdown, as in an InPlace upgrade) announces its restart, to every
	// peer node of its routes (dialed) and on the peer connections it serves, and then refuses
	// connections for a few seconds; dials of its node redial it while it refuses them, the
	// window counted from the first dial refused after the announcement, so its requests are
	// served late instead of failing (the announcement stands until a dial of the node
	// succeeds, or for restartGrace, 30 s). Dials that the peer answers by refusing the
	// handshake (a sidecar that has not loaded its plan yet) are redialed so too. A peer that
	// cannot be reached without having announced a restart (killed, crashed, its node lost)
	// is not waited for: its keys are routed around it (DisablePeerFailover), or, without
	// another node for them, its requests are answered so at once. Dials end with the window, so
	// a peer that does not answer holds no request longer. An Update that takes the peer out
	// of a tenant's routes ends the wait: the requests are routed under the new routes. Once
	// a dial's failure was answered, the node's requests are answered so at once for a second
	// (unless the node announced a restart since), then one request dials it again (the
	// others answered at once meanwhile) to learn whether it is back.
	PeerRetryWindow time.Duration
	// DisablePeerFailover keeps a peer that cannot be reached (without having announced a
	// restart, or beyond PeerRetryWindow after it did) in its tenants' routes: its keys are
	// answered as PeerRetryWindow says until the plan changes. Without it the peer is ejected
	// and its keys routed to the tenants' other nodes until it is reached again (eject.go).
	DisablePeerFailover bool
	// BackendTimeout bounds an engine's or peer's silence while replies are due (a reply that
	// keeps arriving may take longer), and waiting for it to accept a request (default 10s; it
	// must exceed ThrottleMaxWait, which a peer may spend waiting).
	BackendTimeout time.Duration
	// ClientWriteTimeout closes a client that accepts no reply bytes for this long (default 60s).
	ClientWriteTimeout time.Duration
	// PeerHandshakeTimeout bounds the peer handshake on either side (default 5s).
	PeerHandshakeTimeout time.Duration
	// PeerTLS, when set, makes peer connections mutual TLS: the proxy dials peers over TLS with
	// this certificate and accepts on its peer listener only peers presenting a certificate of
	// the same identity from the same CA (the peer token is still checked, inside TLS).
	// Config.PeerPlaintext lets plaintext peers through during an upgrade.
	PeerTLS *pki.Peer
	// EngineLinks is how many connections ("links") the proxy keeps to each local partition
	// (per RESP version), shared by all the tenant's client connections: requests from many
	// clients are pipelined on them and written in batches (default 1, which batches best;
	// docs/sidecar-performance.md).
	EngineLinks int
	// PeerLinks is how many links the proxy keeps to each peer sidecar per tenant (and RESP
	// version) for the requests it forwards (default 1).
	PeerLinks int

	// MRCCurvePoints is how many sizes each partition's curve is reported at, one series each
	// (default 16): a grid that follows the partition's size and its tenant's footprint
	// (mrc.PartitionSizes).
	MRCCurvePoints int
	// MRCSampleRate is the initial SHARDS sampling rate (default 0.1); MRCMaxTrackedKeys
	// bounds the keys each tracker remembers (default 8192, about 1 MiB), lowering the rate
	// as needed.
	MRCSampleRate     float64
	MRCMaxTrackedKeys int
	// MRCCalibrationInterval is how often the engine's memory per object is read to convert
	// object sizes into what the engine's limit counts (default 5s).
	MRCCalibrationInterval time.Duration
	// MRCDecayInterval is how often curves halve the weight of the past (default 1 minute).
	MRCDecayInterval time.Duration
	// GhostEntries bounds each tenant's ghost list (default mrc.DefaultGhostEntries).
	GhostEntries int

	// EngineVersion is reported in HELLO replies; empty asks a local engine once.
	EngineVersion string
}

// ConnectionMemoryBudget is what one idle client connection costs the sidecar at most beyond
// the replies it holds; the operator sizes the sidecar's memory limit with it.
const ConnectionMemoryBudget = sidecarmem.ConnectionBudget

// Defaults for Options.
const (
	DefaultMaxRequestBytesRedis     = 64 << 20
	DefaultMaxRequestBytesMemcached = 1 << 20
	DefaultMaxPipeline              = 1024
	DefaultMaxAuthFailures          = 3
	DefaultMaxConnectionReplyBytes  = 4 << 20
	DefaultMaxReplyBytesInFlight    = sidecarmem.DefaultMaxReplyBytesInFlight
	DefaultPreAuthMaxRequestBytes   = 16 << 10
	DefaultLoginTimeout             = 10 * time.Second
	DefaultMaxClientConnections     = sidecarmem.DefaultMaxClientConnections
	DefaultAuthBackoffFailures      = 10
	DefaultAuthBackoff              = time.Second
	DefaultAuthBackoffMax           = time.Minute
	DefaultThrottleMaxWait          = time.Second
	DefaultBurstWindow              = 100 * time.Millisecond
	DefaultMaxValueBytes            = 1 << 20
	DefaultDialTimeout              = 2 * time.Second
	DefaultPeerRetryWindow          = 5 * time.Second
	DefaultBackendTimeout           = 10 * time.Second
	DefaultClientWriteTimeout       = 60 * time.Second
	DefaultPeerHandshakeTimeout     = 5 * time.Second
	DefaultEngineLinks              = 1
	DefaultPeerLinks                = 1
	DefaultMRCSampleRate            = 0.1
	DefaultMRCMaxTrackedKeys        = 8192
	DefaultMRCCurvePoints           = 16
	DefaultMRCDecayInterval         = time.Minute
	DefaultMRCCalibrationInterval   = 5 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	switch o.Protocol {
	case Redis:
		o.MaxRequestBytes = orDefault(o.MaxRequestBytes, DefaultMaxRequestBytesRedis)
	case Memcached:
		o.MaxRequestBytes = orDefault(o.MaxRequestBytes, DefaultMaxRequestBytesMemcached)
	default:
		return o, fmt.Errorf("proxy: protocol %q is neither %q nor %q", o.Protocol, Redis, Memcached)
	}
	if o.Registry == nil {
		return o, errors.New("proxy: no metrics registry")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.MaxPipeline = orDefault(o.MaxPipeline, DefaultMaxPipeline)
	o.MaxAuthFailures = orDefault(o.MaxAuthFailures, DefaultMaxAuthFailures)
	o.MaxConnectionReplyBytes = orDefault(o.MaxConnectionReplyBytes, DefaultMaxConnectionReplyBytes)
	o.MaxReplyBytesInFlight = orDefault(o.MaxReplyBytesInFlight, DefaultMaxReplyBytesInFlight)
	if o.MaxReplyBytesInFlight < o.MaxConnectionReplyBytes {
		return o, fmt.Errorf("proxy: reply bytes in flight %d below the per-connection bound %d", o.MaxReplyBytesInFlight, o.MaxConnectionReplyBytes)
	}
	o.PreAuthMaxRequestBytes = orDefault(o.PreAuthMaxRequestBytes, DefaultPreAuthMaxRequestBytes)
	o.LoginTimeout = orDefault(o.LoginTimeout, DefaultLoginTimeout)
	o.MaxClientConnections = orDefault(o.MaxClientConnections, DefaultMaxClientConnections)
	o.AuthBackoffFailures = orDefault(o.AuthBackoffFailures, DefaultAuthBackoffFailures)
	o.AuthBackoff = orDefault(o.AuthBackoff, DefaultAuthBackoff)
	o.AuthBackoffMax = orDefault(o.AuthBackoffMax, DefaultAuthBackoffMax)
	if o.IdleTimeout < 0 {
		return o, fmt.Errorf("proxy: idle timeout %v is negative", o.IdleTimeout)
	}
	if o.PreAuthMaxRequestBytes > o.MaxRequestBytes {
		return o, fmt.Errorf("proxy: pre-authentication request limit %d exceeds the request limit %d", o.PreAuthMaxRequestBytes, o.MaxRequestBytes)
	}
	if o.AuthBackoffMax < o.AuthBackoff {
		return o, fmt.Errorf("proxy: auth backoff maximum %v is below its start %v", o.AuthBackoffMax, o.AuthBackoff)
	}
	o.ThrottleMaxWait = orDefault(o.ThrottleMaxWait, DefaultThrottleMaxWait)
	o.BurstWindow = orDefault(o.BurstWindow, DefaultBurstWindow)
	o.MaxValueBytes = orDefault(o.MaxValueBytes, DefaultMaxValueBytes)
	o.DialTimeout = orDefault(o.DialTimeout, DefaultDialTimeout)
	o.PeerRetryWindow = orDefault(o.PeerRetryWindow, DefaultPeerRetryWindow)
	o.BackendTimeout = orDefault(o.BackendTimeout, DefaultBackendTimeout)
	o.ClientWriteTimeout = orDefault(o.ClientWriteTimeout, DefaultClientWriteTimeout)
	o.PeerHandshakeTimeout = orDefault(o.PeerHandshakeTimeout, DefaultPeerHandshakeTimeout)
	o.EngineLinks = orDefault(o.EngineLinks, DefaultEngineLinks)
	o.PeerLinks = orDefault(o.PeerLinks, DefaultPeerLinks)
	o.MRCSampleRate = orDefault(o.MRCSampleRate, DefaultMRCSampleRate)
	o.MRCMaxTrackedKeys = orDefault(o.MRCMaxTrackedKeys, DefaultMRCMaxTrackedKeys)
	o.MRCCurvePoints = orDefault(o.MRCCurvePoints, DefaultMRCCurvePoints)
	o.MRCDecayInterval = orDefault(o.MRCDecayInterval, DefaultMRCDecayInterval)
	o.MRCCalibrationInterval = orDefault(o.MRCCalibrationInterval, DefaultMRCCalibrationInterval)
	o.GhostEntries = orDefault(o.GhostEntries, mrc.DefaultGhostEntries)
	if o.BackendTimeout <= o.ThrottleMaxWait {
		return o, fmt.Errorf("proxy: backend timeout %v must exceed the throttle wait %v", o.BackendTimeout, o.ThrottleMaxWait)
	}
	if o.MRCCurvePoints < minCurvePoints || o.MRCCurvePoints > mrc.MaxCurveSizes {
		return o, fmt.Errorf("proxy: %d curve points, want %d to %d", o.MRCCurvePoints, minCurvePoints, mrc.MaxCurveSizes)
	}
	if o.MRCSampleRate > 1 {
		return o, fmt.Errorf("proxy: MRC sampling rate %v above 1", o.MRCSampleRate)
	}
	if o.MRCMaxTrackedKeys < minTrackedKeys {
		return o, fmt.Errorf("proxy: MRC max tracked keys %d, want at least %d", o.MRCMaxTrackedKeys, minTrackedKeys)
	}
	return o, nil
}

// minCurvePoints and minTrackedKeys are the smallest curve grid and sample the proxy accepts
// (the API's bounds).
const (
	minCurvePoints = 3
	minTrackedKeys = 64
)

func orDefault[T int | int64 | float64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
