package resp

import (
	"fmt"
	"strings"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Short names keep the table below one row per command.
const (
	ro  = FlagReadonly
	wr  = FlagWrite
	oom = FlagDenyOOM
	fst = FlagFast
	mov = FlagMovableKeys
	blk = FlagBlocking

	read   = protocol.ClassRead
	write  = protocol.ClassWrite
	del    = protocol.ClassDelete
	admin  = protocol.ClassAdmin
	other  = protocol.ClassOther
	route  = protocol.HandleRoute
	split  = protocol.HandleSplit
	local  = protocol.HandleProxy
	anyEng = protocol.HandleAnyEngine
	allEng = protocol.HandleAllEngines
)

var (
	noKeys    = KeySpec{}
	oneKey    = KeySpec{First: 1, Last: 1, Step: 1}
	twoKeys   = KeySpec{First: 1, Last: 2, Step: 1}
	allKeys   = KeySpec{First: 1, Last: -1, Step: 1}
	keyValues = KeySpec{First: 1, Last: -1, Step: 2}
	// numKeys1: "CMD numkeys key [key ...] ..." (ZUNION, LMPOP).
	numKeys1 = KeySpec{NumKeysAt: 1}
	// destNumKeys2: "CMD destination numkeys key [key ...] ..." (ZUNIONSTORE).
	destNumKeys2 = KeySpec{First: 1, Last: 1, Step: 1, NumKeysAt: 2}
	// keysTimeout: "CMD key [key ...] timeout" (BLPOP).
	keysTimeout = KeySpec{First: 1, Last: -2, Step: 1}
	// numKeys2: "CMD arg numkeys key [key ...] ..." (EVAL, BLMPOP).
	numKeys2 = KeySpec{NumKeysAt: 2}
)

// supported lists every command the proxy forwards or answers. Arity, flags and legacy key
// positions are redis 7.0's (the engine tests compare them with a real server's COMMAND).
// Commands with several keys and HandleRoute must have all their keys on one node.
var supported = []CommandSpec{
	// Strings.
	{Name: "get", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "set", Arity: -3, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "setnx", Arity: 3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "setex", Arity: 4, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "psetex", Arity: 4, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "getset", Arity: 3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "getdel", Arity: 2, Flags: wr | fst, Keys: oneKey, Class: del, Handling: route},
	{Name: "getex", Arity: -2, Flags: wr | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "append", Arity: 3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "strlen", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "getrange", Arity: 4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "substr", Arity: 4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "setrange", Arity: 4, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "incr", Arity: 2, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "decr", Arity: 2, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "incrby", Arity: 3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "decrby", Arity: 3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "incrbyfloat", Arity: 3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "mget", Arity: -2, Flags: ro | fst, Keys: allKeys, Class: read, Handling: split, Merge: MergeArrayInKeyOrder},
	{Name: "mset", Arity: -3, Flags: wr | oom, Keys: keyValues, Class: write, Handling: split, Merge: MergeAllOK},
	// MSETNX is all-or-nothing, so it cannot be split across nodes.
	{Name: "msetnx", Arity: -3, Flags: wr | oom, Keys: keyValues, Class: write, Handling: route},
	{Name: "getbit", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "setbit", Arity: 4, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "bitcount", Arity: -2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "bitpos", Arity: -3, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "bitfield", Arity: -2, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "bitfield_ro", Arity: -2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "bitop", Arity: -4, Flags: wr | oom, Keys: KeySpec{First: 2, Last: -1, Step: 1}, Class: write, Handling: route},
	{Name: "lcs", Arity: -3, Flags: ro, Keys: twoKeys, Class: read, Handling: route},

	// Keys.
	{Name: "del", Arity: -2, Flags: wr, Keys: allKeys, Class: del, Handling: split, Merge: MergeSumIntegers},
	{Name: "unlink", Arity: -2, Flags: wr | fst, Keys: allKeys, Class: del, Handling: split, Merge: MergeSumIntegers},
	{Name: "exists", Arity: -2, Flags: ro | fst, Keys: allKeys, Class: read, Handling: split, Merge: MergeSumIntegers},
	{Name: "touch", Arity: -2, Flags: ro | fst, Keys: allKeys, Class: read, Handling: split, Merge: MergeSumIntegers},
	{Name: "expire", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "pexpire", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "expireat", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "pexpireat", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "expiretime", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "pexpiretime", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "ttl", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "pttl", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "persist", Arity: 2, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "type", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "rename", Arity: 3, Flags: wr, Keys: twoKeys, Class: write, Handling: route},
	{Name: "renamenx", Arity: 3, Flags: wr | fst, Keys: twoKeys, Class: write, Handling: route},
	{Name: "scan", Arity: -2, Flags: ro, Keys: noKeys, Class: read, Handling: allEng, Merge: MergeScan},
	{Name: "dbsize", Arity: 1, Flags: ro | fst, Keys: noKeys, Class: read, Handling: allEng, Merge: MergeSumIntegers},

	// Hashes.
	{Name: "hset", Arity: -4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "hsetnx", Arity: 4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "hmset", Arity: -4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "hget", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "hmget", Arity: -3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "hgetall", Arity: 2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "hdel", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: del, Handling: route},
	{Name: "hexists", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "hincrby", Arity: 4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "hincrbyfloat", Arity: 4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "hkeys", Arity: 2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "hvals", Arity: 2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "hlen", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "hstrlen", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "hrandfield", Arity: -2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "hscan", Arity: -3, Flags: ro, Keys: oneKey, Class: read, Handling: route},

	// Lists.
	{Name: "lpush", Arity: -3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "rpush", Arity: -3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "lpushx", Arity: -3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "rpushx", Arity: -3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "lpop", Arity: -2, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "rpop", Arity: -2, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "lrange", Arity: 4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "llen", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "lindex", Arity: 3, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "lset", Arity: 4, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "lrem", Arity: 4, Flags: wr, Keys: oneKey, Class: del, Handling: route},
	{Name: "ltrim", Arity: 4, Flags: wr, Keys: oneKey, Class: write, Handling: route},
	{Name: "linsert", Arity: 5, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "lpos", Arity: -3, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "rpoplpush", Arity: 3, Flags: wr | oom, Keys: twoKeys, Class: write, Handling: route},
	{Name: "lmove", Arity: 5, Flags: wr | oom, Keys: twoKeys, Class: write, Handling: route},
	{Name: "lmpop", Arity: -4, Flags: wr | mov, Keys: numKeys1, Class: write, Handling: route},
	// Blocking pops: the proxy sends them on an engine connection of the client's own, which
	// the block holds (see the proxy's package documentation).
	{Name: "blpop", Arity: -3, Flags: wr | blk, Keys: keysTimeout, Class: write, Handling: route},
	{Name: "brpop", Arity: -3, Flags: wr | blk, Keys: keysTimeout, Class: write, Handling: route},
	{Name: "brpoplpush", Arity: 4, Flags: wr | oom | blk, Keys: twoKeys, Class: write, Handling: route},
	{Name: "blmove", Arity: 6, Flags: wr | oom | blk, Keys: twoKeys, Class: write, Handling: route},
	{Name: "blmpop", Arity: -5, Flags: wr | blk | mov, Keys: numKeys2, Class: write, Handling: route},

	// Sets.
	{Name: "sadd", Arity: -3, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "srem", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: del, Handling: route},
	{Name: "smembers", Arity: 2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "sismember", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "smismember", Arity: -3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "scard", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "spop", Arity: -2, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "srandmember", Arity: -2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "sscan", Arity: -3, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "sinter", Arity: -2, Flags: ro, Keys: allKeys, Class: read, Handling: route},
	{Name: "sunion", Arity: -2, Flags: ro, Keys: allKeys, Class: read, Handling: route},
	{Name: "sdiff", Arity: -2, Flags: ro, Keys: allKeys, Class: read, Handling: route},
	{Name: "sinterstore", Arity: -3, Flags: wr | oom, Keys: allKeys, Class: write, Handling: route},
	{Name: "sunionstore", Arity: -3, Flags: wr | oom, Keys: allKeys, Class: write, Handling: route},
	{Name: "sdiffstore", Arity: -3, Flags: wr | oom, Keys: allKeys, Class: write, Handling: route},
	{Name: "sintercard", Arity: -3, Flags: ro | mov, Keys: numKeys1, Class: read, Handling: route},
	{Name: "smove", Arity: 4, Flags: wr | fst, Keys: twoKeys, Class: write, Handling: route},

	// Sorted sets.
	{Name: "zadd", Arity: -4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "zrem", Arity: -3, Flags: wr | fst, Keys: oneKey, Class: del, Handling: route},
	{Name: "zscore", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zmscore", Arity: -3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zincrby", Arity: 4, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "zcard", Arity: 2, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zcount", Arity: 4, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zlexcount", Arity: 4, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrange", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrevrange", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrangebyscore", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrevrangebyscore", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrangebylex", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrevrangebylex", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrank", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrevrank", Arity: 3, Flags: ro | fst, Keys: oneKey, Class: read, Handling: route},
	{Name: "zremrangebyrank", Arity: 4, Flags: wr, Keys: oneKey, Class: del, Handling: route},
	{Name: "zremrangebyscore", Arity: 4, Flags: wr, Keys: oneKey, Class: del, Handling: route},
	{Name: "zremrangebylex", Arity: 4, Flags: wr, Keys: oneKey, Class: del, Handling: route},
	{Name: "zpopmin", Arity: -2, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "zpopmax", Arity: -2, Flags: wr | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "zrandmember", Arity: -2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zscan", Arity: -3, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "zrangestore", Arity: -5, Flags: wr | oom, Keys: twoKeys, Class: write, Handling: route},
	{Name: "zunionstore", Arity: -4, Flags: wr | oom | mov, Keys: destNumKeys2, Class: write, Handling: route},
	{Name: "zinterstore", Arity: -4, Flags: wr | oom | mov, Keys: destNumKeys2, Class: write, Handling: route},
	{Name: "zdiffstore", Arity: -4, Flags: wr | oom | mov, Keys: destNumKeys2, Class: write, Handling: route},
	{Name: "zunion", Arity: -3, Flags: ro | mov, Keys: numKeys1, Class: read, Handling: route},
	{Name: "zinter", Arity: -3, Flags: ro | mov, Keys: numKeys1, Class: read, Handling: route},
	{Name: "zdiff", Arity: -3, Flags: ro | mov, Keys: numKeys1, Class: read, Handling: route},
	{Name: "zintercard", Arity: -3, Flags: ro | mov, Keys: numKeys1, Class: read, Handling: route},
	{Name: "zmpop", Arity: -4, Flags: wr | mov, Keys: numKeys1, Class: write, Handling: route},
	{Name: "bzpopmin", Arity: -3, Flags: wr | blk | fst, Keys: keysTimeout, Class: write, Handling: route},
	{Name: "bzpopmax", Arity: -3, Flags: wr | blk | fst, Keys: keysTimeout, Class: write, Handling: route},
	{Name: "bzmpop", Arity: -5, Flags: wr | blk | mov, Keys: numKeys2, Class: write, Handling: route},

	// HyperLogLog and geo.
	{Name: "pfadd", Arity: -2, Flags: wr | oom | fst, Keys: oneKey, Class: write, Handling: route},
	{Name: "pfcount", Arity: -2, Flags: ro, Keys: allKeys, Class: read, Handling: route},
	{Name: "pfmerge", Arity: -2, Flags: wr | oom, Keys: allKeys, Class: write, Handling: route},
	{Name: "geoadd", Arity: -5, Flags: wr | oom, Keys: oneKey, Class: write, Handling: route},
	{Name: "geodist", Arity: -4, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "geohash", Arity: -2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "geopos", Arity: -2, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "geosearch", Arity: -7, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "geosearchstore", Arity: -8, Flags: wr | oom, Keys: twoKeys, Class: write, Handling: route},
	{Name: "georadius_ro", Arity: -6, Flags: ro, Keys: oneKey, Class: read, Handling: route},
	{Name: "georadiusbymember_ro", Arity: -5, Flags: ro, Keys: oneKey, Class: read, Handling: route},

	// Connection: answered by the proxy (AUTH and HELLO authenticate the tenant; SELECT accepts
	// database 0 only; CLIENT keeps per-connection state in the proxy).
	{Name: "auth", Arity: -2, Flags: fst, Class: other, Handling: local},
	{Name: "hello", Arity: -1, Flags: fst, Class: other, Handling: local},
	{Name: "ping", Arity: -1, Flags: fst, Class: other, Handling: local},
	{Name: "echo", Arity: 2, Flags: fst, Class: other, Handling: local},
	{Name: "select", Arity: 2, Flags: fst, Class: other, Handling: local},
	{Name: "quit", Arity: -1, Flags: fst, Class: other, Handling: local},
	{Name: "reset", Arity: 1, Flags: fst, Class: other, Handling: local},
	// Transactions: the proxy queues the commands and sends MULTI, them and EXEC together to
	// the node that holds every key.
	{Name: "multi", Arity: 1, Flags: fst, Class: other, Handling: local},
	{Name: "exec", Arity: 1, Class: other, Handling: local},
	{Name: "discard", Arity: 1, Flags: fst, Class: other, Handling: local},
	// WATCH goes, with the client's later commands on its keys' node, on an engine connection
	// of the client's own; UNWATCH on that connection, or answered by the proxy without one.
	{Name: "watch", Arity: -2, Flags: fst, Keys: allKeys, Class: other, Handling: route},
	{Name: "unwatch", Arity: 1, Flags: fst, Class: other, Handling: anyEng},
	// Scripts must declare their keys (numkeys > 0), all on one node; SCRIPT LOAD loads a
	// script on every engine of the tenant, where EVALSHA may find it whichever node its keys
	// are on.
	{Name: "eval", Arity: -3, Flags: mov, Keys: numKeys2, Class: other, Handling: route},
	{Name: "evalsha", Arity: -3, Flags: mov, Keys: numKeys2, Class: other, Handling: route},
	{Name: "eval_ro", Arity: -3, Flags: ro | mov, Keys: numKeys2, Class: read, Handling: route},
	{Name: "evalsha_ro", Arity: -3, Flags: ro | mov, Keys: numKeys2, Class: read, Handling: route},
	{Name: "script", Arity: -2, Class: other, Handling: allEng, Merge: MergeSame, Subcommands: subcommandTable("script", []CommandSpec{
		{Name: "load", Arity: 3, Class: other, Handling: allEng, Merge: MergeSame},
	})},
	{Name: "client", Arity: -2, Class: other, Handling: local, Subcommands: subcommandTable("client", []CommandSpec{
		{Name: "setname", Arity: 3, Class: other, Handling: local},
		{Name: "getname", Arity: 2, Class: other, Handling: local},
		{Name: "id", Arity: 2, Class: other, Handling: local},
		// SETINFO arrived in redis 7.2; clients send it on connect and ignore failures.
		{Name: "setinfo", Arity: 4, Class: other, Handling: local},
	})},

	// Introspection that is the same on every engine of the tenant.
	{Name: "command", Arity: -1, Class: admin, Handling: anyEng},
	{Name: "info", Arity: -1, Class: admin, Handling: anyEng},
	{Name: "time", Arity: 1, Flags: fst, Class: other, Handling: anyEng},
}

// refusalGroup refuses a set of commands for one reason.
type refusalGroup struct {
	class  protocol.Class
	reason string // completes "ERR <NAME> is not supported by the cacheqos proxy: "
	names  []string
}

// refused lists every other redis 7.0 command, so clients get a reason rather than "unknown
// command".
var refused = []refusalGroup{
	{admin, "administrative and replication commands are reserved to the cacheqos operator", []string{
		"acl", "bgrewriteaof", "bgsave", "config", "debug", "failover", "flushall", "flushdb",
		"lastsave", "latency", "memory", "module", "monitor", "pfdebug", "pfselftest", "psync",
		"replconf", "replicaof", "role", "save", "shutdown", "slaveof", "slowlog", "sync", "lolwut",
		"wait",
	}},
	{read, "it would scan every node of the tenant at once; use SCAN", []string{"keys", "randomkey"}},
	{write, "only database 0 exists behind the proxy", []string{"move", "copy", "swapdb"}},
	{write, "it reads or writes keys at positions the proxy cannot route", []string{
		"sort", "sort_ro", "georadius", "georadiusbymember", "migrate", "dump", "restore",
		"restore-asking", "object",
	}},
	{other, "functions are not supported; use EVAL or EVALSHA with declared keys", []string{
		"fcall", "fcall_ro", "function",
	}},
	{other, "it serves caching commands, not messaging", []string{
		"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe",
		"publish", "spublish", "pubsub",
		"xadd", "xack", "xautoclaim", "xclaim", "xdel", "xgroup", "xinfo", "xlen", "xpending",
		"xrange", "xread", "xreadgroup", "xrevrange", "xsetid", "xtrim",
	}},
}

// clusterCommands get redis' own standalone answer, which cluster-aware clients use to detect
// that they talk to a non-cluster server.
var clusterCommands = []string{"cluster", "asking", "readonly", "readwrite"}

const clusterDisabled = "ERR This instance has cluster support disabled"

var commandTable = buildCommandTable()

func buildCommandTable() map[string]*CommandSpec {
	table := make(map[string]*CommandSpec, len(supported)+64)
	add := func(s *CommandSpec) {
		if _, dup := table[s.Name]; dup || len(s.Name) > maxNameLen {
			panic(fmt.Sprintf("resp: command %q is listed twice or is too long", s.Name))
		}
		table[s.Name] = s
	}
	for i := range supported {
		add(&supported[i])
	}
	for _, g := range refused {
		for _, name := range g.names {
			add(&CommandSpec{Name: name, Class: g.class, Refusal: fmt.Sprintf(
				"ERR %s is not supported by the cacheqos proxy: %s", strings.ToUpper(name), g.reason)})
		}
	}
	for _, name := range clusterCommands {
		add(&CommandSpec{Name: name, Class: admin, Refusal: clusterDisabled})
	}
	return table
}

func subcommandTable(container string, subs []CommandSpec) map[string]*CommandSpec {
	table := make(map[string]*CommandSpec, len(subs))
	for i := range subs {
		s := &subs[i]
		table[s.Name] = s
		s.Name = container + "|" + s.Name
	}
	return table
}

// Commands returns every command the table knows, supported or refused, for documentation and
// tests. The specs are shared: do not modify them.
func Commands() []*CommandSpec {
	out := make([]*CommandSpec, 0, len(commandTable))
	for _, s := range commandTable {
		out = append(out, s)
	}
	return out
}
