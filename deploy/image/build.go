package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Output names under Options.OutDir.
const (
	LayoutDirName = "turbine-image"     // OCI image layout of the multi-platform index
	TarballName   = "turbine-image.tar" // `docker load` tarball of one platform
)

// Options says what Build builds.
type Options struct {
	ModuleDir string        // root of the Go module (holds go.mod)
	OutDir    string        // where LayoutDirName and TarballName go (created if missing)
	Tag       string        // image tag, e.g. "v0.4.0"; the layout's ref name
	Platforms []v1.Platform // one image each; linux only
	// NVML adds, to the linux/amd64 image only, NVMLBinaryPath: the binary built with
	// cgo for engine images. It needs a C compiler for the host, which must be amd64.
	NVML bool
	// CABundle is the host file copied to CABundlePath; a missing file leaves it out.
	CABundle string
	Meta     Meta
	// Log receives one line per step (nil: none).
	Log func(format string, args ...any)
}

// Result is what Build wrote.
type Result struct {
	Index     v1.Hash            // digest of the image index
	Images    map[string]v1.Hash // manifest digest by platform ("linux/amd64")
	LayoutDir string             // OutDir/LayoutDirName
	Tarball   string             // OutDir/TarballName
	TarballOf v1.Platform        // the platform the tarball holds
}

// Build compiles ./cmd/turbine for each platform (CGO_ENABLED=0, -trimpath, no build
// id), assembles the images (Assemble) and writes the OCI layout (replacing an older one)
// and the docker tarball: of the host's architecture when it is among the platforms,
// else of the first. Errors: a failed compilation (with go's output), a platform other
// than linux, NVML without an amd64 host, an invalid tag, any write.
func Build(ctx context.Context, o Options) (Result, error) {
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if len(o.Platforms) == 0 {
		return Result{}, errors.New("image: no platform")
	}
	tag, err := name.NewTag(ImageName + ":" + o.Tag)
	if err != nil {
		return Result{}, fmt.Errorf("image: --tag %q: %w", o.Tag, err)
	}
	if o.NVML && runtime.GOARCH != "amd64" {
		return Result{}, fmt.Errorf("image: --nvml builds with cgo for linux/amd64 and needs an amd64 host (this one is %s); use --nvml=false", runtime.GOARCH)
	}
	ca, err := os.ReadFile(o.CABundle)
	switch {
	case errors.Is(err, fs.ErrNotExist) || o.CABundle == "":
		logf("no CA bundle at %q: the image has none (TLS to public hosts will not verify)", o.CABundle)
		ca = nil
	case err != nil:
		return Result{}, fmt.Errorf("image: CA bundle: %w", err)
	}
	work, err := os.MkdirTemp("", "turbine-image-")
	if err != nil {
		return Result{}, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(work)

	res := Result{Images: map[string]v1.Hash{}, TarballOf: o.Platforms[0],
		LayoutDir: filepath.Join(o.OutDir, LayoutDirName), Tarball: filepath.Join(o.OutDir, TarballName)}
	imgs := make([]v1.Image, len(o.Platforms))
	for i, plat := range o.Platforms {
		if plat.OS != "linux" {
			return Result{}, fmt.Errorf("image: platform %s: only linux", plat)
		}
		layers := []Layer{{Name: "base: passwd, group, CA bundle, /tmp", Files: BaseFiles(ca)}}
		bin, err := compile(ctx, o.ModuleDir, work, plat, false)
		if err != nil {
			return Result{}, err
		}
		logf("compiled %s (%d bytes)", plat, len(bin))
		layers = append(layers, Layer{Name: "turbine (static, CGO_ENABLED=0)",
			Files: []File{{Path: BinaryPath, Mode: 0o755, Data: bin}}})
		if o.NVML && plat.Architecture == "amd64" {
			nbin, err := compile(ctx, o.ModuleDir, work, plat, true)
			if err != nil {
				return Result{}, err
			}
			logf("compiled %s with cgo for NVML (%d bytes)", plat, len(nbin))
			layers = append(layers, Layer{Name: "turbine with NVML (cgo, glibc) for engine images",
				Files: []File{{Path: NVMLBinaryPath, Mode: 0o755, Data: nbin}}})
		}
		if imgs[i], err = Assemble(o.Meta, plat, layers); err != nil {
			return Result{}, err
		}
		if res.Images[plat.String()], err = imgs[i].Digest(); err != nil {
			return Result{}, fmt.Errorf("image: %w", err)
		}
		if plat.Architecture == runtime.GOARCH && plat.Variant == "" {
			res.TarballOf = plat
		}
	}
	idx, err := Index(o.Meta, o.Platforms, imgs)
	if err != nil {
		return Result{}, err
	}
	if res.Index, err = idx.Digest(); err != nil {
		return Result{}, fmt.Errorf("image: %w", err)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("image: %w", err)
	}
	if err := writeLayout(res.LayoutDir, idx, tag); err != nil {
		return Result{}, err
	}
	logf("wrote %s (index %s)", res.LayoutDir, res.Index)
	for i, plat := range o.Platforms {
		if plat.Equals(res.TarballOf) {
			if err := tarball.WriteToFile(res.Tarball, tag, imgs[i]); err != nil {
				return Result{}, fmt.Errorf("image: %s: %w", res.Tarball, err)
			}
		}
	}
	logf("wrote %s (%s, %s)", res.Tarball, res.TarballOf, tag)
	return res, nil
}

// writeLayout writes idx as the one entry of a fresh OCI layout at dir, annotated with
// the tag as its ref name (what skopeo's oci:DIR:TAG reads). It builds next to dir and
// renames, so a reader never sees half a layout.
func writeLayout(dir string, idx v1.ImageIndex, tag name.Tag) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("image: layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.String(),
	})); err != nil {
		return fmt.Errorf("image: layout: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// compile builds ./cmd/turbine for plat into work and returns the binary.
func compile(ctx context.Context, moduleDir, work string, plat v1.Platform, cgo bool) ([]byte, error) {
	out := filepath.Join(work, strings.ReplaceAll(plat.String(), "/", "-"))
	env := append(os.Environ(), "GOOS="+plat.OS, "GOARCH="+plat.Architecture, "CGO_ENABLED=0")
	if cgo {
		out += "-nvml"
		env = append(env, "CGO_ENABLED=1")
		if os.Getenv("CGO_CFLAGS") == "" {
			// go-nvml's C header marks old NVML calls deprecated.
			env = append(env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		}
	}
	if plat.Architecture == "arm" && plat.Variant != "" {
		env = append(env, "GOARM="+strings.TrimPrefix(plat.Variant, "v"))
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o", out, "./cmd/turbine")
	cmd.Dir, cmd.Env = moduleDir, env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("image: go build %s (cgo %v): %w\n%s", plat, cgo, err, stderr.Bytes())
	}
	return os.ReadFile(out)
}
