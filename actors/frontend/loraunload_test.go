package frontend

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// TestUnloadEverywhere: an unload asks the workers that hold or know the adapter, then
// every other ready worker with adapter slots, where a load of it may be under way (the
// router's stats list an adapter only once loaded): one that is loading it answers
// LORA_ENGINE (unload it once it is loaded), and its line is kept; those that have
// nothing to unload (LORA_NOT_FOUND) or do not answer are left out, so that an adapter
// nobody has is still the 404 it was. Workers not ready or without slots are not asked.
func TestUnloadEverywhere(t *testing.T) {
	type line struct {
		id      string
		failure messages.LoraFailure
	}
	held := &messages.LoraAdapter{Name: "sql", Path: "/sql"}
	for _, tc := range []struct {
		name    string
		holders map[string][]*messages.LoraAdapter
		loading bool // w1 is loading the adapter
		want    []line
	}{
		{"nobody has it", nil, false, nil},
		{"a load under way, none held", nil, true, []line{{"w1", messages.LoraFailure_LORA_ENGINE}}},
		{"held by w0, loading on w1", map[string][]*messages.LoraAdapter{"w0": {held}}, true,
			[]line{{"w0", messages.LoraFailure_LORA_OK}, {"w1", messages.LoraFailure_LORA_ENGINE}}},
		{"held by w0 only", map[string][]*messages.LoraAdapter{"w0": {held}}, false, []line{{"w0", messages.LoraFailure_LORA_OK}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w1 := messages.LoraFailure_LORA_NOT_FOUND
			if tc.loading {
				w1 = messages.LoraFailure_LORA_ENGINE
			}
			ws := []*loraWorkerActor{
				{id: "w0"}, // answers OK: it holds the adapter when the stats say so
				{id: "w1", failure: w1},
				{id: "w2", failure: messages.LoraFailure_LORA_NOT_FOUND},
				{id: "w3", silent: true},
				{id: "w4", failure: messages.LoraFailure_LORA_ENGINE}, // not ready
				{id: "w5", failure: messages.LoraFailure_LORA_ENGINE}, // no adapter slots
			}
			if tc.holders == nil {
				ws[0].failure = messages.LoraFailure_LORA_NOT_FOUND
			}
			st, ask := loraCluster(t, 200*time.Millisecond, ws, tc.holders)
			st.Workers[4].Ready = false
			st.Workers[5].MaxLoras = 0
			res := unloadEverywhere(context.Background(), ask, st, gateway.LoraUnload{Model: "m", Name: "sql"})
			var got []line
			for _, w := range res.Workers {
				got = append(got, line{w.WorkerID, w.Failure})
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("lines %+v, want %+v", got, tc.want)
			}
			for _, w := range ws[4:] {
				if m := w.messages(); len(m) != 0 {
					t.Errorf("%s got %v, want nothing", w.id, m)
				}
			}
			for _, w := range ws[:4] {
				if m := w.messages(); len(m) != 1 || m[0].(*messages.UnloadLora).GetName() != "sql" {
					t.Errorf("%s got %v, want one unload", w.id, m)
				}
			}
		})
	}
}
