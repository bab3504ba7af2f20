package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// checkReadError fails unless err is one of the errors a reader may return for bad input.
func checkReadError(t *testing.T, err error) {
	t.Helper()
	var perr *ProtocolError
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &perr) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
}

var commandSeeds = []string{
	"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
	"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\nPING\r\n",
	"SET \"a\\x41\" 'b\\'c'\r\n",
	"*0\r\n*-1\r\n\r\n",
	"*1\r\n$-1\r\n",
	"*1\r\n$4\r\nPINGxx",
	"*99999999999999999999\r\n",
	"*1\r\n$536870913\r\n",
	"\"unbalanced\r\n",
	"*2\r\n$1\r\na\r\n:1\r\n",
}

func FuzzReadCommand(f *testing.F) {
	for _, s := range commandSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		small := Limits{MaxArgs: 8, MaxBulkLen: 64, MaxLineLen: 32, MaxCommandLen: 256, RetainBytes: 64}
		for _, lim := range []Limits{{}, small} {
			// A 16-byte buffer never holds a whole command, a large one usually does: the
			// general path and the buffered fast path must read the same commands.
			trickle := readAllCommands(t, bufio.NewReaderSize(bytes.NewReader(data), 16), lim)
			buffered := readAllCommands(t, bufio.NewReaderSize(bytes.NewReader(data), 1<<16), lim)
			if trickle != buffered {
				t.Fatalf("small buffer read\n%s\nlarge buffer read\n%s", trickle, buffered)
			}
		}
	})
}

// readAllCommands reads commands until an error, checks each one, and describes what it read.
func readAllCommands(t *testing.T, br *bufio.Reader, lim Limits) string {
	var log strings.Builder
	r := NewCommandReader(br, lim)
	for {
		cmd, err := r.ReadCommand()
		if err != nil {
			checkReadError(t, err)
			fmt.Fprintf(&log, "error %v\n", err)
			return log.String()
		}
		fmt.Fprintf(&log, "raw %q args %q\n", cmd.Raw(), cmd.Args)
		if len(cmd.Args) == 0 {
			t.Fatalf("empty command with raw %q", cmd.Raw())
		}
		// Re-encoding the arguments gives a command that parses to the same arguments.
		again, err := NewCommandReader(bufio.NewReader(bytes.NewReader(AppendCommand(nil, cmd.Args))), Limits{}).ReadCommand()
		if err != nil || len(again.Args) != len(cmd.Args) {
			t.Fatalf("re-encoded %q: %v", cmd.Args, err)
		}
		for i := range cmd.Args {
			if !bytes.Equal(again.Args[i], cmd.Args[i]) {
				t.Fatalf("arg %d: %q became %q", i, cmd.Args[i], again.Args[i])
			}
		}
	}
}

var replySeeds = []string{
	"+OK\r\n", "-ERR x\r\n", ":12\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n",
	"*2\r\n*1\r\n:1\r\n%1\r\n+k\r\n~1\r\n_\r\n",
	",1.5\r\n#t\r\n(123\r\n=7\r\ntxt:abc\r\n!3\r\nERR\r\n",
	">2\r\n+a\r\n+b\r\n", "|1\r\n+k\r\n+v\r\n:1\r\n",
	"*3\r\n:1\r\n", "$5\r\nab", "?\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
}

func FuzzReadReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReplyReader(bufio.NewReaderSize(bytes.NewReader(data), 16), ReplyLimits{MaxDepth: 8})
		var consumed []byte
		for {
			reply, err := r.ReadReply()
			if err != nil {
				checkReadError(t, err)
				break
			}
			consumed = append(consumed, reply.Raw()...)
			if !bytes.HasPrefix(data, consumed) {
				t.Fatalf("replies %q are not a prefix of the input", consumed)
			}
			v, err := reply.Decode()
			if err != nil {
				t.Fatalf("a framed reply %q does not decode: %v", reply.Raw(), err)
			}
			if !bytes.Equal(v.Raw, reply.Raw()) {
				t.Fatalf("decoded raw %q differs from %q", v.Raw, reply.Raw())
			}
		}
	})
}

func FuzzDecodeValue(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeValue(data)
		if err != nil {
			var perr *ProtocolError
			if !errors.As(err, &perr) {
				t.Fatalf("error type %T: %v", err, err)
			}
			return
		}
		// What decodes must also frame as exactly one reply.
		reply, err := NewReplyReader(bufio.NewReader(bytes.NewReader(data)), ReplyLimits{}).ReadReply()
		if err != nil || !bytes.Equal(reply.Raw(), data) || !bytes.Equal(v.Raw, data) {
			t.Fatalf("decoded %q but framing says %q, %v", data, reply.Raw(), err)
		}
	})
}
