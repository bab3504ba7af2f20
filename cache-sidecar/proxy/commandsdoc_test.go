package proxy

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/memcache"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/sidecar-commands.md from the command tables")

// commandsDocPath is the generated page, from this package's directory.
const commandsDocPath = "../../docs/sidecar-commands.md"

// TestCommandsDocMatchesTables renders the page of the commands the proxy serves from the
// codecs' command tables (the tables the proxy routes by) and fails when docs/sidecar-commands.md
// differs, so the page cannot drift from the code; -update-docs rewrites it.
func TestCommandsDocMatchesTables(t *testing.T) {
	want := renderCommandsDoc()
	if *updateDocs {
		if err := os.WriteFile(commandsDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(commandsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/sidecar-commands.md differs from the command tables; run go test ./cache-sidecar/proxy -run TestCommandsDocMatchesTables -update-docs")
	}
}

// commandRow is one command of the page.
type commandRow struct{ name, handling, note string }

func renderCommandsDoc() string {
	var b strings.Builder
	b.WriteString(`# Commands the sidecar serves

Generated from the proxy's command tables (` + "`internal/protocol/resp`, `internal/protocol/memcache`" + `) by
` + "`go test ./cache-sidecar/proxy -run TestCommandsDocMatchesTables -update-docs`" + `; the same test
fails when this page and the tables differ. What each handling means:

- **route**: forwarded unchanged to the node that owns the key. A command with several keys is
  served when all of them are on one node (hash tags, ` + "`{user42}:cart`" + `, put keys on one node) and
  refused with ` + "`-CROSSSLOT`" + ` otherwise.
- **split**: one request per node owning some of the keys, the replies merged as the note says;
  not atomic across nodes, as in Redis Cluster.
- **proxy**: answered by the sidecar itself.
- **any engine**: keyless, forwarded to one of the tenant's engines.
- **all engines**: forwarded to every engine of the tenant, the replies merged.
- **refused**: answered with an error giving the reason shown; nothing is forwarded.

` + "`MULTI`" + `, ` + "`EXEC`" + ` and ` + "`DISCARD`" + ` are answered by the sidecar: it queues the commands in between
(route, split or any-engine commands whose keys all live on one node) and at ` + "`EXEC`" + ` sends the
whole transaction to that node. ` + "`WATCH`" + ` and the blocking pops go on an engine connection of the
client's own (**own link** below), which the client keeps for its later commands on that node
until it neither watches nor blocks. Scripts must declare their keys. See
docs/sidecar-limits.md (Transactions, scripts and blocking commands).

`)
	var redis []commandRow
	for _, s := range resp.Commands() {
		redis = append(redis, redisRow(s))
		for _, sub := range s.Subcommands {
			redis = append(redis, redisRow(sub))
		}
	}
	writeCommandTable(&b, "redis", redis)
	var mc []commandRow
	for c := memcache.Command(1); c.Spec().Name != "unknown"; c++ {
		s := c.Spec()
		row := commandRow{name: s.Name, handling: handlingName(s.Handling), note: refusalReason(s.Refusal)}
		if s.Handling == protocol.HandleSplit {
			row.note = "values in the order of the keys, one END"
		}
		mc = append(mc, row)
	}
	b.WriteString("\n")
	writeCommandTable(&b, "memcached", mc)
	return b.String()
}

func redisRow(s *resp.CommandSpec) commandRow {
	row := commandRow{name: strings.ToUpper(strings.ReplaceAll(s.Name, "|", " ")), handling: handlingName(s.Handling)}
	switch {
	case s.Handling == protocol.HandleRefuse:
		row.note = refusalReason(s.Refusal)
	case s.Name == "script":
		row.note = "LOAD only (on every node, which answer the same digest); other subcommands refused"
	case s.Handling == protocol.HandleSplit || s.Handling == protocol.HandleAllEngines:
		row.note = mergeNote(s.Merge)
	case s.Flags&resp.FlagBlocking != 0:
		row.handling, row.note = "own link", "keys on one node; the block holds the client's own engine connection"
	case s.Name == "watch":
		row.handling, row.note = "own link", "keys on one node; the later commands on that node and EXEC follow it"
	case s.Name == "unwatch":
		row.handling, row.note = "own link", "on the WATCH's link; answered by the sidecar without one"
	case s.Name == "info":
		row.note = infoNote() + "; not inside a transaction; sent as the engine's default user, so scripts, which run as the link user, may not call it"
	case strings.HasPrefix(s.Name, "eval"):
		row.note = "declared keys (numkeys > 0) on one node; refused on an engine shared by tenants"
	case s.Handling == protocol.HandleRoute && (s.Keys.Last != s.Keys.First || s.Keys.NumKeysAt > 0):
		row.note = "several keys: all on one node"
	}
	return row
}

func handlingName(h protocol.Handling) string {
	switch h {
	case protocol.HandleAnyEngine:
		return "any engine"
	case protocol.HandleAllEngines:
		return "all engines"
	case protocol.HandleRefuse:
		return "refused"
	}
	return h.String()
}

// refusalReason is the reason a refusal reply gives, or the reply without its error code.
func refusalReason(refusal string) string {
	if _, reason, ok := strings.Cut(refusal, "is not supported by the cacheqos proxy: "); ok {
		return reason
	}
	_, text, _ := strings.Cut(refusal, " ")
	return text
}

func mergeNote(m resp.Merge) string {
	switch m {
	case resp.MergeArrayInKeyOrder:
		return "values in the order of the keys"
	case resp.MergeSumIntegers:
		return "counts summed"
	case resp.MergeAllOK:
		return "OK when every node answered OK, else the first error"
	case resp.MergeScan:
		return "one node after another, the cursor names the node"
	case resp.MergeSame:
		return "the same reply from every node"
	}
	return ""
}

func writeCommandTable(b *strings.Builder, title string, rows []commandRow) {
	slices.SortFunc(rows, func(x, y commandRow) int { return strings.Compare(x.name, y.name) })
	fmt.Fprintf(b, "## %s\n\n| command | handling | note |\n| --- | --- | --- |\n", title)
	for _, r := range rows {
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", r.name, r.handling, strings.ReplaceAll(r.note, "|", "\\|"))
	}
}
