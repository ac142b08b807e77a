package launch

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
)

// TestMockerLoraCommand: with adapter slots the mock engine's command line carries the
// adapter settings, which `turbine mocker` reads back; without, none of them.
func TestMockerLoraCommand(t *testing.T) {
	m := mocker(t, "", "")
	argv, _ := m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, "lora") }) {
		t.Fatalf("a mock engine without adapters got %q", argv)
	}
	m.Params.Engine.MaxLoras, m.Params.Engine.MaxLoraRank, m.Params.Engine.LoraLoadMillis = 4, 32, 75
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if line := strings.Join(argv, " "); !strings.Contains(line, "--max-loras 4 --max-lora-rank 32 --lora-load-ms 75") {
		t.Fatalf("command %q lacks the adapter settings", line)
	}
	got := server.DefaultParams()
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	got.Flags(fs)
	for _, f := range []string{"host", "port", "served-model-name", "tokenizer", "kv-events-config"} {
		fs.String(f, "", "")
	}
	if err := fs.Parse(argv[2:]); err != nil {
		t.Fatal(err)
	}
	if e := got.Engine; e.MaxLoras != 4 || e.MaxLoraRank != 32 || e.LoraLoadMillis != 75 {
		t.Fatalf("parsed %+v", e)
	}
}

// TestMockerClientsLoadLoras: in every dialect the client a worker gets loads adapters
// (engines.LoraLoader) and runs requests with them on the mock engine.
func TestMockerClientsLoadLoras(t *testing.T) {
	for _, d := range server.Dialects {
		t.Run(string(d), func(t *testing.T) {
			srv, url := enginetest.StartLoraMock(t, d, 2)
			e := mocker(t, d, "").Connect(url)
			if c, ok := e.(interface{ Close() error }); ok {
				t.Cleanup(func() { _ = c.Close() })
			}
			l, ok := e.(engines.LoraLoader)
			if !ok {
				t.Fatalf("%T is no engines.LoraLoader", e)
			}
			ctx := enginetest.Ctx(t)
			if err := l.LoadLora(ctx, "a", enginetest.AdapterDir(t, 8)); err != nil {
				t.Fatal(err)
			}
			base, err := enginetest.GenerateIDs(ctx, e, "")
			if err != nil {
				t.Fatal(err)
			}
			withA, err := enginetest.GenerateIDs(ctx, e, "a")
			if err != nil || slices.Equal(base, withA) || srv.Stats().LoraLoads != 1 {
				t.Fatalf("adapter a: %v %v (base %v, %d loads)", withA, err, base, srv.Stats().LoraLoads)
			}
			if err := l.UnloadLora(ctx, "a"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
