package main

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildImage builds the linux/amd64 image twice (each compiles ./cmd/turbine),
// checks that both builds have the same digests, reads the OCI layout and the docker
// tarball back, checks the configuration, and runs the extracted /turbine help.
// It compiles the whole module, so -short skips it.
func TestBuildImage(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles ./cmd/turbine twice (minutes on a cold build cache); run without -short")
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("runs the linux/amd64 binary it builds; this host is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	_, ccErr := exec.LookPath("gcc")
	nvml := ccErr == nil
	if !nvml {
		t.Log("no gcc: building without the NVML binary")
	}
	ctx := context.Background()
	if d, ok := t.Deadline(); ok { // go test -timeout bounds the compilations
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func() Result {
		res, err := Build(ctx, Options{ModuleDir: "../..", OutDir: t.TempDir(), Tag: testMeta.Version,
			Platforms: []v1.Platform{amd64}, NVML: nvml, CABundle: ca, Meta: testMeta, Log: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, second := build(), build()
	if first.Index != second.Index || first.Images["linux/amd64"] != second.Images["linux/amd64"] {
		t.Fatalf("two builds of the same sources differ: index %s vs %s, image %s vs %s",
			first.Index, second.Index, first.Images["linux/amd64"], second.Images["linux/amd64"])
	}

	img := imageFromLayout(t, first.LayoutDir, amd64)
	if d, _ := img.Digest(); d != first.Images["linux/amd64"] {
		t.Errorf("layout image %s, Build said %s", d, first.Images["linux/amd64"])
	}
	fromTar, err := tarball.ImageFromPath(first.Tarball, nil)
	if err != nil {
		t.Fatal(err)
	}
	// docker's tarball format rewrites the manifest (Docker media types), so compare
	// the configuration, whose digest is the image id docker load shows.
	tarID, _ := fromTar.ConfigName()
	layoutID, _ := img.ConfigName()
	if tarID != layoutID {
		t.Errorf("tarball image id %s, layout %s", tarID, layoutID)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/turbine"}) || !slices.Equal(c.Cmd, []string{"help"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", c.User)
	}
	for _, p := range []string{"8000/tcp", "9090/tcp", "9002/tcp", "9003/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed (%v)", p, c.ExposedPorts)
		}
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.title":    "turbine",
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": testMeta.Revision,
		"org.opencontainers.image.licenses": "NOASSERTION",
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if cf.Architecture != "amd64" || cf.OS != "linux" || !cf.Created.Time.Equal(testMeta.Created) {
		t.Errorf("config %s/%s created %v", cf.OS, cf.Architecture, cf.Created)
	}

	root := extract(t, img)
	for path, mode := range map[string]os.FileMode{"tmp": os.ModeDir | os.ModeSticky | 0o777, "turbine": 0o755} {
		fi, err := os.Lstat(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModeDir | os.ModeSticky | os.ModePerm); got != mode {
			t.Errorf("/%s mode %v, want %v", path, got, mode)
		}
	}
	for path, want := range map[string]string{
		"etc/passwd":                        "nonroot:x:65532:65532:",
		"etc/ssl/certs/ca-certificates.crt": "BEGIN CERTIFICATE",
	} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("/%s: %v, %q lacks %q", path, err, b, want)
		}
	}
	if dyn := dynamic(t, filepath.Join(root, "turbine")); dyn {
		t.Error("/turbine is dynamically linked; want a static binary (CGO_ENABLED=0)")
	}
	if nvml {
		if dyn := dynamic(t, filepath.Join(root, strings.TrimPrefix(NVMLBinaryPath, "/"))); !dyn {
			t.Errorf("%s is static; want the cgo build (NVML is loaded through glibc's dlopen)", NVMLBinaryPath)
		}
	}

	cmd := exec.CommandContext(ctx, filepath.Join(root, "turbine"), "help")
	cmd.Dir, cmd.Env = root, []string{"HOME=" + root}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("extracted /turbine help: %v", err)
	}
	for _, sub := range []string{"serve", "frontend", "node", "mocker"} {
		if !strings.Contains(string(out), "\n  "+sub+" ") {
			t.Errorf("extracted /turbine help does not list %q:\n%s", sub, out)
		}
	}
}

// imageFromLayout reads the index of the layout at dir and returns its image for plat.
func imageFromLayout(t *testing.T, dir string, plat v1.Platform) v1.Image {
	t.Helper()
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testMeta.Version {
		t.Fatalf("layout index.json: %+v, want one index named %s", im.Manifests, testMeta.Version)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	idxm, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range idxm.Manifests {
		if d.Platform != nil && d.Platform.Equals(plat) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no %s image in the index: %+v", plat, idxm.Manifests)
	return nil
}

// extract writes the flattened filesystem of img under a temporary folder.
func extract(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("entry %q leaves the root", h.Name)
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, mode&(os.ModePerm|os.ModeSticky)); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, mode.Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected entry %q type %c", h.Name, h.Typeflag)
		}
	}
}

// dynamic says whether the ELF file at path asks for a program interpreter.
func dynamic(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
