package resp

import "strings"

// commandExample is one invocation of a supported command: the keys the proxy must route it by,
// and the reply type a real redis 7 gives in RESP2 and RESP3 after exampleSetup ran (0 = any).
type commandExample struct {
	line  string
	keys  []string
	resp2 Type
	resp3 Type // when it differs from resp2
}

func (e commandExample) args() [][]byte {
	fields := strings.Fields(e.line)
	args := make([][]byte, len(fields))
	for i, f := range fields {
		args[i] = []byte(f)
	}
	return args
}

// exampleSetup creates the data the examples read.
var exampleSetup = []string{
	"FLUSHALL",
	"SET str 10", "SET str2 hello",
	"HSET h f1 1 f2 2",
	"RPUSH l a b c d",
	"SADD s1 a b c", "SADD s2 b c d",
	"ZADD z1 1 a 2 b 3 c", "ZADD z2 1 b 5 d",
	"PFADD hll a b c",
	"GEOADD geo 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
}

const (
	tSimple  = TypeSimpleString
	tErr     = TypeError
	tInt     = TypeInteger
	tBulk    = TypeBulkString
	tArray   = TypeArray
	tNull    = TypeNull
	tMap     = TypeMap
	tSet     = TypeSet
	tDouble  = TypeDouble
	tVerbatm = TypeVerbatim
)

func keys(k ...string) []string { return k }

// commandExamples covers every supported command and subcommand, in an order that works as one
// script against a real server.
var commandExamples = []commandExample{
	{"GET str", keys("str"), tBulk, 0},
	{"SET newk v EX 100", keys("newk"), tSimple, 0},
	{"SETNX newk2 v", keys("newk2"), tInt, 0},
	{"SETEX sx 100 v", keys("sx"), tSimple, 0},
	{"PSETEX psx 100000 v", keys("psx"), tSimple, 0},
	{"GETSET gs v", keys("gs"), tBulk, tNull},
	{"GETDEL gs", keys("gs"), tBulk, 0},
	{"GETEX str EX 100", keys("str"), tBulk, 0},
	{"APPEND str2 x", keys("str2"), tInt, 0},
	{"STRLEN str2", keys("str2"), tInt, 0},
	{"GETRANGE str2 0 2", keys("str2"), tBulk, 0},
	{"SUBSTR str2 0 2", keys("str2"), tBulk, 0},
	{"SETRANGE str2 0 J", keys("str2"), tInt, 0},
	{"INCR ctr", keys("ctr"), tInt, 0},
	{"DECR ctr", keys("ctr"), tInt, 0},
	{"INCRBY ctr 5", keys("ctr"), tInt, 0},
	{"DECRBY ctr 2", keys("ctr"), tInt, 0},
	{"INCRBYFLOAT fl 1.5", keys("fl"), tBulk, 0},
	{"MGET str str2 nokey", keys("str", "str2", "nokey"), tArray, 0},
	{"MSET m1 a m2 b", keys("m1", "m2"), tSimple, 0},
	{"MSETNX m3 a m4 b", keys("m3", "m4"), tInt, 0},
	{"GETBIT str 1", keys("str"), tInt, 0},
	{"SETBIT bits 7 1", keys("bits"), tInt, 0},
	{"BITCOUNT bits", keys("bits"), tInt, 0},
	{"BITPOS bits 1", keys("bits"), tInt, 0},
	{"BITFIELD bf INCRBY u8 0 1", keys("bf"), tArray, 0},
	{"BITFIELD_RO bf GET u8 0", keys("bf"), tArray, 0},
	{"BITOP AND bdest bits bits", keys("bdest", "bits", "bits"), tInt, 0},
	{"LCS str2 str", keys("str2", "str"), tBulk, 0},

	{"DEL m1 m2 nokey", keys("m1", "m2", "nokey"), tInt, 0},
	{"UNLINK m3", keys("m3"), tInt, 0},
	{"EXISTS str str nokey", keys("str", "str", "nokey"), tInt, 0},
	{"TOUCH str", keys("str"), tInt, 0},
	{"EXPIRE str 100", keys("str"), tInt, 0},
	{"PEXPIRE str 100000", keys("str"), tInt, 0},
	{"EXPIREAT str 4102444800", keys("str"), tInt, 0},
	{"PEXPIREAT str 4102444800000", keys("str"), tInt, 0},
	{"EXPIRETIME str", keys("str"), tInt, 0},
	{"PEXPIRETIME str", keys("str"), tInt, 0},
	{"TTL str", keys("str"), tInt, 0},
	{"PTTL str", keys("str"), tInt, 0},
	{"PERSIST str", keys("str"), tInt, 0},
	{"TYPE str", keys("str"), tSimple, 0},
	{"RENAME sx sx2", keys("sx", "sx2"), tSimple, 0},
	{"RENAMENX sx2 sx3", keys("sx2", "sx3"), tInt, 0},
	{"SCAN 0 COUNT 100", nil, tArray, 0},
	{"DBSIZE", nil, tInt, 0},

	{"HSET h f3 3", keys("h"), tInt, 0},
	{"HSETNX h f4 4", keys("h"), tInt, 0},
	{"HMSET h f5 5", keys("h"), tSimple, 0},
	{"HGET h f1", keys("h"), tBulk, 0},
	{"HMGET h f1 nof", keys("h"), tArray, 0},
	{"HGETALL h", keys("h"), tArray, tMap},
	{"HDEL h f5", keys("h"), tInt, 0},
	{"HEXISTS h f1", keys("h"), tInt, 0},
	{"HINCRBY h f1 2", keys("h"), tInt, 0},
	{"HINCRBYFLOAT h f2 0.5", keys("h"), tBulk, 0},
	{"HKEYS h", keys("h"), tArray, 0},
	{"HVALS h", keys("h"), tArray, 0},
	{"HLEN h", keys("h"), tInt, 0},
	{"HSTRLEN h f1", keys("h"), tInt, 0},
	{"HRANDFIELD h", keys("h"), tBulk, 0},
	{"HSCAN h 0", keys("h"), tArray, 0},

	{"LPUSH l z", keys("l"), tInt, 0},
	{"RPUSH l y", keys("l"), tInt, 0},
	{"LPUSHX l x", keys("l"), tInt, 0},
	{"RPUSHX l w", keys("l"), tInt, 0},
	{"LPOP l", keys("l"), tBulk, 0},
	{"RPOP l", keys("l"), tBulk, 0},
	{"LRANGE l 0 -1", keys("l"), tArray, 0},
	{"LLEN l", keys("l"), tInt, 0},
	{"LINDEX l 0", keys("l"), tBulk, 0},
	{"LSET l 0 q", keys("l"), tSimple, 0},
	{"LREM l 1 q", keys("l"), tInt, 0},
	{"LTRIM l 0 10", keys("l"), tSimple, 0},
	{"LINSERT l BEFORE b bb", keys("l"), tInt, 0},
	{"LPOS l c", keys("l"), tInt, 0},
	{"RPOPLPUSH l l2", keys("l", "l2"), tBulk, 0},
	{"LMOVE l l2 LEFT RIGHT", keys("l", "l2"), tBulk, 0},
	{"LMPOP 2 l l2 LEFT", keys("l", "l2"), tArray, 0},
	{"BLPOP l2 l 0.01", keys("l2", "l"), 0, 0},
	{"BRPOP l2 0.01", keys("l2"), 0, 0},
	{"BRPOPLPUSH l l2 0.01", keys("l", "l2"), 0, 0},
	{"BLMOVE l l2 LEFT RIGHT 0.01", keys("l", "l2"), 0, 0},
	{"BLMPOP 0.01 2 l l2 LEFT", keys("l", "l2"), 0, 0},

	{"SADD s1 e", keys("s1"), tInt, 0},
	{"SREM s1 e", keys("s1"), tInt, 0},
	{"SMEMBERS s1", keys("s1"), tArray, tSet},
	{"SISMEMBER s1 a", keys("s1"), tInt, 0},
	{"SMISMEMBER s1 a z", keys("s1"), tArray, 0},
	{"SCARD s1", keys("s1"), tInt, 0},
	{"SPOP nosuchset", keys("nosuchset"), tBulk, tNull},
	{"SRANDMEMBER s1", keys("s1"), tBulk, 0},
	{"SSCAN s1 0", keys("s1"), tArray, 0},
	{"SINTER s1 s2", keys("s1", "s2"), tArray, tSet},
	{"SUNION s1 s2", keys("s1", "s2"), tArray, tSet},
	{"SDIFF s1 s2", keys("s1", "s2"), tArray, tSet},
	{"SINTERSTORE s3 s1 s2", keys("s3", "s1", "s2"), tInt, 0},
	{"SUNIONSTORE s4 s1 s2", keys("s4", "s1", "s2"), tInt, 0},
	{"SDIFFSTORE s5 s1 s2", keys("s5", "s1", "s2"), tInt, 0},
	{"SINTERCARD 2 s1 s2", keys("s1", "s2"), tInt, 0},
	{"SMOVE s4 s5 d", keys("s4", "s5"), tInt, 0},

	{"ZADD z1 4 d", keys("z1"), tInt, 0},
	{"ZREM z1 d", keys("z1"), tInt, 0},
	{"ZSCORE z1 a", keys("z1"), tBulk, tDouble},
	{"ZMSCORE z1 a nom", keys("z1"), tArray, 0},
	{"ZINCRBY z1 1 a", keys("z1"), tBulk, tDouble},
	{"ZCARD z1", keys("z1"), tInt, 0},
	{"ZCOUNT z1 0 10", keys("z1"), tInt, 0},
	{"ZLEXCOUNT z1 - +", keys("z1"), tInt, 0},
	{"ZRANGE z1 0 -1", keys("z1"), tArray, 0},
	{"ZREVRANGE z1 0 -1", keys("z1"), tArray, 0},
	{"ZRANGEBYSCORE z1 0 10", keys("z1"), tArray, 0},
	{"ZREVRANGEBYSCORE z1 10 0", keys("z1"), tArray, 0},
	{"ZRANGEBYLEX z1 - +", keys("z1"), tArray, 0},
	{"ZREVRANGEBYLEX z1 + -", keys("z1"), tArray, 0},
	{"ZRANK z1 a", keys("z1"), tInt, 0},
	{"ZREVRANK z1 a", keys("z1"), tInt, 0},
	{"ZREMRANGEBYRANK zr 0 0", keys("zr"), tInt, 0},
	{"ZREMRANGEBYSCORE zr 0 1", keys("zr"), tInt, 0},
	{"ZREMRANGEBYLEX zr - +", keys("zr"), tInt, 0},
	{"ZRANDMEMBER z1", keys("z1"), tBulk, 0},
	{"ZSCAN z1 0", keys("z1"), tArray, 0},
	{"ZRANGESTORE zdst z1 0 -1", keys("zdst", "z1"), tInt, 0},
	{"ZUNIONSTORE zu 2 z1 z2", keys("zu", "z1", "z2"), tInt, 0},
	{"ZINTERSTORE zi 2 z1 z2", keys("zi", "z1", "z2"), tInt, 0},
	{"ZDIFFSTORE zd 2 z1 z2", keys("zd", "z1", "z2"), tInt, 0},
	{"ZUNION 2 z1 z2", keys("z1", "z2"), tArray, 0},
	{"ZINTER 2 z1 z2", keys("z1", "z2"), tArray, 0},
	{"ZDIFF 2 z1 z2", keys("z1", "z2"), tArray, 0},
	{"ZINTERCARD 2 z1 z2", keys("z1", "z2"), tInt, 0},
	{"ZPOPMIN z2", keys("z2"), tArray, 0},
	{"ZPOPMAX z2", keys("z2"), tArray, 0},
	{"ZMPOP 1 z1 MIN", keys("z1"), tArray, 0},
	{"BZPOPMIN z1 0.01", keys("z1"), 0, 0},
	{"BZPOPMAX z1 z2 0.01", keys("z1", "z2"), 0, 0},
	{"BZMPOP 0.01 1 z1 MAX", keys("z1"), 0, 0},

	{"PFADD hll d", keys("hll"), tInt, 0},
	{"PFCOUNT hll", keys("hll"), tInt, 0},
	{"PFMERGE hll2 hll", keys("hll2", "hll"), tSimple, 0},
	{"GEOADD geo 2.35 48.85 Paris", keys("geo"), tInt, 0},
	{"GEODIST geo Palermo Catania", keys("geo"), tBulk, 0},
	{"GEOHASH geo Palermo", keys("geo"), tArray, 0},
	{"GEOPOS geo Palermo", keys("geo"), tArray, 0},
	{"GEOSEARCH geo FROMMEMBER Palermo BYRADIUS 200 km", keys("geo"), tArray, 0},
	{"GEOSEARCHSTORE gdst geo FROMMEMBER Palermo BYRADIUS 200 km", keys("gdst", "geo"), tInt, 0},
	{"GEORADIUS_RO geo 15 37 200 km", keys("geo"), tArray, 0},
	{"GEORADIUSBYMEMBER_RO geo Palermo 200 km", keys("geo"), tArray, 0},

	{"PING", nil, tSimple, 0},
	{"ECHO hi", nil, tBulk, 0},
	{"SELECT 0", nil, tSimple, 0},
	{"CLIENT SETNAME app", nil, tSimple, 0},
	{"CLIENT GETNAME", nil, tBulk, 0},
	{"CLIENT ID", nil, tInt, 0},
	{"CLIENT SETINFO lib-name cacheqos", nil, 0, 0}, // an error before redis 7.2
	{"AUTH secret", nil, tErr, 0},                   // the test server has no password
	{"COMMAND COUNT", nil, tInt, 0},
	{"INFO server", nil, tBulk, tVerbatm},
	{"TIME", nil, tArray, 0},
	{"MULTI", nil, tSimple, 0},
	{"DISCARD", nil, tSimple, 0},
	{"EXEC", nil, tErr, 0}, // without MULTI
	{"WATCH str str2", keys("str", "str2"), tSimple, 0},
	{"UNWATCH", nil, tSimple, 0},
	{"EVAL return_1 1 str", keys("str"), 0, 0},
	{"EVAL_RO return_1 1 str", keys("str"), 0, 0},
	{"SCRIPT LOAD return_1", nil, 0, 0},
	{"EVALSHA 0000000000000000000000000000000000000000 1 str", keys("str"), tErr, 0},
	{"EVALSHA_RO 0000000000000000000000000000000000000000 1 str", keys("str"), tErr, 0},
	// Last: HELLO and RESET change the connection's protocol; QUIT closes it.
	{"HELLO", nil, tArray, tMap},
	{"RESET", nil, tSimple, 0},
	{"QUIT", nil, tSimple, 0},
}
