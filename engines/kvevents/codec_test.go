package kvevents

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/turbine-llm/turbine/kv"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// The tests build vLLM-shaped payloads with an independent msgpack implementation
// (tinylib/msgp) so that the decoder is not only checked against its own encoder.
type mp func([]byte) []byte

func arr(items ...mp) mp {
	return func(b []byte) []byte {
		b = msgp.AppendArrayHeader(b, uint32(len(items)))
		for _, it := range items {
			b = it(b)
		}
		return b
	}
}

// obj takes alternating string keys and values.
func obj(kvs ...any) mp {
	return func(b []byte) []byte {
		b = msgp.AppendMapHeader(b, uint32(len(kvs)/2))
		for i := 0; i < len(kvs); i += 2 {
			b = msgp.AppendString(b, kvs[i].(string))
			b = kvs[i+1].(mp)(b)
		}
		return b
	}
}

func s(v string) mp         { return func(b []byte) []byte { return msgp.AppendString(b, v) } }
func u(v uint64) mp         { return func(b []byte) []byte { return msgp.AppendUint64(b, v) } }
func i64(v int64) mp        { return func(b []byte) []byte { return msgp.AppendInt64(b, v) } }
func f64(v float64) mp      { return func(b []byte) []byte { return msgp.AppendFloat64(b, v) } }
func bin(v []byte) mp       { return func(b []byte) []byte { return msgp.AppendBytes(b, v) } }
func boolean(v bool) mp     { return func(b []byte) []byte { return msgp.AppendBool(b, v) } }
func nilv() mp              { return func(b []byte) []byte { return msgp.AppendNil(b) } }
func build(m mp) []byte     { return m(nil) }
func raw(p ...byte) mp      { return func(b []byte) []byte { return append(b, p...) } }
func ints(vs ...int64) []mp { return mapSlice(vs, i64) }
func mapSlice[T any](vs []T, f func(T) mp) []mp {
	out := make([]mp, len(vs))
	for i, v := range vs {
		out[i] = f(v)
	}
	return out
}

const bigHash uint64 = 0xfedcba9876543210

func TestDecodeVLLMShapes(t *testing.T) {
	tokens8 := ints(1, 2, 3, 4, 5, 6, 7, 8)
	sha := bytes.Repeat([]byte{0xab}, 24)
	sha = append(sha, 0, 0, 0, 0, 0, 0, 0x01, 0x02)
	cases := []struct {
		name    string
		payload []byte
		want    kv.Batch
	}{
		{
			name: "array form, unsigned hashes, full field list",
			payload: build(arr(f64(1700000000.5), arr(
				arr(s("BlockStored"), arr(u(bigHash), u(7)), u(99), arr(tokens8...), i64(4), nilv(), s("GPU"), nilv()),
				arr(s("BlockRemoved"), arr(u(bigHash)), s("GPU")),
				arr(s("AllBlocksCleared")),
			), i64(0))),
			want: kv.Batch{Timestamp: 1700000000.5, DataParallelRank: 0, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{bigHash, 7}, HasParent: true, ParentHash: 99,
					TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{bigHash}, Medium: "GPU"},
				{Kind: kv.AllBlocksCleared},
			}},
		},
		{
			name: "signed hashes (two's complement) and signed parent",
			payload: build(arr(f64(2), arr(
				arr(s("BlockStored"), arr(i64(-5)), i64(-1), arr(ints(9, 9)...), i64(2), nilv(), nilv(), s("my-lora")),
				arr(s("BlockRemoved"), arr(i64(-5), i64(12)), nilv()),
			), i64(3))),
			want: kv.Batch{Timestamp: 2, DataParallelRank: 3, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{^uint64(4)}, HasParent: true, ParentHash: ^uint64(0),
					TokenIDs: []uint32{9, 9}, BlockSize: 2, LoraName: "my-lora"},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{^uint64(4), 12}},
			}},
		},
		{
			name: "bytes hashes (sha256): low 64 bits of the big-endian value",
			payload: build(arr(f64(3), arr(
				arr(s("BlockStored"), arr(bin(sha)), bin([]byte{1, 0}), arr(ints(5)...), i64(1), nilv(), nilv(), nilv()),
			), nilv())),
			want: kv.Batch{Timestamp: 3, DataParallelRank: -1, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{0x0102}, HasParent: true, ParentHash: 0x0100,
					TokenIDs: []uint32{5}, BlockSize: 1},
			}},
		},
		{
			name: "map form batch and events (msgspec structs without array_like)",
			payload: build(obj(
				"ts", f64(4.25),
				"events", arr(
					obj("type", s("BlockStored"), "block_hashes", arr(u(11)), "parent_block_hash", nilv(),
						"token_ids", arr(ints(1, 2)...), "block_size", i64(2), "lora_id", nilv(),
						"medium", s("GPU"), "lora_name", nilv(),
						"extra_keys", arr(arr(s("salt"), i64(1))), "group_idx", i64(0),
						"kv_cache_spec_kind", s("full_attention"), "kv_cache_spec_sliding_window", nilv()),
					obj("block_hashes", arr(u(11)), "type", s("BlockRemoved"), "medium", s("CPU_PINNED"), "group_idx", i64(0)),
					obj("type", s("AllBlocksCleared")),
				),
				"data_parallel_rank", i64(1),
			)),
			want: kv.Batch{Timestamp: 4.25, DataParallelRank: 1, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{11}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: "GPU"},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{11}, Medium: "CPU_PINNED"},
				{Kind: kv.AllBlocksCleared},
			}},
		},
		{
			name: "trailing fields of newer engines are ignored",
			payload: build(arr(f64(5), arr(
				arr(s("BlockStored"), arr(u(1)), nilv(), arr(ints(7)...), i64(1), nilv(), s("GPU"), nilv(),
					arr(nilv()), i64(0), s("sliding_window"), i64(4096), obj("future", arr(arr(arr())))),
				arr(s("BlockRemoved"), arr(u(1)), nilv(), i64(0), s("more")),
				arr(s("AllBlocksCleared"), boolean(true)),
			), i64(0), s("trailing batch field"))),
			want: kv.Batch{Timestamp: 5, DataParallelRank: 0, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{1}, TokenIDs: []uint32{7}, BlockSize: 1, Medium: "GPU"},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{1}},
				{Kind: kv.AllBlocksCleared},
			}},
		},
		{
			name: "older engines: two-element batch, BlockStored without medium, BlockRemoved without medium",
			payload: build(arr(i64(6), arr(
				arr(s("BlockStored"), arr(u(2)), u(1), arr(ints(3, 4)...), i64(2), nilv()),
				arr(s("BlockRemoved"), arr(u(2))),
			))),
			want: kv.Batch{Timestamp: 6, DataParallelRank: -1, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{2}, HasParent: true, ParentHash: 1, TokenIDs: []uint32{3, 4}, BlockSize: 2},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{2}},
			}},
		},
		{
			name: "unknown event types are skipped",
			payload: build(arr(f64(7), arr(
				arr(s("BlockPinned"), arr(u(1)), obj("x", arr())),
				obj("type", s("SomethingNew"), "payload", arr(u(1))),
				arr(s("AllBlocksCleared")),
			), i64(0))),
			want: kv.Batch{Timestamp: 7, DataParallelRank: 0, Events: []kv.Event{{Kind: kv.AllBlocksCleared}}},
		},
		{
			name:    "empty batch",
			payload: build(arr(f64(8), arr(), i64(0))),
			want:    kv.Batch{Timestamp: 8, DataParallelRank: 0, Events: []kv.Event{}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePayload(tc.payload)
			if err != nil {
				t.Fatalf("DecodePayload: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	deep := nilv()
	for i := 0; i < 40; i++ {
		deep = arr(deep)
	}
	valid := build(arr(f64(1), arr(arr(s("AllBlocksCleared"))), i64(0)))
	cases := []struct {
		name, wantErr string
		payload       []byte
	}{
		{"empty", "truncated", nil},
		{"scalar batch", "want array or map, got integer", build(i64(1))},
		{"short batch", "array of 1 elements", build(arr(f64(1)))},
		{"ts string", "batch ts: want float, got string", build(arr(s("x"), arr(), nilv()))},
		{"events not array", "events: want array, got map", build(arr(f64(1), obj(), nilv()))},
		{"truncated float", "truncated", valid[:5]},
		{"truncated string", "exceeds", valid[:len(valid)-3]},
		{"trailing bytes", "trailing bytes", append(append([]byte{}, valid...), 0x01)},
		{"length bomb", "exceeds", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"string length bomb", "exceeds", append(build(arr(f64(1), arr(raw(0x91, 0xdb, 0x7f, 0xff, 0xff, 0xff)))), 'x')},
		{"token count mismatch", "3 token_ids for 1 blocks of 2 tokens",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(ints(1, 2, 3)...), i64(2), nilv(), nilv(), nilv())), nilv()))},
		{"zero block size", "block_size 0 out of range",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(), nilv(), arr(), i64(0))), nilv()))},
		{"negative token", "token id -1 out of range",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(i64(-1)), i64(1))), nilv()))},
		{"float hash", "want integer or bytes, got float",
			build(arr(f64(1), arr(arr(s("BlockRemoved"), arr(f64(1.5)))), nilv()))},
		{"nil hash", "want integer or bytes, got nil",
			build(arr(f64(1), arr(arr(s("BlockRemoved"), arr(nilv()))), nilv()))},
		{"stored too few fields", "BlockStored: 2 fields, want at least 4",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(), nilv())), nilv()))},
		{"map event without type", `without "type"`,
			build(arr(f64(1), arr(obj("block_hashes", arr())), nilv()))},
		{"map stored missing fields", "BlockStored map without",
			build(arr(f64(1), arr(obj("type", s("BlockStored"), "block_hashes", arr())), nilv()))},
		{"map batch without events", `without "ts" or "events"`, build(obj("ts", f64(1)))},
		{"empty event", "empty event array", build(arr(f64(1), arr(arr()), nilv()))},
		{"deep nesting", "nested deeper", build(arr(f64(1), arr(arr(s("AllBlocksCleared"), deep)), nilv()))},
		{"negative rank", "data_parallel_rank -2 out of range", build(arr(f64(1), arr(), i64(-2)))},
		{"lora_name an array", "lora_name: want string, got array",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(ints(1)...), i64(1), nilv(), nilv(), arr(s("x")))), nilv()))},
		{"metadata map cut short", "BlockStored metadata: truncated",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(ints(1)...), i64(1), nilv(), nilv(), raw(0x81, 0xaa))), nilv()))},
		{"medium not string", "medium: want string, got integer",
			build(arr(f64(1), arr(arr(s("BlockRemoved"), arr(), i64(3))), nilv()))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePayload(tc.payload)
			if err == nil {
				t.Fatalf("DecodePayload succeeded, want error containing %q", tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "kvevents: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want prefix kvevents: and %q", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeMessageFrames(t *testing.T) {
	payload := build(arr(f64(1), arr(), i64(0)))
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, 0x0102030405060708)
	topic, b, err := DecodeMessage([][]byte{[]byte("kv-events"), seq, payload})
	if err != nil {
		t.Fatal(err)
	}
	if topic != "kv-events" || b.Seq != 0x0102030405060708 {
		t.Fatalf("topic %q seq %x", topic, b.Seq)
	}
	for _, tc := range []struct {
		frames  [][]byte
		wantErr string
	}{
		{[][]byte{seq, payload}, "2 frames"},
		{[][]byte{nil, seq[:4], payload}, "sequence frame has 4 bytes"},
		{[][]byte{nil, seq, {0xc1}}, "decode payload"},
	} {
		if _, _, err := DecodeMessage(tc.frames); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("DecodeMessage: %v, want %q", err, tc.wantErr)
		}
	}
}

func goldenBatch() kv.Batch {
	return kv.Batch{
		Seq:              7,
		Timestamp:        1700000000.25,
		DataParallelRank: 0,
		Events: []kv.Event{
			{Kind: kv.BlockStored, EngineHashes: []uint64{bigHash, 300}, HasParent: true, ParentHash: 42,
				TokenIDs: []uint32{1, 2, 3, 70000, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
			{Kind: kv.BlockStored, EngineHashes: []uint64{5}, TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4,
				LoraName: "adapter-a"},
			{Kind: kv.BlockRemoved, EngineHashes: []uint64{bigHash, 300}, Medium: "GPU"},
			{Kind: kv.AllBlocksCleared},
		},
	}
}

// TestGoldenPayload pins the encoder's bytes (testdata/batch.msgpack, regenerate with
// -update) and checks them with the independent decoder.
func TestGoldenPayload(t *testing.T) {
	got, err := EncodePayload(goldenBatch())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "batch.msgpack")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded payload differs from %s:\ngot  %x\nwant %x", path, got, want)
	}
	tree, rest, err := msgp.ReadIntfBytes(want)
	if err != nil || len(rest) != 0 {
		t.Fatalf("independent decoder: %v (%d bytes left)", err, len(rest))
	}
	expect := []any{1700000000.25, []any{
		[]any{"BlockStored", []any{bigHash, uint64(300)}, uint64(42), []any{uint64(1), uint64(2), uint64(3), uint64(70000), uint64(5), uint64(6), uint64(7), uint64(8)}, uint64(4), nil, "GPU", nil},
		[]any{"BlockStored", []any{uint64(5)}, nil, []any{uint64(9), uint64(10), uint64(11), uint64(12)}, uint64(4), nil, nil, "adapter-a"},
		[]any{"BlockRemoved", []any{bigHash, uint64(300)}, "GPU"},
		[]any{"AllBlocksCleared"},
	}, uint64(0)}
	if n := Normalize(tree); !reflect.DeepEqual(n, expect) {
		t.Fatalf("independent decode:\ngot  %#v\nwant %#v", n, expect)
	}
	b, err := DecodePayload(want)
	if err != nil {
		t.Fatal(err)
	}
	b.Seq = 7
	if !reflect.DeepEqual(b, goldenBatch()) {
		t.Fatalf("round trip:\ngot  %+v\nwant %+v", b, goldenBatch())
	}
}

func TestEncodeMessageAndErrors(t *testing.T) {
	frames, err := EncodeMessage("kv-events", goldenBatch())
	if err != nil {
		t.Fatal(err)
	}
	if string(frames[0]) != "kv-events" || !bytes.Equal(frames[1], []byte{0, 0, 0, 0, 0, 0, 0, 7}) {
		t.Fatalf("frames %q %x", frames[0], frames[1])
	}
	bad := []kv.Event{
		{Kind: 9},
		{Kind: kv.BlockStored, EngineHashes: []uint64{1}, TokenIDs: []uint32{1}, BlockSize: 2},
		{Kind: kv.BlockStored, EngineHashes: []uint64{1}, BlockSize: 0},
	}
	for _, e := range bad {
		if _, err := EncodePayload(kv.Batch{Events: []kv.Event{e}}); err == nil || !strings.HasPrefix(err.Error(), "kvevents: encode event 0") {
			t.Errorf("EncodePayload(%+v) = %v, want an encode error", e, err)
		}
	}
}

// Normalize turns the independent decoder's integers into uint64 (non-negative) or int64
// (negative) so trees compare regardless of the width the encoder chose.
func Normalize(v any) any {
	switch x := v.(type) {
	case int64:
		if x >= 0 {
			return uint64(x)
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = Normalize(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = Normalize(e)
		}
		return out
	}
	return v
}

func FuzzDecodePayload(f *testing.F) {
	if p, err := EncodePayload(goldenBatch()); err == nil {
		f.Add(p)
	}
	f.Add(build(obj("ts", f64(1), "events", arr(obj("type", s("BlockRemoved"), "block_hashes", arr(i64(-3)))), "data_parallel_rank", nilv())))
	f.Add(build(arr(f64(1), arr(arr(s("BlockStored"), arr(bin([]byte{1, 2})), nilv(), arr(ints(1)...), i64(1), nilv(), nilv(), nilv(), arr())), i64(0))))
	f.Add(build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(ints(1)...), i64(1), nilv(), s("GPU"),
		obj("cache_salt", s("tenant-a")))), i64(0)))) // SGLang's BlockStoredWithMetadata
	f.Add([]byte{0x93, 0xcb})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodePayload(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kvevents: ") {
				t.Fatalf("error without package prefix: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode, and decode to the same batch again.
		p, err := EncodePayload(b)
		if err != nil {
			t.Fatalf("re-encode of a decoded batch: %v", err)
		}
		b2, err := DecodePayload(p)
		if err != nil {
			t.Fatalf("decode of re-encoded batch: %v", err)
		}
		if b.Timestamp != b2.Timestamp && !(b.Timestamp != b.Timestamp) { // NaN never equals
			t.Fatalf("timestamp %v became %v", b.Timestamp, b2.Timestamp)
		}
		b.Timestamp, b2.Timestamp = 0, 0
		if !reflect.DeepEqual(normalizeBatch(b), normalizeBatch(b2)) {
			t.Fatalf("round trip changed the batch:\n%+v\n%+v", b, b2)
		}
	})
}

// normalizeBatch maps nil and empty slices together for comparison.
func normalizeBatch(b kv.Batch) kv.Batch {
	for i := range b.Events {
		e := &b.Events[i]
		if len(e.EngineHashes) == 0 {
			e.EngineHashes = nil
		}
		if len(e.TokenIDs) == 0 {
			e.TokenIDs = nil
		}
	}
	if len(b.Events) == 0 {
		b.Events = nil
	}
	return b
}

// BenchmarkDecodePayload decodes a batch of 16 BlockStored events of 4 blocks of 16 tokens.
func BenchmarkDecodePayload(b *testing.B) {
	var evs []kv.Event
	for i := 0; i < 16; i++ {
		toks := make([]uint32, 64)
		for j := range toks {
			toks[j] = uint32(i*1000 + j)
		}
		evs = append(evs, kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{bigHash, 2, 3, uint64(i)}, HasParent: true, ParentHash: 9,
			TokenIDs: toks, BlockSize: 16, Medium: "GPU"})
	}
	p, err := EncodePayload(kv.Batch{Timestamp: 1, Events: evs})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := DecodePayload(p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N*len(evs)*4)/b.Elapsed().Seconds(), "blocks/s")
}

// realisticBatch returns a batch as a vLLM engine with a 128,256-token vocabulary
// (Llama 3) publishes it: 16 chained BlockStored events of 1 to 8 blocks of blockSize
// tokens, random 64-bit block hashes, token ids uniform over the vocabulary, then one
// BlockRemoved of 8 blocks. It also returns the number of blocks (stored plus removed).
func realisticBatch(blockSize int) (kv.Batch, int) {
	rng := rand.New(rand.NewPCG(1, uint64(blockSize)))
	b := kv.Batch{Timestamp: 1700000000.125, DataParallelRank: 0}
	blocks := 0
	var parent uint64
	for i := 0; i < 16; i++ {
		n := 1 + rng.IntN(8)
		hs := make([]uint64, n)
		for j := range hs {
			hs[j] = rng.Uint64()
		}
		toks := make([]uint32, n*blockSize)
		for j := range toks {
			toks[j] = uint32(rng.IntN(128256))
		}
		b.Events = append(b.Events, kv.Event{Kind: kv.BlockStored, EngineHashes: hs, HasParent: i > 0,
			ParentHash: parent, TokenIDs: toks, BlockSize: blockSize, Medium: "GPU"})
		parent = hs[n-1]
		blocks += n
	}
	removed := make([]uint64, 8)
	for j := range removed {
		removed[j] = rng.Uint64()
	}
	b.Events = append(b.Events, kv.Event{Kind: kv.BlockRemoved, EngineHashes: removed, Medium: "GPU"})
	return b, blocks + len(removed)
}

// BenchmarkDecodeMessage decodes the ZeroMQ frames of realisticBatch, as the subscriber
// does for every message, at block sizes 16 and 64.
func BenchmarkDecodeMessage(b *testing.B) {
	for _, bs := range []int{16, 64} {
		b.Run(fmt.Sprintf("block-size=%d", bs), func(b *testing.B) {
			batch, blocks := realisticBatch(bs)
			frames, err := EncodeMessage("kv-events", batch)
			if err != nil {
				b.Fatal(err)
			}
			if _, got, err := DecodeMessage(frames); err != nil || !reflect.DeepEqual(normalizeBatch(got), normalizeBatch(batch)) {
				b.Fatalf("decode: %v", err)
			}
			b.SetBytes(int64(len(frames[2])))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := DecodeMessage(frames); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*blocks)/b.Elapsed().Seconds(), "blocks/s")
			b.ReportMetric(float64(len(frames[2])), "payload-bytes")
		})
	}
}

// TestDecodeIntegerAndSkipForms covers every msgpack form the fast paths of the decoder
// hand over to the general one: token ids and hashes in each integer width and sign,
// float32 timestamps, extension values and bytes in skipped fields, unknown events and
// repeated map keys between kept events.
func TestDecodeIntegerAndSkipForms(t *testing.T) {
	toks := arr(
		raw(0x05),                         // positive fixnum
		raw(0xcc, 0xc8),                   // uint8 200
		raw(0xcd, 0x01, 0x00),             // uint16 256
		raw(0xce, 0x00, 0x01, 0x00, 0x00), // uint32 65536
		raw(0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff), // uint64 2^32-1
		raw(0xd0, 0x7f),                      // int8 127
		raw(0xd1, 0x01, 0x00),                // int16 256
		raw(0xd2, 0x00, 0x02, 0x00, 0x00),    // int32 131072
		raw(0xd3, 0, 0, 0, 0, 0, 0, 0, 0x09), // int64 9
		raw(0xcd, 0xff, 0xff),                // uint16 65535 as the last value (fewer than 5 bytes may follow)
	)
	hashes := arr(
		raw(0xcf, 0xff, 0, 0, 0, 0, 0, 0, 0x01),
		raw(0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe), // int64 -2
		raw(0xd0, 0xff), // int8 -1
		raw(0xe0),       // negative fixnum -32
		raw(0x07),
	)
	payload := build(arr(raw(0xca, 0x3f, 0xc0, 0, 0), arr( // float32 1.5
		arr(s("BlockRemoved"), arr(u(1), u(2)), nilv(), raw(0xd4, 0x01, 0xaa), raw(0xc7, 0x02, 0x05, 1, 2),
			raw(0xd8, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), bin([]byte{1, 2, 3}), f64(2.5), raw(0xca, 0, 0, 0, 0)),
		arr(s("BlockPinned"), arr(u(3), u(4)), arr(ints(1, 2)...)),
		obj("type", s("BlockStored"), "block_hashes", arr(u(8)), "block_hashes", hashes,
			"token_ids", arr(ints(1)...), "token_ids", toks, "block_size", i64(2), "parent_block_hash", nilv()),
		obj("type", s("BlockRemoved"), "block_hashes", arr(u(6)), "token_ids", arr(ints(1, 2)...)),
		obj("type", s("Unknown"), "block_hashes", arr(u(5))),
		arr(s("BlockStored"), arr(u(9)), u(8), arr(ints(70000, 3)...), i64(2), i64(4), s("GPU"), s("lora-x")),
	), i64(1)))
	want := kv.Batch{Timestamp: 1.5, DataParallelRank: 1, Events: []kv.Event{
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{1, 2}},
		{Kind: kv.BlockStored, EngineHashes: []uint64{0xff00000000000001, ^uint64(1), ^uint64(0), ^uint64(31), 7},
			TokenIDs: []uint32{5, 200, 256, 65536, 0xffffffff, 127, 256, 131072, 9, 65535}, BlockSize: 2},
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{6}},
		{Kind: kv.BlockStored, EngineHashes: []uint64{9}, HasParent: true, ParentHash: 8, TokenIDs: []uint32{70000, 3},
			BlockSize: 2, Medium: "GPU", LoraName: "lora-x"},
	}}
	got, err := DecodePayload(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// The events share backing arrays; appending to one must not change the next.
	got.Events[1].TokenIDs = append(got.Events[1].TokenIDs, 42)
	got.Events[0].EngineHashes = append(got.Events[0].EngineHashes, 42)
	if got.Events[3].TokenIDs[0] != 70000 || got.Events[1].EngineHashes[0] != 0xff00000000000001 {
		t.Fatalf("append to one event's slice changed another: %+v", got.Events)
	}

	for _, tc := range []struct {
		name, wantErr string
		payload       []byte
	}{
		{"token uint64 above uint32", "token_ids[0]: token id 4294967296 out of range",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(raw(0xcf, 0, 0, 0, 1, 0, 0, 0, 0)), i64(1))), nilv()))},
		{"token uint64 above int64", "token_ids[0]: token_ids: 18446744073709551615 out of range",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(u(^uint64(0))), i64(1))), nilv()))},
		{"token string", "token_ids[1]: token_ids: want integer, got string",
			build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(i64(1), s("x")), i64(2))), nilv()))},
		{"truncated token", "truncated", build(arr(f64(1), arr(arr(s("BlockStored"), arr(u(1)), nilv(), arr(raw(0xce, 0, 1)), i64(1)))))},
		{"truncated hash", "truncated", build(arr(f64(1), arr(arr(s("BlockRemoved"), arr(raw(0xcf, 0, 1))))))},
		{"empty bytes hash", "block_hashes[1]: empty bytes",
			build(arr(f64(1), arr(arr(s("BlockRemoved"), arr(u(1), bin(nil)))), nilv()))},
		{"unknown code in skipped field", "unknown msgpack code 0xc1",
			build(arr(f64(1), arr(arr(s("AllBlocksCleared"), raw(0xc1))), nilv()))},
		{"truncated extension", "truncated", build(arr(f64(1), arr(arr(s("AllBlocksCleared"), raw(0xc8, 0xff))), nilv()))},
		{"map length bomb", "batch: length", []byte{0xdf, 0x7f, 0xff, 0xff, 0xff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePayload(tc.payload)
			if err == nil || !strings.HasPrefix(err.Error(), "kvevents: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
