package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

// readers yields the ways a test feeds bytes: all at once, and one byte per Read through the
// smallest bufio buffer, so every frame crosses buffer boundaries.
func readers(data string) map[string]*bufio.Reader {
	return map[string]*bufio.Reader{
		"whole":        bufio.NewReader(strings.NewReader(data)),
		"byte-by-byte": bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(data)), 16),
	}
}

func argStrings(args [][]byte) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}

func TestReadCommandParsesEachForm(t *testing.T) {
	long := strings.Repeat("v", 5000)
	tests := []struct {
		name   string
		input  string
		args   []string
		inline bool
	}{
		{"multibulk", "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n", []string{"GET", "key"}, false},
		{"empty argument", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", []string{"SET", "k", ""}, false},
		{"binary argument", "*2\r\n$4\r\nECHO\r\n$4\r\n\r\n\x00\xff\r\n", []string{"ECHO", "\r\n\x00\xff"}, false},
		{"argument longer than the buffer", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000\r\n" + long + "\r\n", []string{"SET", "k", long}, false},
		{"inline", "PING\r\n", []string{"PING"}, true},
		{"inline with bare LF", "set k v\n", []string{"set", "k", "v"}, true},
		{"inline whitespace", " \t GET   key \r\n", []string{"GET", "key"}, true},
		{"inline double quotes", `SET "a key" "va\"l\x41\n"` + "\r\n", []string{"SET", "a key", "va\"lA\n"}, true},
		{"inline single quotes", `SET 'it\'s' 'a\nb'` + "\r\n", []string{"SET", "it's", `a\nb`}, true},
		{"inline empty quoted", `SET k ""` + "\r\n", []string{"SET", "k", ""}, true},
		{"inline quote inside word", `SET k ab"c d"` + "\r\n", []string{"SET", "k", "abc d"}, true},
		{"inline bad hex escape kept", `ECHO "\xZZ"` + "\r\n", []string{"ECHO", "xZZ"}, true},
		{"empty commands skipped", "*0\r\n*-1\r\n\r\n  \r\nPING\r\n", []string{"PING"}, true},
	}
	for _, tt := range tests {
		for how, br := range readers(tt.input) {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				r := NewCommandReader(br, Limits{})
				cmd, err := r.ReadCommand()
				if err != nil {
					t.Fatalf("ReadCommand: %v", err)
				}
				if got := argStrings(cmd.Args); strings.Join(got, "|") != strings.Join(tt.args, "|") || len(got) != len(tt.args) {
					t.Fatalf("args = %q, want %q", got, tt.args)
				}
				if cmd.Inline() != tt.inline {
					t.Fatalf("inline = %v, want %v", cmd.Inline(), tt.inline)
				}
				if !strings.HasSuffix(tt.input, string(cmd.Raw())) || len(cmd.Raw()) == 0 {
					t.Fatalf("raw %q is not the tail of the input %q", cmd.Raw(), tt.input)
				}
				if _, err := r.ReadCommand(); !errors.Is(err, io.EOF) {
					t.Fatalf("after the command: err = %v, want io.EOF", err)
				}
			})
		}
	}
}

func TestReadCommandPipelineKeepsRawExact(t *testing.T) {
	cmds := []string{
		"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$2\r\nv1\r\n",
		"GET k1\r\n",
		"*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n",
		"*1\r\n$4\r\nPING\r\n",
	}
	input := strings.Join(cmds, "")
	for how, br := range readers(input) {
		t.Run(how, func(t *testing.T) {
			r := NewCommandReader(br, Limits{})
			var forwarded bytes.Buffer
			for i := range cmds {
				cmd, err := r.ReadCommand()
				if err != nil {
					t.Fatalf("command %d: %v", i, err)
				}
				if string(cmd.Raw()) != cmds[i] {
					t.Fatalf("command %d raw = %q, want %q", i, cmd.Raw(), cmds[i])
				}
				forwarded.Write(cmd.Raw())
			}
			if forwarded.String() != input {
				t.Fatalf("forwarded bytes differ from the input")
			}
		})
	}
}

func TestReadCommandRejectsMalformedInput(t *testing.T) {
	tests := []struct {
		name  string
		input string
		lim   Limits
		want  string
	}{
		{"bad count", "*x\r\n", Limits{}, "invalid multibulk length"},
		{"count without CR", "*1\n$4\r\nPING\r\n", Limits{}, "invalid multibulk length"},
		{"too many args", "*1048577\r\n", Limits{}, "invalid multibulk length"},
		{"too many args, custom limit", "*3\r\n", Limits{MaxArgs: 2}, "invalid multibulk length"},
		{"not a bulk", "*1\r\n:4\r\n", Limits{}, "expected '$', got ':'"},
		{"control byte instead of bulk", "*1\r\n\r\n", Limits{}, "expected '$', got byte 0x0d"},
		{"bad bulk length", "*1\r\n$x\r\n", Limits{}, "invalid bulk length"},
		{"negative bulk length", "*1\r\n$-1\r\n", Limits{}, "invalid bulk length"},
		{"bulk over redis' limit", "*1\r\n$536870913\r\n", Limits{}, "invalid bulk length"},
		{"bulk over custom limit", "*1\r\n$11\r\nhello world\r\n", Limits{MaxBulkLen: 10}, "invalid bulk length"},
		{"bulk without CRLF", "*1\r\n$4\r\nPINGxx", Limits{}, "bulk string not terminated by CRLF"},
		{"command too large", "*2\r\n$3\r\nSET\r\n$20\r\n", Limits{MaxCommandLen: 32}, "command larger than 32 bytes"},
		{"header line too long", "*1\r\n$" + strings.Repeat("1", 100), Limits{MaxLineLen: 50}, "too big bulk count string"},
		{"count line too long", "*" + strings.Repeat("1", 100), Limits{MaxLineLen: 50}, "too big mbulk count string"},
		{"inline too long", strings.Repeat("a", 100), Limits{MaxLineLen: 50}, "too big inline request"},
		{"unbalanced double quote", `SET "k v` + "\r\n", Limits{}, "unbalanced quotes in request"},
		{"unbalanced single quote", "SET 'k v\r\n", Limits{}, "unbalanced quotes in request"},
		{"text after closing quote", `SET "k"v` + "\r\n", Limits{}, "unbalanced quotes in request"},
		{"too many inline args", "a b c\r\n", Limits{MaxArgs: 2}, "too many arguments in inline request"},
	}
	for _, tt := range tests {
		for how, br := range readers(tt.input) {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				_, err := NewCommandReader(br, tt.lim).ReadCommand()
				var perr *ProtocolError
				if !errors.As(err, &perr) {
					t.Fatalf("err = %v, want *ProtocolError", err)
				}
				if perr.Msg != tt.want {
					t.Fatalf("message = %q, want %q", perr.Msg, tt.want)
				}
				if !strings.HasPrefix(err.Error(), "Protocol error: ") {
					t.Fatalf("Error() = %q lacks redis' prefix", err.Error())
				}
			})
		}
	}
}

func TestReadCommandEndOfStream(t *testing.T) {
	tests := []struct {
		input string
		want  error
	}{
		{"", io.EOF},
		{"*2\r\n$3\r\nGET\r\n", io.ErrUnexpectedEOF},
		{"*1\r\n$4\r\nPI", io.ErrUnexpectedEOF},
		{"*1\r\n$4", io.ErrUnexpectedEOF},
		{"PING", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		_, err := NewCommandReader(bufio.NewReader(strings.NewReader(tt.input)), Limits{}).ReadCommand()
		if !errors.Is(err, tt.want) {
			t.Errorf("%q: err = %v, want %v", tt.input, err, tt.want)
		}
	}
}

// A client that declares a large argument and then stalls must not make the reader allocate the
// declared size: the buffer grows only with the bytes that arrive.
func TestReadCommandDoesNotAllocateDeclaredLength(t *testing.T) {
	input := "*2\r\n$3\r\nSET\r\n$400000000\r\nonly a few bytes"
	r := NewCommandReader(bufio.NewReader(strings.NewReader(input)), Limits{})
	if _, err := r.ReadCommand(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if c := cap(r.raw); c > 1<<20 {
		t.Fatalf("buffer grew to %d bytes for a 400 MB declaration", c)
	}
}

func TestReadCommandReleasesLargeBuffers(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	input := "*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\nPING\r\n"
	r := NewCommandReader(bufio.NewReader(strings.NewReader(input)), Limits{})
	cmd, err := r.ReadCommand()
	if err != nil || string(cmd.Args[1]) != big {
		t.Fatalf("large command: %v", err)
	}
	if _, err := r.ReadCommand(); err != nil {
		t.Fatal(err)
	}
	if c := cap(r.raw); c > DefaultRetainBytes {
		t.Fatalf("raw buffer of %d bytes retained after a small command", c)
	}
}

func TestReadCommandArgsCannotGrowIntoNeighbours(t *testing.T) {
	r := NewCommandReader(bufio.NewReader(strings.NewReader("*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n")), Limits{})
	cmd, err := r.ReadCommand()
	if err != nil {
		t.Fatal(err)
	}
	_ = append(cmd.Args[0], 'X') // must reallocate, not overwrite the CRLF and "b" after it
	if string(cmd.Raw()) != "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n" {
		t.Fatalf("appending to an argument changed the raw bytes: %q", cmd.Raw())
	}
}

func TestCommandReaderReset(t *testing.T) {
	r := NewCommandReader(bufio.NewReader(strings.NewReader("GET a\r\n")), Limits{})
	if _, err := r.ReadCommand(); err != nil {
		t.Fatal(err)
	}
	r.Reset(bufio.NewReader(strings.NewReader("GET b\r\nGET c\r\n")))
	cmd, err := r.ReadCommand()
	if err != nil || string(cmd.Args[1]) != "b" {
		t.Fatalf("after Reset: %v %q", err, cmd.Args)
	}
	if r.Buffered() != len("GET c\r\n") {
		t.Fatalf("Buffered = %d", r.Buffered())
	}
}

// errNeedMore ends the bytes a completeness test buffers: a parser that returns it needed more.
var errNeedMore = errors.New("needs more bytes")

func TestCompletenessTellsWhetherReadCommandWaits(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       protocol.Completeness
	}{
		{"nothing", "", protocol.Incomplete},
		{"inline in part", "PING", protocol.Incomplete},
		{"inline", "PING\r\n", protocol.Complete},
		{"blank inline line", " \t\r\n", protocol.Undecided},
		{"inline line over the limit", strings.Repeat("a", 40), protocol.Undecided},
		{"count in part", "*2\r", protocol.Incomplete},
		{"header in part", "*2\r\n$3\r\nGET\r\n$1", protocol.Incomplete},
		{"argument in part", "*2\r\n$3\r\nGET\r\n$1\r\nk", protocol.Incomplete},
		{"multibulk", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", protocol.Complete},
		{"two commands", "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI", protocol.Complete},
		{"empty multibulk", "*0\r\n", protocol.Undecided},
		{"not a bulk string", "*2\r\n$3\r\nGET\r\n:1\r\n", protocol.Undecided},
		{"argument not ended by CRLF", "*1\r\n$4\r\nPINGxx", protocol.Undecided},
		{"argument over the limit", "*1\r\n$99\r\n", protocol.Undecided},
		{"count over the limit", "*9\r\n", protocol.Undecided},
		{"header line over the limit", "*1\r\n$" + strings.Repeat("1", 40), protocol.Undecided},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(io.MultiReader(strings.NewReader(tc.data), iotest.ErrReader(errNeedMore)), 64)
			_, _ = br.Peek(len(tc.data))
			r := NewCommandReader(br, Limits{MaxArgs: 4, MaxBulkLen: 32, MaxLineLen: 32})
			got := r.Completeness()
			if got != tc.want {
				t.Fatalf("Completeness() = %d, want %d", got, tc.want)
			}
			cmd, err := r.ReadCommand()
			needed := errors.Is(err, errNeedMore)
			if got == protocol.Complete && err != nil || got == protocol.Incomplete && !needed {
				t.Fatalf("Completeness() = %d, but ReadCommand returned %v", got, err)
			}
			if err != nil {
				return
			}
			// The command read after Completeness is the one read without it.
			lim := Limits{MaxArgs: 4, MaxBulkLen: 32, MaxLineLen: 32}
			alone, err := NewCommandReader(bufio.NewReader(strings.NewReader(tc.data)), lim).ReadCommand()
			if err != nil || !slices.Equal(argStrings(cmd.Args), argStrings(alone.Args)) || !bytes.Equal(cmd.Raw(), alone.Raw()) {
				t.Fatalf("after Completeness: %q %q; alone: %q %q (%v)", cmd.Args, cmd.Raw(), alone.Args, alone.Raw(), err)
			}
		})
	}
}
