package trtllm

import (
	"errors"
	"testing"

	"github.com/turbine-llm/turbine/engines/launcher"
)

func TestLauncherRefusesPooling(t *testing.T) {
	_, err := NewLauncher(launcher.Spec{ModelPath: "/m", TensorParallelSize: 1, BlockSize: 32, Pooling: true, TempDir: t.TempDir()})
	if !errors.Is(err, ErrNoEmbeddings) {
		t.Fatalf("%v", err)
	}
}
