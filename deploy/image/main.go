// Command image builds Turbine's container image without a Docker daemon: the static
// turbine binary on an empty base, for linux/amd64 and linux/arm64, into an OCI layout
// (dist/turbine-image/) and a `docker load` tarball (dist/turbine-image.tar). The build
// is reproducible: the same sources and SOURCE_DATE_EPOCH (default: the commit time) give
// the same digests. docs/image.md has the usage.
//
//	go run ./deploy/image [--out dist] [--tag v0.4.0] [--platforms linux/amd64,linux/arm64] [--nvml=false]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("out", "dist", "output folder: turbine-image/ (OCI layout) and turbine-image.tar go there")
	tag := fs.String("tag", "", "image tag and org.opencontainers.image.version (default: git describe --tags --always, else dev)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant] of the images")
	nvml := fs.Bool("nvml", true, "add "+NVMLBinaryPath+" to the linux/amd64 image: the binary built with cgo, for GPU nodes on the engines' images (needs a C compiler)")
	licenses := fs.String("licenses", "NOASSERTION", "org.opencontainers.image.licenses (an SPDX expression)")
	ca := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the image (none when the file is missing)")
	module := fs.String("module", ".", "root of the Turbine Go module")
	if err := fs.Parse(args); err != nil {
		return err
	}
	plats, err := ParsePlatforms(*platforms)
	if err != nil {
		return err
	}
	created, err := SourceDate(os.Getenv("SOURCE_DATE_EPOCH"), func() string { return git(*module, "log", "-1", "--format=%ct") })
	if err != nil {
		return err
	}
	meta := Meta{Version: *tag, Revision: git(*module, "rev-parse", "HEAD"), Licenses: *licenses, Created: created}
	if meta.Version == "" {
		meta.Version = git(*module, "describe", "--tags", "--always")
	}
	if meta.Version == "" {
		meta.Version = "dev"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := Build(ctx, Options{
		ModuleDir: *module, OutDir: *out, Tag: meta.Version, Platforms: plats, NVML: *nvml,
		CABundle: *ca, Meta: meta,
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	fmt.Printf("%s:%s\nindex %s\n", ImageName, meta.Version, res.Index)
	for _, p := range plats {
		fmt.Printf("%s %s\n", p, res.Images[p.String()])
	}
	return nil
}

// SourceDate is the time every timestamp of the image carries: epoch (the value of
// SOURCE_DATE_EPOCH, decimal seconds) when set, else commitTime()'s decimal seconds
// (the commit time; "" when unknown), else the Unix epoch. Errors: epoch set but not a
// non-negative integer.
func SourceDate(epoch string, commitTime func() string) (time.Time, error) {
	if epoch != "" {
		s, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil || s < 0 {
			return time.Time{}, fmt.Errorf("image: SOURCE_DATE_EPOCH=%q: want seconds since 1970", epoch)
		}
		return time.Unix(s, 0).UTC(), nil
	}
	if s, err := strconv.ParseInt(commitTime(), 10, 64); err == nil && s >= 0 {
		return time.Unix(s, 0).UTC(), nil
	}
	return time.Unix(0, 0).UTC(), nil
}

// git runs git in dir and returns its trimmed output, or "" when it fails.
func git(dir string, args ...string) string {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
