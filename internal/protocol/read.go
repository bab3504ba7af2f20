package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
)

// ErrLineTooLong is returned by AppendLine when no line terminator arrives within the limit.
var ErrLineTooLong = errors.New("line too long")

// growStep bounds how far AppendFull grows its destination ahead of the bytes that have really
// arrived, so a peer that declares a huge length and then sends little cannot make us allocate
// the declared size.
const growStep = 64 << 10

// AppendLine reads through the next '\n' and appends the bytes read, terminator included, to dst.
// It fails with ErrLineTooLong as soon as more than limit bytes arrive without a '\n' (checked
// after every read, without waiting for the rest of the line or for br's buffer to fill), with
// io.EOF when the stream ends before any byte of the line, and with io.ErrUnexpectedEOF when it
// ends inside the line.
func AppendLine(br *bufio.Reader, dst []byte, limit int) ([]byte, error) {
	start := len(dst)
	for {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if errors.Is(err, io.EOF) && len(dst) > start {
					err = io.ErrUnexpectedEOF
				}
				return dst, err
			}
		}
		b, _ := br.Peek(br.Buffered()) // cannot fail: the bytes are buffered
		n, found := len(b), false
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			n, found = i+1, true
		}
		if len(dst)-start+n > limit {
			return dst, ErrLineTooLong
		}
		dst = append(dst, b[:n]...)
		_, _ = br.Discard(n)
		if found {
			return dst, nil
		}
	}
}

// AppendFull appends exactly n bytes read from r to dst. It grows dst as the bytes arrive (at most
// 64 KiB beyond what has been received, or into capacity dst already has), never by n up front.
// A stream that ends early gives io.ErrUnexpectedEOF, with the bytes received so far appended.
func AppendFull(r io.Reader, dst []byte, n int) ([]byte, error) {
	for n > 0 {
		chunk := n
		if free := cap(dst) - len(dst); chunk > free && chunk > growStep {
			chunk = max(free, growStep)
		}
		dst = slices.Grow(dst, chunk)
		start := len(dst)
		got, err := io.ReadFull(r, dst[start:start+chunk])
		dst = dst[:start+got]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
		n -= chunk
	}
	return dst, nil
}

// Discard skips exactly n bytes of br without buffering them, for swallowing a payload that is
// refused (too large) while keeping the stream in step. It reports io.ErrUnexpectedEOF when the
// stream ends first.
func Discard(br *bufio.Reader, n int) error {
	_, err := br.Discard(n)
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// TrimEOL removes a trailing "\n" or "\r\n" from line.
func TrimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
	}
	return line
}

// TrimCRLF removes a trailing "\r\n" from line and reports whether it was there: the strict form
// for protocols that require CRLF.
func TrimCRLF(line []byte) ([]byte, bool) {
	n := len(line)
	if n < 2 || line[n-2] != '\r' || line[n-1] != '\n' {
		return line, false
	}
	return line[:n-2], true
}

// AppendReplyLine appends s and a CRLF, turning any CR or LF in s into a space: a one-line reply
// (an error message, a status) must never end early or smuggle a second line to the client.
func AppendReplyLine(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}

// Completeness says whether a reader's next request is whole in its buffer, so that a server
// can read the request without waiting for the network.
type Completeness uint8

const (
	// Incomplete: the request's framing so far is well-formed and more bytes are needed.
	Incomplete Completeness = iota
	// Complete: reading the next request takes only bytes already buffered.
	Complete
	// Undecided: the reader alone can tell (malformed or empty input, which it answers or skips
	// as it reads it); reading may wait for more bytes.
	Undecided
)

// BufferedLineEnd finds the end of the line at the start of buf: the index of its '\n' and
// Complete; or, with no '\n' yet, Incomplete while the line may still end within maxLineLen,
// else Undecided (the reader answers an overlong line as it reads it).
func BufferedLineEnd(buf []byte, maxLineLen int) (int, Completeness) {
	if eol := bytes.IndexByte(buf, '\n'); eol >= 0 {
		return eol, Complete
	}
	if len(buf) < maxLineLen {
		return -1, Incomplete
	}
	return -1, Undecided
}
