package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// shellLauncher starts `sh -c script` as the engine, with env as the launcher's own
// environment. Its engine never becomes healthy, which is all these tests need.
type shellLauncher struct {
	script string
	env    []string
}

func (l shellLauncher) Command(string, int, string) (argv, env []string) {
	return []string{"/bin/sh", "-c", l.script}, l.env
}
func (l shellLauncher) Connect(string) engines.Engine { return deadEngine{} }
func (l shellLauncher) SubscribeKVEvents(ctx context.Context, _ string, _ func(kv.Batch)) error {
	<-ctx.Done()
	return ctx.Err()
}

type deadEngine struct{}

func (deadEngine) Health(context.Context) error { return errors.New("not serving") }
func (deadEngine) Generate(context.Context, string, []uint32, *messages.SamplingParams, func(engines.Chunk) error) error {
	return errors.New("not serving")
}
func (deadEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return nil, errors.New("not serving")
}

type nopRouter struct{}

func (nopRouter) Register(*messages.RegisterWorker) (*messages.RegisterAck, error) {
	return &messages.RegisterAck{Accepted: true}, nil
}
func (nopRouter) Deregister(*messages.DeregisterWorker) (*messages.Ack, error) {
	return &messages.Ack{}, nil
}
func (nopRouter) PublishEvents(*messages.KvEventBatch) (*messages.EventAck, error) {
	return &messages.EventAck{}, nil
}
func (nopRouter) PublishDump(*messages.BlockDump) (*messages.Ack, error) { return &messages.Ack{}, nil }

// stdoutLines is a zerolog writer that passes on the engine's stdout lines, which the
// worker logs with stream=stdout.
type stdoutLines chan string

func (s stdoutLines) Write(p []byte) (int, error) {
	var ev struct{ Stream, Message string }
	if json.Unmarshal(p, &ev) == nil && ev.Stream == "stdout" {
		select {
		case s <- ev.Message:
		default:
		}
	}
	return len(p), nil
}

func TestEngineEnvironment(t *testing.T) {
	// The script prints the variables the cases set; ${VAR-unset} tells an absent
	// variable from an empty one.
	const script = `echo "A=$A B=$B cuda=${CUDA_VISIBLE_DEVICES-unset} order=${CUDA_DEVICE_ORDER-unset}"; exec sleep 60`
	for _, tc := range []struct {
		name           string
		launcher, conf []string
		want           string
	}{
		{"launcher env only", []string{"A=launcher", "B=launcher"}, nil,
			"A=launcher B=launcher"},
		{"config overrides launcher", []string{"A=launcher", "B=launcher"}, []string{"A=config"},
			"A=config B=launcher"},
		{"GPUs pinned", nil, []string{"A=x", "CUDA_VISIBLE_DEVICES=0,3", "CUDA_DEVICE_ORDER=PCI_BUS_ID"},
			"A=x B= cuda=0,3 order=PCI_BUS_ID"},
		{"no GPU visible", nil, []string{"A=x", "CUDA_VISIBLE_DEVICES=", "CUDA_DEVICE_ORDER=PCI_BUS_ID"},
			"A=x B= cuda= order=PCI_BUS_ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := make(stdoutLines, 16)
			sys := actor.NewActorSystem()
			props, err := Props(Config{WorkerID: "w-env", Card: &messages.ModelCard{Model: "m"},
				Launcher: shellLauncher{script: script, env: tc.launcher}, Env: tc.conf,
				StopGrace: time.Second, Router: nopRouter{}, Logger: zerolog.New(lines)})
			if err != nil {
				t.Fatal(err)
			}
			pid := sys.Root.Spawn(props)
			defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
			select {
			case got := <-lines:
				if !strings.HasPrefix(got, tc.want) {
					t.Fatalf("engine printed %q, want it to start with %q", got, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("engine printed nothing within 10 s")
			}
		})
	}
}
