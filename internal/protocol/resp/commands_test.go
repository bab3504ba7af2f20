package resp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// supportedSpecs returns every command and subcommand the proxy forwards or answers.
func supportedSpecs() []*CommandSpec {
	var out []*CommandSpec
	for _, s := range Commands() {
		if s.Handling == protocol.HandleRefuse {
			continue
		}
		if s.Subcommands != nil {
			for _, sub := range s.Subcommands {
				out = append(out, sub)
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func TestEverySupportedCommandHasAnExample(t *testing.T) {
	covered := map[string]bool{}
	for _, ex := range commandExamples {
		spec, err := Classify(ex.args())
		if err != nil {
			t.Errorf("%s: %v", ex.line, err)
			continue
		}
		covered[spec.Name] = true
	}
	for _, s := range supportedSpecs() {
		if !covered[s.Name] {
			t.Errorf("command %s has no example in commandExamples", s.Name)
		}
	}
}

func TestExamplesKeyPositions(t *testing.T) {
	for _, ex := range commandExamples {
		args := ex.args()
		spec, err := Classify(args)
		if err != nil {
			t.Fatalf("%s: %v", ex.line, err)
		}
		idx, err := spec.KeyIndexes(args, nil)
		if err != nil {
			t.Errorf("%s: KeyIndexes: %v", ex.line, err)
			continue
		}
		var got []string
		for _, i := range idx {
			got = append(got, string(args[i]))
		}
		if !slices.Equal(got, ex.keys) {
			t.Errorf("%s: keys = %q, want %q", ex.line, got, ex.keys)
		}
		if len(ex.keys) == 0 && spec.Handling == protocol.HandleRoute {
			t.Errorf("%s: routed by key but has none", ex.line)
		}
	}
}

func TestKeyIndexesEdgeCases(t *testing.T) {
	tests := []struct {
		line    string
		want    []int
		wantErr bool
	}{
		{"MSET a 1 b 2 c 3", []int{1, 3, 5}, false},
		{"MSET a 1 b", []int{1, 3}, false}, // wrong arity is Classify's to report, not a panic
		{"ZUNIONSTORE dst 3 a b c WEIGHTS 1 2 3", []int{1, 3, 4, 5}, false},
		{"ZUNION 1 a WITHSCORES", []int{2}, false},
		{"LMPOP 2 a b LEFT COUNT 2", []int{2, 3}, false},
		{"ZUNION 0 a", nil, true},
		{"ZUNION x a", nil, true},
		{"ZUNION 3 a b", nil, true},
		{"ZUNION", nil, true},
		{"BITOP OR dst a b", []int{2, 3, 4}, false},
	}
	for _, tt := range tests {
		args := commandExample{line: tt.line}.args()
		spec := Lookup(args[0])
		got, err := spec.KeyIndexes(args, nil)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, want error %v", tt.line, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !slices.Equal(got, tt.want) {
			t.Errorf("%s: indexes = %v, want %v", tt.line, got, tt.want)
		}
	}
}

// The metrics class follows redis' flags: read-only commands are reads, writes are writes unless
// their purpose is removal. The exceptions are deliberate and listed.
func TestClassFollowsFlags(t *testing.T) {
	deletes := []string{
		"del", "unlink", "getdel", "hdel", "lrem", "srem", "zrem",
		"zremrangebyrank", "zremrangebyscore", "zremrangebylex",
	}
	readsDespiteWriteFlag := []string{"getex"} // GETEX returns the value; the TTL change is a side effect
	for _, s := range supportedSpecs() {
		var want protocol.Class
		switch {
		case slices.Contains(deletes, s.Name):
			want = protocol.ClassDelete
		case slices.Contains(readsDespiteWriteFlag, s.Name), s.Flags&FlagReadonly != 0:
			want = protocol.ClassRead
		case s.Flags&FlagWrite != 0:
			want = protocol.ClassWrite
		case s.Name == "command" || s.Name == "info":
			want = protocol.ClassAdmin
		default:
			want = protocol.ClassOther
		}
		if s.Class != want {
			t.Errorf("%s: class %v, want %v", s.Name, s.Class, want)
		}
	}
}

func TestHandlingOfMultiKeyCommands(t *testing.T) {
	want := map[string]Merge{
		"mget": MergeArrayInKeyOrder, "mset": MergeAllOK,
		"del": MergeSumIntegers, "unlink": MergeSumIntegers, "exists": MergeSumIntegers, "touch": MergeSumIntegers,
	}
	for _, s := range supportedSpecs() {
		merge, isSplit := want[s.Name]
		if isSplit != (s.Handling == protocol.HandleSplit) || merge != s.Merge && isSplit {
			t.Errorf("%s: handling %v merge %v", s.Name, s.Handling, s.Merge)
		}
		if s.Handling == protocol.HandleRoute && s.Keys.First == 0 && s.Keys.NumKeysAt == 0 {
			t.Errorf("%s: routed by key but its spec names no key", s.Name)
		}
	}
	for name, merge := range map[string]Merge{"scan": MergeScan, "dbsize": MergeSumIntegers} {
		s := Lookup([]byte(name))
		if s.Handling != protocol.HandleAllEngines || s.Merge != merge {
			t.Errorf("%s: handling %v merge %v", name, s.Handling, s.Merge)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		line     string
		wantName string
		wantErr  string
	}{
		{"get k", "get", ""},
		{"GeT k", "get", ""},
		{"client SetName x", "client|setname", ""},
		{"get", "get", "ERR wrong number of arguments for 'get' command"},
		{"get a b", "get", "ERR wrong number of arguments for 'get' command"},
		{"set k", "set", "ERR wrong number of arguments for 'set' command"},
		{"client", "client", "ERR wrong number of arguments for 'client' command"},
		{"client setname", "client|setname", "ERR wrong number of arguments for 'client|setname' command"},
		{"client kill 1.2.3.4:5", "client", "ERR CLIENT KILL is not supported by the cacheqos proxy"},
		{"config get maxmemory", "config", "ERR CONFIG is not supported by the cacheqos proxy: administrative and replication commands are reserved to the cacheqos operator"},
		{"flushall", "flushall", "ERR FLUSHALL is not supported by the cacheqos proxy: administrative and replication commands are reserved to the cacheqos operator"},
		{"keys *", "keys", "ERR KEYS is not supported by the cacheqos proxy: it would scan every node of the tenant at once; use SCAN"},
		{"multi", "multi", ""},
		{"watch k", "watch", ""},
		{"script flush", "script", "ERR SCRIPT FLUSH is not supported by the cacheqos proxy"},
		{"fcall f 1 k", "fcall", "ERR FCALL is not supported by the cacheqos proxy: functions are not supported; use EVAL or EVALSHA with declared keys"},
		{"subscribe ch", "subscribe", "ERR SUBSCRIBE is not supported by the cacheqos proxy: it serves caching commands, not messaging"},
		{"blpop l 0", "blpop", ""},
		{"wait 1 0", "wait", "ERR WAIT is not supported by the cacheqos proxy: administrative and replication commands are reserved to the cacheqos operator"},
		{"cluster info", "cluster", "ERR This instance has cluster support disabled"},
		{"foo bar baz", "", "ERR unknown command 'foo', with args beginning with: 'bar' 'baz' "},
		{"averyveryverylongcommandnamethatisnotknown", "", "ERR unknown command 'averyveryverylongcommandnamethatisnotknown', with args beginning with: "},
	}
	for _, tt := range tests {
		spec, err := Classify(commandExample{line: tt.line}.args())
		gotName := ""
		if spec != nil {
			gotName = spec.Name
		}
		gotErr := ""
		if err != nil {
			var cerr *CommandError
			if !errors.As(err, &cerr) {
				t.Errorf("%s: error type %T", tt.line, err)
			}
			gotErr = err.Error()
		}
		if gotName != tt.wantName || gotErr != tt.wantErr {
			t.Errorf("%s: got (%q, %q), want (%q, %q)", tt.line, gotName, gotErr, tt.wantName, tt.wantErr)
		}
	}
}

func TestUnknownCommandTruncatesArguments(t *testing.T) {
	args := [][]byte{[]byte("nope")}
	for range 10 {
		args = append(args, []byte(strings.Repeat("a", 50)))
	}
	_, err := Classify(args)
	msg := err.Error()
	prefix := "ERR unknown command 'nope', with args beginning with: "
	if !strings.HasPrefix(msg, prefix) || len(msg)-len(prefix) > 128+3*3 {
		t.Fatalf("message = %q (%d bytes of arguments)", msg, len(msg)-len(prefix))
	}
}

func TestEveryRefusedCommandHasAReason(t *testing.T) {
	for _, s := range Commands() {
		if s.Handling == protocol.HandleRefuse && !strings.HasPrefix(s.Refusal, "ERR ") {
			t.Errorf("%s: refusal %q", s.Name, s.Refusal)
		}
		if s.Handling != protocol.HandleRefuse && s.Refusal != "" {
			t.Errorf("%s: supported but has a refusal", s.Name)
		}
	}
}

func TestClassifyAndKeyIndexesDoNotAllocate(t *testing.T) {
	args := commandExample{line: "MSET k1 v1 k2 v2"}.args()
	idx := make([]int, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		spec, err := Classify(args)
		if err != nil {
			t.Fatal(err)
		}
		if idx, err = spec.KeyIndexes(args, idx[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Classify+KeyIndexes", allocs)
	}
}

func TestParseHello(t *testing.T) {
	tests := []struct {
		line    string
		want    Hello
		wantErr string
	}{
		{"HELLO", Hello{}, ""},
		{"HELLO 3", Hello{Proto: RESP3}, ""},
		{"HELLO 2 AUTH alice s3cret SETNAME app", Hello{Proto: RESP2, HasAuth: true, User: []byte("alice"), Password: []byte("s3cret"), ClientName: []byte("app")}, ""},
		{"hello 3 setname app auth bob pw", Hello{Proto: RESP3, HasAuth: true, User: []byte("bob"), Password: []byte("pw"), ClientName: []byte("app")}, ""},
		{"HELLO 4", Hello{}, "NOPROTO unsupported protocol version"},
		{"HELLO x", Hello{}, "ERR Protocol version is not an integer or out of range"},
		{"HELLO 3 AUTH alice", Hello{}, "ERR Syntax error in HELLO option 'AUTH'"},
		{"HELLO 3 BOGUS", Hello{}, "ERR Syntax error in HELLO option 'BOGUS'"},
	}
	for _, tt := range tests {
		got, err := ParseHello(commandExample{line: tt.line}.args())
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if gotErr != tt.wantErr {
			t.Errorf("%s: err %q, want %q", tt.line, gotErr, tt.wantErr)
			continue
		}
		if got.Proto != tt.want.Proto || got.HasAuth != tt.want.HasAuth || string(got.User) != string(tt.want.User) ||
			string(got.Password) != string(tt.want.Password) || string(got.ClientName) != string(tt.want.ClientName) {
			t.Errorf("%s: %+v, want %+v", tt.line, got, tt.want)
		}
	}
}

func TestParseAuth(t *testing.T) {
	user, pass, err := ParseAuth(commandExample{line: "AUTH pw"}.args())
	if err != nil || user != nil || string(pass) != "pw" {
		t.Errorf("AUTH pw: %q %q %v", user, pass, err)
	}
	user, pass, err = ParseAuth(commandExample{line: "AUTH alice pw"}.args())
	if err != nil || string(user) != "alice" || string(pass) != "pw" {
		t.Errorf("AUTH alice pw: %q %q %v", user, pass, err)
	}
	if _, _, err := ParseAuth(commandExample{line: "AUTH a b c"}.args()); err == nil || err.Error() != "ERR syntax error" {
		t.Errorf("AUTH a b c: %v", err)
	}
}

func TestFlagsString(t *testing.T) {
	if got := (FlagReadonly | FlagFast).String(); got != "readonly,fast" {
		t.Errorf("String = %q", got)
	}
	if ParseFlag("denyoom") != FlagDenyOOM || ParseFlag("loading") != 0 {
		t.Error("ParseFlag")
	}
}
