// Package loadgen is the cacheqos load generator: it drives many tenants at once against
// redis or memcached (directly, or through the cacheqos sidecar proxy), each with its own
// workload shape (internal/workload), target rate and connections, and reports per-tenant hit
// ratio and latency percentiles over time.
//
// # Requests
//
// Every access of a tenant's workload is one cache-aside operation, as applications fill a
// cache: GET the key; on a miss, SET the key to a value of the access's size. With a write
// fraction w, a share w of the accesses are a plain SET instead (a write-through update). The
// hit ratio is hits / (hits + misses) over the GETs, so it is the ratio the application sees.
//
// The accesses of a tenant come from one generator shared by its connections (under a lock),
// so the shapes that depend on order keep it across connections: independent generators
// would replay a loop once per connection in lockstep (turning the later copies into hits)
// and make a scan hit the keys another connection just filled.
//
// # Pacing
//
// A tenant's target rate is split evenly over its connections, their schedules staggered so
// the accesses are evenly spaced. Each connection sends access k at start + k/rate (open
// loop: a slow reply does not delay the next access) but has at most Inflight requests
// outstanding (pipelined on the connection); when all are outstanding it waits, so an
// overloaded server slows the generator down instead of piling up requests. An access more
// than a second late is skipped rather than sent in a burst. Rate 0 sends as fast
// as the in-flight bound allows. A request's latency runs from its write to its reply.
//
// # Outcomes
//
// Each reply is a hit, a miss, stored, throttled, or an error. Throttled replies are the
// sidecar proxy's explicit refusals ("-ERR cacheqos: throttled: ..." for redis,
// "SERVER_ERROR throttled: ..." for memcached) and are counted apart from errors. Errors are
// counted by kind: auth (the handshake was refused, or the server demands authentication),
// connect (the address cannot be reached), reply (any other error reply) and io (a timeout,
// a malformed reply, or a request lost with its connection). A connection that cannot be
// opened or authenticated is retried with exponential backoff (100 ms to 5 s), one that fails
// later is reopened after 100 ms; the password file is read again each time, so a rotated
// Secret is picked up.
//
// # Authentication
//
// redis: "AUTH <user> <password>" right after connecting (the proxy's user is the tenant ID).
// memcached: memcached's -Y convention, which the proxy follows: the first request of a
// connection is a set whose value is "<user> <password>". Without a password nothing is sent,
// for engines that need no authentication.
//
// # Reports
//
// Every interval, for each tenant: one CSV row (columns in CSVHeader), one line on the report
// writer, and the Prometheus counters and histogram of Metrics, which are cumulative and
// updated on every request.
package loadgen
