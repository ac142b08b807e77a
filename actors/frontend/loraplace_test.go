package frontend

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// placementCase is one case of testdata/lora_placement.json: workers (ready unless
// "ready": false; role aggregated unless given), the adapter's path, n, and the
// placement wanted.
type placementCase struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	N        int    `json:"n"`
	Unpinned bool   `json:"unpinned"` // the load's "pinned": false
	Workers  []struct {
		ID       string `json:"id"`
		Role     string `json:"role"`
		Ready    *bool  `json:"ready"`
		Max      int    `json:"max"`
		Held     int    `json:"held"`
		Pinned   int    `json:"pinned"`
		Known    int    `json:"known"`
		Load     int64  `json:"load"`
		Requests int32  `json:"requests"`
		Has      *struct {
			Path   string `json:"path"`
			Pinned bool   `json:"pinned"`
			Known  bool   `json:"known"`
		} `json:"has"`
	} `json:"workers"`
	Want struct {
		Send         []string `json:"send"`
		Held         []string `json:"held"`
		NoSlot       []string `json:"no_slot"`
		Conflict     string   `json:"conflict"`
		ConflictPath string   `json:"conflict_path"`
	} `json:"want"`
}

// TestPlaceLora runs the placement cases of testdata/lora_placement.json.
func TestPlaceLora(t *testing.T) {
	b, err := os.ReadFile("testdata/lora_placement.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []placementCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var ws []loraWorker
			for _, w := range c.Workers {
				role, ok := messages.ParseRole(w.Role)
				if !ok {
					t.Fatalf("role %q", w.Role)
				}
				lw := loraWorker{ID: w.ID, Role: role, Ready: w.Ready == nil || *w.Ready, MaxLoras: w.Max, Held: w.Held,
					Pinned: w.Pinned, Known: w.Known, Load: w.Load, Requests: w.Requests}
				if w.Has != nil {
					lw.Has = &loraHeld{Path: w.Has.Path, Pinned: w.Has.Pinned, Known: w.Has.Known}
				}
				ws = append(ws, lw)
			}
			got := placeLora(ws, c.Path, c.N, c.Unpinned)
			if !slices.Equal(got.Send, c.Want.Send) || !slices.Equal(got.Held, c.Want.Held) || !slices.Equal(got.NoSlot, c.Want.NoSlot) ||
				got.Conflict != c.Want.Conflict || got.ConflictPath != c.Want.ConflictPath {
				t.Errorf("placed %+v, want %+v", got, c.Want)
			}
		})
	}
}

// TestLoraWorkersFromStats: placement reads each worker's slots, load and the adapter
// being placed from the Router grain's stats.
func TestLoraWorkersFromStats(t *testing.T) {
	st := &messages.RouterStats{Workers: []*messages.WorkerStats{
		{WorkerId: "w0", Ready: true, Role: messages.Role_ROLE_DECODE, MaxLoras: 4, ActiveBlocks: 12, ActiveRequests: 2,
			Adapters: []*messages.LoraAdapter{{Name: "a", Path: "/a", Pinned: true}, {Name: "sql", Path: "/s"}, {Name: "b", Pinned: true}}},
		{WorkerId: "w1", MaxLoras: 2},
	}}
	got := loraWorkers(st, "sql")
	want := []loraWorker{
		{ID: "w0", Role: messages.Role_ROLE_DECODE, Ready: true, MaxLoras: 4, Held: 3, Pinned: 2, Load: 12, Requests: 2,
			Has: &loraHeld{Path: "/s"}},
		{ID: "w1", MaxLoras: 2},
	}
	if len(got) != 2 || got[0].Has == nil || *got[0].Has != *want[0].Has {
		t.Fatalf("got %+v", got)
	}
	got[0].Has, want[0].Has = nil, nil
	if got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
