// Command mkimage builds a container image as a `docker save`-format tar from a root filesystem
// directory and/or single host files, with no registry and no Docker engine; containerd imports
// the result with `ctr -n k8s.io images import` (see hack/images/import.sh). -format oci writes
// the same image as an OCI image layout in a tar instead (hack/release.sh).
//
//	mkimage -tag localhost/cacheqos/redis:local -o redis.tar \
//	    -add /usr/bin/redis-server -libs -dir /data:1777 -workdir /data -user 65534:65534 \
//	    -entrypoint '["/usr/bin/redis-server"]' -cmd '["--port","6379"]'
//
// -add SRC[:DST] copies a host file (symlinks followed) to DST, default the same path. -libs adds
// every shared library the added dynamically linked executables load, as `ldd` resolves them
// on this host, at the same paths, plus their program interpreter. The image has one layer
// whose bytes depend only on the inputs (sorted entries, owned by root, fixed times), so
// rebuilding unchanged inputs gives the same image ID.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// listFlag collects a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// run builds the image args describe and prints "TAG IMAGE_ID OUTPUT" to stdout.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	var (
		spec                  imageSpec
		adds, dirs, env, port listFlag
		labels                listFlag
		entrypoint, cmd       string
	)
	fs.StringVar(&spec.Tag, "tag", "", "image reference, e.g. localhost/cacheqos/smoke:local (required)")
	fs.StringVar(&spec.Output, "o", "", "output tar (required)")
	fs.StringVar(&spec.Format, "format", formatDocker, "archive format: docker (`docker save`'s, for ctr import) or oci (an OCI image layout, for release)")
	fs.StringVar(&spec.RootFS, "rootfs", "", "directory whose tree becomes the image's root filesystem")
	fs.Var(&adds, "add", "SRC[:DST]: copy a host file into the image (repeatable)")
	fs.BoolVar(&spec.WithLibs, "libs", false, "also add the shared libraries of every -add executable")
	fs.Var(&dirs, "dir", "PATH[:OCTAL_MODE]: create a directory, e.g. /data:1777 (repeatable)")
	fs.StringVar(&entrypoint, "entrypoint", "", `entrypoint as a JSON array, e.g. '["/smoke"]'`)
	fs.StringVar(&cmd, "cmd", "", "default arguments as a JSON array")
	fs.Var(&env, "env", "NAME=VALUE (repeatable; PATH has a default)")
	fs.StringVar(&spec.User, "user", "", "UID[:GID] the container runs as")
	fs.StringVar(&spec.WorkDir, "workdir", "/", "working directory")
	fs.Var(&port, "expose", "PORT/PROTO, e.g. 6379/tcp (repeatable)")
	fs.Var(&labels, "label", "KEY=VALUE (repeatable)")
	fs.StringVar(&spec.Arch, "arch", runtime.GOARCH, "architecture recorded in the image config")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if spec.Entrypoint, err = parseJSONArgs("entrypoint", entrypoint); err != nil {
		return err
	}
	if spec.Cmd, err = parseJSONArgs("cmd", cmd); err != nil {
		return err
	}
	for _, a := range adds {
		spec.Files = append(spec.Files, parseAdd(a))
	}
	for _, d := range dirs {
		dir, err := parseDir(d)
		if err != nil {
			return err
		}
		spec.Dirs = append(spec.Dirs, dir)
	}
	spec.Env = env
	spec.ExposedPorts = port
	if spec.Labels, err = parseLabels(labels); err != nil {
		return err
	}
	id, err := build(spec)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s %s %s\n", spec.Tag, id, spec.Output)
	return err
}

// parseJSONArgs reads an entrypoint or cmd given as a JSON array of strings; empty means unset.
func parseJSONArgs(name, value string) ([]string, error) {
	if value == "" {
		return nil, nil
	}
	var args []string
	if err := json.Unmarshal([]byte(value), &args); err != nil {
		return nil, fmt.Errorf("-%s %q: want a JSON array of strings: %w", name, value, err)
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("-%s %q: the array is empty", name, value)
	}
	return args, nil
}

// parseAdd splits SRC[:DST]; DST defaults to SRC, so a host file keeps its path.
func parseAdd(value string) fileSource {
	src, dst, found := strings.Cut(value, ":")
	if !found {
		dst = src
	}
	return fileSource{Src: src, Dst: dst}
}

func parseLabels(values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	labels := make(map[string]string, len(values))
	for _, v := range values {
		key, value, found := strings.Cut(v, "=")
		if !found || key == "" {
			return nil, fmt.Errorf("-label %q: want KEY=VALUE", v)
		}
		labels[key] = value
	}
	return labels, nil
}
