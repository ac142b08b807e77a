package catalog

import (
	"fmt"
	"strings"
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

func TestCatalogListSetsFilesFromWithoutMutatingStoredCards(t *testing.T) {
	now := time.Unix(100, 0)
	c := New(func() time.Time { return now })
	ref := func(id string) *messages.ActorRef {
		return &messages.ActorRef{Address: "10.0.0.1:7000", Id: "worker/" + id}
	}
	cards := map[string]*messages.ModelCard{}
	announce := func(worker, digest string, ref *messages.ActorRef) {
		t.Helper()
		card := &messages.ModelCard{Model: "m", Tokenizer: "/models/m", TokenizerDigest: digest}
		cards[worker] = card
		if _, err := c.Announce(&messages.AnnounceModel{Card: card, WorkerId: worker, TtlMs: 10_000, Worker: ref}, nil); err != nil {
			t.Fatal(err)
		}
	}
	list := func() *messages.ModelCard {
		t.Helper()
		l, err := c.List(&messages.ListModelsRequest{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Models) != 1 {
			t.Fatalf("listed %d models, want 1", len(l.Models))
		}
		return l.Models[0]
	}

	announce("w0", "d0", nil) // a worker that names no actor
	if got := list(); got.FilesFrom != nil {
		t.Fatalf("files_from %v, want none when no worker named its actor", got.FilesFrom)
	}
	announce("w1", "d1", ref("w1"))
	now = now.Add(time.Second)
	announce("w2", "d2", ref("w2")) // announced last: chosen
	got := list()
	if got.GetFilesFrom().GetId() != "worker/w2" || got.GetTokenizerDigest() != "d2" {
		t.Fatalf("listed files_from %v digest %q, want worker/w2 with its own card's digest d2", got.GetFilesFrom(), got.GetTokenizerDigest())
	}
	if got == cards["w2"] {
		t.Fatal("List returned the stored card itself, not a copy")
	}
	got.FilesFrom.Id = "changed by a caller"
	got.TokenizerDigest = "changed by a caller"
	for w, card := range cards {
		if card.FilesFrom != nil || card.TokenizerDigest != "d"+w[1:] {
			t.Fatalf("stored card of %s changed: files_from %v digest %q", w, card.FilesFrom, card.TokenizerDigest)
		}
	}
	if again := list(); again.GetFilesFrom().GetId() != "worker/w2" || again.GetTokenizerDigest() != "d2" {
		t.Fatalf("a caller's change reached the catalog: files_from %v digest %q", again.GetFilesFrom(), again.GetTokenizerDigest())
	}
	// The chosen worker expires: another live one is named.
	now = now.Add(9500 * time.Millisecond)
	if got := list(); got.GetFilesFrom().GetId() != "worker/w2" {
		t.Fatalf("files_from %v before w2 expired, want worker/w2", got.GetFilesFrom())
	}
	announce("w1", "d1", ref("w1"))
	now = now.Add(time.Second)
	if got := list(); got.GetFilesFrom().GetId() != "worker/w1" || got.GetTokenizerDigest() != "d1" {
		t.Fatalf("after w2 expired: files_from %v digest %q, want worker/w1 with d1", got.GetFilesFrom(), got.GetTokenizerDigest())
	}
}

// TestCatalogListsAdapters: after the base models, List has one entry per LoRA adapter a
// live worker holds (ModelCard.lora set, model = the adapter's name, the rest its base
// model's listed card), sorted by name then base model; an adapter goes when no live
// announcement holds it, and one named like a served base model is not listed.
func TestCatalogListsAdapters(t *testing.T) {
	now := time.Unix(100, 0)
	c := New(func() time.Time { return now })
	ref := &messages.ActorRef{Address: "10.0.0.1:7000", Id: "worker/w0"}
	announce := func(model, worker string, ttl time.Duration, adapters ...*messages.LoraAdapter) {
		t.Helper()
		card := &messages.ModelCard{Model: model, Tokenizer: "/models/" + model, ContextLength: 4096}
		if _, err := c.Announce(&messages.AnnounceModel{Card: card, WorkerId: worker, TtlMs: ttl.Milliseconds(),
			Worker: ref, Adapters: adapters}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lora := func(name, path string, pinned bool) *messages.LoraAdapter {
		return &messages.LoraAdapter{Name: name, Path: path, Rank: 8, Pinned: pinned}
	}
	type entry struct {
		model, parent, path, tokenizer string
		pinned                         bool
	}
	list := func() []entry {
		t.Helper()
		l, err := c.List(&messages.ListModelsRequest{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []entry
		for _, m := range l.Models {
			e := entry{model: m.Model, tokenizer: m.Tokenizer}
			if m.Lora != nil {
				e.parent, e.path, e.pinned = m.Lora.Parent, m.Lora.Path, m.Lora.Pinned
				if m.Lora.Name != m.Model || m.ContextLength != 4096 || m.FilesFrom.GetId() != ref.Id {
					t.Errorf("adapter entry %v is not its base model's card under the adapter's name", m)
				}
			}
			out = append(out, e)
		}
		return out
	}
	check := func(step string, want ...entry) {
		t.Helper()
		got := list()
		if len(got) != len(want) {
			t.Fatalf("%s: listed %v, want %v", step, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: entry %d is %+v, want %+v", step, i, got[i], want[i])
			}
		}
	}
	announce("m", "w0", 3*time.Second, lora("sql", "/a/sql", false), lora("chat", "/a/chat", true))
	announce("m", "w1", 10*time.Second, lora("sql", "/a/sql", true))
	announce("n", "w2", 10*time.Second, lora("sql", "/b/sql", true), lora("m", "/b/m", true))
	check("three workers",
		entry{model: "m", tokenizer: "/models/m"}, entry{model: "n", tokenizer: "/models/n"},
		entry{"chat", "m", "/a/chat", "/models/m", true},
		entry{"sql", "m", "/a/sql", "/models/m", true},
		entry{"sql", "n", "/b/sql", "/models/n", true})

	now = now.Add(5 * time.Second) // w0's announcement expired: chat has no holder left
	check("w0 expired",
		entry{model: "m", tokenizer: "/models/m"}, entry{model: "n", tokenizer: "/models/n"},
		entry{"sql", "m", "/a/sql", "/models/m", true},
		entry{"sql", "n", "/b/sql", "/models/n", true})

	announce("m", "w1", 10*time.Second) // w1 unloaded sql
	check("w1 unloaded",
		entry{model: "m", tokenizer: "/models/m"}, entry{model: "n", tokenizer: "/models/n"},
		entry{"sql", "n", "/b/sql", "/models/n", true})
}

// TestCatalogListsKnownAdapters: an adapter a live worker only knows (evicted from its
// engine, still registered: AnnounceModel.known_adapters) is listed, unpinned, with a
// holder's path where one holds it; it goes with the last worker that holds or knows it.
func TestCatalogListsKnownAdapters(t *testing.T) {
	now := time.Unix(100, 0)
	c := New(func() time.Time { return now })
	announce := func(worker string, ttl time.Duration, held, known []*messages.LoraAdapter) {
		t.Helper()
		if _, err := c.Announce(&messages.AnnounceModel{Card: &messages.ModelCard{Model: "m"}, WorkerId: worker,
			TtlMs: ttl.Milliseconds(), Adapters: held, KnownAdapters: known}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lora := func(name, path string, pinned bool) *messages.LoraAdapter {
		return &messages.LoraAdapter{Name: name, Path: path, Pinned: pinned}
	}
	list := func() string {
		t.Helper()
		l, err := c.List(&messages.ListModelsRequest{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range l.Models {
			s := m.Model
			if a := m.Lora; a != nil {
				s += fmt.Sprintf("(%s %s pinned=%v)", a.Parent, a.Path, a.Pinned)
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	announce("w0", 3*time.Second, []*messages.LoraAdapter{lora("a", "/w0/a", false)},
		[]*messages.LoraAdapter{lora("b", "/w0/b", false), lora("c", "/w0/c", true)})
	announce("w1", 10*time.Second, []*messages.LoraAdapter{lora("b", "/w1/b", false)}, []*messages.LoraAdapter{lora("d", "/w1/d", false)})
	if got, want := list(), "m a(m /w0/a pinned=false) b(m /w1/b pinned=false) c(m /w0/c pinned=false) d(m /w1/d pinned=false)"; got != want {
		t.Errorf("listed %s, want %s", got, want)
	}
	now = now.Add(5 * time.Second) // w0's announcement expired
	if got, want := list(), "m b(m /w1/b pinned=false) d(m /w1/d pinned=false)"; got != want {
		t.Errorf("after w0 expired: listed %s, want %s", got, want)
	}
	announce("w1", 10*time.Second, nil, nil) // w1 unloaded both
	if got, want := list(), "m"; got != want {
		t.Errorf("after the unloads: listed %s, want %s", got, want)
	}
}
