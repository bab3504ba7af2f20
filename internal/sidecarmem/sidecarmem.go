// Package sidecarmem holds the cache sidecar's memory bounds beyond its engines: the proxy's
// defaults that bound what clients can make it hold, shared by the proxy (which enforces them)
// and the operator (which sizes the sidecar container's memory with them), so the two cannot
// drift apart.
package sidecarmem

// ConnectionBudget is what one idle client connection costs the sidecar at most beyond the
// replies it holds (bounded by DefaultMaxReplyBytesInFlight): its 16 KiB read buffer, the
// request and reply buffers its largest request and reply left it (each kept up to 64 KiB),
// its pipeline and its two goroutines' stacks. The proxy's TestConnectionMemoryBudget measures
// 150-155 KiB after a 63 KiB SET and GET.
const ConnectionBudget = 192 << 10

// DefaultMaxReplyBytesInFlight is the reply bytes the proxy holds for all its connections
// before it stops reading replies for connections that hold some.
const DefaultMaxReplyBytesInFlight = 64 << 20

// DefaultMaxClientConnections is the number of client connections a sidecar keeps open at once.
const DefaultMaxClientConnections = 10000

// ProxyBound is the most memory the proxy's clients can make it hold at the default limits:
// every connection at its budget plus the replies in flight.
const ProxyBound = DefaultMaxReplyBytesInFlight + ConnectionBudget*DefaultMaxClientConnections

// TLSConnectionOverhead is what TLS adds to a client connection: crypto/tls's buffers for the
// records it reads and writes (each grown to a full 16 KiB record) and what the handshake left.
// cmd/cache-sidecar's TestConnectionMemoryWithTLS measures 53-55 KiB.
const TLSConnectionOverhead = 64 << 10

// ProxyBoundTLS is ProxyBound when clients connect over TLS.
const ProxyBoundTLS = ProxyBound + TLSConnectionOverhead*DefaultMaxClientConnections
