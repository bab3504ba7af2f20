package protocol

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func oneByte(s string) *bufio.Reader {
	return bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(s)), 16)
}

func TestAppendLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		input string
		limit int
		want  string
		err   error
	}{
		{"abc\r\nrest", 10, "abc\r\n", nil},
		{"\n", 10, "\n", nil},
		{long + "\n", 101, long + "\n", nil},
		{long + "\n", 100, "", ErrLineTooLong},
		{long, 50, "", ErrLineTooLong}, // fails before the end of the line arrives
		{"", 10, "", io.EOF},
		{"abc", 10, "abc", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		for _, br := range []*bufio.Reader{bufio.NewReader(strings.NewReader(tt.input)), oneByte(tt.input)} {
			got, err := AppendLine(br, []byte("prefix:"), tt.limit)
			if !errors.Is(err, tt.err) {
				t.Errorf("%.20q limit %d: err %v, want %v", tt.input, tt.limit, err, tt.err)
				continue
			}
			if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
				if string(got) != "prefix:"+tt.want {
					t.Errorf("%.20q: got %q", tt.input, got)
				}
			}
		}
	}
}

// TestAppendLineUnterminated: a line over the limit fails once the bytes read pass it, while
// the sender still holds the stream open and br's buffer is not full.
func TestAppendLineUnterminated(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(strings.Repeat("x", 70_000))) }()
	done := make(chan error, 1)
	go func() {
		_, err := AppendLine(bufio.NewReaderSize(pr, 16<<10), nil, 64<<10)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("err %v, want ErrLineTooLong", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error 10s after 70,000 bytes without a line end")
	}
}

func TestAppendFull(t *testing.T) {
	data := strings.Repeat("0123456789", 20000) // 200 KB: several growth steps
	got, err := AppendFull(oneByte(data+"tail"), []byte("p"), len(data))
	if err != nil || string(got) != "p"+data {
		t.Fatalf("AppendFull: %v, %d bytes", err, len(got))
	}
	got, err = AppendFull(strings.NewReader("short"), nil, 1<<30)
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(got) != "short" {
		t.Fatalf("short stream: %q %v", got, err)
	}
	if cap(got) > 2*growStep {
		t.Fatalf("grew to %d bytes for 5 received", cap(got))
	}
	if got, err := AppendFull(strings.NewReader(""), []byte("x"), 0); err != nil || string(got) != "x" {
		t.Fatalf("zero bytes: %q %v", got, err)
	}
}

func TestDiscard(t *testing.T) {
	br := oneByte("0123456789rest")
	if err := Discard(br, 10); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(br); string(rest) != "rest" {
		t.Fatalf("after Discard: %q", rest)
	}
	if err := Discard(oneByte("abc"), 5); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short: %v", err)
	}
}

func TestTrim(t *testing.T) {
	for in, want := range map[string]string{"a\r\n": "a", "a\n": "a", "a": "a", "\r\n": "", "a\r": "a\r", "": ""} {
		if got := string(TrimEOL([]byte(in))); got != want {
			t.Errorf("TrimEOL(%q) = %q", in, got)
		}
	}
	for in, want := range map[string]bool{"a\r\n": true, "\r\n": true, "a\n": false, "\n": false, "": false} {
		got, ok := TrimCRLF([]byte(in))
		if ok != want || ok && string(got)+"\r\n" != in {
			t.Errorf("TrimCRLF(%q) = %q, %v", in, got, ok)
		}
	}
}

func TestClassAndHandlingNames(t *testing.T) {
	classes := map[Class]string{ClassOther: "other", ClassRead: "read", ClassWrite: "write", ClassDelete: "delete", ClassAdmin: "admin"}
	for c, want := range classes {
		if c.String() != want {
			t.Errorf("%d: %q", c, c.String())
		}
	}
	handlings := map[Handling]string{HandleRefuse: "refuse", HandleProxy: "proxy", HandleRoute: "route",
		HandleSplit: "split", HandleAnyEngine: "any-engine", HandleAllEngines: "all-engines"}
	for h, want := range handlings {
		if h.String() != want {
			t.Errorf("%d: %q", h, h.String())
		}
	}
	var zero Handling
	if zero != HandleRefuse {
		t.Error("the zero Handling must refuse")
	}
}

func TestAppendReplyLine(t *testing.T) {
	if got := string(AppendReplyLine([]byte("-"), "ERR a\r\nb\nc")); got != "-ERR a  b c\r\n" {
		t.Fatalf("got %q", got)
	}
}
