package serve

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestRunRejectsBadLora: a bad --lora, --max-loras or --max-lora-rank fails serve's
// start before anything binds or starts, naming the flag and the reason.
func TestRunRejectsBadLora(t *testing.T) {
	fixture := "../../../model/testdata/adapters/"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lora", "sql"}, `flag -lora: "sql": want NAME=PATH`},
		{[]string{"--lora", "a=/x", "--lora", "a=/y"}, `adapter "a" given twice`},
		{[]string{"--max-loras", "-1"}, "--max-loras -1"},
		{[]string{"--max-lora-rank", "513"}, "--max-lora-rank 513"},
		{[]string{"--lora", "sql=/nonexistent/sql"}, "--lora sql=/nonexistent/sql: model: adapter folder /nonexistent/sql does not exist"},
		// The default model is turbine-mock: a Qwen3 adapter adapts another model.
		{[]string{"--lora", "sql=" + fixture + "qwen3-sql"}, `adapts "Qwen/Qwen3-0.6B" (base_model_name_or_path), not model "turbine-mock"`},
		{[]string{"--model", "Qwen/Qwen3-0.6B", "--lora", "x=" + fixture + "bad-no-weights"}, "has no weights file"},
		{[]string{"--model", "Qwen/Qwen3-0.6B", "--lora", "big=" + fixture + "qwen3-rank64"}, "rank 64, above the engine's max_lora_rank 16"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := Run(context.Background(), append([]string{"--port", "0"}, tc.args...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
