package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// tokenizerFolder writes a small model folder (the worker sends files without parsing
// them) and returns its path and digest.
func tokenizerFolder(t *testing.T, withTemplate bool) (string, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"tokenizer.json": `{"model":{"type":"BPE"}}`, "tokenizer_config.json": `{"eos_token":"</s>"}`,
		"model.safetensors": "not a tokenizer file"}
	if withTemplate {
		files["chat_template.jinja"] = "{{ messages }}"
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest, err := model.SourceDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, digest
}

func fileNames(m *messages.ModelFiles) []string {
	var names []string
	for _, f := range m.GetFiles() {
		names = append(names, f.GetName())
	}
	return names
}

func TestAnswerModelFiles(t *testing.T) {
	dir, digest := tokenizerFolder(t, true)
	for _, tc := range []struct {
		name, source, digest string
		maxBytes             int64
		wantFiles            string // names joined by ","
		wantErr              string
	}{
		{"digest matches", dir, digest, 1 << 20, "chat_template.jinja,tokenizer.json,tokenizer_config.json", ""},
		{"another digest", dir, strings.Repeat("0", 64), 1 << 20, "", "not the"},
		{"empty digest", dir, "", 1 << 20, "", "not the"},
		{"builtin tokenizer", "builtin:cl100k_base", "", 1 << 20, "", "no files to send"},
		{"absent folder", filepath.Join(dir, "absent"), digest, 1 << 20, "", "absent"},
		{"over the size cap", dir, digest, 16, "", "more than 16 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := answerModelFiles(tc.source, tc.digest, tc.maxBytes)
			if tc.wantErr != "" {
				if !strings.Contains(got.GetError(), tc.wantErr) || len(got.GetFiles()) != 0 {
					t.Fatalf("answer error %q with %d files, want an error containing %q and no files", got.GetError(), len(got.GetFiles()), tc.wantErr)
				}
				return
			}
			if got.GetError() != "" {
				t.Fatalf("answer error %q", got.GetError())
			}
			if names := strings.Join(fileNames(got), ","); names != tc.wantFiles || got.GetDigest() != tc.digest {
				t.Fatalf("answer files %s digest %s, want %s digest %s", names, got.GetDigest(), tc.wantFiles, tc.digest)
			}
		})
	}
}

// spawnWorker starts a worker actor whose engine never becomes healthy.
func spawnWorker(t *testing.T, sys *actor.ActorSystem, cfg Config) *actor.PID {
	t.Helper()
	if cfg.Launcher == nil {
		cfg.Launcher = shellLauncher{script: "exec sleep 60"}
	}
	cfg.WorkerID, cfg.StopGrace, cfg.Router, cfg.Logger = "w-files", time.Second, nopRouter{}, zerolog.Nop()
	props, err := Props(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	return pid
}

func TestWorkerAnswersModelFilesRequest(t *testing.T) {
	dir, digest := tokenizerFolder(t, false)
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := spawnWorker(t, sys, Config{Card: &messages.ModelCard{Model: "m", Tokenizer: dir, TokenizerDigest: digest}})
	ask := func(digest string) *messages.ModelFiles {
		t.Helper()
		res, err := sys.Root.RequestFuture(pid, &messages.ModelFilesRequest{Digest: digest}, 10*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		files, ok := res.(*messages.ModelFiles)
		if !ok {
			t.Fatalf("answer %T, want *messages.ModelFiles", res)
		}
		return files
	}
	got := ask(digest)
	if got.GetError() != "" || strings.Join(fileNames(got), ",") != "tokenizer.json,tokenizer_config.json" {
		t.Fatalf("answer files %v error %q, want tokenizer.json and tokenizer_config.json", fileNames(got), got.GetError())
	}
	for _, f := range got.GetFiles() {
		want, err := os.ReadFile(filepath.Join(dir, f.GetName()))
		if err != nil || string(want) != string(f.GetData()) {
			t.Fatalf("%s: sent %q, folder holds %q (%v)", f.GetName(), f.GetData(), want, err)
		}
	}
	// The folder changes under the worker: the card's digest is refused from then on.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model":{"type":"BPE"},"x":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ask(digest); got.GetError() == "" || len(got.GetFiles()) != 0 {
		t.Fatalf("after the folder changed: answer files %v error %q, want a refusal", fileNames(got), got.GetError())
	}
}

func TestWorkerRefusesModelFilesForBuiltinTokenizer(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := spawnWorker(t, sys, Config{Card: &messages.ModelCard{Model: "m", Tokenizer: "builtin:cl100k_base"}})
	res, err := sys.Root.RequestFuture(pid, &messages.ModelFilesRequest{}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(*messages.ModelFiles); !strings.Contains(got.GetError(), "no files to send") {
		t.Fatalf("answer error %q, want a refusal for a builtin tokenizer", got.GetError())
	}
}

// healthyLauncher's engine answers /health and load scrapes, so the worker announces.
type healthyLauncher struct{ shellLauncher }

func (healthyLauncher) Connect(string) engines.Engine { return healthyEngine{} }

type healthyEngine struct{ deadEngine }

func (healthyEngine) Health(context.Context) error { return nil }
func (healthyEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return &messages.WorkerLoad{}, nil
}

// announcements is a CatalogClient passing on what workers announce.
type announcements chan *messages.AnnounceModel

func (a announcements) Announce(m *messages.AnnounceModel) (*messages.Ack, error) {
	select {
	case a <- m:
	default:
	}
	return &messages.Ack{}, nil
}

func TestWorkerAnnouncesItsActorRef(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	got := make(announcements, 16)
	pid := spawnWorker(t, sys, Config{Card: &messages.ModelCard{Model: "m", Tokenizer: "builtin:cl100k_base"},
		Launcher: healthyLauncher{shellLauncher{script: "exec sleep 60"}}, Catalog: got, Heartbeat: 10 * time.Millisecond})
	select {
	case m := <-got:
		if m.GetTtlMs() <= 0 || m.GetWorker().GetAddress() != pid.Address || m.GetWorker().GetId() != pid.Id {
			t.Fatalf("announced worker %v ttl %d ms, want %s/%s with a ttl", m.GetWorker(), m.GetTtlMs(), pid.Address, pid.Id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no announcement within 10 s")
	}
}
