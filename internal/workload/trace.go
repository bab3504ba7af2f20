package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// maxTraceLine bounds one trace line (key plus size); longer lines are reported, not split.
const maxTraceLine = 1 << 20

// ReadTraceFile reads a whole trace file; see ReadTrace for the format.
func ReadTraceFile(path string) ([]Access, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadTrace(f, path)
}

// ReadTrace parses a trace: one "key,size" per line, size a non-negative byte count, the last
// comma separating key from size; blank lines and lines starting with '#' are skipped. Errors
// name the source and the 1-based line number. An empty trace is an error.
func ReadTrace(r io.Reader, name string) ([]Access, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxTraceLine)
	var out []Access
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" || strings.HasPrefix(text, "#") {
			continue
		}
		comma := strings.LastIndexByte(text, ',')
		if comma < 0 {
			return nil, fmt.Errorf("%s:%d: want \"key,size\", found no comma", name, line)
		}
		key, sizeText := text[:comma], strings.TrimSpace(text[comma+1:])
		if key == "" {
			return nil, fmt.Errorf("%s:%d: empty key", name, line)
		}
		size, err := strconv.ParseInt(sizeText, 10, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("%s:%d: size %q is not a non-negative integer byte count", name, line, sizeText)
		}
		out = append(out, Access{Key: key, Size: size})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, line+1, maxTraceLine)
		}
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: trace has no accesses", name)
	}
	return out, nil
}
