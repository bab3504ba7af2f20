package engine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// The file a memcached partition's items are saved to on Shutdown and loaded from at its next
// start (memcached has no snapshot of its own that leaves the cache resizable):
//
//	magic    "cacheqos-memcached-items 1\n"
//	item     'I' uvarint(len key) key uint32(flags) int64(expiry) uvarint(len value) value
//	         ... one per item
//	end      'E' uint64(items) uint32(CRC-32C of every byte before it)
//
// Integers are big-endian; expiry is in unix seconds, 0 for an item that never expires. The
// end record makes a truncated file and the checksum a corrupted one fail before anything is
// loaded.
const itemsDumpMagic = "cacheqos-memcached-items 1\n"

// Record markers.
const (
	itemsDumpItem = 'I'
	itemsDumpEnd  = 'E'
)

// maxSavedValueBytes is memcached's largest item size (item_size_max at most 1 GiB).
const maxSavedValueBytes = 1 << 30

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// savedItem is one memcached item as saved.
type savedItem struct {
	key   []byte
	flags uint32
	// expiry is when the item expires, in unix seconds; 0: never.
	expiry int64
	value  []byte
}

// itemsDumpWriter writes the file, item by item.
type itemsDumpWriter struct {
	out   io.Writer
	w     *bufio.Writer // writes to out and crc
	crc   hash.Hash32
	items uint64
	bytes int64 // key and value bytes written
}

func newItemsDumpWriter(w io.Writer) (*itemsDumpWriter, error) {
	d := &itemsDumpWriter{out: w, crc: crc32.New(crc32c)}
	d.w = bufio.NewWriterSize(io.MultiWriter(w, d.crc), 256<<10)
	_, err := d.w.WriteString(itemsDumpMagic)
	return d, err
}

func (d *itemsDumpWriter) write(it savedItem) error {
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = itemsDumpItem
	n := 1 + binary.PutUvarint(head[1:], uint64(len(it.key)))
	var fixed [12 + binary.MaxVarintLen64]byte
	binary.BigEndian.PutUint32(fixed[0:], it.flags)
	binary.BigEndian.PutUint64(fixed[4:], uint64(it.expiry))
	m := 12 + binary.PutUvarint(fixed[12:], uint64(len(it.value)))
	for _, b := range [][]byte{head[:n], it.key, fixed[:m], it.value} {
		if _, err := d.w.Write(b); err != nil {
			return err
		}
	}
	d.items++
	d.bytes += int64(len(it.key) + len(it.value))
	return nil
}

// finish writes the end record and flushes.
func (d *itemsDumpWriter) finish() error {
	var end [9]byte
	end[0] = itemsDumpEnd
	binary.BigEndian.PutUint64(end[1:], d.items)
	if _, err := d.w.Write(end[:]); err != nil {
		return err
	}
	if err := d.w.Flush(); err != nil {
		return err
	}
	return binary.Write(d.out, binary.BigEndian, d.crc.Sum32())
}

// errItemsDump marks a file that is not a complete, intact items dump.
var errItemsDump = errors.New("not a complete memcached items dump")

func itemsDumpErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errItemsDump, fmt.Sprintf(format, args...))
}

// hashingReader checksums what is read through it.
type hashingReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (h *hashingReader) ReadByte() (byte, error) {
	b, err := h.r.ReadByte()
	if err == nil {
		h.crc.Write([]byte{b})
	}
	return b, err
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.crc.Write(p[:n])
	return n, err
}

// readItemsDump reads a file written by itemsDumpWriter and calls visit for each item, in
// order; the item's slices are reused after visit returns. It fails on anything that is not a
// complete, intact file (a truncated one included) with an error wrapping errItemsDump, after
// visiting the items before the fault: check a file with a visit that does nothing before
// acting on its items. Memory use is bounded by the largest value actually present.
func readItemsDump(r io.Reader, visit func(savedItem) error) (items uint64, err error) {
	h := &hashingReader{r: bufio.NewReaderSize(r, 256<<10), crc: crc32.New(crc32c)}
	magic := make([]byte, len(itemsDumpMagic))
	if _, err := io.ReadFull(h, magic); err != nil || string(magic) != itemsDumpMagic {
		return 0, itemsDumpErrorf("the file does not start with %q", itemsDumpMagic)
	}
	var key [maxTextKeyLength]byte
	var value bytes.Buffer
	for {
		marker, err := h.ReadByte()
		if err != nil {
			return items, itemsDumpErrorf("truncated after %d items (no end record)", items)
		}
		switch marker {
		case itemsDumpItem:
		case itemsDumpEnd:
			return items, readItemsDumpEnd(h, items)
		default:
			return items, itemsDumpErrorf("record %d starts with %#x, neither an item nor the end", items+1, marker)
		}
		it, err := readSavedItem(h, key[:], &value)
		if err != nil {
			return items, fmt.Errorf("item %d: %w", items+1, err)
		}
		if err := visit(it); err != nil {
			return items, err
		}
		items++
	}
}

func readSavedItem(h *hashingReader, keyBuf []byte, value *bytes.Buffer) (savedItem, error) {
	var it savedItem
	keyLen, err := binary.ReadUvarint(h)
	if err != nil {
		return it, itemsDumpErrorf("truncated key length")
	}
	if keyLen == 0 || keyLen > uint64(len(keyBuf)) {
		return it, itemsDumpErrorf("key length %d is outside 1..%d", keyLen, len(keyBuf))
	}
	it.key = keyBuf[:keyLen]
	var fixed [12]byte
	if _, err := io.ReadFull(h, it.key); err != nil {
		return it, itemsDumpErrorf("truncated key")
	}
	if _, err := io.ReadFull(h, fixed[:]); err != nil {
		return it, itemsDumpErrorf("truncated flags or expiry")
	}
	it.flags = binary.BigEndian.Uint32(fixed[0:])
	it.expiry = int64(binary.BigEndian.Uint64(fixed[4:]))
	if it.expiry < 0 {
		return it, itemsDumpErrorf("negative expiry %d", it.expiry)
	}
	valueLen, err := binary.ReadUvarint(h)
	if err != nil {
		return it, itemsDumpErrorf("truncated value length")
	}
	if valueLen > maxSavedValueBytes {
		return it, itemsDumpErrorf("value length %d is above memcached's largest item %d", valueLen, maxSavedValueBytes)
	}
	value.Reset()
	// CopyN grows the buffer as bytes arrive, so a length the file does not back allocates
	// nothing like it.
	if _, err := io.CopyN(value, h, int64(valueLen)); err != nil {
		return it, itemsDumpErrorf("truncated value (%d bytes announced)", valueLen)
	}
	it.value = value.Bytes()
	return it, nil
}

// readItemsDumpEnd checks the end record: the item count, the checksum, and nothing after.
func readItemsDumpEnd(h *hashingReader, items uint64) error {
	var count [8]byte
	if _, err := io.ReadFull(h, count[:]); err != nil {
		return itemsDumpErrorf("truncated end record")
	}
	if n := binary.BigEndian.Uint64(count[:]); n != items {
		return itemsDumpErrorf("the end record counts %d items, the file holds %d", n, items)
	}
	want := h.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(h.r, sum[:]); err != nil {
		return itemsDumpErrorf("truncated checksum")
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return itemsDumpErrorf("checksum %08x, the content sums to %08x", got, want)
	}
	if _, err := h.r.ReadByte(); !errors.Is(err, io.EOF) {
		return itemsDumpErrorf("bytes after the end record")
	}
	return nil
}
