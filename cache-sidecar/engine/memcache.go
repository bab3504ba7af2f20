package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The subset of the memcached text protocol the manager needs: stats, cache_memlimit,
// slabs reassign, lru_crawler metadump and meta delete.

// memcacheError is an ERROR, CLIENT_ERROR or SERVER_ERROR reply.
type memcacheError struct{ line string }

func (e *memcacheError) Error() string { return "memcached: " + e.line }

// errCrawlerBusy is metadump's answer while the LRU crawler is already crawling.
var errCrawlerBusy = errors.New("memcached: lru crawler busy")

// replyError turns an error line into a *memcacheError, or returns nil for any other line.
func replyError(line []byte) error {
	if bytes.Equal(line, []byte("ERROR")) || bytes.HasPrefix(line, []byte("ERROR ")) ||
		bytes.HasPrefix(line, []byte("CLIENT_ERROR")) || bytes.HasPrefix(line, []byte("SERVER_ERROR")) {
		return &memcacheError{line: string(line)}
	}
	return nil
}

type memcacheClient struct{ *engineConn }

func dialMemcache(ctx context.Context, socket string) (memcacheClient, error) {
	c, err := dialEngine(ctx, socket)
	return memcacheClient{c}, err
}

// command sends one command line and returns the first reply line, or the error it carries.
func (c memcacheClient) command(line string) (string, error) {
	if _, err := c.w.WriteString(line + "\r\n"); err != nil {
		return "", err
	}
	if err := c.w.Flush(); err != nil {
		return "", err
	}
	reply, err := readLine(c.r)
	if err != nil {
		return "", fmt.Errorf("%s: %w", line, err)
	}
	if err := replyError(reply); err != nil {
		return "", fmt.Errorf("%s: %w", line, err)
	}
	return string(reply), nil
}

// version checks the engine answers and returns its version.
func (c memcacheClient) version() (string, error) {
	reply, err := c.command("version")
	if err != nil {
		return "", err
	}
	v, ok := strings.CutPrefix(reply, "VERSION ")
	if !ok {
		return "", protocolErrorf("version: unexpected reply %q", reply)
	}
	return v, nil
}

// setMemoryLimit runs cache_memlimit with a limit in MiB.
func (c memcacheClient) setMemoryLimit(mib int64) error {
	cmd := "cache_memlimit " + strconv.FormatInt(mib, 10)
	reply, err := c.command(cmd)
	if err != nil {
		return err
	}
	if reply != "OK" {
		return protocolErrorf("%s: unexpected reply %q", cmd, reply)
	}
	return nil
}

// stats runs "stats" or "stats <group>" and returns its fields.
func (c memcacheClient) stats(group string) (map[string]string, error) {
	cmd := strings.TrimSpace("stats " + group)
	if _, err := c.w.WriteString(cmd + "\r\n"); err != nil {
		return nil, err
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	fields := make(map[string]string)
	for {
		line, err := readLine(c.r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		if string(line) == "END" {
			return fields, nil
		}
		if err := replyError(line); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		name, value, err := parseStatLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		fields[name] = value
	}
}

// parseStatLine parses "STAT <name> <value>"; values may contain spaces.
func parseStatLine(line []byte) (name, value string, err error) {
	rest, ok := bytes.CutPrefix(line, []byte("STAT "))
	if !ok {
		return "", "", protocolErrorf("expected a STAT line, got %q", truncate(line))
	}
	n, v, ok := bytes.Cut(rest, []byte(" "))
	if !ok || len(n) == 0 {
		return "", "", protocolErrorf("STAT line without a value: %q", truncate(line))
	}
	return string(n), string(v), nil
}

// Results of "slabs reassign".
const (
	reassignOK      = "OK"
	reassignBusy    = "BUSY"
	reassignNoSpare = "NOSPARE"
)

// slabsReassign asks memcached to move one page of class src to class dst (0 is the global
// page pool) and returns the reply's first word.
func (c memcacheClient) slabsReassign(src, dst int) (string, error) {
	reply, err := c.command(fmt.Sprintf("slabs reassign %d %d", src, dst))
	if err != nil {
		return "", err
	}
	word, _, _ := strings.Cut(reply, " ")
	switch word {
	case reassignOK, reassignBusy, reassignNoSpare, "BADCLASS", "SAME":
		return word, nil
	}
	return "", protocolErrorf("slabs reassign: unexpected reply %q", reply)
}

// metadumpItem is one line of "lru_crawler metadump".
type metadumpItem struct {
	key        []byte // decoded
	lastAccess int64  // unix seconds
	fetched    bool   // read at least once since it was stored
	class      int
	size       int64 // the item's total size, as counted by the "bytes" stat
}

// metadump streams "lru_crawler metadump all" to visit. It needs a connection of its own:
// memcached refuses to run it behind pipelined commands and the connection is not reused.
func (c memcacheClient) metadump(visit func(metadumpItem) error) error {
	if _, err := c.w.WriteString("lru_crawler metadump all\r\n"); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	for first := true; ; first = false {
		line, err := readLine(c.r)
		if err != nil {
			return fmt.Errorf("lru_crawler metadump: %w", err)
		}
		switch {
		case string(line) == "END":
			return nil
		case first && bytes.HasPrefix(line, []byte("BUSY")):
			return errCrawlerBusy
		}
		if err := replyError(line); err != nil {
			return fmt.Errorf("lru_crawler metadump: %w", err)
		}
		item, err := parseMetadumpLine(line)
		if err != nil {
			return err
		}
		if err := visit(item); err != nil {
			return err
		}
	}
}

// parseMetadumpLine parses
// "key=<uri-encoded> exp=<unix|-1> la=<unix> cas=<n> fetch=<yes|no> cls=<n> size=<n>";
// fields other than key, la, fetch, cls and size are ignored, so later memcached versions that
// add fields still parse.
func parseMetadumpLine(line []byte) (metadumpItem, error) {
	var item metadumpItem
	var seen [5]bool
	for field := range bytes.SplitSeq(line, []byte(" ")) {
		name, value, ok := bytes.Cut(field, []byte("="))
		if !ok {
			return item, protocolErrorf("metadump field %q is not name=value in %q", truncate(field), truncate(line))
		}
		var err error
		switch string(name) {
		case "key":
			item.key, err = AppendDecodedKey(make([]byte, 0, len(value)), value)
			seen[0] = true
		case "la":
			item.lastAccess, err = parseNonNegative(value)
			seen[1] = true
		case "fetch":
			switch string(value) {
			case "yes":
				item.fetched = true
			case "no":
			default:
				err = protocolErrorf("fetch=%q is neither yes nor no", truncate(value))
			}
			seen[2] = true
		case "cls":
			var cls int64
			cls, err = parseNonNegative(value)
			item.class = int(min(cls, 1<<16))
			seen[3] = true
		case "size":
			item.size, err = parseNonNegative(value)
			seen[4] = true
		}
		if err != nil {
			return item, fmt.Errorf("metadump line %q: %w", truncate(line), err)
		}
	}
	for i, name := range []string{"key", "la", "fetch", "cls", "size"} {
		if !seen[i] || (i == 0 && len(item.key) == 0) {
			return item, protocolErrorf("metadump line %q has no %s", truncate(line), name)
		}
	}
	return item, nil
}

func parseNonNegative(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return 0, protocolErrorf("%q is not a non-negative integer", truncate(b))
	}
	return n, nil
}

// AppendDecodedKey appends to key the key enc encodes in memcached's URI encoding of keys
// (metadump, the watch log), which writes every byte outside [A-Za-z0-9-._~] as %XX.
func AppendDecodedKey(key, enc []byte) ([]byte, error) {
	for i := 0; i < len(enc); i++ {
		if enc[i] != '%' {
			key = append(key, enc[i])
			continue
		}
		if i+2 >= len(enc) {
			return nil, protocolErrorf("truncated %%-escape in key %q", truncate(enc))
		}
		hi, ok1 := unhex(enc[i+1])
		lo, ok2 := unhex(enc[i+2])
		if !ok1 || !ok2 {
			return nil, protocolErrorf("bad %%-escape in key %q", truncate(enc))
		}
		key = append(key, hi<<4|lo)
		i += 2
	}
	return key, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// maxTextKeyLength is memcached's key length limit, which meta commands check on the key token
// before decoding a base64 key.
const maxTextKeyLength = 250

// metaDeleteLine returns the "md" command for a key: the key itself when it is a valid text
// protocol key, else its base64 form with the b flag (keys stored through the binary protocol
// or as base64 meta keys may hold any byte). ok is false when neither form fits memcached's key
// length limit.
func metaDeleteLine(key []byte) (line string, ok bool) {
	if textKey(key) {
		return "md " + string(key) + "\r\n", true
	}
	enc := base64.StdEncoding.EncodeToString(key)
	if len(enc) > maxTextKeyLength {
		return "", false
	}
	return "md " + enc + " b\r\n", true
}

func textKey(key []byte) bool {
	if len(key) == 0 || len(key) > maxTextKeyLength {
		return false
	}
	for _, c := range key {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// deleteResult counts what a batch of meta deletes did.
type deleteResult struct {
	deleted, missing, refused int
}

// metaDelete deletes keys with pipelined "md" commands and reads one reply per command.
func (c memcacheClient) metaDelete(lines []string) (deleteResult, error) {
	var res deleteResult
	for _, line := range lines {
		if _, err := c.w.WriteString(line); err != nil {
			return res, err
		}
	}
	if err := c.w.Flush(); err != nil {
		return res, err
	}
	for range lines {
		reply, err := readLine(c.r)
		if err != nil {
			return res, fmt.Errorf("md: %w", err)
		}
		switch {
		case string(reply) == "HD":
			res.deleted++
		case string(reply) == "NF":
			res.missing++
		case bytes.HasPrefix(reply, []byte("CLIENT_ERROR")):
			// A key memcached cannot address this way; the page mover evicts it if needed.
			res.refused++
		default:
			return res, protocolErrorf("md: unexpected reply %q", truncate(reply))
		}
	}
	return res, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
