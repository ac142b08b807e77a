package launcher

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/gateway/preprocess"
	"github.com/turbine-llm/turbine/messages"
)

// TestStructuredOutputReachesTheEngine sends a request constrained to a list of choices
// through each engine adapter (vLLM's, SGLang's, trtllm-serve's) to the mock engine
// speaking its dialect, which answers with an instance of the constraint it read: the
// answer is one of the choices exactly (then the end of sequence).
func TestStructuredOutputReachesTheEngine(t *testing.T) {
	model, err := preprocess.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	tok := model.Tokenizer
	choices := []string{"alpha beta", "gamma"}
	for _, tc := range []struct {
		engine  string
		dialect server.Dialect
	}{
		{EngineVLLM, server.DialectVLLM},
		{EngineSGLang, server.DialectSGLang},
		{EngineTRTLLM, server.DialectTRTLLM},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			s := minimal(tc.engine)
			s.ServedModelName, s.BlockSize, s.TempDir = "m", testBlock, t.TempDir()
			l, err := New(s)
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := l.(io.Closer); ok {
				t.Cleanup(func() { _ = c.Close() })
			}
			ep := ""
			if tc.dialect != server.DialectTRTLLM {
				kvPort, err := supervise.FreePort("127.0.0.1")
				if err != nil {
					t.Fatal(err)
				}
				ep = fmt.Sprintf("tcp://127.0.0.1:%d", kvPort)
			}
			host, port := mockEngine(t, tc.dialect, ep)
			l.Command(host, port, ep)
			e := l.Connect(fmt.Sprintf("http://%s:%d", host, port))
			if c, ok := e.(io.Closer); ok {
				defer c.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var ids []uint32
			finish := ""
			err = e.Generate(ctx, "structured-1", tok.Encode("Pick one."), &messages.SamplingParams{MaxTokens: 32,
				Structured: &messages.StructuredOutput{Choice: choices}}, func(ch engines.Chunk) error {
				ids = append(ids, ch.TokenIDs...)
				finish = ch.FinishReason
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			ids = slices.DeleteFunc(ids, func(id uint32) bool { return slices.Contains(model.EOSTokenIDs, id) })
			if text := tok.Decode(ids); !slices.Contains(choices, text) || finish != "stop" {
				t.Errorf("answer %q (finish %q), want one of %q, then a stop", text, finish, choices)
			}
		})
	}
}
