package memcache

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func checkReadError(t *testing.T, err error) *ProtocolError {
	t.Helper()
	var perr *ProtocolError
	if errors.As(err, &perr) {
		return perr
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
	return nil
}

var requestSeeds = []string{
	"get a b c\r\n", "gat 10 a\r\n", "set k 1 2 3\r\nabc\r\n", "cas k 0 0 1 9 noreply\r\nx\r\n",
	"delete k 0 noreply\r\n", "incr k 1\r\n", "touch k 1\r\n", "mg k v q Oab b\r\n",
	"ms a2V5 2 b q\r\nab\r\n", "md k q\r\n", "ma k N0 J1 v\r\n", "mn\r\n", "me k\r\n",
	"version\r\n", "stats items\r\n", "set k 0 0 5\r\nab", "set k 0 0 99999999999\r\n",
	"mg k v v\r\n", "\r\n", "get " + string(bytes.Repeat([]byte("k"), 251)) + "\r\n",
}

func FuzzReadRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewRequestReader(bufio.NewReaderSize(bytes.NewReader(data), 16), RequestLimits{MaxLineLen: 512, MaxValueLen: 128})
		for range 1000 { // every request consumes at least one byte, so this bounds the loop
			req, err := r.ReadRequest()
			if err != nil {
				if perr := checkReadError(t, err); perr == nil || perr.Fatal {
					return
				}
				continue
			}
			if !bytes.Contains(data, req.Raw()) {
				t.Fatalf("raw %q is not from the input", req.Raw())
			}
			for _, k := range req.Keys {
				if len(k) == 0 || len(k) > MaxKeyLen {
					t.Fatalf("key %q accepted", k)
				}
			}
			if (req.Command.IsStorage() || req.Command == CmdMetaSet) && !bytes.Contains(req.Raw(), req.Data) {
				t.Fatalf("data %q is not in the raw request", req.Data)
			}
		}
	})
}

var responseSeeds = []struct {
	cmd   Command
	input string
}{
	{CmdGet, "VALUE a 1 2\r\nab\r\nEND\r\n"}, {CmdGets, "VALUE a 1 2 3\r\nab\r\nEND\r\n"},
	{CmdSet, "STORED\r\n"}, {CmdIncr, "12 \r\n"}, {CmdMetaGet, "VA 2 t1\r\nab\r\n"},
	{CmdMetaGet, "EN\r\n"}, {CmdMetaDebug, "ME k a=1\r\n"}, {CmdStats, "STAT a 1\r\nEND\r\n"},
	{CmdVersion, "VERSION 1\r\n"}, {CmdDelete, "SERVER_ERROR x\r\n"}, {CmdGet, "VALUE a 1 -2\r\n"},
}

func FuzzReadResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(uint8(s.cmd), false, []byte(s.input))
		f.Add(uint8(s.cmd), true, []byte(s.input+"MN\r\n"))
	}
	f.Fuzz(func(t *testing.T, cmd uint8, sentinel bool, data []byte) {
		exp := Expect{Command: Command(cmd % uint8(numCommands)), Sentinel: sentinel}
		if !canFrame(exp.Command) {
			return
		}
		r := NewResponseReader(bufio.NewReaderSize(bytes.NewReader(data), 16), ResponseLimits{MaxLineLen: 512, MaxValueLen: 1024, MaxResponseLen: 4096})
		for {
			resp, err := r.ReadResponse(exp)
			if err != nil {
				_ = checkReadError(t, err) // any error ends the stream for a response reader
				return
			}
			if !bytes.Contains(data, resp.Raw()) {
				t.Fatalf("raw %q is not from the input", resp.Raw())
			}
			for _, v := range resp.Values {
				if !bytes.HasPrefix(v.Raw, []byte("VALUE ")) || !bytes.Contains(v.Raw, v.Data) {
					t.Fatalf("value %+v", v)
				}
			}
			if resp.Status == StatusEnd && !bytes.HasSuffix(resp.Raw(), []byte("END\r\n")) {
				t.Fatalf("END response %q", resp.Raw())
			}
		}
	})
}
