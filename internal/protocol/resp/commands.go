package resp

import (
	"fmt"
	"strings"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// Flags are the redis command flags the proxy cares about (the same names redis' COMMAND reply
// uses).
type Flags uint16

// Command flags.
const (
	FlagReadonly Flags = 1 << iota
	FlagWrite
	FlagDenyOOM
	FlagAdmin
	FlagPubSub
	FlagBlocking
	FlagFast
	// FlagMovableKeys: key positions depend on the arguments (KeySpec.NumKeysAt).
	FlagMovableKeys
)

// flagNames maps flags to redis' names, for comparison with COMMAND output and for String.
var flagNames = []struct {
	flag Flags
	name string
}{
	{FlagReadonly, "readonly"}, {FlagWrite, "write"}, {FlagDenyOOM, "denyoom"},
	{FlagAdmin, "admin"}, {FlagPubSub, "pubsub"}, {FlagBlocking, "blocking"},
	{FlagFast, "fast"}, {FlagMovableKeys, "movablekeys"},
}

// ParseFlag returns the flag redis names name, or 0 for flags the proxy does not track.
func ParseFlag(name string) Flags {
	for _, f := range flagNames {
		if f.name == name {
			return f.flag
		}
	}
	return 0
}

// String lists the flags by redis name.
func (f Flags) String() string {
	var names []string
	for _, n := range flagNames {
		if f&n.flag != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// KeySpec says where a command's keys are. Fixed positions use redis' legacy range (First, Last,
// Step); commands with a key count argument (ZUNIONSTORE, LMPOP) add NumKeysAt.
type KeySpec struct {
	// First is the index of the first key; 0 when there are no keys at fixed positions.
	First int
	// Last is the index of the last key; negative values count from the end (-1 = the last
	// argument, -2 = the one before it).
	Last int
	// Step is the distance between keys (2 for MSET's key/value pairs). When splitting, each key
	// takes the Step-1 arguments after it along.
	Step int
	// NumKeysAt, when positive, is the index of an argument holding a key count; that many keys
	// follow it.
	NumKeysAt int
}

// Merge says how the proxy combines the per-node replies of a split or fanned-out command.
type Merge uint8

const (
	// MergeNone: the command is never split.
	MergeNone Merge = iota
	// MergeArrayInKeyOrder: each node answers an array with one element per key it was sent; the
	// client gets one array with the elements in the order of its keys (MGET).
	MergeArrayInKeyOrder
	// MergeSumIntegers: each node answers an integer; the client gets their sum (DEL, EXISTS,
	// DBSIZE).
	MergeSumIntegers
	// MergeAllOK: each node answers +OK; the client gets +OK, or the first error (MSET).
	MergeAllOK
	// MergeScan: SCAN over every engine; the proxy composes the cursor from the engine index and
	// that engine's cursor, and answers [cursor, keys] from one engine at a time.
	MergeScan
	// MergeSame: every node answers the same reply (SCRIPT LOAD's digest); the client gets it,
	// or the first error.
	MergeSame
)

// CommandSpec describes one redis command (or one subcommand of a container such as CLIENT).
type CommandSpec struct {
	// Name is the lower-case name; subcommands are "container|sub" ("client|setname").
	Name string
	// Arity follows redis: N > 0 means exactly N arguments (the name included), -N at least N.
	Arity int
	Flags Flags
	Keys  KeySpec
	Class protocol.Class
	// Handling says what the proxy does with the command.
	Handling protocol.Handling
	// Merge says how split or fanned-out replies combine (HandleSplit, HandleAllEngines).
	Merge Merge
	// Refusal is the error reply (without '-') for a refused command.
	Refusal string
	// Subcommands of a container command, by lower-case name. A subcommand missing from the map
	// is refused.
	Subcommands map[string]*CommandSpec
}

// ArityOK reports whether argc arguments (the name included) satisfy the arity.
func (s *CommandSpec) ArityOK(argc int) bool {
	if s.Arity >= 0 {
		return argc == s.Arity
	}
	return argc >= -s.Arity
}

// KeyIndexes appends to dst the indexes in args of the command's keys, in argument order, and
// returns the extended slice. It allocates nothing when dst has room. A key count argument that
// is not a positive integer or promises more keys than there are arguments gives a
// *CommandError, so no partial key set is ever routed.
func (s *CommandSpec) KeyIndexes(args [][]byte, dst []int) ([]int, error) {
	k := s.Keys
	if k.First > 0 {
		last := k.Last
		if last < 0 {
			last += len(args)
		}
		for i := k.First; i <= last && i < len(args); i += k.Step {
			dst = append(dst, i)
		}
	}
	if k.NumKeysAt > 0 {
		if k.NumKeysAt >= len(args) {
			return dst, errNumKeys
		}
		n, ok := protocol.ParseInt(args[k.NumKeysAt])
		if !ok || n <= 0 || n > int64(len(args)-k.NumKeysAt-1) {
			return dst, errNumKeys
		}
		for i := k.NumKeysAt + 1; i <= k.NumKeysAt+int(n); i++ {
			dst = append(dst, i)
		}
	}
	return dst, nil
}

var errNumKeys = &CommandError{Msg: "ERR numkeys must be a positive integer no larger than the number of keys given"}

// maxNameLen is the longest command name in the table; longer names cannot match.
const maxNameLen = 24

// Lookup returns the spec of the named command (any letter case), or nil if the proxy does not
// know it. It does not allocate.
func Lookup(name []byte) *CommandSpec {
	return lookupIn(commandTable, name)
}

func lookupIn(table map[string]*CommandSpec, name []byte) *CommandSpec {
	if len(name) > maxNameLen {
		return nil
	}
	var lower [maxNameLen]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	return table[string(lower[:len(name)])]
}

// Classify finds the spec for a command (resolving container subcommands such as CLIENT SETNAME)
// and checks what can be checked without executing it. It returns a *CommandError for an unknown
// command, a refused command (with the spec, so the refusal can still be counted by class) and a
// wrong number of arguments, with redis' wording where redis has one. It does not allocate when
// the command is accepted.
func Classify(args [][]byte) (*CommandSpec, error) {
	if len(args) == 0 {
		return nil, &CommandError{Msg: "ERR empty command"}
	}
	spec := Lookup(args[0])
	if spec == nil {
		return nil, unknownCommand(args)
	}
	if spec.Subcommands != nil && len(args) >= 2 {
		sub := lookupIn(spec.Subcommands, args[1])
		if sub == nil {
			return spec, &CommandError{Msg: fmt.Sprintf(
				"ERR %s %s is not supported by the cacheqos proxy",
				strings.ToUpper(spec.Name), strings.ToUpper(string(args[1])))}
		}
		spec = sub
	}
	if spec.Handling == protocol.HandleRefuse {
		return spec, &CommandError{Msg: spec.Refusal}
	}
	if !spec.ArityOK(len(args)) {
		return spec, &CommandError{Msg: fmt.Sprintf("ERR wrong number of arguments for '%s' command", spec.Name)}
	}
	return spec, nil
}

// unknownCommand builds redis 7's reply to an unknown command: the name and the first arguments,
// each quoted, about 128 bytes of them at most.
func unknownCommand(args [][]byte) *CommandError {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", truncate(a, 128-b.Len()))
	}
	return &CommandError{Msg: fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s",
		truncate(args[0], 128), b.String())}
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
