package lmserver

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goldenKey is the key testdata/gen_golden.py packs (LMCache's key format:
// model@world_size@worker_id@chunk_hash_hex@dtype).
const goldenKey = "meta-llama/Llama-3.1-8B@1@0@1a2b3c4d5e6f7081@bfloat16"

// chunkBytes is one bf16 [2,32,256,1024] chunk (Llama-3.1-8B, 256 tokens): 32 MiB.
const chunkBytes = 2 * 32 * 256 * 1024 * 2

var chunkDesc = Desc{Fmt: FmtKV2LTD, Dtype: DtypeBF16, Shape: [4]int32{2, 32, 256, 1024}}

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var goldenRequests = []struct {
	file string
	req  Request
}{
	{"exist_request.bin", Request{Command: CmdExist, Desc: defaultDesc, Key: goldenKey}},
	{"get_request.bin", Request{Command: CmdGet, Desc: defaultDesc, Key: goldenKey}},
	{"put_request.bin", Request{Command: CmdPut, Length: chunkBytes, Desc: chunkDesc, Key: goldenKey}},
}

var goldenReplies = []struct {
	file string
	rep  Reply
}{
	{"exist_reply.bin", Reply{Code: CodeOK, Desc: defaultDesc}},
	{"miss_reply.bin", Reply{Code: CodeFail, Desc: defaultDesc}},
	{"get_reply.bin", Reply{Code: CodeOK, Length: chunkBytes, Desc: chunkDesc}},
}

func TestGoldenRequests(t *testing.T) {
	for _, tc := range goldenRequests {
		t.Run(tc.file, func(t *testing.T) {
			want := readGolden(t, tc.file)
			if len(want) != RequestLen {
				t.Fatalf("golden is %d bytes, want %d", len(want), RequestLen)
			}
			got, err := AppendRequest(nil, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("AppendRequest:\n got %x\nwant %x", got, want)
			}
			back, err := ParseRequest(want)
			if err != nil {
				t.Fatal(err)
			}
			if back != tc.req {
				t.Fatalf("ParseRequest = %+v, want %+v", back, tc.req)
			}
		})
	}
}

func TestGoldenReplies(t *testing.T) {
	for _, tc := range goldenReplies {
		t.Run(tc.file, func(t *testing.T) {
			want := readGolden(t, tc.file)
			if len(want) != ReplyLen {
				t.Fatalf("golden is %d bytes, want %d", len(want), ReplyLen)
			}
			if got := AppendReply(nil, tc.rep); !bytes.Equal(got, want) {
				t.Fatalf("AppendReply:\n got %x\nwant %x", got, want)
			}
			back, err := ParseReply(want)
			if err != nil {
				t.Fatal(err)
			}
			if back != tc.rep {
				t.Fatalf("ParseReply = %+v, want %+v", back, tc.rep)
			}
		})
	}
}

// TestExistGoldenLiteral pins the EXIST frame of docs/reference.md §9.4 independently of
// the testdata files: LE {3,0,1,2,0,0,0,0,0}, then the key space-padded to 150 bytes.
func TestExistGoldenLiteral(t *testing.T) {
	want := []byte{3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}
	want = append(want, make([]byte, 20)...)
	want = append(want, goldenKey+strings.Repeat(" ", KeyLen-len(goldenKey))...)
	if !bytes.Equal(want, readGolden(t, "exist_request.bin")) {
		t.Fatal("testdata/exist_request.bin differs from the literal frame")
	}
	reply := []byte{200, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}
	reply = append(reply, make([]byte, 20)...)
	if !bytes.Equal(reply, readGolden(t, "exist_reply.bin")) {
		t.Fatal("testdata/exist_reply.bin differs from the literal frame")
	}
}

func TestV0Header(t *testing.T) {
	v0 := readGolden(t, "v0_exist_request.bin")
	if len(v0) != v0RequestLen {
		t.Fatalf("v0 golden is %d bytes", len(v0))
	}
	if !IsV0(v0) {
		t.Fatal("IsV0(v0 header) = false")
	}
	// A v0 header followed by more traffic still parses as v0, never as a v1 request.
	if _, err := ParseRequest(append(v0, make([]byte, RequestLen)...)); !errors.Is(err, ErrV0Header) {
		t.Fatalf("ParseRequest(v0) error = %v, want ErrV0Header", err)
	}
	for _, tc := range goldenRequests {
		if IsV0(readGolden(t, tc.file)) {
			t.Fatalf("IsV0(%s) = true", tc.file)
		}
	}
}

func TestParseRequestErrors(t *testing.T) {
	base, _ := AppendRequest(nil, Request{Command: CmdGet, Desc: defaultDesc, Key: "k"})
	with := func(off int, v uint32) []byte {
		b := bytes.Clone(base)
		le.PutUint32(b[off:], v)
		return b
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"short", base[:RequestLen-1], ErrShortFrame},
		{"negative length", with(4, 0xffffffff), ErrBadLength},
		{"negative fmt (not text)", with(8, 0xffffffff), ErrBadHeader},
		{"huge dtype", with(12, 1<<20), ErrBadHeader},
		{"fmt that is key text", with(8, le.Uint32([]byte("vllm"))), ErrV0Header},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseRequest(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := AppendRequest(nil, Request{Key: strings.Repeat("k", KeyLen+1)}); !errors.Is(err, ErrKeyTooLong) {
		t.Fatalf("AppendRequest(151-byte key) error = %v", err)
	}
}

func TestKeyStrip(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"a@b", "a@b"},
		{"  a b \t\n", "a b"},
		{"", ""},
		{strings.Repeat("x", KeyLen), strings.Repeat("x", KeyLen)},
	} {
		b, err := AppendRequest(nil, Request{Command: CmdExist, Key: tc.raw})
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if r.Key != tc.want {
			t.Fatalf("key %q parsed as %q, want %q", tc.raw, r.Key, tc.want)
		}
	}
}

func TestMeta(t *testing.T) {
	d := Desc{Fmt: FmtKV2LTD, Dtype: DtypeBF16, Shape: [4]int32{2, 32, 256, 1024}, Location: 2}
	m := AppendMeta(nil, chunkBytes, d)
	if len(m) != MetaLen {
		t.Fatalf("meta is %d bytes", len(m))
	}
	if le.Uint32(m) != chunkBytes {
		t.Fatalf("meta length word = %d", le.Uint32(m))
	}
	if got, ok := ParseMeta(m); !ok || got != d {
		t.Fatalf("ParseMeta = %+v %v, want %+v", got, ok, d)
	}
	// LMCache's 28-byte RemoteMetadata (no location) reads as location 0.
	want := d
	want.Location = 0
	if got, ok := ParseMeta(m[:remoteMetaLen]); !ok || got != want {
		t.Fatalf("ParseMeta(28 bytes) = %+v %v, want %+v", got, ok, want)
	}
	if _, ok := ParseMeta(m[:remoteMetaLen-1]); ok {
		t.Fatal("ParseMeta(27 bytes) ok")
	}
}

// TestStructCrossCheck packs seeded random headers with Python's struct module (the
// packing LMCache uses) and compares them with ours, both ways.
func TestStructCrossCheck(t *testing.T) {
	py := "/usr/bin/python3" // Debian's, preferred to any wrapper on PATH
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			t.Skip("python3 not installed (Debian package python3): struct cross-check skipped")
		}
	}
	rng := rand.New(rand.NewPCG(15, 4))
	type frame struct {
		Kind string  `json:"kind"` // "req" or "rep"
		Ints []int32 `json:"ints"`
		Key  string  `json:"key"`
		Hex  string  `json:"hex"` // our encoding
	}
	var frames []frame
	for i := 0; i < 40; i++ {
		d := Desc{Fmt: Fmt(rng.IntN(7)), Dtype: Dtype(rng.IntN(9)), Location: rng.Int32N(3)}
		for j := range d.Shape {
			d.Shape[j] = rng.Int32N(4096)
		}
		key := randomKey(rng)
		req := Request{Command: Command(1 + rng.IntN(5)), Length: rng.Int32(), Desc: d, Key: key}
		b, err := AppendRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frame{Kind: "req", Key: key, Hex: hex.EncodeToString(b), Ints: []int32{
			int32(req.Command), req.Length, int32(d.Fmt), int32(d.Dtype), d.Location,
			d.Shape[0], d.Shape[1], d.Shape[2], d.Shape[3]}})
		rep := Reply{Code: []Code{CodeOK, CodeFail}[rng.IntN(2)], Length: rng.Int32(), Desc: d}
		frames = append(frames, frame{Kind: "rep", Hex: hex.EncodeToString(AppendReply(nil, rep)), Ints: []int32{
			int32(rep.Code), rep.Length, int32(d.Fmt), int32(d.Dtype),
			d.Shape[0], d.Shape[1], d.Shape[2], d.Shape[3], d.Location}})
	}
	in, _ := json.Marshal(frames)
	const script = `
import json, struct, sys
out = []
for f in json.load(sys.stdin):
    ours = bytes.fromhex(f["hex"])
    if f["kind"] == "req":
        packed = struct.pack("iiiiiiiii150s", *f["ints"], f["key"].encode().ljust(150))
        *ints, key = struct.unpack("iiiiiiiii150s", ours)
        back = (ints == f["ints"] and key.decode().strip() == f["key"])
    else:
        packed = struct.pack("iiiiiiiii", *f["ints"])
        back = list(struct.unpack("iiiiiiiii", ours)) == f["ints"]
    out.append({"hex": packed.hex(), "size": struct.calcsize("iiiiiiiii150s" if f["kind"] == "req" else "iiiiiiiii"), "back": back})
print(json.dumps(out))
`
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = bytes.NewReader(in)
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got []struct {
		Hex  string `json:"hex"`
		Size int    `json:"size"`
		Back bool   `json:"back"`
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(frames) {
		t.Fatalf("python3 answered %d frames, want %d", len(got), len(frames))
	}
	for i, f := range frames {
		wantSize := RequestLen
		if f.Kind == "rep" {
			wantSize = ReplyLen
		}
		if got[i].Size != wantSize {
			t.Fatalf("struct.calcsize = %d, want %d", got[i].Size, wantSize)
		}
		if got[i].Hex != f.Hex {
			t.Fatalf("frame %d (%s): struct.pack\n %s\nours\n %s", i, f.Kind, got[i].Hex, f.Hex)
		}
		if !got[i].Back {
			t.Fatalf("frame %d (%s): struct.unpack of ours differs from the fields", i, f.Kind)
		}
	}
}

func randomKey(rng *rand.Rand) string {
	const alpha = "abcdefghijklmnopqrstuvwxyz0123456789@/-._"
	n := 1 + rng.IntN(KeyLen)
	b := make([]byte, n)
	for i := range b {
		b[i] = alpha[rng.IntN(len(alpha))]
	}
	return string(b)
}
