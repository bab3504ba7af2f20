package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// memcachedSaveBatch is how many items one pipelined round of mg (saving) or ms (loading)
// carries.
const memcachedSaveBatch = 256

// maxRelativeTTL is the longest TTL memcached takes as relative: a larger one is a unix time.
const maxRelativeTTL = 30 * 24 * 60 * 60

// save writes every live item of the engine (key, value, client flags and expiry) into
// paths.savedItems: lru_crawler metadump lists the keys, and pipelined mg commands on a second
// connection read each one's value, flags and remaining TTL; an item gone in between (expired,
// evicted) is left out. The file appears whole (written aside, synced, renamed) or not at all.
// memcached keeps running: the caller stops it.
func (memcachedDriver) save(ctx context.Context, paths partitionPaths) error {
	lister, err := dialMemcache(ctx, paths.socket)
	if err != nil {
		return err
	}
	defer lister.Close()
	reader, err := dialMemcache(ctx, paths.socket)
	if err != nil {
		return err
	}
	defer reader.Close()
	tmp := paths.savedItems + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after the rename, there is nothing to remove
	err = writeMemcachedItems(f, lister, reader)
	if syncErr := f.Sync(); err == nil {
		err = syncErr
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, paths.savedItems)
}

func (memcachedDriver) exitsAfterSave() bool { return false }

// maxDumpPasses bounds the crawls of one save. A crawl can miss an item that memcached's LRU
// maintainer moves between LRU segments while the crawler walks them (one of 5,000 keys, seen
// once in a test), so the save crawls again while it has listed fewer keys than the engine
// counts; expired items the engine has not reclaimed yet count too, hence a bound.
const maxDumpPasses = 3

func writeMemcachedItems(f io.Writer, lister, reader memcacheClient) error {
	out, err := newItemsDumpWriter(f)
	if err != nil {
		return err
	}
	batch := make([][]byte, 0, memcachedSaveBatch)
	flush := func() error {
		err := reader.metaGet(batch, out.write)
		batch = batch[:0]
		return err
	}
	listed := map[string]bool{}
	list := func(item metadumpItem) error {
		if listed[string(item.key)] {
			return nil
		}
		listed[string(item.key)] = true
		if batch = append(batch, item.key); len(batch) == cap(batch) {
			return flush()
		}
		return nil
	}
	for range maxDumpPasses {
		err := lister.metadump(list)
		for errors.Is(err, errCrawlerBusy) {
			// The crawler is busy with a crawl of its own (memcached's or a shrink's): wait it out.
			time.Sleep(pollEvery)
			err = lister.metadump(list)
		}
		if err == nil {
			err = flush()
		}
		if err != nil {
			return err
		}
		st, err := lister.stats("")
		if err != nil {
			return err
		}
		if held, err := strconv.ParseInt(st["curr_items"], 10, 64); err != nil || held <= int64(len(listed)) {
			break
		}
	}
	return out.finish()
}

// metaKey is a key as meta commands take it: itself, or base64 with the b flag for a key that
// is not a valid text key (stored through the binary protocol or as a base64 meta key).
func metaKey(key []byte) (token, flag string) {
	if textKey(key) {
		return string(key), ""
	}
	return base64.StdEncoding.EncodeToString(key), " b"
}

// metaGet reads keys' values, client flags and remaining TTLs with pipelined mg commands and
// passes each item still there to keep, with its expiry as a unix time.
func (c memcacheClient) metaGet(keys [][]byte, keep func(savedItem) error) error {
	if len(keys) == 0 {
		return nil
	}
	for _, key := range keys {
		token, flag := metaKey(key)
		if _, err := c.w.WriteString("mg " + token + flag + " v f t\r\n"); err != nil {
			return err
		}
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	now := time.Now().Unix()
	var value []byte
	for _, key := range keys {
		line, err := readLine(c.r)
		if err != nil {
			return fmt.Errorf("mg: %w", err)
		}
		if string(line) == "EN" {
			continue
		}
		size, flags, ttl, err := parseMetaValueLine(line)
		if err != nil {
			return err
		}
		if cap(value) < size+2 {
			value = make([]byte, size+2)
		}
		value = value[:size+2]
		if _, err := io.ReadFull(c.r, value); err != nil {
			return fmt.Errorf("mg value: %w", err)
		}
		if !bytes.HasSuffix(value, []byte("\r\n")) {
			return protocolErrorf("mg: value of %d bytes not followed by CRLF", size)
		}
		it := savedItem{key: key, flags: flags, value: value[:size]}
		switch {
		case ttl < 0:
		case ttl == 0: // expires within the second
			continue
		default:
			it.expiry = now + ttl
		}
		if err := keep(it); err != nil {
			return err
		}
	}
	return nil
}

// parseMetaValueLine parses "VA <size> f<flags> t<ttl>" (the return flags in any order).
func parseMetaValueLine(line []byte) (size int, flags uint32, ttl int64, err error) {
	fields := bytes.Fields(line)
	if len(fields) < 2 || string(fields[0]) != "VA" {
		if err := replyError(line); err != nil {
			return 0, 0, 0, fmt.Errorf("mg: %w", err)
		}
		return 0, 0, 0, protocolErrorf("mg: unexpected reply %q", truncate(line))
	}
	n, err := strconv.ParseUint(string(fields[1]), 10, 31)
	if err != nil || n > maxSavedValueBytes {
		return 0, 0, 0, protocolErrorf("mg: bad value size in %q", truncate(line))
	}
	var seenFlags, seenTTL bool
	for _, f := range fields[2:] {
		switch f[0] {
		case 'f':
			v, perr := strconv.ParseUint(string(f[1:]), 10, 32)
			flags, seenFlags, err = uint32(v), true, perr
		case 't':
			ttl, err = strconv.ParseInt(string(f[1:]), 10, 64)
			seenTTL = true
		}
		if err != nil {
			return 0, 0, 0, protocolErrorf("mg: bad return flag %q in %q", truncate(f), truncate(line))
		}
	}
	if !seenFlags || !seenTTL {
		return 0, 0, 0, protocolErrorf("mg: %q lacks the f or t return flag", truncate(line))
	}
	return int(n), flags, ttl, nil
}

// itemsLoad is what loading saved items did.
type itemsLoad struct {
	stored, expired, refused int
	bytes                    int64 // key and value bytes stored
}

// load stores the items saved in path into the engine, leaving out those expired since, with
// pipelined quiet ms commands. The file is read through once to check it is complete and
// intact before anything is stored; an error then leaves the engine as it was. An error while
// storing (the engine failing) flushes what was stored, so the partition is either loaded or
// empty.
func (memcachedDriver) load(ctx context.Context, socket, path string) (itemsLoad, error) {
	f, err := os.Open(path)
	if err != nil {
		return itemsLoad{}, err
	}
	defer f.Close()
	if _, err := readItemsDump(f, func(savedItem) error { return ctx.Err() }); err != nil {
		return itemsLoad{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return itemsLoad{}, err
	}
	c, err := dialMemcache(ctx, socket)
	if err != nil {
		return itemsLoad{}, err
	}
	defer c.Close()
	var res itemsLoad
	pending := 0
	now := time.Now().Unix()
	_, err = readItemsDump(f, func(it savedItem) error {
		ttl := int64(0)
		if it.expiry != 0 {
			if ttl = it.expiry - now; ttl <= 0 {
				res.expired++
				return nil
			}
			if ttl > maxRelativeTTL {
				ttl = it.expiry
			}
		}
		token, flag := metaKey(it.key)
		// bufio keeps the first write error, which the batch's Flush returns.
		_, _ = fmt.Fprintf(c.w, "ms %s %d%s F%d T%d q\r\n", token, len(it.value), flag, it.flags, ttl)
		_, _ = c.w.Write(it.value)
		_, _ = c.w.WriteString("\r\n")
		res.stored++
		res.bytes += int64(len(it.key) + len(it.value))
		if pending++; pending == memcachedSaveBatch {
			pending = 0
			return c.quietRoundTrip(&res)
		}
		return nil
	})
	if err == nil {
		err = c.quietRoundTrip(&res)
	}
	if err != nil {
		if _, flushErr := c.command("flush_all"); flushErr != nil {
			err = errors.Join(err, fmt.Errorf("flushing the items stored before the failure: %w", flushErr))
		}
		return itemsLoad{}, err
	}
	return res, nil
}

// quietRoundTrip ends a batch of quiet commands with mn and reads up to its MN: every line
// before it is an item the engine refused (too large for its memory, say).
func (c memcacheClient) quietRoundTrip(res *itemsLoad) error {
	if _, err := c.w.WriteString("mn\r\n"); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	for {
		line, err := readLine(c.r)
		if err != nil {
			return fmt.Errorf("ms: %w", err)
		}
		if string(line) == "MN" {
			return nil
		}
		if replyError(line) == nil && string(line) != "NS" {
			return protocolErrorf("ms: unexpected reply %q", truncate(line))
		}
		res.refused++
		res.stored--
	}
}
