package protocol

// Class groups commands for per-tenant metrics. The set is small and fixed so that metric label
// cardinality stays bounded whatever commands tenants send.
type Class uint8

const (
	// ClassOther covers connection handling and anything that touches no data (PING, AUTH, mn).
	ClassOther Class = iota
	// ClassRead covers commands that only read data (GET, HGETALL, SCAN, get, mg).
	ClassRead
	// ClassWrite covers commands that create or change data, including pops that also return it.
	ClassWrite
	// ClassDelete covers commands whose purpose is to remove keys or members (DEL, HDEL, ZREM,
	// delete, md).
	ClassDelete
	// ClassAdmin covers server administration and introspection (CONFIG, INFO, stats, flush_all).
	ClassAdmin
)

// String returns the metric label value of the class.
func (c Class) String() string {
	switch c {
	case ClassRead:
		return "read"
	case ClassWrite:
		return "write"
	case ClassDelete:
		return "delete"
	case ClassAdmin:
		return "admin"
	default:
		return "other"
	}
}

// Handling says what the proxy does with a command. The zero value refuses, so a command that
// was never classified is never forwarded by accident.
type Handling uint8

const (
	// HandleRefuse: the proxy answers with the command's refusal error and forwards nothing.
	HandleRefuse Handling = iota
	// HandleProxy: the proxy answers the command itself (AUTH, HELLO, PING, QUIT, mn, quit).
	HandleProxy
	// HandleRoute: forward the request unchanged to the node that owns its key. When the command
	// names several keys they must all live on one node; otherwise the proxy answers with an error.
	HandleRoute
	// HandleSplit: a multi-key command the proxy splits by owning node, forwarding one
	// sub-request per node and merging the replies (MGET, DEL, multi-key get).
	HandleSplit
	// HandleAnyEngine: a keyless command forwarded to any one of the tenant's engines (COMMAND,
	// INFO, version).
	HandleAnyEngine
	// HandleAllEngines: a keyless command forwarded to every engine of the tenant, replies merged
	// (SCAN, DBSIZE).
	HandleAllEngines
)

// String names the handling for logs and errors.
func (h Handling) String() string {
	switch h {
	case HandleProxy:
		return "proxy"
	case HandleRoute:
		return "route"
	case HandleSplit:
		return "split"
	case HandleAnyEngine:
		return "any-engine"
	case HandleAllEngines:
		return "all-engines"
	default:
		return "refuse"
	}
}
