package resp

import "github.com/cacheqos/cacheqos/internal/protocol"

// Limits bounds what a CommandReader accepts from a client. Zero fields take the defaults, which
// match redis 7's own limits so that any command redis accepts passes the proxy too; a proxy may
// lower them per tenant.
type Limits struct {
	// MaxArgs is the largest number of arguments in one command (redis: 1,048,576).
	MaxArgs int
	// MaxBulkLen is the largest single argument in bytes (redis proto-max-bulk-len: 512 MiB).
	MaxBulkLen int
	// MaxLineLen is the longest inline command, and the longest "*<n>" or "$<n>" header line
	// (redis PROTO_INLINE_MAX_SIZE: 64 KiB).
	MaxLineLen int
	// MaxCommandLen is the largest whole command in bytes (redis client-query-buffer-limit: 1 GiB).
	MaxCommandLen int
	// RetainBytes is the buffer capacity a reader keeps between commands; a buffer grown beyond
	// it for one large command is released before the next, so an idle connection does not pin
	// a large buffer (default 64 KiB).
	RetainBytes int
}

// Default limits; see Limits for where each comes from.
const (
	DefaultMaxArgs       = 1 << 20
	DefaultMaxBulkLen    = 512 << 20
	DefaultMaxLineLen    = 64 << 10
	DefaultMaxCommandLen = 1 << 30
	DefaultRetainBytes   = 64 << 10
)

func (l Limits) withDefaults() Limits {
	l.MaxArgs = protocol.OrDefault(l.MaxArgs, DefaultMaxArgs)
	l.MaxBulkLen = protocol.OrDefault(l.MaxBulkLen, DefaultMaxBulkLen)
	l.MaxLineLen = protocol.OrDefault(l.MaxLineLen, DefaultMaxLineLen)
	l.MaxCommandLen = protocol.OrDefault(l.MaxCommandLen, DefaultMaxCommandLen)
	l.RetainBytes = protocol.OrDefault(l.RetainBytes, DefaultRetainBytes)
	return l
}

// ReplyLimits bounds what a ReplyReader accepts from an engine or a peer sidecar. Zero fields
// take the defaults.
type ReplyLimits struct {
	// MaxBulkLen is the largest bulk string, verbatim string or blob error (default 512 MiB,
	// redis' own largest value).
	MaxBulkLen int
	// MaxLineLen is the longest simple string, error, number or header line (default 1 MiB).
	MaxLineLen int
	// MaxAggregateLen is the largest element count of one array, set, map, push or attribute
	// (default 2^31-1).
	MaxAggregateLen int
	// MaxDepth is the deepest nesting of aggregates (default 64; redis nests at most a handful).
	MaxDepth int
	// MaxReplyLen is the largest whole reply in bytes (default 1 GiB).
	MaxReplyLen int
	// RetainBytes: see Limits.RetainBytes (default 64 KiB).
	RetainBytes int
}

// Default reply limits; see ReplyLimits.
const (
	DefaultReplyMaxLineLen      = 1 << 20
	DefaultReplyMaxAggregateLen = 1<<31 - 1
	DefaultReplyMaxDepth        = 64
	DefaultReplyMaxLen          = 1 << 30
)

func (l ReplyLimits) withDefaults() ReplyLimits {
	l.MaxBulkLen = protocol.OrDefault(l.MaxBulkLen, DefaultMaxBulkLen)
	l.MaxLineLen = protocol.OrDefault(l.MaxLineLen, DefaultReplyMaxLineLen)
	l.MaxAggregateLen = protocol.OrDefault(l.MaxAggregateLen, DefaultReplyMaxAggregateLen)
	l.MaxDepth = protocol.OrDefault(l.MaxDepth, DefaultReplyMaxDepth)
	l.MaxReplyLen = protocol.OrDefault(l.MaxReplyLen, DefaultReplyMaxLen)
	l.RetainBytes = protocol.OrDefault(l.RetainBytes, DefaultRetainBytes)
	return l
}
