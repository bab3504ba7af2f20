// Package proxy is the data plane of the cacheqos cache sidecar: it serves a tenant's clients on
// the engine's own protocol (RESP2/RESP3 for redis, memcached's text protocol with meta
// commands), authenticates them as tenants, routes each key to the node holding it, holds the
// tenant to its bandwidth and operation limits on each node, and measures every tenant
// partition (hit ratio, sampled miss-ratio curve, ghost hits). It imports nothing from
// Kubernetes: the sidecar's main builds a Config from its node's plan and calls Update.
//
// # Connections and pipelining
//
// Each connection has a reader goroutine and a writer goroutine. The reader parses requests,
// writes each to the link (engine or peer connection) that serves it without waiting for the
// reply, and queues an entry per request; the writer takes entries in order, reads each reply
// from its link and copies it to the client. Requests and replies are forwarded as the bytes
// received (no re-encoding); both sides buffer and flush only when they run out of buffered
// input, so pipelined batches move in few system calls. A request that arrives alone with
// nothing in flight (an unpipelined client) the reader serves itself, writing it, reading the
// reply and copying it to the client, so it costs no hand-off between goroutines. At most Options.MaxPipeline requests
// are in flight per connection and a request is at most Options.MaxRequestBytes, which bounds
// a connection's memory; a client must therefore read replies while it sends (as clients do):
// one that sends a deep pipeline and never reads stalls once the socket buffers fill and is
// disconnected after Options.ClientWriteTimeout. Malformed input gets a protocol error reply and the connection
// closes (memcached errors that leave the stream in step only get the reply, as memcached
// does).
//
// # Authentication
//
// redis: AUTH <tenant> <password> or HELLO <protover> AUTH <tenant> <password>; the user name
// is the tenant ID "<namespace>/<name>". Before that, every command but AUTH, HELLO with AUTH
// and QUIT (which closes the connection, as redis allows) is answered "-NOAUTH Authentication
// required." (HELLO without AUTH too); a wrong pair gets "-WRONGPASS
// invalid username-password pair or user is disabled.". A connection may authenticate again,
// as another tenant too (its links to the previous tenant's partitions are released), and RESET
// logs it out. memcached follows memcached's -Y convention: the first command must be a set
// whose data block is "<tenant> <password>" (answered STORED, or "CLIENT_ERROR authentication
// failure"); anything else first gets "CLIENT_ERROR unauthenticated". Passwords are checked
// against salted hashes in constant time (internal/credentials), against a dummy hash for
// unknown tenants. After Options.MaxAuthFailures failures the connection closes. A tenant's
// requests only ever reach links bound to that tenant.
//
// # Routing
//
// A tenant's keys are spread over the nodes holding its partitions by weighted rendezvous
// hashing (internal/rendezvous; weights proportional to partition sizes), so a weight change
// moves only the keys it must. A key with a Redis Cluster style hash tag ("{user1}.cart")
// routes by the tag, which lets related keys share a node. Keys of this node go to the local
// engine's unix socket; others are forwarded to the owning node's peer listener over links
// pooled per peer and tenant. Multi-key commands:
//   - split by node and merged: MGET (values back in key order), MSET, DEL, UNLINK, EXISTS,
//     TOUCH (counts summed), memcached get/gets/gat/gats (values in key order, one END);
//     MSET and DEL across nodes are not atomic, as in Redis Cluster;
//   - routed whole when all keys are on one node, otherwise refused with "-CROSSSLOT ...":
//     MSETNX, RENAME, SMOVE, SINTER/SUNION/SDIFF(STORE), ZUNIONSTORE and the other commands the
//     codec table routes with several keys;
//   - refused outright (the codec's table gives the reason): transactions (MULTI, EXEC,
//     WATCH), scripts, blocking commands, pub/sub, KEYS, administration.
//
// DBSIZE is summed over the nodes. SCAN iterates the tenant's nodes one after the other, in
// node ID order: the proxy's cursor keeps the node's index in its low 10 bits and that node's
// engine cursor in the rest, moves to the next node when an engine cursor returns to 0, and
// returns 0 after the last node. SCAN's guarantees hold while the tenant's node set does not
// change during the iteration.
//
// # The peer protocol
//
// A sidecar opens a TCP connection to another node's peer listener and sends one line,
// "CQPEER 1 <peer token> <tenant ID>\r\n"; the peer compares the token (a shared secret from
// the configuration) in constant time and answers "OK\r\n", or "ERR <reason>\r\n" and closes.
// The connection then carries the engine protocol exactly as a client connection
// authenticated as that tenant, except that the peer serves every request from its local
// partition (the sender already chose the node) and splits nothing. Split parts, SCAN and
// DBSIZE send plain engine commands over it.
//
// # Limits
//
// Each tenant has a token bucket for bytes (request and reply bytes of its local partition)
// and one for operations, per node, applied where the partition lives, so a node's limit
// covers the traffic its partition serves whichever node the clients use. A request waits for
// tokens (requests are never dropped silently); one that would wait longer than
// Options.ThrottleMaxWait is answered "-ERR cacheqos: throttled: tenant over its bandwidth
// limit" (or "... operations limit"; memcached: "SERVER_ERROR throttled: ..."). A reply's
// size is known only after the request passed, so its bytes are charged to the bucket when it
// arrives, which may leave it in debt for the tenant's next requests to pay. Bucket depth is the rate times Options.BurstWindow, at least Options.MaxValueBytes
// bytes; a larger request passes when the bucket is full and leaves it in debt.
//
// # Configuration
//
// Update swaps the tenant table atomically: routes, limits, credential hashes and local
// engine sockets change for the next request; connections stay open; a removed tenant's
// connections (client and peer) are closed. Options are fixed for the proxy's lifetime.
//
// # Metrics
//
// Handler serves /metrics, /healthz and /readyz. Per-tenant series are listed and counted in
// metrics.go: 38 + P per tenant-partition with the default 12 curve sizes (P: peer nodes the
// tenant's requests are forwarded to), no per-key or per-client labels. Hits, misses and the
// miss-ratio curve are measured where the partition lives, for every read its local engine
// serves (from local clients or peers): a null or empty reply is a miss, a value a hit (per
// key for MGET and multi-key get); replies that say nothing about presence (integers,
// statuses) are not counted. The curve (internal/mrc, SHARDS) sees reads only, and the ghost
// list follows the engine's evictions (redis keyspace events, memcached "watch evictions")
// to count misses a quarter larger partition would have served.
package proxy
