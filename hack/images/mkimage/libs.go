package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// interpreter returns the program interpreter (dynamic loader) an ELF executable names, or ""
// for a statically linked or non-ELF file, which needs no libraries.
func interpreter(file string) (string, error) {
	raw, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	magic := make([]byte, len(elf.ELFMAG))
	if _, err := io.ReadFull(raw, magic); err != nil || string(magic) != elf.ELFMAG {
		return "", nil // shorter than an ELF header, or a script: nothing to load
	}
	f, err := elf.NewFile(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		buf := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(buf, 0); err != nil {
			return "", fmt.Errorf("%s: reading the program interpreter: %w", file, err)
		}
		return string(bytes.TrimRight(buf, "\x00")), nil
	}
	return "", nil
}

// sharedLibraries lists the host paths of everything the dynamically linked executable file
// loads: its program interpreter and the libraries ldd resolves. A library ldd cannot find is
// an error, never a silently broken image.
func sharedLibraries(file string) ([]string, error) {
	interp, err := interpreter(file)
	if err != nil || interp == "" {
		return nil, err
	}
	out, err := exec.Command("ldd", file).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil, fmt.Errorf("ldd %s: %w: %s", file, err, bytes.TrimSpace(exitErr.Stderr))
		}
		return nil, fmt.Errorf("ldd %s: %w", file, err)
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", file, err)
	}
	for _, lib := range libs {
		if lib == interp {
			return libs, nil
		}
	}
	return append(libs, interp), nil
}

// parseLdd reads ldd's output: "name => /path (0x...)" for a resolved library, "/path (0x...)"
// for the loader, "name (0x...)" for the kernel's vDSO (no file, skipped), and
// "name => not found" for a missing library (an error).
func parseLdd(out string) ([]string, error) {
	var libs []string
	var missing []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" {
			continue
		}
		name, resolved, arrow := strings.Cut(line, "=>")
		target := strings.TrimSpace(name)
		if arrow {
			target = strings.TrimSpace(resolved)
			if target == "not found" {
				missing = append(missing, strings.TrimSpace(name))
				continue
			}
		}
		// Strip the load address "(0x...)".
		if i := strings.LastIndex(target, "(0x"); i >= 0 && strings.HasSuffix(target, ")") {
			target = strings.TrimSpace(target[:i])
		}
		switch {
		case strings.HasPrefix(target, "/"):
			libs = append(libs, target)
		case arrow && target != "":
			return nil, fmt.Errorf("unexpected line %q: resolved path is not absolute", line)
		case arrow:
			// "name => (0x...)": a library the loader provides itself, like the vDSO.
		case strings.Contains(target, " ") || target == "":
			return nil, fmt.Errorf("unexpected line %q", line)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("libraries not found: %s", strings.Join(missing, ", "))
	}
	return libs, nil
}
