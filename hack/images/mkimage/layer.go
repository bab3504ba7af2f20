package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// epoch stamps every file and the image config: fixed, so equal inputs give equal bytes.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindSymlink
)

// entry is one path of the layer. Paths are clean, relative to the image root ("usr/bin/x").
type entry struct {
	kind entryKind
	mode fs.FileMode // permission, sticky, setuid and setgid bits
	src  string      // kindFile: host file to copy (symlinks followed)
	link string      // kindSymlink: target
	// implicit marks a directory created only because something lives below it; an explicit
	// directory (from -rootfs or -dir) overrides its mode.
	implicit bool
	origin   string // where the entry came from, for conflict messages
}

// fileSource is one -add: a host file and its path in the image.
type fileSource struct{ Src, Dst string }

// dirSpec is one -dir: a directory to create with a mode.
type dirSpec struct {
	Path string
	Mode fs.FileMode
}

// parseDir reads PATH[:OCTAL_MODE]; the mode defaults to 0755 and may carry the sticky,
// setgid and setuid bits (1777 for a shared scratch directory).
func parseDir(value string) (dirSpec, error) {
	p, modeText, found := strings.Cut(value, ":")
	if p == "" {
		return dirSpec{}, fmt.Errorf("-dir %q: empty path", value)
	}
	d := dirSpec{Path: p, Mode: 0o755}
	if found {
		bits, err := strconv.ParseUint(modeText, 8, 32)
		if err != nil || bits > 0o7777 {
			return dirSpec{}, fmt.Errorf("-dir %q: mode %q is not an octal mode up to 7777", value, modeText)
		}
		d.Mode = modeFromUnix(uint32(bits))
	}
	return d, nil
}

func modeFromUnix(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	return m
}

func unixFromMode(m fs.FileMode) int64 {
	bits := int64(m.Perm())
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	return bits
}

// imagePath turns an absolute or relative image path into the layer's key; the root itself
// and paths escaping it are errors.
func imagePath(p string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		return "", fmt.Errorf("path %q names the image root", p)
	}
	return clean, nil
}

// layer is the set of entries of the image's single layer.
type layer struct{ entries map[string]*entry }

func newLayer() *layer { return &layer{entries: map[string]*entry{}} }

// put records e at p; the same path twice is fine only when both agree.
func (l *layer) put(p string, e *entry) error {
	old, ok := l.entries[p]
	if !ok {
		l.entries[p] = e
		return nil
	}
	switch {
	case old.kind == kindDir && e.kind == kindDir:
		if old.implicit || (!e.implicit && old.mode == e.mode) {
			l.entries[p] = e
		} else if !e.implicit {
			return fmt.Errorf("/%s: directory mode %v from %s conflicts with %v from %s", p, e.mode, e.origin, old.mode, old.origin)
		}
		return nil
	case old.kind == kindFile && e.kind == kindFile && sameFile(old.src, e.src):
		return nil
	case old.kind == kindSymlink && e.kind == kindSymlink && old.link == e.link:
		return nil
	}
	return fmt.Errorf("/%s: %s conflicts with %s", p, e.origin, old.origin)
}

// sameFile reports whether two host paths lead to the same file, as the libraries several
// executables share do.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

// addTree adds every directory, regular file and symlink under root at the same relative path.
func (l *layer) addTree(root string) error {
	info, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("-rootfs: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("-rootfs %s: not a directory", root)
	}
	return filepath.WalkDir(root, func(hostPath string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, hostPath)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		p := filepath.ToSlash(rel)
		origin := "-rootfs " + hostPath
		switch {
		case d.IsDir():
			return l.put(p, &entry{kind: kindDir, mode: info.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid), origin: origin})
		case info.Mode().IsRegular():
			return l.put(p, &entry{kind: kindFile, mode: fileMode(info), src: hostPath, origin: origin})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(hostPath)
			if err != nil {
				return err
			}
			return l.put(p, &entry{kind: kindSymlink, mode: 0o777, link: target, origin: origin})
		default:
			return fmt.Errorf("%s: unsupported file type %v (only directories, regular files and symlinks)", hostPath, info.Mode().Type())
		}
	})
}

func fileMode(info fs.FileInfo) fs.FileMode {
	return info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid)
}

// addFile copies the host file src (symlinks followed) to dst.
func (l *layer) addFile(src, dst, origin string) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("%s: %w", origin, err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s: %s is not a regular file", origin, src)
	}
	p, err := imagePath(dst)
	if err != nil {
		return fmt.Errorf("%s: %w", origin, err)
	}
	return l.put(p, &entry{kind: kindFile, mode: fileMode(info), src: src, origin: origin})
}

func (l *layer) addDir(d dirSpec) error {
	p, err := imagePath(d.Path)
	if err != nil {
		return fmt.Errorf("-dir: %w", err)
	}
	return l.put(p, &entry{kind: kindDir, mode: d.Mode, origin: "-dir " + d.Path})
}

// addParents creates the missing parent directories of every entry, so the tar never relies on
// the importer to invent them with arbitrary modes.
func (l *layer) addParents() error {
	for _, p := range l.sortedPaths() {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if e, ok := l.entries[dir]; ok {
				if e.kind != kindDir {
					return fmt.Errorf("/%s from %s needs /%s to be a directory, but %s makes it a file or symlink", p, l.entries[p].origin, dir, e.origin)
				}
				continue
			}
			l.entries[dir] = &entry{kind: kindDir, mode: 0o755, implicit: true, origin: "parent of /" + p}
		}
	}
	return nil
}

func (l *layer) sortedPaths() []string {
	paths := make([]string, 0, len(l.entries))
	for p := range l.entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// writeTo writes the layer as an uncompressed tar and returns its sha256 (the diff ID).
func (l *layer) writeTo(w io.Writer) (string, error) {
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	for _, p := range l.sortedPaths() {
		if err := writeEntry(tw, p, l.entries[p]); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeEntry(tw *tar.Writer, p string, e *entry) error {
	hdr := &tar.Header{Name: p, Mode: unixFromMode(e.mode), ModTime: epoch}
	switch e.kind {
	case kindDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
		return tw.WriteHeader(hdr)
	case kindSymlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.link
		return tw.WriteHeader(hdr)
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != info.Size() {
		err = errors.New("file changed size while being copied")
	}
	if err != nil {
		return fmt.Errorf("copying %s to /%s: %w", e.src, p, err)
	}
	return nil
}
