package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts (docs/image.md).
const (
	// ImageName is the repository the image is tagged with.
	ImageName = "ghcr.io/turbine-llm/turbine"
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/turbine-llm/turbine"
	// BinaryPath is the static (CGO_ENABLED=0) binary and the entrypoint.
	BinaryPath = "/turbine"
	// NVMLBinaryPath is the same program built with cgo, so that `turbine node` finds
	// GPUs through NVML; it is linked against glibc and runs only in a glibc image (the
	// engines' images), never in this one.
	NVMLBinaryPath = "/usr/local/lib/turbine/nvml/turbine"
	// CABundlePath is where the build host's CA bundle goes, and SSL_CERT_FILE.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// NonRootUID is the user (and group) the image runs as.
	NonRootUID = 65532
	// HomeDir is the non-root user's home and the working directory.
	HomeDir = "/home/nonroot"
)

// ExposedPorts are the ports Turbine's commands listen on by default: 8000 the OpenAI
// API (serve, frontend), 9090 the node's /live, /health and /metrics, 9002 the endpoint
// picker's ext_proc gRPC and 9003 its gRPC health.
var ExposedPorts = []string{"8000/tcp", "9002/tcp", "9003/tcp", "9090/tcp"}

// Meta is what the labels and timestamps say about one build.
type Meta struct {
	Version  string    // org.opencontainers.image.version, e.g. "v0.4.0" or "dev"
	Revision string    // org.opencontainers.image.revision: the commit, "" when unknown
	Licenses string    // org.opencontainers.image.licenses (SPDX expression)
	Created  time.Time // every timestamp of the image: SOURCE_DATE_EPOCH or the commit time
}

// File is one entry of a layer. Paths are absolute; a parent directory a File does not
// list is added as root-owned 0755.
type File struct {
	Path     string
	Mode     int64 // permission bits, plus 01000 for sticky
	UID, GID int
	Dir      bool
	Data     []byte // regular files only
}

// Labels returns the OCI annotation labels of the image.
func Labels(m Meta) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.title":       "turbine",
		"org.opencontainers.image.description": "Turbine: orchestration for LLM inference (frontend, node, planner, kvbm, endpoint picker, mock engine)",
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.licenses":    m.Licenses,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
	}
	if m.Revision != "" {
		l["org.opencontainers.image.revision"] = m.Revision
	}
	return l
}

// Config returns the image's run configuration: entrypoint /turbine, command help, user
// 65532:65532, working directory /home/nonroot, the exposed ports and the labels.
func Config(m Meta) v1.Config {
	ports := map[string]struct{}{}
	for _, p := range ExposedPorts {
		ports[p] = struct{}{}
	}
	return v1.Config{
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"help"},
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		WorkingDir: HomeDir,
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"HOME=" + HomeDir,
			"SSL_CERT_FILE=" + CABundlePath,
		},
		ExposedPorts: ports,
		Labels:       Labels(m),
	}
}

// BaseFiles are the files a static binary needs around it: /etc/passwd and /etc/group
// with root and nonroot (65532), /etc/nsswitch.conf (hosts from files, then DNS), the
// CA bundle when caBundle is not empty, /tmp (1777) and the home directory of nonroot.
func BaseFiles(caBundle []byte) []File {
	uid := strconv.Itoa(NonRootUID)
	files := []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nonroot:x:" + uid + ":" + uid + ":nonroot:" + HomeDir + ":/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:" + uid + ":\n")},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: HomeDir, Dir: true, Mode: 0o755, UID: NonRootUID, GID: NonRootUID},
	}
	if len(caBundle) > 0 {
		files = append(files, File{Path: CABundlePath, Mode: 0o644, Data: caBundle})
	}
	return files
}

// LayerTar returns the uncompressed tar of files: entries sorted by path, implied parent
// directories added (root, 0755), every time set to mtime, no user or group names. The
// same files and mtime always give the same bytes. Errors: a relative or unclean path,
// a path given twice, a regular file named as the parent of another entry.
func LayerTar(files []File, mtime time.Time) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("image: layer path %q: want a clean absolute path", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("image: layer path %q given twice", f.Path)
		}
		byPath[f.Path] = f
	}
	for _, f := range files {
		for dir := path.Dir(f.Path); dir != "/"; dir = path.Dir(dir) {
			p, ok := byPath[dir]
			if ok && !p.Dir {
				return nil, fmt.Errorf("image: %q is a file but holds %q", dir, f.Path)
			}
			if !ok {
				byPath[dir] = File{Path: dir, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: mtime.UTC(),
			Format:  tar.FormatPAX,
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: tar header %s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: tar: %w", err)
	}
	return buf.Bytes(), nil
}

// Layer is one named layer of the image.
type Layer struct {
	Name  string // history comment, e.g. "turbine binary"
	Files []File
}

// Assemble builds the OCI image of one platform from its layers, in order, on an empty
// base: OCI media types, the Config of m, every timestamp m.Created. It does no I/O;
// the same arguments give the same digest.
func Assemble(m Meta, plat v1.Platform, layers []Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: m.Created.UTC()}
	for _, l := range layers {
		raw, err := LayerTar(l.Files, m.Created)
		if err != nil {
			return nil, fmt.Errorf("image: layer %q: %w", l.Name, err)
		}
		layer, err := gzipLayer(raw)
		if err != nil {
			return nil, fmt.Errorf("image: layer %q: %w", l.Name, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: created, CreatedBy: "go run ./deploy/image", Comment: l.Name},
		})
		if err != nil {
			return nil, fmt.Errorf("image: layer %q: %w", l.Name, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = plat.Architecture, plat.OS, plat.Variant
	cf.Config = Config(m)
	cf.Created = created
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

// Index returns the OCI image index of imgs, one per platform (same order), annotated
// with the labels of m.
func Index(m Meta, plats []v1.Platform, imgs []v1.Image) (v1.ImageIndex, error) {
	if len(plats) != len(imgs) {
		return nil, fmt.Errorf("image: %d platforms, %d images", len(plats), len(imgs))
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, len(imgs))
	for i, img := range imgs {
		plat := plats[i]
		adds[i] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1, Platform: &plat}}
	}
	idx = mutate.AppendManifests(idx, adds...)
	return mutate.Annotations(idx, Labels(m)).(v1.ImageIndex), nil
}

// ParsePlatforms reads a comma-separated list of os/arch[/variant], e.g.
// "linux/amd64,linux/arm64". Errors: an empty list, an entry of another shape, an OS
// other than linux, a platform given twice.
func ParsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		f := strings.Split(part, "/")
		if len(f) < 2 || len(f) > 3 || slices.Contains(f, "") {
			return nil, fmt.Errorf("image: --platforms: %q: want os/arch[/variant]", part)
		}
		if f[0] != "linux" {
			return nil, fmt.Errorf("image: --platforms: %q: only linux images are built", part)
		}
		p := v1.Platform{OS: f[0], Architecture: f[1]}
		if len(f) == 3 {
			p.Variant = f[2]
		}
		if slices.ContainsFunc(out, p.Equals) {
			return nil, fmt.Errorf("image: --platforms: %q given twice", part)
		}
		out = append(out, p)
	}
	return out, nil
}

// gzipLayer compresses raw once (compress/gzip, default level, no header time or name:
// the same raw gives the same bytes for one Go release) into an OCI layer that hands out
// those bytes, so digests, the layout and the tarball do not compress again.
func gzipLayer(raw []byte) (v1.Layer, error) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	b := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
