package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/")

var (
	testMeta = Meta{Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567",
		Licenses: "NOASSERTION", Created: time.Unix(1700000000, 0).UTC()}
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
)

// golden compares got with testdata/name, or rewrites it under -rewrite.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -rewrite updates it); got:\n%s", p, got)
	}
}

// listing is one line per tar entry: type, mode, uid:gid, size, mtime, name.
func listing(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b strings.Builder
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%c %04o %d:%d %d %d %s %q\n", h.Typeflag, h.Mode, h.Uid, h.Gid, h.Size,
			h.ModTime.Unix(), h.Name, h.Uname+h.Gname)
	}
	return []byte(b.String())
}

func TestBaseLayerGolden(t *testing.T) {
	raw, err := LayerTar(BaseFiles([]byte("CA\n")), testMeta.Created)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "base-layer.txt", listing(t, raw))
	again, _ := LayerTar(BaseFiles([]byte("CA\n")), testMeta.Created)
	if !bytes.Equal(raw, again) {
		t.Error("two LayerTar calls on the same files differ")
	}
}

func TestConfigGolden(t *testing.T) {
	img, err := Assemble(testMeta, amd64, []Layer{{Name: "base", Files: BaseFiles(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, cf, "", "  "); err != nil {
		t.Fatal(err)
	}
	golden(t, "config.json", append(pretty.Bytes(), '\n'))
}

func TestLayerTar(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []File
		want  string // listing names, or the error
	}{
		{"parents implied and sorted", []File{{Path: "/b/c/d", Mode: 0o600, Data: []byte("x")}, {Path: "/a", Mode: 0o644}},
			"a b/ b/c/ b/c/d"},
		{"explicit parent kept", []File{{Path: "/b/c", Mode: 0o644}, {Path: "/b", Dir: true, Mode: 0o700, UID: 7}},
			"b/ b/c"},
		{"relative path", []File{{Path: "etc/passwd"}}, `image: layer path "etc/passwd": want a clean absolute path`},
		{"unclean path", []File{{Path: "/etc/../passwd"}}, `image: layer path "/etc/../passwd": want a clean absolute path`},
		{"root", []File{{Path: "/", Dir: true}}, `image: layer path "/": want a clean absolute path`},
		{"duplicate", []File{{Path: "/a"}, {Path: "/a"}}, `image: layer path "/a" given twice`},
		{"file as parent", []File{{Path: "/a"}, {Path: "/a/b"}}, `image: "/a" is a file but holds "/a/b"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, err := LayerTar(c.files, testMeta.Created)
			if err != nil {
				if err.Error() != c.want {
					t.Fatalf("error %q, want %q", err, c.want)
				}
				return
			}
			var names []string
			for _, line := range strings.Split(strings.TrimSpace(string(listing(t, raw))), "\n") {
				f := strings.Fields(line)
				names = append(names, f[5])
			}
			if got := strings.Join(names, " "); got != c.want {
				t.Fatalf("entries %q, want %q", got, c.want)
			}
		})
	}
}

// TestAssembleDeterministic: the same inputs give the same digest; a change of time,
// content or platform gives another.
func TestAssembleDeterministic(t *testing.T) {
	layers := func(bin string) []Layer {
		return []Layer{{Name: "base", Files: BaseFiles([]byte("CA\n"))},
			{Name: "bin", Files: []File{{Path: BinaryPath, Mode: 0o755, Data: []byte(bin)}}}}
	}
	digest := func(m Meta, p v1.Platform, bin string) v1.Hash {
		img, err := Assemble(m, p, layers(bin))
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := digest(testMeta, amd64, "ELF")
	if again := digest(testMeta, amd64, "ELF"); again != base {
		t.Fatalf("same inputs, digests %s and %s", base, again)
	}
	later := testMeta
	later.Created = later.Created.Add(time.Second)
	for name, d := range map[string]v1.Hash{
		"created":  digest(later, amd64, "ELF"),
		"binary":   digest(testMeta, amd64, "ELF2"),
		"platform": digest(testMeta, v1.Platform{OS: "linux", Architecture: "arm64"}, "ELF"),
	} {
		if d == base {
			t.Errorf("another %s, same digest %s", name, d)
		}
	}
}

func TestParsePlatforms(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"linux/amd64", "[linux/amd64]"},
		{"linux/amd64, linux/arm64", "[linux/amd64 linux/arm64]"},
		{"linux/arm/v7", "[linux/arm/v7]"},
		{"", `image: --platforms: "": want os/arch[/variant]`},
		{"linux", `image: --platforms: "linux": want os/arch[/variant]`},
		{"linux//v7", `image: --platforms: "linux//v7": want os/arch[/variant]`},
		{"windows/amd64", `image: --platforms: "windows/amd64": only linux images are built`},
		{"linux/amd64,linux/amd64", `image: --platforms: "linux/amd64" given twice`},
	} {
		got, err := ParsePlatforms(c.in)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
		} else {
			var ps []string
			for _, p := range got {
				ps = append(ps, p.String())
			}
			s = "[" + strings.Join(ps, " ") + "]"
		}
		if s != c.want {
			t.Errorf("ParsePlatforms(%q) = %s, want %s", c.in, s, c.want)
		}
	}
}

func TestSourceDate(t *testing.T) {
	for _, c := range []struct{ epoch, commit, want string }{
		{"1700000000", "1", "2023-11-14T22:13:20Z"},
		{"", "1600000000", "2020-09-13T12:26:40Z"},
		{"", "", "1970-01-01T00:00:00Z"},
		{"", "garbage", "1970-01-01T00:00:00Z"},
		{"-5", "", `image: SOURCE_DATE_EPOCH="-5": want seconds since 1970`},
		{"1.5", "", `image: SOURCE_DATE_EPOCH="1.5": want seconds since 1970`},
	} {
		got, err := SourceDate(c.epoch, func() string { return c.commit })
		s := got.Format(time.RFC3339)
		if err != nil {
			s = err.Error()
		}
		if s != c.want {
			t.Errorf("SourceDate(%q, %q) = %s, want %s", c.epoch, c.commit, s, c.want)
		}
	}
}

func FuzzParsePlatforms(f *testing.F) {
	for _, s := range []string{"linux/amd64,linux/arm64", "linux/arm/v7", "", ",", "linux/a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePlatforms(s)
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.OS != "linux" || p.Architecture == "" {
				t.Fatalf("ParsePlatforms(%q) gave %v", s, p)
			}
		}
	})
}

func FuzzSourceDate(f *testing.F) {
	for _, s := range []string{"0", "1700000000", "-1", "x", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := SourceDate(s, func() string { return "" })
		if err == nil && s != "" && got.Unix() < 0 {
			t.Fatalf("SourceDate(%q) = %v", s, got)
		}
	})
}
