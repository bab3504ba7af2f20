package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readTar returns the regular files and the headers of a tar stream, by name.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[hdr.Name] = hdr
		if hdr.Typeflag == tar.TypeReg {
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[hdr.Name] = body
		}
	}
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// sampleSpec builds a rootfs with a file, an empty directory and a symlink, plus a separate
// host file added with -add.
func sampleSpec(t *testing.T) imageSpec {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	writeFile(t, filepath.Join(root, "etc", "motd"), "hello\n", 0o644)
	if err := os.MkdirAll(filepath.Join(root, "var", "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(dir, "server")
	writeFile(t, server, "#!/bin/true\n", 0o755)
	return imageSpec{
		Tag:        "localhost/cacheqos/sample:v1",
		Output:     filepath.Join(dir, "sample.tar"),
		RootFS:     root,
		Files:      []fileSource{{Src: server, Dst: "/usr/bin/server"}},
		Dirs:       []dirSpec{{Path: "/data", Mode: modeFromUnix(0o1777)}},
		Entrypoint: []string{"/usr/bin/server"},
		Cmd:        []string{"--port", "80"},
		Env:        []string{"MODE=test"},
		User:       "65534:65534",
		WorkDir:    "/data",
		Arch:       "amd64",
	}
}

// buildFiles builds spec and returns the image ID and the archive's regular files.
func buildFiles(t *testing.T, spec imageSpec) (string, map[string][]byte) {
	t.Helper()
	imageID, err := build(spec)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := os.ReadFile(spec.Output)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, bytes.NewReader(archive))
	return imageID, files
}

func TestBuildWritesDockerArchive(t *testing.T) {
	spec := sampleSpec(t)
	imageID, files := buildFiles(t, spec)

	var manifest []manifestEntry
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{spec.Tag}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest = %+v", manifest)
	}
	cfgBytes := files[manifest[0].Config]
	if sum := sha256.Sum256(cfgBytes); hex.EncodeToString(sum[:]) != imageID || manifest[0].Config != imageID+".json" {
		t.Fatalf("config %s does not hash to image ID %s", manifest[0].Config, imageID)
	}
	layerBytes := files[manifest[0].Layers[0]]
	layerSum := sha256.Sum256(layerBytes)

	var cfg imageConfig
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{defaultPath, "MODE=test"}
	switch {
	case !slices.Equal(cfg.RootFS.DiffIDs, []string{"sha256:" + hex.EncodeToString(layerSum[:])}):
		t.Errorf("diff_ids = %v, want the layer's sha256", cfg.RootFS.DiffIDs)
	case cfg.OS != "linux" || cfg.Architecture != "amd64":
		t.Errorf("platform = %s/%s", cfg.OS, cfg.Architecture)
	case !slices.Equal(cfg.Config.Entrypoint, spec.Entrypoint) || !slices.Equal(cfg.Config.Cmd, spec.Cmd):
		t.Errorf("entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	case !slices.Equal(cfg.Config.Env, wantEnv):
		t.Errorf("env = %v, want %v", cfg.Config.Env, wantEnv)
	case cfg.Config.User != "65534:65534" || cfg.Config.WorkingDir != "/data":
		t.Errorf("user %q workdir %q", cfg.Config.User, cfg.Config.WorkingDir)
	}

	layerFiles, headers := readTar(t, bytes.NewReader(layerBytes))
	tests := []struct {
		name     string
		typeflag byte
		mode     int64
		content  string
		link     string
	}{
		{name: "bin", typeflag: tar.TypeSymlink, mode: 0o777, link: "usr/bin"},
		{name: "data/", typeflag: tar.TypeDir, mode: 0o1777},
		{name: "etc/", typeflag: tar.TypeDir, mode: 0o755},
		{name: "etc/motd", typeflag: tar.TypeReg, mode: 0o644, content: "hello\n"},
		{name: "usr/", typeflag: tar.TypeDir, mode: 0o755},
		{name: "usr/bin/", typeflag: tar.TypeDir, mode: 0o755},
		{name: "usr/bin/server", typeflag: tar.TypeReg, mode: 0o755, content: "#!/bin/true\n"},
		{name: "var/empty/", typeflag: tar.TypeDir, mode: 0o700},
	}
	for _, tc := range tests {
		hdr, ok := headers[tc.name]
		if !ok {
			t.Errorf("layer lacks %s", tc.name)
			continue
		}
		if hdr.Typeflag != tc.typeflag || hdr.Mode != tc.mode || hdr.Linkname != tc.link || hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: type %c mode %o link %q owner %d:%d time %v", tc.name, hdr.Typeflag, hdr.Mode, hdr.Linkname, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		if string(layerFiles[tc.name]) != tc.content {
			t.Errorf("%s: content %q, want %q", tc.name, layerFiles[tc.name], tc.content)
		}
	}
	if len(headers) != len(tests)+1 { // +1: the rootfs's own "var/" parent
		names := make([]string, 0, len(headers))
		for n := range headers {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Errorf("layer has %d entries %v, want %d", len(headers), names, len(tests)+1)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	spec := sampleSpec(t)
	first, err := build(spec)
	if err != nil {
		t.Fatal(err)
	}
	firstBytes, err := os.ReadFile(spec.Output)
	if err != nil {
		t.Fatal(err)
	}
	second, err := build(spec)
	if err != nil {
		t.Fatal(err)
	}
	secondBytes, err := os.ReadFile(spec.Output)
	if err != nil {
		t.Fatal(err)
	}
	if first != second || !bytes.Equal(firstBytes, secondBytes) {
		t.Fatalf("two builds differ: image IDs %s and %s", first, second)
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	tests := []struct {
		name   string
		modify func(t *testing.T, s *imageSpec)
		want   string
	}{
		{"no tag", func(_ *testing.T, s *imageSpec) { s.Tag = "" }, "-tag is required"},
		{"docker hub name", func(_ *testing.T, s *imageSpec) { s.Tag = "redis:7" }, "registry host"},
		{"no version", func(_ *testing.T, s *imageSpec) { s.Tag = "localhost/redis" }, "explicit :tag"},
		{"upper case", func(_ *testing.T, s *imageSpec) { s.Tag = "localhost/Redis:v1" }, "lower case"},
		{"no output", func(_ *testing.T, s *imageSpec) { s.Output = "" }, "-o is required"},
		{"missing file", func(_ *testing.T, s *imageSpec) {
			s.Files = append(s.Files, fileSource{Src: "/nonexistent/file", Dst: "/x"})
		}, "/nonexistent/file"},
		{"directory added as a file", func(t *testing.T, s *imageSpec) {
			s.Files = append(s.Files, fileSource{Src: t.TempDir(), Dst: "/x"})
		}, "not a regular file"},
		{"two files at one path", func(t *testing.T, s *imageSpec) {
			other := filepath.Join(t.TempDir(), "other")
			writeFile(t, other, "different", 0o644)
			s.Files = append(s.Files, fileSource{Src: other, Dst: "/usr/bin/server"})
		}, "/usr/bin/server: -add"},
		{"file below a file", func(t *testing.T, s *imageSpec) {
			s.Files = append(s.Files, fileSource{Src: s.Files[0].Src, Dst: "/etc/motd/inner"})
		}, "needs /etc/motd to be a directory"},
		{"directory modes disagree", func(_ *testing.T, s *imageSpec) {
			s.Dirs = append(s.Dirs, dirSpec{Path: "/data", Mode: 0o700})
		}, "directory mode"},
		{"image root as a file", func(_ *testing.T, s *imageSpec) { s.Files[0].Dst = "/" }, "names the image root"},
		{"empty image", func(_ *testing.T, s *imageSpec) { s.RootFS, s.Files, s.Dirs = "", nil, nil }, "would be empty"},
		{"rootfs is a file", func(_ *testing.T, s *imageSpec) { s.RootFS = s.Files[0].Src }, "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := sampleSpec(t)
			tc.modify(t, &spec)
			_, err := build(spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if spec.Output != "" {
				if _, statErr := os.Stat(spec.Output); !os.IsNotExist(statErr) {
					t.Errorf("a failed build left %s behind", spec.Output)
				}
			}
		})
	}
}

func TestRunParsesFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // "" for success
	}{
		{"entrypoint not JSON", []string{"-entrypoint", "/smoke"}, "JSON array"},
		{"empty cmd array", []string{"-cmd", "[]"}, "array is empty"},
		{"bad dir mode", []string{"-dir", "/data:99"}, "octal mode"},
		{"dir mode too large", []string{"-dir", "/data:17777"}, "octal mode"},
		{"label without value", []string{"-label", "novalue"}, "KEY=VALUE"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
		{"ok", []string{"-label", "a=b", "-expose", "80/tcp", "-env", "PATH=/bin"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "f"), "x", 0o644)
			args := append([]string{"-tag", "localhost/t:v1", "-o", filepath.Join(dir, "out.tar"), "-add", filepath.Join(dir, "f") + ":/f"}, tc.args...)
			err := run(args, io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParseLdd(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want []string
		err  string
	}{
		{
			name: "dynamic executable",
			out: "\tlinux-vdso.so.1 (0x00007ffd5a3e4000)\n" +
				"\tlibjemalloc.so.2 => /lib/x86_64-linux-gnu/libjemalloc.so.2 (0x00007f2a1c000000)\n" +
				"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2a1be1e000)\n" +
				"\t/lib64/ld-linux-x86-64.so.2 (0x00007f2a1c4f6000)\n",
			want: []string{"/lib/x86_64-linux-gnu/libjemalloc.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"},
		},
		{name: "static", out: "\tstatically linked\n"},
		{name: "provided by the loader", out: "\tlinux-gate.so.1 =>  (0xf7f9e000)\n"},
		{
			name: "missing libraries",
			out:  "\tlibfoo.so.1 => not found\n\tlibbar.so.2 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n",
			err:  "libraries not found: libfoo.so.1, libbar.so.2",
		},
		{name: "relative resolution", out: "\tlibx.so => lib/libx.so (0x1)\n", err: "not absolute"},
		{name: "garbage", out: "\tnot a dynamic executable\n", err: "unexpected line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLdd(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("parseLdd = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestSharedLibrariesOfHostExecutable resolves a real dynamically linked program of this host
// (the shell's ls) and checks the loader and libc come with it.
func TestSharedLibrariesOfHostExecutable(t *testing.T) {
	// ldd (libc-bin) and ls (coreutils) are on every Debian machine the images are built on.
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Fatal("ldd not installed: image builds need it")
	}
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Fatal(err)
	}
	interp, err := interpreter(ls)
	if err != nil {
		t.Fatal(err)
	}
	if interp == "" {
		t.Skipf("%s is statically linked", ls)
	}
	libs, err := sharedLibraries(ls)
	if err != nil {
		t.Fatal(err)
	}
	hasLibc := slices.ContainsFunc(libs, func(l string) bool { return strings.HasPrefix(filepath.Base(l), "libc.so") })
	if !slices.Contains(libs, interp) || !hasLibc {
		t.Fatalf("libraries of %s = %v, want the loader %s and libc", ls, libs, interp)
	}
	// A non-ELF file needs nothing.
	script := filepath.Join(t.TempDir(), "script")
	writeFile(t, script, "#!/bin/sh\n", 0o755)
	if libs, err := sharedLibraries(script); err != nil || libs != nil {
		t.Fatalf("sharedLibraries(script) = %v, %v", libs, err)
	}
}

func FuzzParseLdd(f *testing.F) {
	f.Add("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2a1be1e000)\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n")
	f.Add("\tlibfoo.so => not found\n")
	f.Add("\tlinux-vdso.so.1 (0x00007ffd5a3e4000)\n")
	f.Add(" => \n( )\n=> (0x)")
	f.Fuzz(func(t *testing.T, out string) {
		libs, err := parseLdd(out)
		if err != nil {
			return
		}
		for _, l := range libs {
			if !strings.HasPrefix(l, "/") {
				t.Fatalf("parseLdd(%q) returned relative path %q", out, l)
			}
		}
	})
}

func FuzzParseDir(f *testing.F) {
	for _, s := range []string{"/data:1777", "/data", "/x:0", ":755", "/a:8", "/a:77777"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		d, err := parseDir(value)
		if err != nil {
			return
		}
		if d.Path == "" || unixFromMode(d.Mode) > 0o7777 {
			t.Fatalf("parseDir(%q) = %+v", value, d)
		}
		if _, modeText, found := strings.Cut(value, ":"); found {
			if got := strings.TrimLeft(modeText, "0"); got != "" && got != strconv.FormatInt(unixFromMode(d.Mode), 8) {
				t.Fatalf("parseDir(%q) mode %o does not round-trip", value, unixFromMode(d.Mode))
			}
		}
	})
}

func FuzzValidateTag(f *testing.F) {
	for _, s := range []string{"localhost/cacheqos/redis:local", "redis:7", "localhost/x", "example.com:5000/a/b:c", "localhost/:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		if validateTag(tag, formatOCI) == nil {
			repo, version, found := cutTag(tag)
			if !found || repo == "" || version == "" || strings.ContainsAny(version, ":/@") {
				t.Fatalf("validateTag accepted %q for an OCI archive", tag)
			}
		}
		if validateTag(tag, formatDocker) != nil {
			return
		}
		host, rest, _ := strings.Cut(tag, "/")
		if host == "" || !strings.Contains(rest, ":") {
			t.Fatalf("validateTag accepted %q", tag)
		}
	})
}

// readBlob returns the blob a descriptor points at in an OCI layout's files, checking that it
// is there, has the size and hashes to the digest the descriptor says.
func readBlob(t *testing.T, files map[string][]byte, d ociDescriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	blob, ok := files["blobs/sha256/"+hexDigest]
	if !ok {
		t.Fatalf("no blob for %s", d.Digest)
	}
	if sum := sha256.Sum256(blob); hex.EncodeToString(sum[:]) != hexDigest || int64(len(blob)) != d.Size {
		t.Fatalf("blob %s: %d bytes hashing to %x, descriptor says %d bytes", d.Digest, len(blob), sum, d.Size)
	}
	return blob
}

// TestBuildWritesOCIArchive follows an OCI archive from index.json to the layer, checking every
// digest and size, and compares it with the docker archive of the same spec: one image, two
// containers.
func TestBuildWritesOCIArchive(t *testing.T) {
	spec := sampleSpec(t)
	dockerID, dockerFiles := buildFiles(t, spec)
	spec.Format, spec.Tag = formatOCI, "cacheqos/sample:1.2.3"
	spec.Output = filepath.Join(t.TempDir(), "sample-oci.tar")
	imageID, files := buildFiles(t, spec)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", files["oci-layout"])
	}
	var index ociIndex
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if index.SchemaVersion != 2 || index.MediaType != mediaTypeOCIIndex || len(index.Manifests) != 1 {
		t.Fatalf("index.json = %+v", index)
	}
	desc := index.Manifests[0]
	if desc.MediaType != mediaTypeOCIManifest || desc.Annotations[annotationRefName] != "1.2.3" || desc.Annotations[annotationImageName] != spec.Tag {
		t.Fatalf("index.json names %+v", desc)
	}
	var manifest ociManifest
	if err := json.Unmarshal(readBlob(t, files, desc), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.SchemaVersion != 2 || manifest.MediaType != mediaTypeOCIManifest || manifest.Config.MediaType != mediaTypeOCIConfig ||
		len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != mediaTypeOCILayer {
		t.Fatalf("manifest = %+v", manifest)
	}
	cfg := readBlob(t, files, manifest.Config)
	layer := readBlob(t, files, manifest.Layers[0])
	if manifest.Config.Digest != "sha256:"+imageID || imageID != dockerID {
		t.Errorf("config %s, image ID %s, docker archive's image ID %s: want one", manifest.Config.Digest, imageID, dockerID)
	}
	var dockerManifest []manifestEntry
	if err := json.Unmarshal(dockerFiles["manifest.json"], &dockerManifest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg, dockerFiles[dockerManifest[0].Config]) || !bytes.Equal(layer, dockerFiles[dockerManifest[0].Layers[0]]) {
		t.Error("the OCI archive's config or layer differs from the docker archive's")
	}
	var parsed imageConfig
	if err := json.Unmarshal(cfg, &parsed); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(parsed.RootFS.DiffIDs, []string{manifest.Layers[0].Digest}) {
		t.Errorf("diff_ids %v, want the uncompressed layer's digest %s", parsed.RootFS.DiffIDs, manifest.Layers[0].Digest)
	}
}

func TestBuildChecksTagForFormat(t *testing.T) {
	tests := []struct {
		format, tag, wantErr string
	}{
		{format: formatOCI, tag: "cacheqos/operator:0.1.0"},
		{format: formatOCI, tag: "registry.example:5000/cacheqos/operator:0.1.0"},
		{format: formatDocker, tag: "cacheqos/operator:0.1.0", wantErr: "registry host"},
		{format: formatOCI, tag: "cacheqos/operator", wantErr: "explicit :tag"},
		{format: formatOCI, tag: "cacheqos/operator@sha256:abc", wantErr: "malformed"},
		{format: "zip", tag: "localhost/x:y", wantErr: `-format "zip"`},
	}
	for _, tt := range tests {
		spec := sampleSpec(t)
		spec.Format, spec.Tag = tt.format, tt.tag
		_, err := build(spec)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s %s: error %v, want %q", tt.format, tt.tag, err, tt.wantErr)
		}
	}
}
