package proxy

import (
	"sync"

	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// Scripts. EVAL and EVALSHA are routed by their declared keys like any command with several
// keys; what is particular to them is checked here.

// scriptSpecs are the commands that run a script on the engine.
var scriptSpecs = map[*resp.CommandSpec]bool{
	specEval:                          true,
	specEvalRO:                        true,
	resp.Lookup([]byte("evalsha")):    true,
	resp.Lookup([]byte("evalsha_ro")): true,
}

// The commands that carry a script's body.
var (
	specEval       = resp.Lookup([]byte("eval"))
	specEvalRO     = resp.Lookup([]byte("eval_ro"))
	specScriptLoad = resp.Lookup([]byte("script")).Subcommands["load"]
)

// scriptRefusal says why a script command cannot run, with redis' words for a bad key count:
// a script must declare its keys (numkeys > 0) so the proxy can send it to their node, it
// runs only on engines that hold no other tenant's keys, since inside the engine it may reach
// any key, and a new script body must fit the tenant's bound of distinct scripts. "" when it
// can run.
func (c *conn) scriptRefusal(spec *resp.CommandSpec, args [][]byte) string {
	n, ok := protocol.ParseRedisInt(args[2])
	engine := c.tenant.cfg.Load().localEngine
	switch {
	case !ok:
		return "ERR value is not an integer or out of range"
	case n < 0:
		return "ERR Number of keys can't be negative"
	case n > int64(len(args)-3):
		return "ERR Number of keys can't be greater than number of args"
	case n == 0:
		return "ERR cacheqos: a script must declare the keys it touches (numkeys > 0): the sidecar sends it to " +
			"the node that holds them"
	case c.p.conf.Load().sharedEngines[engine]:
		return "ERR cacheqos: scripts are refused on a partition whose engine holds other tenants' keys"
	case (spec == specEval || spec == specEvalRO) && !c.tenant.scripts.admit(engine, args[1]):
		return replyTooManyScripts
	}
	return ""
}

// maxScriptsPerEngine and maxScriptBytesPerEngine bound the distinct scripts (EVAL bodies and
// SCRIPT LOAD) a tenant sends to its engine on this node, in number and in bytes. redis keeps
// every one, compiled, in a Lua VM that maxmemory does not bound, until SCRIPT FLUSH, which
// tenants cannot send: without a bound, ever new scripts would grow the engine past its
// partition's size.
const (
	maxScriptsPerEngine     = 1000
	maxScriptBytesPerEngine = 4 << 20
)

const replyTooManyScripts = "ERR cacheqos: this tenant has sent its engine its limit of distinct scripts " +
	"(1000, 4 MiB); send a few scripts, with their data as arguments, and run them again with EVALSHA"

// scriptSet remembers the scripts a tenant sent its local engine.
type scriptSet struct {
	mu      sync.Mutex
	engine  string
	digests map[uint64]struct{}
	bytes   int // of the scripts in digests
}

// admit records a script body sent to engine and reports whether it may go: one the engine
// was sent before, or a new one that keeps the scripts sent within the bounds. A new engine (the
// tenant's partition moved) starts afresh; "" (no local engine) admits everything, as the
// node that holds the engine checks it.
func (s *scriptSet) admit(engine string, body []byte) bool {
	if engine == "" {
		return true
	}
	h := keyhash.Sum64(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.engine != engine || s.digests == nil {
		s.engine, s.digests, s.bytes = engine, make(map[uint64]struct{}), 0
	}
	if _, ok := s.digests[h]; ok {
		return true
	}
	if len(s.digests) >= maxScriptsPerEngine || s.bytes+len(body) > maxScriptBytesPerEngine {
		return false
	}
	s.digests[h] = struct{}{}
	s.bytes += len(body)
	return true
}
