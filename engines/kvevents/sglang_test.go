package kvevents

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/turbine-llm/turbine/kv"
)

// readHexFixture reads testdata/name: hex bytes, spaces between them allowed, '#' to the
// end of a line a comment.
func readHexFixture(t *testing.T, name string) []byte {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(text), "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// TestSGLangSaltedBlockStored decodes SGLang's salted BlockStored events in both layouts
// SGLang has published (testdata/sglang_salt_*.hex name their sources): the metadata
// map's cache_salt is the salt of an event that starts a sequence (a continuation
// inherits its parent's), and token ids, hashes, parents and media read as in the
// unsalted events.
func TestSGLangSaltedBlockStored(t *testing.T) {
	const h1 = uint64(0xaaaaaaaaaaaaaaaa) // -6148914691236517206 as two's complement
	cases := []struct {
		fixture string
		// shape the independent decoder must see: the element count of each event and
		// the index of the metadata map in the first
		lens   []int
		metaAt int
		want   kv.Batch
	}{
		{
			fixture: "sglang_salt_in_lora_slot.hex",
			lens:    []int{8, 7, 3, 1},
			metaAt:  7,
			want: kv.Batch{Timestamp: 1754000000.25, DataParallelRank: 1, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{h1, 0x1122334455667788}, HasParent: true,
					ParentHash: 0x0102030405060708, TokenIDs: []uint32{1, 200, 70000, 128000}, BlockSize: 2, Medium: "GPU"},
				{Kind: kv.BlockStored, EngineHashes: []uint64{5}, HasParent: true, ParentHash: 0x1122334455667788,
					TokenIDs: []uint32{9, 10}, BlockSize: 2, Medium: "CPU_PINNED"},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{h1}, Medium: "GPU"},
				{Kind: kv.AllBlocksCleared},
			}},
		},
		{
			fixture: "sglang_salt_in_extra_keys.hex",
			lens:    []int{15, 8, 2},
			metaAt:  14,
			want: kv.Batch{Timestamp: 1754000000.25, DataParallelRank: 0, Events: []kv.Event{
				{Kind: kv.BlockStored, EngineHashes: []uint64{h1}, TokenIDs: []uint32{8000, 128000}, BlockSize: 2, Medium: "GPU",
					CacheSalt: "tenant-a"},
				{Kind: kv.BlockRemoved, EngineHashes: []uint64{h1}, Medium: "GPU"},
				{Kind: kv.AllBlocksCleared},
			}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.fixture, func(t *testing.T) {
			payload := readHexFixture(t, tc.fixture)
			tree, rest, err := msgp.ReadIntfBytes(payload)
			if err != nil || len(rest) != 0 {
				t.Fatalf("independent decoder: %v (%d bytes left)", err, len(rest))
			}
			events := tree.([]any)[1].([]any)
			for i, ev := range events {
				if n := len(ev.([]any)); i >= len(tc.lens) || n != tc.lens[i] {
					t.Fatalf("fixture event %d has %d elements, want %v", i, n, tc.lens)
				}
			}
			meta, ok := events[0].([]any)[tc.metaAt].(map[string]any)
			if !ok || meta["cache_salt"] != "tenant-a" {
				t.Fatalf("fixture metadata %#v", events[0].([]any)[tc.metaAt])
			}
			got, err := DecodePayload(payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
