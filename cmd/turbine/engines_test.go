package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// The real-engine tests run `turbine node --engine vllm|sglang|trtllm` against the
// stand-in executables of testdata/fake-engines, which record the command line turbine
// gave them and then play the engine with `turbine mocker --dialect <engine>`. The node
// places these engines on fake GPUs (TURBINE_FAKE_GPUS): a machine without GPUs refuses
// real engines otherwise.

// fakeEngines sets the environment the node and its stand-in engines read and returns
// the stand-ins' folder and the folder where they record their starts.
func fakeEngines(t *testing.T) (dir, starts string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "fake-engines"))
	if err != nil {
		t.Fatal(err)
	}
	starts = t.TempDir()
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("TURBINE_MOCKER_BIN", turbineBin)
	t.Setenv("FAKE_ENGINE_ARGS_DIR", starts)
	t.Setenv("TURBINE_FAKE_GPUS", "1")
	return dir, starts
}

// modelFolder is the absolute path of the test model folder (Qwen3-8B's config.json, a
// tiny tokenizer).
func modelFolder(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "tiny-qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// engineStart is one recorded start of a stand-in engine.
type engineStart struct {
	argv []string
	env  string // CUDA_VISIBLE_DEVICES=...
	yaml string // trtllm-serve's options file, when it had one
}

// engineStarts reads the starts the stand-in called name recorded in dir.
func engineStarts(t *testing.T, dir, name string) []engineStart {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, name+".*.argv"))
	if err != nil {
		t.Fatal(err)
	}
	var out []engineStart
	for _, f := range files {
		base := strings.TrimSuffix(f, ".argv")
		argv, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		env, _ := os.ReadFile(base + ".env")
		yaml, _ := os.ReadFile(base + ".yaml")
		out = append(out, engineStart{argv: strings.Split(strings.TrimSuffix(string(argv), "\n"), "\n"),
			env: strings.TrimSpace(string(env)), yaml: string(yaml)})
	}
	return out
}

// matchArgv checks argv against want, whose entries are literal arguments or, after a
// "~", regular expressions matching the whole argument.
func matchArgv(t *testing.T, argv, want []string) {
	t.Helper()
	ok := len(argv) == len(want)
	for i := 0; ok && i < len(want); i++ {
		if p, isRE := strings.CutPrefix(want[i], "~"); isRE {
			ok = regexp.MustCompile("^(" + p + ")$").MatchString(argv[i])
		} else {
			ok = argv[i] == want[i]
		}
	}
	if !ok {
		t.Fatalf("engine command line:\n  %s\nwant:\n  %s", strings.Join(argv, "\n  "), strings.Join(want, "\n  "))
	}
}

// logEvent is one JSON log line of a turbine process.
type logEvent map[string]any

// logEvents parses s's JSON log lines.
func logEvents(s *server) []logEvent {
	var out []logEvent
	sc := bufio.NewScanner(strings.NewReader(s.Logs()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev logEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// countLogs counts s's log events with message msg for worker (any worker when "") whose
// text holds contains.
func countLogs(s *server, msg, worker, contains string) int {
	n := 0
	for _, ev := range logEvents(s) {
		if ev["message"] != msg || (worker != "" && ev["worker"] != worker) {
			continue
		}
		if b, _ := json.Marshal(ev); strings.Contains(string(b), contains) {
			n++
		}
	}
	return n
}

const kvEventsJSON = `\{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127\.0\.0\.1:\d+","topic":"kv-events"\}`

func TestRealEngines(t *testing.T) {
	c := newLocalCluster(t)
	dir, starts := fakeEngines(t)
	model := modelFolder(t)
	fe := c.frontend("frontend")
	for _, tc := range []struct {
		engine string
		stub   string   // the stand-in's name
		flags  []string // the node's engine flags beyond --engine and --model
		extra  string   // an engine argument given after --
		argv   []string // the engine's expected command line
		yaml   string   // trtllm-serve's expected options file
	}{
		{engine: "vllm", stub: "vllm", extra: "--enforce-eager",
			argv: []string{"~.*/fake-engines/vllm", "serve", model, "--served-model-name", "e2e-vllm",
				"--host", "127.0.0.1", "--port", `~\d+`, "--tensor-parallel-size", "1", "--block-size", "64",
				"--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-model-len", "4096", "--max-num-seqs", "256",
				"--max-num-batched-tokens", "8192", "--kv-events-config", "~" + kvEventsJSON, "--enforce-eager"}},
		{engine: "sglang", stub: "python3", flags: []string{"--python", filepath.Join(dir, "python3")}, extra: "--disable-cuda-graph",
			argv: []string{filepath.Join(dir, "python3"), "-m", "sglang.launch_server", "--model-path", model,
				"--served-model-name", "e2e-sglang", "--host", "127.0.0.1", "--port", `~\d+`, "--tp-size", "1",
				"--page-size", "64", "--context-length", "4096", "--max-running-requests", "256",
				"--chunked-prefill-size", "8192", "--enable-metrics", "--kv-events-config",
				`~\{"publisher":"zmq","endpoint":"tcp://127\.0\.0\.1:\d+","topic":"kv-events"\}`, "--disable-cuda-graph"}},
		{engine: "trtllm", stub: "trtllm-serve", extra: "--trust_remote_code",
			argv: []string{"~.*/fake-engines/trtllm-serve", model, "--host", "127.0.0.1", "--port", `~\d+`,
				"--backend", "pytorch", "--tp_size", "1", "--max_batch_size", "256", "--max_num_tokens", "8192",
				"--max_seq_len", "4096", "--extra_llm_api_options", `~.*/turbine-trtllm-\d+/extra_llm_api_options\.yaml`,
				"--trust_remote_code"},
			yaml: "kv_cache_config:\n  enable_block_reuse: true\n  tokens_per_block: 64\n  event_buffer_max_size: 16384\nenable_iter_perf_stats: true\nguided_decoding_backend: xgrammar\n"},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			served := "e2e-" + tc.engine
			args := append([]string{"node", "--node-id", "node-" + tc.engine, "--workers", "1", "--heartbeat", "200ms",
				"--engine", tc.engine, "--model", model, "--served-model-name", served, "--max-model-len", "4096",
				"--ready-timeout", "60s", "--http-port", "0"}, tc.flags...)
			args = append(append(args, c.clusterArgs()...), "--", tc.extra)
			node := startTurbine(t, "node-"+tc.engine, "node agent joined the cluster", args...)
			fe.waitReady(served, 1)
			worker := "node-" + tc.engine + "-0"

			// The command line, the GPU the engine was pinned to, the options file.
			recorded := engineStarts(t, starts, tc.stub)
			if len(recorded) != 1 {
				t.Fatalf("%d starts of %s recorded, want 1", len(recorded), tc.stub)
			}
			matchArgv(t, recorded[0].argv, tc.argv)
			if recorded[0].env != "CUDA_VISIBLE_DEVICES=0" {
				t.Fatalf("engine environment %q, want it pinned to GPU 0", recorded[0].env)
			}
			if tc.yaml != "" && !strings.HasSuffix(recorded[0].yaml, tc.yaml) {
				t.Fatalf("options file:\n%s\nwant it to end with:\n%s", recorded[0].yaml, tc.yaml)
			}
			// The engine's own output reaches the node's log with the worker id.
			if n := countLogsOfEngine(node, worker, "mocker serving"); n != 1 {
				t.Fatalf("%d engine lines 'mocker serving' logged for %s, want 1", n, worker)
			}

			// Requests through the OpenAI SDK.
			cl := sdk(fe)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: served,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(longText("delta", 40))},
				MaxTokens: openai.Int(8)})
			if err != nil {
				t.Fatalf("chat completion through %s: %v", tc.engine, err)
			}
			if len(resp.Choices) != 1 || resp.Usage.CompletionTokens != 8 || resp.Usage.PromptTokens < 128 {
				t.Fatalf("chat completion %+v", resp)
			}
			// KV-aware routing: the engine's own KV events reached the router's index.
			fe.waitFor(20*time.Second, "indexed blocks of "+worker, func() bool {
				w := fe.workerStats(served)[worker]
				return w != nil && w.IndexedBlocks >= 2
			})

			// A stream closed early: the engine aborts the request.
			stream := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: served,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell a long story")},
				MaxTokens: openai.Int(3000)})
			// Read until tokens flow, so that the engine runs the request when it closes.
			for content := 0; content < 3; {
				if !stream.Next() {
					t.Fatalf("stream ended before 3 content chunks: %v", stream.Err())
				}
				for _, ch := range stream.Current().Choices {
					if ch.Delta.Content != "" {
						content++
					}
				}
			}
			_ = stream.Close()
			node.waitFor(20*time.Second, "the engine to abort the closed stream's request", func() bool {
				return countLogsOfEngine(node, worker, "request aborted") > 0
			})
		})
	}
}

// countLogsOfEngine counts the engine output lines logged for worker whose text holds
// contains.
func countLogsOfEngine(s *server, worker, contains string) int {
	n := 0
	for _, ev := range logEvents(s) {
		line, _ := ev["message"].(string)
		if ev["worker"] == worker && ev["stream"] != nil && strings.Contains(line, contains) {
			n++
		}
	}
	return n
}

// TestRealEngineFaults: engines that cannot start, exit at once or never become ready are
// retried with backoff; their workers stay out of routing (visible as not ready on the
// frontend's /metrics) while a healthy worker of the same model serves, and their nodes
// keep running.
func TestRealEngineFaults(t *testing.T) {
	c := newLocalCluster(t)
	dir, starts := fakeEngines(t)
	model := modelFolder(t)
	const served = "e2e-faults"
	fe := c.frontend("frontend")
	node := func(id string, flags ...string) *server {
		args := append([]string{"node", "--node-id", id, "--workers", "1", "--heartbeat", "200ms", "--engine", "vllm",
			"--model", model, "--served-model-name", served, "--http-port", "0"}, flags...)
		return startTurbine(t, id, "node agent joined the cluster", append(args, c.clusterArgs()...)...)
	}
	node("healthy")
	missing := node("missing", "--engine-executable", "/nonexistent/bin/vllm")
	exits := node("exits", "--engine-executable", filepath.Join(dir, "exits-at-once"))
	stuck := node("stuck", "--engine-executable", filepath.Join(dir, "never-ready"), "--ready-timeout", "1s")
	fe.waitReady(served, 1)

	exits.waitFor(20*time.Second, "three starts of an engine that exits at once", func() bool {
		return len(engineStarts(t, starts, "exits-at-once")) >= 3
	})
	if n := countLogs(exits, "engine exited", "exits-0", "restart_in"); n < 2 {
		t.Fatalf("%d 'engine exited' events with a restart delay, want ≥ 2:\n%s", n, exits.Logs())
	}
	if countLogsOfEngine(exits, "exits-0", "failing at start") == 0 {
		t.Fatal("the failing engine's stderr is not in its worker's log")
	}
	missing.waitFor(20*time.Second, "two failed starts of a missing engine binary", func() bool {
		return countLogs(missing, "engine start failed", "missing-0", "/nonexistent/bin/vllm") >= 2
	})
	if n := countLogs(missing, "engine start failed", "missing-0", "restart_in"); n < 2 {
		t.Fatalf("%d failed starts logged with a restart delay, want ≥ 2", n)
	}
	stuck.waitFor(20*time.Second, "a readiness timeout and a second start", func() bool {
		return countLogs(stuck, "engine did not become ready; stopping it", "stuck-0", "") >= 1 &&
			len(engineStarts(t, starts, "never-ready")) >= 2
	})

	// The broken workers are registered, not ready; the healthy one serves the model.
	fe.waitFor(20*time.Second, "four workers of the model on /metrics, one ready", func() bool {
		st := fe.workerStats(served)
		return len(st) == 4 && st["healthy-0"].Ready && !st["missing-0"].Ready && !st["exits-0"].Ready && !st["stuck-0"].Ready
	})
	cl := sdk(fe)
	for i := 0; i < 4; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := cl.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(served),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(fmt.Sprintf("request %d", i))}, MaxTokens: openai.Int(4)})
		cancel()
		if err != nil {
			t.Fatalf("request %d with three broken workers: %v", i, err)
		}
	}
	for _, s := range []*server{missing, exits, stuck} {
		select {
		case <-s.done:
			t.Fatalf("node %s exited:\n%s", s.name, s.Logs())
		default:
		}
	}
	if got := engineStarts(t, starts, "vllm"); len(got) != 1 || !slices.Contains(got[0].argv, served) {
		t.Fatalf("healthy engine starts: %v", got)
	}
}
