package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// defaultPath is the PATH an image gets unless -env sets one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageSpec is everything one image is built from.
type imageSpec struct {
	Tag, Output string
	// Format is formatDocker (the default) or formatOCI.
	Format       string
	RootFS       string
	Files        []fileSource
	WithLibs     bool
	Dirs         []dirSpec
	Entrypoint   []string
	Cmd          []string
	Env          []string
	User         string
	WorkDir      string
	ExposedPorts []string
	Labels       map[string]string
	Arch         string
}

// The image config, the subset of the OCI/Docker image config containerd and kubelet read.
type imageConfig struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Created      string          `json:"created"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
	History      []history       `json:"history"`
}

type containerConfig struct {
	User         string              `json:"User,omitempty"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// Archive formats.
const (
	// formatDocker is `docker save`'s format, which `ctr images import` reads; its tag must
	// name a registry host (validateTag).
	formatDocker = "docker"
	// formatOCI is an OCI image layout in a tar (an "oci-archive"), for release: registries
	// and tools such as skopeo take it; its tag is any repository:tag.
	formatOCI = "oci"
)

// OCI media types and annotations (image-spec v1.1).
const (
	mediaTypeOCIIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeOCIManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeOCIConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeOCILayer    = "application/vnd.oci.image.layer.v1.tar"
	// annotationRefName is the image-layout's name of a manifest: the tag alone.
	annotationRefName = "org.opencontainers.image.ref.name"
	// annotationImageName is the full reference, as containerd names imported images.
	annotationImageName = "io.containerd.image.name"
)

// ociDescriptor points at a blob of an OCI layout.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociManifest struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType"`
	Config        ociDescriptor   `json:"config"`
	Layers        []ociDescriptor `json:"layers"`
}

type ociIndex struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType"`
	Manifests     []ociDescriptor `json:"manifests"`
}

// manifestEntry is one image of a docker archive's manifest.json.
type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// validateTag insists on a reference whose first component is a registry host (localhost, or a
// name with a dot or a port) and which carries a tag: kubelet expands anything else to a Docker
// Hub name that would not match the imported image.
// An OCI archive is pushed under a name its user chooses, so any repository:tag will do.
func validateTag(tag, format string) error {
	if tag == "" {
		return fmt.Errorf("-tag is required")
	}
	rest := tag
	if format != formatOCI {
		host, afterHost, hasSlash := strings.Cut(tag, "/")
		isHost := host == "localhost" || strings.ContainsAny(host, ".:")
		if !hasSlash || !isHost {
			return fmt.Errorf("-tag %q: the first component must be a registry host such as localhost, so kubelet resolves the name to this image", tag)
		}
		rest = afterHost
	}
	repo, version, hasTag := cutTag(rest)
	switch {
	case !hasTag || repo == "" || version == "" || strings.HasSuffix(repo, "/"):
		return fmt.Errorf("-tag %q: needs a repository name and an explicit :tag", tag)
	case strings.ToLower(repo) != repo:
		return fmt.Errorf("-tag %q: repository names must be lower case", tag)
	case strings.ContainsAny(repo[strings.LastIndex(repo, "/")+1:], ":@") || strings.Contains(version, "@"):
		return fmt.Errorf("-tag %q: malformed tag %q", tag, version)
	}
	return nil
}

// config builds the image config for a layer with the given diff ID.
func (s imageSpec) config(diffID string) imageConfig {
	env := s.Env
	hasPath := false
	for _, e := range env {
		hasPath = hasPath || strings.HasPrefix(e, "PATH=")
	}
	if !hasPath {
		env = append([]string{defaultPath}, env...)
	}
	var ports map[string]struct{}
	for _, p := range s.ExposedPorts {
		if ports == nil {
			ports = map[string]struct{}{}
		}
		ports[p] = struct{}{}
	}
	created := epoch.Format("2006-01-02T15:04:05Z")
	return imageConfig{
		Architecture: s.Arch,
		OS:           "linux",
		Created:      created,
		Config: containerConfig{
			User: s.User, Env: env, Entrypoint: s.Entrypoint, Cmd: s.Cmd,
			WorkingDir: s.WorkDir, ExposedPorts: ports, Labels: s.Labels,
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{"sha256:" + diffID}},
		History: []history{{Created: created, CreatedBy: "hack/images/mkimage"}},
	}
}

// collect fills a layer from the spec's rootfs, files, libraries and directories.
func (s imageSpec) collect() (*layer, error) {
	l := newLayer()
	if s.RootFS != "" {
		if err := l.addTree(s.RootFS); err != nil {
			return nil, err
		}
	}
	for _, f := range s.Files {
		origin := "-add " + f.Src
		if err := l.addFile(f.Src, f.Dst, origin); err != nil {
			return nil, err
		}
		if !s.WithLibs {
			continue
		}
		libs, err := sharedLibraries(f.Src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", origin, err)
		}
		for _, lib := range libs {
			if err := l.addFile(lib, lib, "library of "+f.Src); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range s.Dirs {
		if err := l.addDir(d); err != nil {
			return nil, err
		}
	}
	if len(l.entries) == 0 {
		return nil, fmt.Errorf("the image would be empty: give -rootfs or -add")
	}
	if err := l.addParents(); err != nil {
		return nil, err
	}
	return l, nil
}

// build writes the image to s.Output (atomically) and returns the image ID, the sha256 of its
// config.
func build(s imageSpec) (string, error) {
	switch s.Format {
	case "":
		s.Format = formatDocker
	case formatDocker, formatOCI:
	default:
		return "", fmt.Errorf("-format %q: want %s or %s", s.Format, formatDocker, formatOCI)
	}
	if err := validateTag(s.Tag, s.Format); err != nil {
		return "", err
	}
	if s.Output == "" {
		return "", fmt.Errorf("-o is required")
	}
	l, err := s.collect()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(s.Output)
	layerFile, err := os.CreateTemp(dir, ".layer-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()
	diffID, err := l.writeTo(layerFile)
	if err != nil {
		return "", err
	}
	cfg, err := json.Marshal(s.config(diffID))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cfg)
	imageID := hex.EncodeToString(sum[:])

	out, err := os.CreateTemp(dir, ".image-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	write := writeArchive
	if s.Format == formatOCI {
		write = writeOCIArchive
	}
	if err := write(out, s.Tag, imageID, cfg, diffID, layerFile); err != nil {
		return "", fmt.Errorf("writing %s: %w", s.Output, err)
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(out.Name(), 0o644); err != nil {
		return "", err
	}
	return imageID, os.Rename(out.Name(), s.Output)
}

// writeArchive writes the docker archive: <image ID>.json (the config), <diff ID>/layer.tar and
// manifest.json, which names both and the tag.
func writeArchive(w io.Writer, tag, imageID string, cfg []byte, diffID string, layerTar *os.File) error {
	manifest, err := json.Marshal([]manifestEntry{{
		Config:   imageID + ".json",
		RepoTags: []string{tag},
		Layers:   []string{diffID + "/layer.tar"},
	}})
	if err != nil {
		return err
	}
	layerInfo, err := layerTar.Stat()
	if err != nil {
		return err
	}
	if _, err := layerTar.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return writeTar(w, []string{diffID + "/"}, []archiveFile{
		{diffID + "/layer.tar", layerInfo.Size(), layerTar},
		{imageID + ".json", int64(len(cfg)), bytes.NewReader(cfg)},
		{"manifest.json", int64(len(manifest)), bytes.NewReader(manifest)},
	})
}

// archiveFile is one regular file of an image archive.
type archiveFile struct {
	name string
	size int64
	body io.Reader
}

// writeTar writes the directories, then the files, owned by root at the fixed time.
func writeTar(w io.Writer, dirs []string, files []archiveFile) error {
	tw := tar.NewWriter(w)
	for _, dir := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: f.size, ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, f.body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// cutTag splits repository:tag at the last colon after the last slash (a registry host may
// have a port).
func cutTag(ref string) (repo, tag string, found bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}

// writeOCIArchive writes an OCI image layout: the layer, the config and the manifest as
// blobs/sha256/<digest>, the oci-layout marker, and index.json naming the manifest by tag.
func writeOCIArchive(w io.Writer, tag, imageID string, cfg []byte, diffID string, layerTar *os.File) error {
	layerInfo, err := layerTar.Stat()
	if err != nil {
		return err
	}
	if _, err := layerTar.Seek(0, io.SeekStart); err != nil {
		return err
	}
	manifest, err := json.Marshal(ociManifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeOCIManifest,
		Config:        ociDescriptor{MediaType: mediaTypeOCIConfig, Digest: "sha256:" + imageID, Size: int64(len(cfg))},
		Layers:        []ociDescriptor{{MediaType: mediaTypeOCILayer, Digest: "sha256:" + diffID, Size: layerInfo.Size()}},
	})
	if err != nil {
		return err
	}
	manifestSum := sha256.Sum256(manifest)
	manifestID := hex.EncodeToString(manifestSum[:])
	_, version, _ := cutTag(tag)
	index, err := json.Marshal(ociIndex{
		SchemaVersion: 2,
		MediaType:     mediaTypeOCIIndex,
		Manifests: []ociDescriptor{{
			MediaType: mediaTypeOCIManifest, Digest: "sha256:" + manifestID, Size: int64(len(manifest)),
			Annotations: map[string]string{annotationRefName: version, annotationImageName: tag},
		}},
	})
	if err != nil {
		return err
	}
	return writeTar(w, []string{"blobs/", "blobs/sha256/"}, []archiveFile{
		{"blobs/sha256/" + diffID, layerInfo.Size(), layerTar},
		{"blobs/sha256/" + imageID, int64(len(cfg)), bytes.NewReader(cfg)},
		{"blobs/sha256/" + manifestID, int64(len(manifest)), bytes.NewReader(manifest)},
		{"oci-layout", int64(len(ociLayout)), strings.NewReader(ociLayout)},
		{"index.json", int64(len(index)), bytes.NewReader(index)},
	})
}

// ociLayout marks a directory (here a tar) as an OCI image layout.
const ociLayout = `{"imageLayoutVersion":"1.0.0"}`
