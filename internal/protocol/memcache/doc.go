// Package memcache is the memcached text-protocol codec (classic and meta commands, memcached
// 1.6) of the cacheqos sidecar proxy.
//
// Requests: RequestReader parses one request at a time from a *bufio.Reader — storage commands
// with their data block, retrievals with many keys, delete/incr/decr/touch, the meta commands
// mg/ms/md/ma/mn/me and the few others — under RequestLimits. A Request gives the keys to route by
// (base64 keys already decoded), the noreply and quiet flags that decide whether the engine will
// answer, and Raw, the exact bytes to forward. Malformed input yields a *ProtocolError carrying
// the reply to send; most leave the stream usable (the reader consumed the bad request, data
// block included when its length was known), and Fatal marks those after which the connection
// must close.
//
// Responses: ResponseReader reads exactly one response for a request, framed by what the request
// was (an Expect): VALUE blocks up to END for retrievals, one status line for storage and the
// like, meta responses with their optional data block. A request that may get no response at all
// (noreply, the meta q flag) is forwarded followed by NoopSentinel ("mn"), so its response ends
// at the engine's "MN" whether or not anything came before it; the reader strips that "MN".
// Responses keep their raw bytes for pass-through and are decoded for merging a multi-key get
// split across nodes.
//
// Writers append the replies the proxy makes itself (errors, values, END) and the requests it
// sends when splitting a multi-key get.
//
// Each command has a Spec with its metrics class and how the proxy handles it. Decisions:
// flush_all, stats, verbosity and the other administrative commands are refused (a tenant's
// engines are sized and observed by cacheqos; per-tenant numbers come from the proxy's metrics);
// version is forwarded to any engine of the tenant; mn and quit are answered by the proxy.
package memcache
