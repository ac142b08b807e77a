package launch

import (
	"flag"
	"io"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker/server"
)

// KvbmURL and KVBytesPerToken reach the engine's flags, read back as the mocker reads
// them; unset, neither flag is rendered.
func TestCommandKvbm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		url     string
		bpt     int64
		wantURL string
		wantBPT int64
	}{
		{"none", "", 0, "", 0},
		{"url", "resp://10.0.0.1:6380", 0, "resp://10.0.0.1:6380", 0},
		{"url and size", "redis://h:1", 16384, "redis://h:1", 16384},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mocker(t, server.DialectVLLM, server.RoleAggregated)
			m.KvbmURL, m.KVBytesPerToken = tc.url, tc.bpt
			argv, _ := m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
			var p server.Params
			fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			p.Flags(fs)
			var host, model, tok, kvev string
			var port int
			fs.StringVar(&host, "host", "", "")
			fs.IntVar(&port, "port", 0, "")
			fs.StringVar(&model, "served-model-name", "", "")
			fs.StringVar(&tok, "tokenizer", "", "")
			fs.StringVar(&kvev, "kv-events-config", "", "")
			if err := fs.Parse(argv[2:]); err != nil {
				t.Fatalf("%v: %v", argv, err)
			}
			if p.KvbmURL != tc.wantURL || p.KVTransfer.BytesPerToken != tc.wantBPT {
				t.Fatalf("read back --kvbm-url %q --kv-bytes-per-token %d, want %q %d (argv %v)",
					p.KvbmURL, p.KVTransfer.BytesPerToken, tc.wantURL, tc.wantBPT, argv)
			}
		})
	}
}
