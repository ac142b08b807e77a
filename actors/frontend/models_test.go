package frontend

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// tinyDir is a small byte-level BPE model folder: "hi" is one token (256), <|im_end|>
// (261) is EOS.
var tinyDir = filepath.Join("testdata", "tiny")

func tinyFiles(t *testing.T) ([]model.TokenizerFile, string) {
	t.Helper()
	files, err := model.ReadTokenizerFiles(tinyDir, model.MaxTokenizerBytes)
	if err != nil {
		t.Fatal(err)
	}
	return files, model.TokenizerDigest(files)
}

func toMessage(files []model.TokenizerFile, digest string) *messages.ModelFiles {
	out := &messages.ModelFiles{Digest: digest}
	for _, f := range files {
		out.Files = append(out.Files, &messages.ModelFile{Name: f.Name, Data: f.Data})
	}
	return out
}

// fakeWorker is a worker actor that answers ModelFilesRequest with answer(digest).
type fakeWorker struct {
	ref      *messages.ActorRef
	requests atomic.Int32
}

func spawnFakeWorker(t *testing.T, sys *actor.ActorSystem, answer func(digest string) *messages.ModelFiles) *fakeWorker {
	t.Helper()
	w := &fakeWorker{}
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*messages.ModelFilesRequest); ok {
			w.requests.Add(1)
			c.Respond(answer(m.GetDigest()))
		}
	}))
	w.ref = &messages.ActorRef{Address: pid.Address, Id: pid.Id}
	return w
}

func newTestLoader(t *testing.T, sys *actor.ActorSystem, cacheDir string) *ModelLoader {
	t.Helper()
	return NewModelLoader(func() *actor.ActorSystem { return sys }, LoaderConfig{CacheDir: cacheDir, FilesTimeout: 10 * time.Second})
}

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	return sys
}

// checkTiny checks that card loads as the tiny model.
func checkTiny(t *testing.T, l *ModelLoader, card *messages.ModelCard) {
	t.Helper()
	pre, err := l.Load(card)
	if err != nil {
		t.Fatal(err)
	}
	if ids := pre.EncodePrompt("hi"); !slices.Equal(ids, []uint32{256}) {
		t.Fatalf(`EncodePrompt("hi") = %v, want [256] (the tiny model)`, ids)
	}
	if eos := pre.EOSTokenIDs(); !slices.Equal(eos, []uint32{261}) {
		t.Fatalf("EOS ids %v, want [261]", eos)
	}
}

func TestLoaderFetchesAbsentFolderOnceAndCachesIt(t *testing.T) {
	sys := newSystem(t)
	files, digest := tinyFiles(t)
	worker := spawnFakeWorker(t, sys, func(string) *messages.ModelFiles { return toMessage(files, digest) })
	cache := t.TempDir()
	card := &messages.ModelCard{Model: "tiny", Tokenizer: filepath.Join(t.TempDir(), "not-here"), TokenizerDigest: digest,
		FilesFrom: worker.ref}

	l := newTestLoader(t, sys, cache)
	checkTiny(t, l, card)
	if n := worker.requests.Load(); n != 1 {
		t.Fatalf("%d requests to the worker, want 1", n)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(cache, digest, f.Name))
		if err != nil || string(data) != string(f.Data) {
			t.Fatalf("cache holds %s: %v; want the worker's file", f.Name, err)
		}
	}
	entries, err := os.ReadDir(cache)
	if err != nil || len(entries) != 1 || entries[0].Name() != digest {
		t.Fatalf("cache folder entries %v (%v), want only %s (no temporary folder left)", entries, err, digest)
	}
	checkTiny(t, l, card) // from memory
	// Another process (a new loader) finds the files on disk.
	checkTiny(t, newTestLoader(t, sys, cache), card)
	if n := worker.requests.Load(); n != 1 {
		t.Fatalf("%d requests to the worker after reloading, want still 1", n)
	}
}

func TestLoaderUsesLocalFolderWithTheCardsDigest(t *testing.T) {
	sys := newSystem(t)
	_, digest := tinyFiles(t)
	cache := t.TempDir()
	// No files_from: loading must not need a worker.
	checkTiny(t, newTestLoader(t, sys, cache), &messages.ModelCard{Model: "tiny", Tokenizer: tinyDir, TokenizerDigest: digest})
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Fatalf("cache folder has %d entries, want none for a local folder", len(entries))
	}
}

func TestLoaderFetchesWhenLocalFolderDiffers(t *testing.T) {
	sys := newSystem(t)
	files, digest := tinyFiles(t)
	worker := spawnFakeWorker(t, sys, func(string) *messages.ModelFiles { return toMessage(files, digest) })
	// The same path holds another version of the model here (one byte more in the config).
	local := t.TempDir()
	for _, f := range files {
		data := f.Data
		if f.Name == "tokenizer_config.json" {
			data = append(slices.Clone(data), ' ')
		}
		if err := os.WriteFile(filepath.Join(local, f.Name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkTiny(t, newTestLoader(t, sys, t.TempDir()), &messages.ModelCard{Model: "tiny", Tokenizer: local, TokenizerDigest: digest,
		FilesFrom: worker.ref})
	if n := worker.requests.Load(); n != 1 {
		t.Fatalf("%d requests to the worker, want 1 (the local folder has other files)", n)
	}
}

func TestLoaderRefusesBadFiles(t *testing.T) {
	files, digest := tinyFiles(t)
	other := slices.Clone(files)
	other[0] = model.TokenizerFile{Name: other[0].Name, Data: append(slices.Clone(other[0].Data), ' ')}
	for _, tc := range []struct {
		name    string
		answer  *messages.ModelFiles
		noRef   bool
		wantErr string
	}{
		{"files hash to another digest", toMessage(other, digest), false, "hash to"},
		{"worker refuses", &messages.ModelFiles{Error: "worker: tokenizer folder changed"}, false, "worker: tokenizer folder changed"},
		{"file outside the tokenizer set", toMessage(append(slices.Clone(files), model.TokenizerFile{Name: "../evil"}), digest), false, `"../evil"`},
		{"file sent twice", toMessage(append(slices.Clone(files), files[0]), digest), false, "twice"},
		{"no worker named", nil, true, "no worker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := newSystem(t)
			worker := spawnFakeWorker(t, sys, func(string) *messages.ModelFiles { return tc.answer })
			card := &messages.ModelCard{Model: "tiny", Tokenizer: "/absent/tiny", TokenizerDigest: digest, FilesFrom: worker.ref}
			if tc.noRef {
				card.FilesFrom = nil
			}
			cache := t.TempDir()
			_, err := newTestLoader(t, sys, cache).Load(card)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `model "tiny"`) {
				t.Fatalf("err %v, want one naming the model and containing %q", err, tc.wantErr)
			}
			if !tc.noRef && !strings.Contains(err.Error(), worker.ref.Id) {
				t.Fatalf("err %v, want it to name the worker %s", err, worker.ref.Id)
			}
			if entries, _ := os.ReadDir(cache); len(entries) != 0 {
				t.Fatalf("cache folder has %d entries after a refused fetch, want none", len(entries))
			}
		})
	}
}

func TestLoaderRefusesMalformedDigest(t *testing.T) {
	sys := newSystem(t)
	worker := spawnFakeWorker(t, sys, func(string) *messages.ModelFiles { return &messages.ModelFiles{} })
	_, err := newTestLoader(t, sys, t.TempDir()).Load(&messages.ModelCard{Model: "tiny", Tokenizer: "/absent/tiny",
		TokenizerDigest: "../../etc", FilesFrom: worker.ref})
	if err == nil || !strings.Contains(err.Error(), "tokenizer_digest") || worker.requests.Load() != 0 {
		t.Fatalf("err %v after %d requests, want a tokenizer_digest error before asking the worker", err, worker.requests.Load())
	}
}

func TestLoaderConcurrentLoadsFetchOnce(t *testing.T) {
	const callers = 8
	sys := newSystem(t)
	files, digest := tinyFiles(t)
	var waiting sync.WaitGroup
	waiting.Add(callers - 1)
	allWaiting := make(chan struct{})
	go func() { waiting.Wait(); close(allWaiting) }()
	worker := spawnFakeWorker(t, sys, func(string) *messages.ModelFiles {
		// Answer only once every other caller waits for this fetch.
		select {
		case <-allWaiting:
		case <-time.After(10 * time.Second):
			t.Error("the other loads did not wait for the first one's fetch")
		}
		return toMessage(files, digest)
	})
	l := newTestLoader(t, sys, t.TempDir())
	l.onWait = waiting.Done
	card := &messages.ModelCard{Model: "tiny", Tokenizer: "/absent/tiny", TokenizerDigest: digest, FilesFrom: worker.ref}
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checkTiny(t, l, card)
		}()
	}
	wg.Wait()
	if n := worker.requests.Load(); n != 1 {
		t.Fatalf("%d requests to the worker for %d concurrent loads, want 1", n, callers)
	}
}

func TestLoaderRetriesFailedLoadAfterDelay(t *testing.T) {
	sys := newSystem(t)
	files, digest := tinyFiles(t)
	var refuse atomic.Bool
	refuse.Store(true)
	worker := spawnFakeWorker(t, sys, func(string) *messages.ModelFiles {
		if refuse.Load() {
			return &messages.ModelFiles{Error: "not now"}
		}
		return toMessage(files, digest)
	})
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	l := NewModelLoader(func() *actor.ActorSystem { return sys }, LoaderConfig{CacheDir: t.TempDir(), FilesTimeout: 10 * time.Second,
		RetryFailedLoad: time.Second, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	card := &messages.ModelCard{Model: "tiny", Tokenizer: "/absent/tiny", TokenizerDigest: digest, FilesFrom: worker.ref}
	for range 2 {
		if _, err := l.Load(card); err == nil || !strings.Contains(err.Error(), "not now") {
			t.Fatalf("err %v, want the worker's refusal", err)
		}
	}
	if n := worker.requests.Load(); n != 1 {
		t.Fatalf("%d requests within the retry delay, want 1", n)
	}
	refuse.Store(false)
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	checkTiny(t, l, card)
	if n := worker.requests.Load(); n != 2 {
		t.Fatalf("%d requests after the retry delay, want 2", n)
	}
}

func TestLoaderBuiltinNeedsNoWorker(t *testing.T) {
	pre, err := newTestLoader(t, newSystem(t), t.TempDir()).Load(&messages.ModelCard{Model: "m", Tokenizer: "builtin:cl100k_base"})
	if err != nil || pre.Tokenizer().VocabSize() < 100000 {
		t.Fatalf("builtin tokenizer: err %v", err)
	}
}

func TestWriteFolderReplacesBrokenCopy(t *testing.T) {
	files, digest := tinyFiles(t)
	dst := filepath.Join(t.TempDir(), digest)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "tokenizer.json"), []byte("half a fi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFolder(dst, files); err != nil {
		t.Fatal(err)
	}
	if got, err := model.SourceDigest(dst); err != nil || got != digest {
		t.Fatalf("folder digest %s (%v) after the write, want %s", got, err, digest)
	}
	// A complete copy written meanwhile by another process is kept.
	if err := writeFolder(dst, files); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 1 {
		t.Fatalf("%d entries next to the folder, want 1 (no temporary folder left)", len(entries))
	}
}
