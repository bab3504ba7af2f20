package memcache

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// describeResponse renders what a response test checks, omitting empty fields.
func describeResponse(r *Response) string {
	var b strings.Builder
	b.WriteString(r.Status.String())
	for _, v := range r.Values {
		fmt.Fprintf(&b, " value(%s %d %q", v.Key, v.Flags, v.Data)
		if v.HasCas {
			fmt.Fprintf(&b, " cas=%d", v.Cas)
		}
		b.WriteString(")")
	}
	if r.Status == StatusNumber {
		fmt.Fprintf(&b, " %d", r.Number)
	}
	if r.Data != nil {
		fmt.Fprintf(&b, " data=%q", r.Data)
	}
	if r.MetaFlags != nil {
		fmt.Fprintf(&b, " flags=%q", r.MetaFlags)
	}
	if r.Text != nil {
		fmt.Fprintf(&b, " text=%q", r.Text)
	}
	for _, s := range r.Stats {
		fmt.Fprintf(&b, " %s=%s", s.Name, s.Value)
	}
	return b.String()
}

func TestReadResponseFramesEachCommand(t *testing.T) {
	tests := []struct {
		exp   Expect
		input string
		want  string
	}{
		{Expect{Command: CmdGet}, "END\r\n", "END"},
		{Expect{Command: CmdGet}, "VALUE a 5 3\r\nabc\r\nVALUE b 0 2\r\n\r\n\r\nEND\r\n", `END value(a 5 "abc") value(b 0 "\r\n")`},
		{Expect{Command: CmdGets}, "VALUE a 0 1 42\r\nx\r\nEND\r\n", `END value(a 0 "x" cas=42)`},
		{Expect{Command: CmdGat}, "VALUE a 0 1\r\nx\r\nEND\r\n", `END value(a 0 "x")`},
		{Expect{Command: CmdGet}, "VALUE a 0 1\r\nx\r\nSERVER_ERROR out of memory\r\n", `SERVER_ERROR value(a 0 "x") text="out of memory"`},
		{Expect{Command: CmdSet}, "STORED\r\n", "STORED"},
		{Expect{Command: CmdAdd}, "NOT_STORED\r\n", "NOT_STORED"},
		{Expect{Command: CmdCas}, "EXISTS\r\n", "EXISTS"},
		{Expect{Command: CmdCas}, "NOT_FOUND\r\n", "NOT_FOUND"},
		{Expect{Command: CmdSet}, "SERVER_ERROR object too large for cache\r\n", `SERVER_ERROR text="object too large for cache"`},
		{Expect{Command: CmdDelete}, "DELETED\r\n", "DELETED"},
		{Expect{Command: CmdIncr}, "18446744073709551615\r\n", "NUMBER 18446744073709551615"},
		{Expect{Command: CmdDecr}, "9  \r\n", "NUMBER 9"},
		{Expect{Command: CmdIncr}, "NOT_FOUND\r\n", "NOT_FOUND"},
		{Expect{Command: CmdIncr}, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n", `CLIENT_ERROR text="cannot increment or decrement non-numeric value"`},
		{Expect{Command: CmdTouch}, "TOUCHED\r\n", "TOUCHED"},
		{Expect{Command: CmdVersion}, "VERSION 1.6.18\r\n", `VERSION text="1.6.18"`},
		{Expect{Command: CmdFlushAll}, "OK\r\n", "OK"},
		{Expect{Command: CmdCacheMemlimit}, "OK\r\n", "OK"},
		{Expect{Command: CmdStats}, "STAT pid 12\r\nSTAT version 1.6.18\r\nSTAT x a b\r\nEND\r\n", "STATS pid=12 version=1.6.18 x=a b"},
		{Expect{Command: CmdMetaGet}, "VA 3 t-1 Oab\r\nabc\r\n", `VA data="abc" flags=["t-1" "Oab"]`},
		{Expect{Command: CmdMetaGet}, "HD f5\r\n", `HD flags=["f5"]`},
		{Expect{Command: CmdMetaGet}, "EN\r\n", "EN"},
		{Expect{Command: CmdMetaSet}, "NS\r\n", "NS"},
		{Expect{Command: CmdMetaDelete}, "NF Ox\r\n", `NF flags=["Ox"]`},
		{Expect{Command: CmdMetaArithmetic}, "VA 2\r\n10\r\n", `VA data="10"`},
		{Expect{Command: CmdMetaNoop}, "MN\r\n", "MN"},
		{Expect{Command: CmdMetaDebug}, "ME k exp=-1 la=0 cas=1\r\n", `ME text="k exp=-1 la=0 cas=1"`},
		{Expect{Command: CmdMetaDebug}, "EN\r\n", "EN"},
		{Expect{Command: CmdMetaGet}, "ERROR\r\n", "ERROR"},
		{Expect{Command: CmdMetaGet, Sentinel: true}, "MN\r\n", "SUPPRESSED"},
		{Expect{Command: CmdMetaGet, Sentinel: true}, "VA 1\r\nx\r\nMN\r\n", `VA data="x"`},
		{Expect{Command: CmdSet, Sentinel: true}, "MN\r\n", "SUPPRESSED"},
		{Expect{Command: CmdSet, Sentinel: true}, "SERVER_ERROR object too large for cache\r\nMN\r\n", `SERVER_ERROR text="object too large for cache"`},
	}
	for _, tt := range tests {
		// The trailing response checks that exactly one response was consumed.
		for how, br := range readers(tt.input + "MN\r\n") {
			t.Run(fmt.Sprintf("%s %q/%s", tt.exp.Command, tt.input, how), func(t *testing.T) {
				r := NewResponseReader(br, ResponseLimits{})
				resp, err := r.ReadResponse(tt.exp)
				if err != nil {
					t.Fatalf("ReadResponse: %v", err)
				}
				if got := describeResponse(resp); got != tt.want {
					t.Fatalf("got  %s\nwant %s", got, tt.want)
				}
				wantRaw := strings.TrimSuffix(tt.input, "MN\r\n")
				if tt.exp.Command == CmdMetaNoop {
					wantRaw = tt.input
				}
				if string(resp.Raw()) != wantRaw {
					t.Fatalf("raw %q, want %q", resp.Raw(), wantRaw)
				}
				if resp.Status == StatusEnd && string(resp.ValueBlocks())+"END\r\n" != wantRaw {
					t.Fatalf("value blocks %q", resp.ValueBlocks())
				}
				next, err := r.ReadResponse(Expect{Command: CmdMetaNoop})
				if err != nil || next.Status != StatusMN {
					t.Fatalf("next response: %v %v", next, err)
				}
			})
		}
	}
}

func TestReadResponseRejectsMismatches(t *testing.T) {
	tests := []struct {
		exp   Expect
		input string
		lim   ResponseLimits
	}{
		{Expect{Command: CmdGet}, "STORED\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, "VALUE a 0\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, " VALUE a 0 1\r\nx\r\nEND\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, "VALUE a x 1\r\nx\r\nEND\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, "VALUE a 0 1\r\nxy\r\nEND\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, "VALUE a 0 -1\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, "VALUE a 0 100\r\n", ResponseLimits{MaxValueLen: 10}},
		{Expect{Command: CmdGet}, "VALUE a 0 5\r\nhello\r\nEND\r\n", ResponseLimits{MaxResponseLen: 12}},
		{Expect{Command: CmdSet}, "DELETED\r\n", ResponseLimits{}},
		{Expect{Command: CmdSet}, "STORED\n", ResponseLimits{}},
		{Expect{Command: CmdIncr}, "-1\r\n", ResponseLimits{}},
		{Expect{Command: CmdVersion}, "OK\r\n", ResponseLimits{}},
		{Expect{Command: CmdMetaGet}, "NS\r\n", ResponseLimits{}},
		{Expect{Command: CmdMetaGet}, "VA x\r\n", ResponseLimits{}},
		{Expect{Command: CmdMetaGet}, "VA\r\n", ResponseLimits{}},
		{Expect{Command: CmdMetaGet}, "\r\n", ResponseLimits{}},
		{Expect{Command: CmdMetaGet, Sentinel: true}, "EN\r\nHD\r\n", ResponseLimits{}},
		{Expect{Command: CmdStats}, "STAT\r\n", ResponseLimits{}},
		{Expect{Command: CmdGet}, "VALUE " + strings.Repeat("k", 100) + " 0 1\r\n", ResponseLimits{MaxLineLen: 50}},
	}
	for _, tt := range tests {
		for how, br := range readers(tt.input) {
			_, err := NewResponseReader(br, tt.lim).ReadResponse(tt.exp)
			var perr *ProtocolError
			if !errors.As(err, &perr) || !perr.Fatal || perr.Kind != KindServerError {
				t.Errorf("%s %q/%s: err = %v, want a fatal *ProtocolError", tt.exp.Command, tt.input, how, err)
			}
		}
	}
}

func TestReadResponseEndOfStreamAndUnframeable(t *testing.T) {
	for _, input := range []string{"VALUE a 0 5\r\nab", "VALUE a 0 1\r\nx\r\n", "VA 2\r\n", "STAT a b\r\n"} {
		cmd := CmdGet
		if strings.HasPrefix(input, "VA ") {
			cmd = CmdMetaGet
		} else if strings.HasPrefix(input, "STAT") {
			cmd = CmdStats
		}
		_, err := NewResponseReader(bufio.NewReader(strings.NewReader(input)), ResponseLimits{}).ReadResponse(Expect{Command: cmd})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: %v, want io.ErrUnexpectedEOF", input, err)
		}
	}
	_, err := NewResponseReader(bufio.NewReader(strings.NewReader("")), ResponseLimits{}).ReadResponse(Expect{Command: CmdGet})
	if !errors.Is(err, io.EOF) {
		t.Errorf("empty stream: %v", err)
	}
	for _, cmd := range []Command{CmdQuit, CmdShutdown, 0, numCommands} {
		if _, err := NewResponseReader(bufio.NewReader(strings.NewReader("OK\r\n")), ResponseLimits{}).ReadResponse(Expect{Command: cmd}); err == nil {
			t.Errorf("%v: framed a response to a request that has none", cmd)
		}
	}
}

func TestWritersRoundTrip(t *testing.T) {
	var wire []byte
	wire = AppendValue(wire, []byte("a"), 7, []byte("x\r\ny"))
	wire = AppendValueCas(wire, []byte("b"), 0, 99, nil)
	wire = AppendEnd(wire)
	r := NewResponseReader(bufio.NewReader(strings.NewReader(string(wire))), ResponseLimits{})
	resp, err := r.ReadResponse(Expect{Command: CmdGets})
	if err != nil {
		t.Fatal(err)
	}
	if got := describeResponse(resp); got != `END value(a 7 "x\r\ny") value(b 0 "" cas=99)` {
		t.Fatalf("got %s", got)
	}
	errorLines := map[string][]byte{
		"CLIENT_ERROR bad\r\nthing\r\n": AppendClientError(nil, "bad\r\nthing"),
		"SERVER_ERROR busy\r\n":         AppendServerError(nil, "busy"),
		"ERROR\r\n":                     AppendError(nil),
		"STORED\r\n":                    AppendStatusLine(nil, "STORED"),
	}
	for want, got := range errorLines {
		if strings.ReplaceAll(want, "bad\r\nthing", "bad  thing") != string(got) {
			t.Errorf("writer gave %q for %q", got, want)
		}
	}
	for _, status := range []string{"CLIENT_ERROR x", "SERVER_ERROR y", "ERROR"} {
		resp, err := NewResponseReader(bufio.NewReader(strings.NewReader(status+"\r\n")), ResponseLimits{}).ReadResponse(Expect{Command: CmdSet})
		if err != nil || !resp.IsError() {
			t.Errorf("%s: %v %v", status, resp, err)
		}
	}
}

func TestRequestWritersRoundTrip(t *testing.T) {
	var wire []byte
	wire = AppendRetrieval(wire, CmdGets, 0, [][]byte{[]byte("a"), []byte("b")})
	wire = AppendRetrieval(wire, CmdGat, 30, [][]byte{[]byte("c")})
	wire = AppendStorage(wire, CmdCas, []byte("k"), 3, 60, 77, []byte("v\r\n"), true)
	wire = AppendStorage(wire, CmdSet, []byte("k"), 0, 0, 0, nil, false)
	want := []string{
		`gets keys=["a" "b"]`,
		`gat keys=["c"] exptime=30`,
		`cas keys=["k"] flags=3 exptime=60 cas=77 noreply data="v\r\n"`,
		`set keys=["k"] data=""`,
	}
	r := NewRequestReader(bufio.NewReader(strings.NewReader(string(wire))), RequestLimits{})
	for _, w := range want {
		req, err := r.ReadRequest()
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(req); got != w {
			t.Errorf("got %s, want %s", got, w)
		}
	}
}

// TestParseValueLine: the VALUE lines ParseValueLine takes are those the response reader
// takes, and EndsRetrieval the lines that end a retrieval for it.
func TestParseValueLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
		key  string
		size int64
	}{
		{"VALUE k 5 12", true, "k", 12},
		{"VALUE k  0  12 99 ", true, "k", 12},
		{" VALUE k 0 12", false, "", 0},
		{"VALUE k 4294967296 12", false, "", 0},
		{"VALUE k 0 -1", false, "", 0},
		{"VALUE k 0 12 x", false, "", 0},
		{"VALUE k 0 12 9 9", false, "", 0},
		{"VALUE k 0", false, "", 0},
		{"END", false, "", 0},
	} {
		v, ok := ParseValueLine([]byte(tc.line))
		if ok != tc.ok || ok && (string(v.Key) != tc.key || v.Size != tc.size) {
			t.Errorf("ParseValueLine(%q) = %+v, %v; want key %q size %d, %v", tc.line, v, ok, tc.key, tc.size, tc.ok)
		}
		if !ok || tc.size < 0 {
			continue
		}
		rr := NewResponseReader(bufio.NewReader(strings.NewReader(tc.line+"\r\n"+strings.Repeat("x", int(tc.size))+"\r\nEND\r\n")), ResponseLimits{})
		if _, err := rr.ReadResponse(Expect{Command: CmdGet}); err != nil {
			t.Errorf("%q: the response reader refuses what ParseValueLine takes: %v", tc.line, err)
		}
	}
	for line, want := range map[string]bool{"END": true, "ERROR": true, "SERVER_ERROR out of memory": true, "CLIENT_ERROR": true, "CLIENT_ERRORS": false, "VALUE k 0 1": false, "ENDS": false} {
		if got := EndsRetrieval([]byte(line)); got != want {
			t.Errorf("EndsRetrieval(%q) = %v, want %v", line, got, want)
		}
	}
}
