// Package resp is the Redis protocol (RESP2 and RESP3) codec of the cacheqos sidecar proxy.
//
// Reading client commands: CommandReader parses one command at a time from a *bufio.Reader —
// RESP arrays of bulk strings and inline commands ("PING\r\n") as redis accepts them — under
// Limits that reject oversized input before allocating for it. A Command's arguments point into
// a buffer the reader reuses, and Raw returns the exact bytes received so the proxy can forward a
// command without encoding it again. Steady-state parsing allocates nothing.
//
// Reading engine replies: ReplyReader reads exactly one complete reply of any RESP2 or RESP3 type
// (attributes included with the value they annotate, pushes returned as their own replies) and
// returns its raw bytes for pass-through; Reply.Decode turns it into a Value tree when the proxy
// must merge replies from several nodes (MGET, DEL counts, SCAN).
//
// Writing: the Append* functions append replies the proxy makes itself, and commands it sends
// when splitting a multi-key command, to a byte slice.
//
// Commands: Lookup and Classify consult the command table, which records for every redis 7.0
// command its arity, flags, key positions, metrics class and how the proxy handles it
// (protocol.Handling) — route by key, split by node and merge, fan out, answer locally, or refuse
// with a specific error. Unknown commands get redis' own "unknown command" error.
//
// Decisions the table encodes (the proxy implements them):
//   - MGET, MSET, DEL, UNLINK, EXISTS and TOUCH are split by node and merged (see Merge); every
//     other multi-key command (MSETNX, RENAME, SINTER, ZUNIONSTORE, LMOVE...) is routed whole and
//     needs all its keys on one node.
//   - SCAN and DBSIZE go to every engine of the tenant; KEYS and RANDOMKEY are refused (KEYS
//     would block every node at once; SCAN does the same job).
//   - AUTH, HELLO, PING, ECHO, SELECT (database 0 only), QUIT, RESET and CLIENT
//     SETNAME/GETNAME/ID/SETINFO are answered by the proxy; COMMAND, INFO and TIME go to any one
//     engine of the tenant.
//   - Refused, each with its reason: administration and replication (CONFIG, FLUSHALL, DEBUG,
//     MONITOR...), other databases (MOVE, COPY, SWAPDB), transactions, scripts and functions,
//     blocking commands, pub/sub and streams, and commands that reach keys the proxy cannot
//     route (SORT, GEORADIUS, whose STORE option writes another key, MIGRATE). CLUSTER and friends get redis' own standalone
//     answer, so cluster-aware clients fall back to standalone mode.
//   - Replies pass through unchanged, so the engine connection must speak the protocol version
//     the client chose with HELLO; RESP3 pushes (client tracking) arrive as their own replies.
//
// Protocol errors: malformed input yields a *ProtocolError; the proxy replies
// "-ERR " + err.Error() and closes the connection, because the byte stream cannot be
// resynchronised (redis does the same).
package resp
