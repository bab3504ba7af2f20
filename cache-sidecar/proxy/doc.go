// Package proxy is the data plane of the cacheqos cache sidecar: it serves a tenant's clients on
// the engine's own protocol (RESP2/RESP3 for redis, memcached's text protocol with meta
// commands), authenticates them as tenants, routes each key to the node holding it, holds the
// tenant to its bandwidth and operation limits on each node, and measures every tenant
// partition (hit ratio, sampled miss-ratio curve, ghost hits). It imports nothing from
// Kubernetes: the sidecar's main builds a Config from its node's plan and calls Update.
//
// # Connections and pipelining
//
// Each client connection has a reader goroutine that parses requests, queues each in the
// connection's pipeline and sends it, without waiting for the reply, to the link that serves
// it. Links are the proxy's connections to engines and peer sidecars, shared by all of a
// tenant's client connections: Options.EngineLinks per local partition and RESP version
// (default 1), Options.PeerLinks per peer node, tenant and RESP version (default 1). A link
// pipelines the requests of many clients: senders append the request bytes and the reply they
// are owed, and one write carries whatever they queued meanwhile (the link's writer goroutine
// first lets ready client connections queue theirs; a request that finds the link idle is
// written by its own sender at once). The link's reader reads replies in that order, hands
// each to its request and, once no more replies are buffered, writes each client's ready
// replies with one non-blocking system call, in request order; what the client's socket does
// not take right away, or a reply that closes the connection, the client connection's writer
// goroutine writes. Requests and replies are forwarded as the bytes received (no
// re-encoding). So an unpipelined client costs no goroutine switch beyond its own reads, and
// the engine sees few large reads and writes instead of one per client request.
//
// Sharing is safe because every command the proxy forwards is stateless on the engine: the
// commands that set connection state (AUTH, HELLO, SELECT, CLIENT, RESET, QUIT) are answered
// by the proxy, which keeps that state per client connection; a transaction is queued by the
// proxy and sent whole, MULTI to EXEC, in one piece that no other client's request splits;
// WATCH and blocking pops, whose effect is tied to the engine connection, go on a link of the
// client's own (pinned links, see Routing); scripts are sent with their declared keys and run
// on engines that hold one tenant's keys only; pub/sub is refused; the RESP version is part of
// the link's identity, so a client's replies always come in its own version. A request that makes
// the engine close the link (such as one over the engine's own size limits) costs the other
// requests in flight on it their replies: they are answered with an error, as are requests
// on a link that fails or times out, and later requests get a new link.
//
// At most Options.MaxPipeline requests are in flight per connection and a request is at most
// Options.MaxRequestBytes, which bounds the requests a connection holds; a client must
// therefore read replies while it sends (as clients do): one that sends a deep pipeline and
// never reads stalls once the socket buffers fill and is disconnected after
// Options.ClientWriteTimeout. Replies are bounded in bytes: while the proxy holds
// Options.MaxConnectionReplyBytes (4 MiB) of a connection's replies (read from links, not yet
// taken by the client), its reader reads no more requests and the links serving it read no
// more replies for it; while the proxy holds Options.MaxReplyBytesInFlight (64 MiB) over all
// connections, links read no more replies for connections that hold some. The engine keeps
// the unread replies meanwhile, and the link's other requests (the same tenant's: links are
// per tenant) wait behind; a link never waits for a connection whose writer itself waits for a
// reply due from a link, which could be the waiting one.
//
// Large replies are streamed: a reply holding a value over 64 KiB (a redis bulk string, a
// memcached VALUE or meta VA block), a redis collection not whole in the link's 16 KiB read
// buffer (LRANGE, HGETALL... of a large collection, or of a few large elements), and every
// reply to a multi-key read sent whole to one node (MGET,
// memcached get/gets/gat/gats of several keys), is not read by the link: its reader hands it
// to the connection's writer, which, once the replies before it are out, copies it from the
// link to the client 64 KiB at a time, and the link reads its next reply once the copy is
// done (a client gone meanwhile gets no more of it, but it is read to its end). So such a
// reply costs one 64 KiB chunk whatever its size: one GET of a 64 MiB value, MGET or "get
// big big ..." of 64 values of 1 MB, LRANGE of 1024 values of 64 KB or of 4 values of 16 MiB,
// mg of a 64 MiB value grew the heap by at most 0.6 MiB (TestLargeReplyIsStreamed;
// 160-222 MiB when replies were read whole), and clients that never read hold one chunk per
// connection (TestClientsThatNeverReadStayBounded). The parts of a multi-key read split across
// nodes are streamed too, and merged value by value in key order (splitstream.go; 64 values
// of 1 MB over two nodes grew the heap by 1.2 MiB, TestSplitReadsAreStreamed). Other replies
// are read whole: they are under 64 KiB or within the link's read buffer, so a connection
// holds at most its bound plus the replies being read. Once read, no reader, link or pipeline slot
// keeps a large reply: a link about to wait drops its reader's grown buffers, so the heap
// returns to its earlier size.
// A link holds at most 1 MiB of requests not yet written; senders wait beyond that. Malformed
// input gets a protocol error reply and the connection closes (memcached errors that leave
// the stream in step only get the reply, as memcached does).
//
// A listener whose accept fails for a reason that passes (out of file descriptors or buffer
// memory, a client that gave up) is retried with backoff from 5ms up to 1s, so it serves again
// once the cause is gone; one that fails otherwise while the proxy serves makes /healthz fail,
// so the liveness probe restarts the pod.
//
// Shutdown closes the listeners, lets every connection finish the requests it has already
// received (their replies are written) and closes it; Close drops everything at once.
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
// Before a client authenticates it costs little: a request is at most
// Options.PreAuthMaxRequestBytes (16 KiB by default, with at most 10 redis arguments, as
// redis-server allows before AUTH; a longer declared length is refused from its header, so
// nothing of it is buffered, and the connection closes; memcached data blocks over it are read
// and dropped); a connection that has not authenticated Options.LoginTimeout (10s) after it
// connected, or after RESET, is closed, whatever it sends meanwhile. An authenticated client
// that sends no request for Options.IdleTimeout is closed (default: never, as the engines do).
// At most Options.MaxClientConnections (10000) client connections are open at once; one more
// is answered "-ERR max number of clients reached" ("SERVER_ERROR too many open connections")
// and closed. After Options.AuthBackoffFailures (10) failed logins in a row from one address
// (TCP clients by IP, unix socket clients together), that address's logins are refused
// without checking the password for Options.AuthBackoff (1s), doubling with every further
// failure up to Options.AuthBackoffMax (1 minute); a success forgets its failures.
//
// # Routing
//
// A tenant's keys are spread over the nodes holding its partitions by weighted rendezvous
// hashing (internal/rendezvous; weights proportional to partition sizes), so a weight change
// moves only the keys it must. A key with a Redis Cluster style hash tag ("{user1}.cart")
// routes by the tag, which lets related keys share a node. Keys of this node go to the local
// engine's unix socket (links to a redis engine log in as engine.RedisLinkUser, which runs
// only the commands the proxy forwards, from scripts too); others are forwarded to the owning node's peer listener over links
// pooled per peer and tenant. A peer whose sidecar is restarting in place announces it, first
// to every peer node of its routes over a dialed peer handshake, then on the links it serves
// before it closes them (see The peer protocol). A node that announced its restart (less than
// restartGrace, 30 s, ago, and not reached since) and cannot be dialed is redialed with
// backoff for up to Options.PeerRetryWindow from the first dial refused after the
// announcement while the requests for it wait, so a restart shorter than that delays them
// instead of failing them (as does a peer that refuses the handshake: it has not loaded its
// plan yet); a dial refused before the announcement came does not count. After the window,
// and at once for a node that cannot be reached without having announced a restart (its
// sidecar killed or crashed, the node lost), the node is ejected: its keys are routed to the
// tenant's other nodes until a probe reaches it again, and the keys written meanwhile are
// deleted from both before it gets requests again (eject.go; TestUnreachablePeerRoutedAround).
// Without another node for the key, or with Options.DisablePeerFailover, plain reads of the
// node's keys (GET, MGET's parts, get, gets, a reading mg) are answered as misses and the
// other requests with the dial's error (peerUnreachableError); so are the requests that come
// while one request a second dials the node again (TestRestartWaitedForOnlyWhenAnnounced). A sidecar that the
// announcing dial did not reach (within restartAnnounceTimeout) and that had no link open to
// the node is not told: its first dial is refused without an announcement and answered at
// once. The requests a peer
// loses by closing the link they were sent on (a stopping sidecar answers those it read and
// reads no more) are answered so too, GET, MGET's parts, get and gets as misses, the others
// with "node <node>: connection closed" (a reading mg too: its miss echoes flags the sent
// request no longer has); a link that times out fails its requests with the error. An Update
// whose routes leave out the node stops the wait at once: the requests held for it are routed
// again under the new routes (a read of a key the node held misses on its new owner, a write
// goes there). Multi-key commands:
//   - split by node and merged: MGET (values back in key order), MSET, DEL, UNLINK, EXISTS,
//     TOUCH (counts summed), memcached get/gets/gat/gats (values in key order, one END);
//     MSET and DEL across nodes are not atomic, as in Redis Cluster;
//   - routed whole when all keys are on one node, otherwise refused with "-CROSSSLOT ...":
//     MSETNX, RENAME, SMOVE, SINTER/SUNION/SDIFF(STORE), ZUNIONSTORE and the other commands the
//     codec table routes with several keys;
//   - transactions (transaction.go): MULTI is answered by the proxy, the commands after it are
//     queued (+QUEUED) when all their keys live on the node of the transaction's first key,
//     and EXEC sends MULTI, them and EXEC to that node at once and passes its EXEC reply; a
//     command with keys on another node is answered "-CROSSSLOT ..." and EXEC then
//     "-EXECABORT ..." with nothing sent, as redis answers a transaction with a command
//     refused while queueing; QUIT and RESET act at once, and RESET ends the transaction;
//   - WATCH and blocking pops (pin.go): a client that sends one gets a link of its own to the
//     node of its keys (which must all be on one node), pinned: its later requests for that
//     node go on it, in order, until it neither watches nor blocks and the link owes no
//     reply; the link is pinned once the client's requests in flight are answered, so none is
//     overtaken. A transaction after WATCH keeps to the watched node and runs on the pinned
//     link, where the engine aborts it (null array) when a watched key changed, whichever
//     client changed it (TestWatchSeesOtherClients); DISCARD and an aborted EXEC send UNWATCH;
//     a lost pinned link makes EXEC answer a null array. A blocking pop's reply is due its
//     timeout plus Options.BackendTimeout (no limit for timeout 0), so the engine timeout
//     never cuts a block (TestBlockingPops); a client gone while blocked closes its link;
//     other clients and tenants are served meanwhile, on their own links;
//   - scripts (EVAL, EVALSHA and their _RO forms): routed by their declared keys, which must
//     be on one node; numkeys 0 is refused (keys a script takes from ARGV cannot be checked,
//     so scripts must declare them); SCRIPT LOAD goes to every node (the same digest back).
//     Each tenant partition has an engine of its own, so a script reaches only its tenant's
//     keys; on an engine the configuration gives to several tenants, scripts are refused
//     (TestScriptsStayInTheirTenant). A tenant sends its engine at most 1000 distinct
//     scripts and 4 MiB of them (redis keeps each, in memory maxmemory does not bound);
//     new ones past that are refused (TestDistinctScriptsAreBounded);
//   - refused outright (the codec's table gives the reason): functions, pub/sub, KEYS,
//     administration (WAIT included).
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
// With Options.PeerTLS, the sender first sends "CQPEER 2 TLS\r\n", the peer answers "OK\r\n",
// both run a TLS 1.3 handshake in which each presents its peer certificate and checks the
// other's against the cluster's CA bundle and identity URI (TestPeerTLSRefusals: another CA,
// another identity, no certificate), and the hello with the token follows inside TLS: the
// token stays a second factor. Such a node refuses a plaintext hello unless
// Config.PeerPlaintext is set, which also makes it dial without TLS a peer that answers the TLS
// request with an ERR, as a sidecar of the version before does (TestPeerMutualTLS). A peer is
// served only for a tenant whose partition the node holds (TestPeerActsOnlyForPartitionsHeld).
// Certificates and the bundle are read again when their files change; open peer links keep
// their session (TestPeerCertificateRotation).
// The connection then carries the engine protocol exactly as a client connection
// authenticated as that tenant, except that the peer serves every request from its local
// partition (the sender already chose the node) and splits nothing. Split parts, SCAN and
// DBSIZE send plain engine commands over it. A peer that stops gracefully (Shutdown) writes,
// after the last reply it owes on the connection, "@CQPEER RESTARTING\r\n" and closes the
// connection once the sender has (or after a second). No redis (RESP2, RESP3) reply or
// memcached (text, meta) response starts with "@", so the sender tells the line from a reply
// by its first byte, also while requests are still due that the peer will not answer
// (FuzzRestartAnnouncementIsNoReply, TestPeerLinkReadsRestartAnnouncement); it notes that the
// node is restarting, for its dials of the node (see Routing), and closes the link as on a
// closed connection. Client connections never get the line. A sidecar of the version before
// takes it for a malformed reply: the requests it loses on that link are answered with a
// protocol error instead of as misses.
//
// Before it closes its listeners, a stopping sidecar also dials every peer node its routes
// lead to, in parallel and for at most restartAnnounceTimeout (1 s) in all, and sends, over
// TLS as a link would, instead of a tenant's hello "CQPEER 1 <token> RESTARTING <node>\r\n"
// naming its own node. A peer with the same token whose routes lead to that node notes the
// restart as if a link had read it, answers "OK\r\n" and closes the connection; anything
// else of the kind (a wrong token, a node it does not route to, a malformed line) gets an ERR
// line and the close (TestRestartAnnouncementNeedsAPeer, TestRestartAnnouncedOverPeerTLS,
// FuzzPeerHandshakeLine). A sidecar of the version before answers it with an ERR too.
//
// # Limits
//
// Each tenant has a token bucket for bytes (request and reply bytes of its local partition)
// and one for operations, per node, applied where the partition lives, so a node's limit
// covers the traffic its partition serves whichever node the clients use. A request takes its
// tokens before it is sent, without waiting when the bucket has them; otherwise it waits
// (requests are never dropped silently), holding back only its own connection's later
// requests, since those before it are on their links already. One that would wait longer than
// Options.ThrottleMaxWait is answered "-ERR cacheqos: throttled: tenant over its bandwidth
// limit" (or "... operations limit"; memcached: "SERVER_ERROR throttled: ..."). A reply's
// size is known only after the request passed. A streamed reply (see Connections and
// pipelining) takes each chunk's bytes from the bucket just before the chunk goes to the
// client, waiting for them if need be, so a large reply reaches the client at the tenant's
// rate and leaves no debt (TestLargeReplyIsPacedAtTheTenantsRate: 8 MB at 4 MB/s in 1.74 s,
// ideal 1.74 s). Other replies, small, are charged when they arrive, which may leave the
// bucket in debt for the tenant's next requests to pay: paced too, a client waiting for its
// batch's last reply left the bucket without demand, which on a loaded machine sometimes
// lasted past its depth and dropped tokens (docs/sidecar-limits.md). Bucket depth is the rate times Options.BurstWindow, at least
// Options.MaxValueBytes bytes; a larger request passes when the bucket is full and leaves it
// in debt.
//
// # Configuration
//
// Update swaps the tenant table atomically: routes, limits, credential hashes and local
// engine sockets change for the next request; connections stay open; a removed tenant's
// connections (client and peer) and links are closed; links to an engine or peer a tenant no
// longer uses close once they have answered what was sent on them. Options are fixed for the
// proxy's lifetime.
//
// # Metrics
//
// Handler serves /metrics, /healthz and /readyz. Per-tenant series are listed and counted in
// metrics.go: 38 + P per tenant-partition with the default 12 curve sizes (P: peer nodes the
// tenant's requests are forwarded to), no per-key or per-client labels. Hits, misses and the
// miss-ratio curve are measured where the partition lives, for every read its local engine
// serves (from local clients or peers): a null or empty reply is a miss, a value a hit (per
// key for MGET and multi-key get); replies that say nothing about presence (integers,
// statuses) are not counted. The curve (internal/mrc, SHARDS) counts reads only; writes and
// deletes move and size its objects (mrc.Recorder, per command family in docs/metrics.md), and
// the ghost list follows the engine's evictions (redis keyspace events, memcached "watch evictions")
// to count misses a quarter larger partition would have served.
package proxy
