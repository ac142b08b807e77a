package options

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

func TestSetRunner(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"),
		[]byte(`{"hidden_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4, "matryoshka_dimensions": [128, 256]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, runner, tokenizer string
		size                    int
		want                    *messages.ModelCard
	}{
		{"generate", RunnerGenerate, "builtin:cl100k_base", 0, &messages.ModelCard{}},
		{"pooling, builtin", RunnerPooling, "builtin:cl100k_base", 0,
			&messages.ModelCard{Runner: messages.Runner_RUNNER_POOLING, EmbeddingSize: mocker.DefaultEmbeddingSize}},
		{"pooling, flag", RunnerPooling, "builtin:cl100k_base", 96, &messages.ModelCard{Runner: messages.Runner_RUNNER_POOLING, EmbeddingSize: 96}},
		{"pooling, folder", RunnerPooling, dir, 0, &messages.ModelCard{Runner: messages.Runner_RUNNER_POOLING, EmbeddingSize: 384,
			IsMatryoshka: true, MatryoshkaDimensions: []int32{128, 256}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultEngine()
			o.Runner, o.EmbeddingSize = c.runner, c.size
			card := &messages.ModelCard{Tokenizer: c.tokenizer, EmbeddingSize: 7}
			if err := o.SetRunner(card); err != nil {
				t.Fatal(err)
			}
			if card.Runner != c.want.Runner || card.EmbeddingSize != c.want.EmbeddingSize || card.IsMatryoshka != c.want.IsMatryoshka ||
				!slices.Equal(card.MatryoshkaDimensions, c.want.MatryoshkaDimensions) {
				t.Errorf("%v", card)
			}
			mock := o.Mocker("turbine", card).Params
			l := DefaultLaunch()
			spec := l.Spec("vllm", "/m", card, 1, 0, nil)
			pooling := c.runner == RunnerPooling
			if (mock.Runner == server.RunnerPooling) != pooling || spec.Pooling != pooling || mock.EmbeddingSize != int(card.EmbeddingSize)*b2i(pooling) {
				t.Errorf("mock %s/%d, spec pooling %v", mock.Runner, mock.EmbeddingSize, spec.Pooling)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestRunnerValidate(t *testing.T) {
	for _, c := range []struct {
		runner string
		size   int
		want   string
	}{
		{"embed", 0, `--runner "embed"`},
		{RunnerPooling, -1, "--embedding-size -1"},
		{RunnerPooling, 0, ""},
	} {
		o := DefaultEngine()
		o.Runner, o.EmbeddingSize = c.runner, c.size
		err := o.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %d: %v", c.runner, c.size, err)
		}
	}
}
