package memcache

import (
	"fmt"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Command is a memcached text-protocol command.
type Command uint8

// Commands, classic then meta then the rest.
const (
	CmdGet Command = iota + 1
	CmdGets
	CmdGat
	CmdGats
	CmdSet
	CmdAdd
	CmdReplace
	CmdAppend
	CmdPrepend
	CmdCas
	CmdDelete
	CmdIncr
	CmdDecr
	CmdTouch
	CmdMetaGet
	CmdMetaSet
	CmdMetaDelete
	CmdMetaArithmetic
	CmdMetaNoop
	CmdMetaDebug
	CmdVersion
	CmdQuit
	CmdVerbosity
	CmdFlushAll
	CmdStats
	CmdCacheMemlimit
	CmdShutdown
	CmdSlabs
	CmdLruCrawler
	CmdLru
	CmdWatch
	CmdExtstore
	numCommands
)

// Spec describes what the proxy does with a command.
type Spec struct {
	// Name is the command as sent on the wire.
	Name     string
	Class    protocol.Class
	Handling protocol.Handling
	// Refusal is the reply line (without CRLF) for a refused command.
	Refusal string
}

const (
	read   = protocol.ClassRead
	write  = protocol.ClassWrite
	del    = protocol.ClassDelete
	admin  = protocol.ClassAdmin
	other  = protocol.ClassOther
	route  = protocol.HandleRoute
	split  = protocol.HandleSplit
	local  = protocol.HandleProxy
	anyEng = protocol.HandleAnyEngine
	refuse = protocol.HandleRefuse
)

var specs = [numCommands]Spec{
	// Multi-key retrievals are split by node; each node answers VALUE blocks and END, merged
	// into one END.
	CmdGet:  {Name: "get", Class: read, Handling: split},
	CmdGets: {Name: "gets", Class: read, Handling: split},
	CmdGat:  {Name: "gat", Class: read, Handling: split},
	CmdGats: {Name: "gats", Class: read, Handling: split},

	CmdSet:     {Name: "set", Class: write, Handling: route},
	CmdAdd:     {Name: "add", Class: write, Handling: route},
	CmdReplace: {Name: "replace", Class: write, Handling: route},
	CmdAppend:  {Name: "append", Class: write, Handling: route},
	CmdPrepend: {Name: "prepend", Class: write, Handling: route},
	CmdCas:     {Name: "cas", Class: write, Handling: route},
	CmdDelete:  {Name: "delete", Class: del, Handling: route},
	CmdIncr:    {Name: "incr", Class: write, Handling: route},
	CmdDecr:    {Name: "decr", Class: write, Handling: route},
	CmdTouch:   {Name: "touch", Class: write, Handling: route},

	CmdMetaGet:        {Name: "mg", Class: read, Handling: route},
	CmdMetaSet:        {Name: "ms", Class: write, Handling: route},
	CmdMetaDelete:     {Name: "md", Class: del, Handling: route},
	CmdMetaArithmetic: {Name: "ma", Class: write, Handling: route},
	CmdMetaDebug:      {Name: "me", Class: read, Handling: route},
	// mn only orders responses; the proxy already writes them in request order.
	CmdMetaNoop: {Name: "mn", Class: other, Handling: local},

	CmdVersion: {Name: "version", Class: other, Handling: anyEng},
	CmdQuit:    {Name: "quit", Class: other, Handling: local},

	CmdVerbosity:     refused("verbosity", "it changes the engine's logging"),
	CmdFlushAll:      refused("flush_all", "it would wipe every partition of the tenant, which cacheqos sizes from their contents"),
	CmdStats:         refused("stats", "per-tenant statistics are the proxy's metrics"),
	CmdCacheMemlimit: refused("cache_memlimit", "cacheqos sets each partition's memory"),
	CmdShutdown:      refused("shutdown", "engines are managed by cacheqos"),
	CmdSlabs:         refused("slabs", "engines are managed by cacheqos"),
	CmdLruCrawler:    refused("lru_crawler", "engines are managed by cacheqos"),
	CmdLru:           refused("lru", "engines are managed by cacheqos"),
	CmdWatch:         refused("watch", "engines are managed by cacheqos"),
	CmdExtstore:      refused("extstore", "engines are managed by cacheqos"),
}

func refused(name, reason string) Spec {
	return Spec{Name: name, Class: admin, Handling: refuse,
		Refusal: fmt.Sprintf("CLIENT_ERROR %s is not supported by the cacheqos proxy: %s", name, reason)}
}

var commandsByName = func() map[string]Command {
	m := make(map[string]Command, numCommands)
	for c := Command(1); c < numCommands; c++ {
		m[specs[c].Name] = c
	}
	return m
}()

// Spec returns the command's spec.
func (c Command) Spec() *Spec {
	if c == 0 || c >= numCommands {
		return &Spec{Name: "unknown", Handling: refuse}
	}
	return &specs[c]
}

// String returns the command's wire name.
func (c Command) String() string { return c.Spec().Name }

// IsRetrieval reports the multi-key retrievals answered by VALUE blocks and END.
func (c Command) IsRetrieval() bool { return c >= CmdGet && c <= CmdGats }

// IsStorage reports the classic commands followed by a data block.
func (c Command) IsStorage() bool { return c >= CmdSet && c <= CmdCas }

// IsMeta reports the meta commands.
func (c Command) IsMeta() bool { return c >= CmdMetaGet && c <= CmdMetaDebug }
