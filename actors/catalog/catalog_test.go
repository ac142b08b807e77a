package catalog

import (
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

func TestCatalogListsModelsWithLiveWorkers(t *testing.T) {
	now := time.Unix(100, 0)
	c := New(func() time.Time { return now })
	announce := func(model, worker string, ttl time.Duration) {
		if _, err := c.Announce(&messages.AnnounceModel{Card: &messages.ModelCard{Model: model}, WorkerId: worker,
			TtlMs: ttl.Milliseconds()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	names := func() []string {
		l, err := c.List(&messages.ListModelsRequest{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range l.Models {
			out = append(out, m.Model)
		}
		return out
	}
	announce("b", "w0", 3*time.Second)
	announce("a", "w1", 10*time.Second)
	announce("b", "w2", 10*time.Second)
	if got := names(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("models %v, want [a b]", got)
	}
	announce("a", "w1", 0) // withdrawn
	now = now.Add(5 * time.Second)
	if got := names(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("models %v, want [b] (a withdrawn, b still has w2)", got)
	}
	now = now.Add(10 * time.Second)
	if got := names(); len(got) != 0 {
		t.Fatalf("models %v, want none after every announcement expired", got)
	}
	// Malformed announcements are ignored.
	announce("", "w9", time.Minute)
	if got := names(); len(got) != 0 {
		t.Fatalf("models %v after an announcement without a model", got)
	}
}
