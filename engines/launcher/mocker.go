// Package launcher builds the engine processes a worker supervises: their command lines
// and the clients that talk to them once they are up.
package launcher

import (
	"encoding/json"
	"strconv"
)

// Mocker launches the mock engine (`turbine mocker`), which speaks vLLM's HTTP dialect
// and publishes KV events in vLLM's wire format; its flags follow vLLM's names.
type Mocker struct {
	// Executable is the turbine binary (os.Executable() in `turbine serve`).
	Executable          string
	Model               string // served model name
	Tokenizer           string // builtin:... or an HF model folder
	BlockSize           int    // tokens per KV block
	NumGPUBlocks        int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int // tokens
	SpeedupRatio        float64
	MeanOutputTokens    int
	Seed                int64
	// Extra arguments appended untouched.
	Extra []string
}

// KVEventsConfig is vLLM's --kv-events-config JSON (REFERENCE §1).
type KVEventsConfig struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`
	Endpoint            string `json:"endpoint"`
	Topic               string `json:"topic"`
}

// KVEventsTopic is the topic Turbine asks engines to publish KV events on.
const KVEventsTopic = "kv-events"

// kvEventsFlag renders --kv-events-config for a ZMQ publisher bound at endpoint.
func kvEventsFlag(endpoint string) string {
	b, _ := json.Marshal(KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: endpoint, Topic: KVEventsTopic})
	return string(b)
}

// Command returns the mock engine's argv for host:port with KV events on kvEndpoint.
func (m *Mocker) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	argv = []string{m.Executable, "mocker",
		"--host", host,
		"--port", strconv.Itoa(port),
		"--served-model-name", m.Model,
		"--tokenizer", m.Tokenizer,
		"--block-size", strconv.Itoa(m.BlockSize),
		"--num-gpu-blocks-override", strconv.Itoa(m.NumGPUBlocks),
		"--max-num-seqs", strconv.Itoa(m.MaxNumSeqs),
		"--max-num-batched-tokens", strconv.Itoa(m.MaxNumBatchedTokens),
		"--max-model-len", strconv.Itoa(m.MaxModelLen),
		"--speedup-ratio", strconv.FormatFloat(m.SpeedupRatio, 'g', -1, 64),
		"--mean-output-tokens", strconv.Itoa(m.MeanOutputTokens),
		"--seed", strconv.FormatInt(m.Seed, 10),
		"--kv-events-config", kvEventsFlag(kvEndpoint),
	}
	argv = append(argv, m.Extra...)
	return argv, nil
}
