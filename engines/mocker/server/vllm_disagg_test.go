package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// Disaggregated serving tests: a prefill and a decode mock engine in one process, the
// vLLM-shaped flow over HTTP and the KV transfer over real TCP. Each case ends with
// every engine's pinned and active blocks back at zero.

// testKVBytesPerToken keeps transfers small: a block of 16 tokens is 16 KiB.
const testKVBytesPerToken = 1024

func disaggOptions(t testing.TB, role Role) Options {
	o := testOptions(t)
	o.Role = role
	o.KVTransfer = KVTransferOptions{BytesPerToken: testKVBytesPerToken, Bandwidth: 1e6} // × speed-up 100: 100 MB/s
	return o
}

type engine struct {
	s   *Server
	url string
}

func startEngine(t *testing.T, opts Options) engine {
	s, hs := startServer(t, opts)
	return engine{s, hs.URL}
}

// waitIdle waits until every engine has no request, no active and no pinned block.
func waitIdle(t *testing.T, engines ...engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, e := range engines {
		for {
			st := e.s.Stats()
			if st.Running+st.Waiting == 0 && st.ActiveBlocks == 0 && st.PinnedBlocks == 0 && st.PinnedRequests == 0 &&
				e.s.TransferStats().Pins == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("engine %s not idle: %+v, transfer %+v", e.url, st, e.s.TransferStats())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// waitUntil polls a condition another goroutine makes true.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// prefillBody is docs/reference.md §6's prefill request.
func prefillBody(prompt []uint32, stream bool) string {
	return fmt.Sprintf(`{"prompt":%s,"max_tokens":1,"min_tokens":1,"stream":%v,"return_token_ids":true,"kv_transfer_params":`+
		`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`,
		jsonIDs(prompt), stream)
}

func decodeBody(prompt []uint32, maxTokens int, params json.RawMessage, stream bool) string {
	return fmt.Sprintf(`{"prompt":%s,"max_tokens":%d,"ignore_eos":true,"stream":%v,"return_token_ids":true,"kv_transfer_params":%s}`,
		jsonIDs(prompt), maxTokens, stream, params)
}

// runPrefill posts a prefill leg and returns its kv_transfer_params.
func runPrefill(t *testing.T, e engine, prompt []uint32, stream bool) json.RawMessage {
	t.Helper()
	resp, b := post(t, e.url, prefillBody(prompt, stream))
	if resp.StatusCode != 200 {
		t.Fatalf("prefill: %d %s", resp.StatusCode, b)
	}
	if !stream {
		var m struct {
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m.KV
	}
	frames := sseData(t, b)
	var last struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	for _, f := range frames {
		if f == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal([]byte(f), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) == 1 && c.Choices[0].FinishReason != nil {
			last = c
		} else if c.KV != nil {
			t.Fatalf("kv_transfer_params on a chunk that is not the last: %s", f)
		}
	}
	if last.Choices == nil {
		t.Fatalf("no finished chunk in %s", b)
	}
	return last.KV
}

func sseData(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, v)
		}
	}
	return out
}

// completionIDs returns the token ids of a non-streaming answer, or of a stream's chunks.
func completionIDs(t *testing.T, b []byte, stream bool) []uint32 {
	t.Helper()
	if !stream {
		return ids(decodeMap(t, b)["choices"].([]any)[0].(map[string]any)["token_ids"])
	}
	var all []uint32
	for _, f := range sseData(t, b) {
		if f == "[DONE]" {
			continue
		}
		m := decodeMap(t, []byte(f))
		if ch := m["choices"].([]any); len(ch) == 1 {
			all = append(all, ids(ch[0].(map[string]any)["token_ids"])...)
		}
	}
	return all
}

func TestDisaggregatedFlow(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			agg := startEngine(t, disaggOptions(t, RoleAggregated))
			pre := startEngine(t, disaggOptions(t, RolePrefill))
			dec := startEngine(t, disaggOptions(t, RoleDecode))
			prompt := promptIDs(40) // two full blocks of 16 and 8 tokens

			_, b := post(t, agg.url, fmt.Sprintf(`{"prompt":%s,"max_tokens":12,"ignore_eos":true,"return_token_ids":true}`, jsonIDs(prompt)))
			want := completionIDs(t, b, false)

			raw := runPrefill(t, pre, prompt, stream)
			var kp vllmKVTransferParams
			if err := json.Unmarshal(raw, &kp); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
			host, port, _ := net.SplitHostPort(pre.s.KVTransferAddr())
			if !kp.DoRemotePrefill || kp.DoRemoteDecode || kp.RemoteEngineID != pre.s.KVTransferEngineID() || kp.RemoteHost != host ||
				strconv.Itoa(kp.RemotePort) != port || len(kp.RemoteBlockIDs) != 2 || kp.RemoteRequestID == "" || kp.TPSize != 1 {
				t.Fatalf("kv_transfer_params %s", raw)
			}
			// The whole block table (three blocks: the partial one too) stays pinned.
			if st := pre.s.Stats(); st.PinnedRequests != 1 || st.PinnedBlocks != 3 || st.ActiveBlocks != 3 || st.Running != 0 {
				t.Fatalf("prefill engine after the prefill leg: %+v", st)
			}

			resp, b := post(t, dec.url, decodeBody(prompt, 12, raw, stream))
			if resp.StatusCode != 200 {
				t.Fatalf("decode: %d %s", resp.StatusCode, b)
			}
			if got := completionIDs(t, b, stream); !slices.Equal(got, want) {
				t.Fatalf("decode leg generated %v, the aggregated engine %v", got, want)
			}
			ts := dec.s.TransferStats()
			const wantBytes = 2 * 16 * testKVBytesPerToken
			if ts.Reads != 1 || ts.FailedReads != 0 || ts.Bytes != wantBytes {
				t.Fatalf("decode transfer stats %+v, want one read of %d bytes", ts, wantBytes)
			}
			// The transfer was paced at 1 MB/s × speed-up 100 (a lower bound by
			// construction, not a speed measurement); the decode leg waited for it
			// before it entered the engine, so its TTFT includes it.
			if min := float64(wantBytes) / (1e6 * 100); ts.Seconds < min {
				t.Fatalf("transfer took %vs, less than %vs", ts.Seconds, min)
			}
			if st := dec.s.Stats(); st.ImportedTokens != 32 || st.PromptTokens != 40 {
				t.Fatalf("decode engine %+v, want 32 imported tokens", st)
			}
			waitUntil(t, "the read to release the pin", func() bool { return pre.s.TransferStats().Released[kvtransfer.ReasonRead] == 1 })
			if ps := pre.s.TransferStats(); ps.SentBytes != wantBytes {
				t.Fatalf("prefill engine sent %d bytes", ps.SentBytes)
			}
			waitIdle(t, agg, pre, dec)
		})
	}
}

// TestDisaggregatedMetrics: the transfer shows on /metrics under vLLM's NIXL names and
// the mock engine's own.
func TestDisaggregatedMetrics(t *testing.T) {
	pre := startEngine(t, disaggOptions(t, RolePrefill))
	dec := startEngine(t, disaggOptions(t, RoleDecode))
	prompt := promptIDs(40)
	raw := runPrefill(t, pre, prompt, false)
	if resp, b := post(t, dec.url, decodeBody(prompt, 3, raw, false)); resp.StatusCode != 200 {
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	waitIdle(t, pre, dec)
	for _, tc := range []struct {
		e    engine
		want []string
	}{
		{dec, []string{
			`vllm:nixl_bytes_transferred_sum{model_name="turbine-mock",engine="0"} 32768`,
			`vllm:nixl_xfer_time_seconds_count{model_name="turbine-mock",engine="0"} 1`,
			`turbine_mocker_kv_transfers_total{result="ok"} 1`,
			`turbine_mocker_kv_transfer_bytes_total 32768`,
			`turbine_mocker_role_info{role="decode"} 1`,
		}},
		{pre, []string{
			`turbine_mocker_kv_pinned_blocks 0`,
			`turbine_mocker_kv_released_total{reason="read"} 1`,
			`turbine_mocker_kv_transfer_sent_bytes_total 32768`,
			`turbine_mocker_role_info{role="prefill"} 1`,
		}},
	} {
		resp, err := http.Get(tc.e.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			text.WriteString(sc.Text() + "\n")
		}
		resp.Body.Close()
		for _, w := range tc.want {
			if !strings.Contains(text.String(), w+"\n") {
				t.Errorf("%s /metrics lacks %q", tc.e.s.opts.Role, w)
			}
		}
	}
}

// TestPrefillLegStopsEarly: a prefill leg that ends on a stop token keeps nothing and
// returns no kv_transfer_params, as vLLM; one with no full prompt block keeps nothing
// and returns no blocks, and its decode leg reads nothing.
func TestPrefillLegStopsEarly(t *testing.T) {
	o := disaggOptions(t, RolePrefill)
	o.Engine.MeanOutputTokens = 1 // EOS first, unless min_tokens
	pre := startEngine(t, o)
	dec := startEngine(t, disaggOptions(t, RoleDecode))
	body := strings.Replace(prefillBody(promptIDs(40), false), `"min_tokens":1,`, "", 1)
	resp, b := post(t, pre.url, body)
	m := decodeMap(t, b)
	if resp.StatusCode != 200 || m["kv_transfer_params"] != nil || m["choices"].([]any)[0].(map[string]any)["finish_reason"] != "stop" {
		t.Fatalf("prefill leg ending on EOS: %d %s", resp.StatusCode, b)
	}
	waitIdle(t, pre)

	short := promptIDs(10)
	raw := runPrefill(t, pre, short, false)
	var kp vllmKVTransferParams
	if err := json.Unmarshal(raw, &kp); err != nil || len(kp.RemoteBlockIDs) != 0 || kp.RemoteBlockIDs == nil {
		t.Fatalf("short prompt's kv_transfer_params %s", raw)
	}
	waitIdle(t, pre) // released at once
	if resp, b := post(t, dec.url, decodeBody(short, 4, raw, false)); resp.StatusCode != 200 {
		t.Fatalf("decode of a short prompt: %d %s", resp.StatusCode, b)
	}
	if ts := dec.s.TransferStats(); ts.Reads+ts.FailedReads != 0 {
		t.Fatalf("a decode leg with no remote blocks read: %+v", ts)
	}
	waitIdle(t, pre, dec)
}

// TestCancelDuringPrefill: a prefill leg whose client leaves is aborted; nothing stays
// pinned.
func TestCancelDuringPrefill(t *testing.T) {
	o := disaggOptions(t, RolePrefill)
	o.Engine.SpeedupRatio = 1
	o.Engine.MaxNumBatchedTokens = 16 // 1,600 prompt tokens: 100 steps of ~17 ms
	pre := startEngine(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", pre.url+"/v1/completions", strings.NewReader(prefillBody(promptIDs(1600), false)))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitUntil(t, "the prefill leg to run", func() bool { st := pre.s.Stats(); return st.Running == 1 && st.ActiveBlocks > 0 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled prefill leg answered")
	}
	waitIdle(t, pre)
	if st := pre.s.Stats(); st.PromptTokens != 0 {
		t.Fatalf("the prefill leg ran to its end: %+v", st)
	}
}

// slowKVBytesPerToken makes a 40-token prompt's two full blocks 3.2 MB: about 3 s at
// the flags' lowest bandwidth (kvtransfer.MinBandwidth) and speed-up 1.
const slowKVBytesPerToken = 100_000

// slowOptions are disaggOptions at speed-up 1, with slowKVBytesPerToken and the lowest
// bandwidth: both engines of a transfer need the same KV size.
func slowOptions(t testing.TB, role Role) Options {
	o := disaggOptions(t, role)
	o.Engine.SpeedupRatio = 1
	o.KVTransfer.BytesPerToken, o.KVTransfer.Bandwidth = slowKVBytesPerToken, kvtransfer.MinBandwidth
	return o
}

// slowPrefill starts a prefill engine whose transfers take about 3 s (slowOptions) and
// runs a prefill leg on it.
func slowPrefill(t *testing.T, mut func(*Options)) (engine, []uint32, json.RawMessage) {
	o := slowOptions(t, RolePrefill)
	if mut != nil {
		mut(&o)
	}
	pre := startEngine(t, o)
	prompt := promptIDs(40)
	return pre, prompt, runPrefill(t, pre, prompt, false)
}

// TestCancelDuringTransfer: a decode leg whose client leaves during the transfer closes
// the connection; the prefill engine releases the blocks.
func TestCancelDuringTransfer(t *testing.T) {
	pre, prompt, raw := slowPrefill(t, nil)
	dec := startEngine(t, slowOptions(t, RoleDecode))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", dec.url+"/v1/completions", strings.NewReader(decodeBody(prompt, 20, raw, true)))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitUntil(t, "the transfer to start", func() bool { return pre.s.TransferStats().SentBytes > 0 })
	cancel()
	<-done
	waitUntil(t, "the prefill engine to release", func() bool { return pre.s.TransferStats().Released[kvtransfer.ReasonClosed] == 1 })
	waitUntil(t, "the failed read to be counted", func() bool { return dec.s.TransferStats().FailedReads == 1 })
	if ps := pre.s.TransferStats(); ps.SentBytes >= 2*16*slowKVBytesPerToken {
		t.Fatalf("the whole transfer happened: %+v", ps)
	}
	if st := dec.s.Stats(); st.PromptTokens != 0 {
		t.Fatalf("the decode leg entered its engine: %+v", st)
	}
	waitIdle(t, pre, dec)
}

// TestCancelDuringDecode: a decode leg's client leaving mid-stream aborts it; the
// prefill engine released its blocks when they were read.
func TestCancelDuringDecode(t *testing.T) {
	pre := startEngine(t, disaggOptions(t, RolePrefill))
	o := disaggOptions(t, RoleDecode)
	o.Engine.SpeedupRatio = 1
	dec := startEngine(t, o)
	prompt := promptIDs(40)
	raw := runPrefill(t, pre, prompt, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", dec.url+"/v1/completions", strings.NewReader(decodeBody(prompt, 1500, raw, true)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	waitIdle(t, pre, dec)
	if g := dec.s.Stats().GenerationTokens; g >= 1500 {
		t.Fatalf("the decode leg ran to its end (%d tokens)", g)
	}
}

// TestExplicitRelease: a release on the transfer port (what engines.KVReleaser sends
// when a decode leg is rejected or never sent) frees the blocks at once; a decode leg
// sent afterwards fails to load them (503 KVTransferError), naming remote_request_id.
func TestExplicitRelease(t *testing.T) {
	pre := startEngine(t, disaggOptions(t, RolePrefill))
	dec := startEngine(t, disaggOptions(t, RoleDecode))
	prompt := promptIDs(40)
	raw := runPrefill(t, pre, prompt, false)
	var kp vllmKVTransferParams
	json.Unmarshal(raw, &kp)
	addr := net.JoinHostPort(kp.RemoteHost, strconv.Itoa(kp.RemotePort))
	if ok, err := kvtransfer.Release(context.Background(), addr, kp.RemoteEngineID, kp.RemoteRequestID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	waitIdle(t, pre)
	resp, b := post(t, dec.url, decodeBody(prompt, 4, raw, false))
	assertKVLoadFailure(t, resp, b, "kv_transfer_params.remote_request_id", "no KV blocks are pinned")
	if ok, err := kvtransfer.Release(context.Background(), addr, kp.RemoteEngineID, kp.RemoteRequestID); err != nil || ok {
		t.Fatalf("second release: %v %v", ok, err)
	}
	waitIdle(t, pre, dec)
}

// TestPinTimeout: blocks nobody reads are released after --kv-transfer-timeout.
func TestPinTimeout(t *testing.T) {
	pre, _, _ := slowPrefill(t, func(o *Options) { o.KVTransfer.Timeout = 100 * time.Millisecond })
	waitUntil(t, "the timeout", func() bool { return pre.s.TransferStats().Released[kvtransfer.ReasonTimeout] == 1 })
	waitIdle(t, pre)
}

func assertAPIError(t *testing.T, resp *http.Response, b []byte, status int, param, msg string) {
	t.Helper()
	var er errorResponse
	if err := json.Unmarshal(b, &er); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	got := ""
	if er.Error.Param != nil {
		got = *er.Error.Param
	}
	if resp.StatusCode != status || er.Error.Code != status || got != param || !strings.Contains(er.Error.Message, msg) {
		t.Errorf("answer %d %s; want %d param %q message containing %q", resp.StatusCode, b, status, param, msg)
	}
}

// assertKVLoadFailure checks a decode leg's answer to a failed KV read
// (kv_load_failure_policy fail): 503, type KVTransferError, naming param and saying msg.
func assertKVLoadFailure(t *testing.T, resp *http.Response, b []byte, param, msg string) {
	t.Helper()
	assertAPIError(t, resp, b, http.StatusServiceUnavailable, param, msg)
	var er errorResponse
	if json.Unmarshal(b, &er) != nil || er.Error.Type != KVTransferErrorType || !strings.HasPrefix(er.Error.Message, "KV cache load failed") {
		t.Errorf("answer %s: want type %s and a message starting with \"KV cache load failed\"", b, KVTransferErrorType)
	}
}

// TestBadKVTransferParams: malformed parameters are answered 400 naming the field;
// parameters the prefill engine refuses (its blocks are not there) and an unreachable
// prefill engine are KV load failures: 503 KVTransferError naming the field. The refused
// reads leave the pin for a good read.
func TestBadKVTransferParams(t *testing.T) {
	pre := startEngine(t, disaggOptions(t, RolePrefill))
	dec := startEngine(t, disaggOptions(t, RoleDecode))
	prompt := promptIDs(40)
	raw := runPrefill(t, pre, prompt, false)
	var good map[string]any
	json.Unmarshal(raw, &good)
	with := func(k string, v any) string {
		m := map[string]any{}
		for kk, vv := range good {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	_, closedPort, _ := net.SplitHostPort(listenAndClose(t))
	port, _ := strconv.Atoi(closedPort)
	for _, tc := range []struct {
		name, params string
		status       int
		param, msg   string
	}{
		{"not an object", `[1]`, 400, "kv_transfer_params", "must be an object"},
		{"both legs", `{"do_remote_decode":true,"do_remote_prefill":true}`, 400, "kv_transfer_params", "both true"},
		{"flag type", `{"do_remote_prefill":"yes"}`, 400, "kv_transfer_params.do_remote_prefill", "must be a boolean"},
		{"no engine id", with("remote_engine_id", nil), 400, "kv_transfer_params.remote_engine_id", "is required"},
		{"engine id type", with("remote_engine_id", 5), 400, "kv_transfer_params.remote_engine_id", "non-empty string"},
		{"no request id", with("remote_request_id", nil), 400, "kv_transfer_params.remote_request_id", "is required"},
		{"no host", with("remote_host", nil), 400, "kv_transfer_params.remote_host", "is required"},
		{"no port", with("remote_port", nil), 400, "kv_transfer_params.remote_port", "is required"},
		{"port type", with("remote_port", "8000"), 400, "kv_transfer_params.remote_port", "TCP port"},
		{"port range", with("remote_port", 70000), 400, "kv_transfer_params.remote_port", "TCP port"},
		{"no blocks", with("remote_block_ids", nil), 400, "kv_transfer_params.remote_block_ids", "is required"},
		{"blocks type", with("remote_block_ids", "1,2"), 400, "kv_transfer_params.remote_block_ids", "list of block ids"},
		{"block id type", with("remote_block_ids", []any{1, "x"}), 400, "kv_transfer_params.remote_block_ids", "[1] must be a block id"},
		{"too many blocks", with("remote_block_ids", []int{1, 2, 3, 4}), 400, "kv_transfer_params.remote_block_ids", "fills 3 blocks"},
		{"tp size", with("tp_size", 0), 400, "kv_transfer_params.tp_size", "positive integer"},
		{"unknown engine id", with("remote_engine_id", "another-engine"), 503, "kv_transfer_params.remote_engine_id", `"another-engine" is not this engine's`},
		{"unknown request", with("remote_request_id", "nobody"), 503, "kv_transfer_params.remote_request_id", "no KV blocks are pinned"},
		{"unknown block ids", with("remote_block_ids", []int{200, 201}), 503, "kv_transfer_params.remote_block_ids", "block 200 is not pinned"},
		{"unreachable engine", with("remote_port", port), 503, "kv_transfer_params", "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, dec.url, decodeBody(prompt, 4, json.RawMessage(tc.params), false))
			if tc.status == http.StatusServiceUnavailable {
				assertKVLoadFailure(t, resp, b, tc.param, tc.msg)
			} else {
				assertAPIError(t, resp, b, tc.status, tc.param, tc.msg)
			}
		})
	}
	// A prefill engine with another block size or KV size is refused, and its pin
	// released (the reader left).
	o := disaggOptions(t, RolePrefill)
	o.KVTransfer.BytesPerToken = 2048
	other := startEngine(t, o)
	otherRaw := runPrefill(t, other, prompt, false)
	resp, b := post(t, dec.url, decodeBody(prompt, 4, otherRaw, false))
	assertKVLoadFailure(t, resp, b, "kv_transfer_params", "2048 KV bytes per token, this engine 1024")
	// The pin survived the refusals: the good parameters still work.
	if resp, b := post(t, dec.url, decodeBody(prompt, 4, raw, false)); resp.StatusCode != 200 {
		t.Fatalf("good decode leg: %d %s", resp.StatusCode, b)
	}
	waitIdle(t, pre, dec, other)
}

// TestKVLoadFailurePolicy: a decode leg whose prefill engine went silent after
// accepting the connection (frozen) fails within the read timeout; with the fail
// policy it is answered 503 KVTransferError, with the recompute policy it computes the
// prompt itself and answers the same tokens as an undisturbed run, counted as
// recomputed. A prefill engine that died (nothing listens) is the same.
func TestKVLoadFailurePolicy(t *testing.T) {
	pre := startEngine(t, disaggOptions(t, RolePrefill))
	prompt := promptIDs(40)
	raw := runPrefill(t, pre, prompt, false)
	var kp map[string]any
	json.Unmarshal(raw, &kp)
	_, closedPort, _ := net.SplitHostPort(listenAndClose(t))
	_, silentPort, _ := net.SplitHostPort(silentListener(t))
	at := func(port string) json.RawMessage {
		m := map[string]any{}
		for k, v := range kp {
			m[k] = v
		}
		m["remote_port"], _ = strconv.Atoi(port)
		b, _ := json.Marshal(m)
		return b
	}
	tokensOf := func(t *testing.T, b []byte) []uint32 {
		t.Helper()
		var c struct {
			Choices []struct {
				TokenIDs []uint32 `json:"token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("answer %s: %v", b, err)
		}
		return c.Choices[0].TokenIDs
	}
	// The undisturbed run reads the pinned blocks.
	good := startEngine(t, disaggOptions(t, RoleDecode))
	resp, b := post(t, good.url, decodeBody(prompt, 6, raw, false))
	if resp.StatusCode != 200 {
		t.Fatalf("undisturbed decode leg: %d %s", resp.StatusCode, b)
	}
	want := tokensOf(t, b)
	waitIdle(t, pre, good)

	for _, policy := range []string{LoadFailureFail, LoadFailureRecompute} {
		o := disaggOptions(t, RoleDecode)
		o.KVTransfer.LoadFailurePolicy, o.KVTransfer.ReadTimeout = policy, 200*time.Millisecond
		dec := startEngine(t, o)
		for _, tc := range []struct{ name, port, msg string }{
			{"frozen prefill engine", silentPort, "answered nothing for 200ms"},
			{"dead prefill engine", closedPort, "connection refused"},
		} {
			t.Run(policy+"/"+tc.name, func(t *testing.T) {
				start := time.Now()
				resp, b := post(t, dec.url, decodeBody(prompt, 6, at(tc.port), false))
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("answered after %v, want within the read timeout and a little", d)
				}
				if policy == LoadFailureFail {
					assertKVLoadFailure(t, resp, b, "kv_transfer_params", tc.msg)
					return
				}
				if resp.StatusCode != 200 {
					t.Fatalf("recomputed decode leg: %d %s", resp.StatusCode, b)
				}
				if got := tokensOf(t, b); !slices.Equal(got, want) {
					t.Fatalf("recomputed decode leg %v, want the undisturbed run's %v", got, want)
				}
			})
		}
		st := dec.s.TransferStats()
		wantRecomputed := uint64(0)
		if policy == LoadFailureRecompute {
			wantRecomputed = 2
		}
		if st.FailedReads != 2 || st.Recomputed != wantRecomputed {
			t.Errorf("%s: transfer stats %+v, want 2 failed reads, %d recomputed", policy, st, wantRecomputed)
		}
		var m strings.Builder
		dec.s.metrics.WritePrometheus(&m)
		if !strings.Contains(m.String(), fmt.Sprintf("%s %d\n", MetricKVRecomputed, wantRecomputed)) {
			t.Errorf("%s: metrics lack %s %d", policy, MetricKVRecomputed, wantRecomputed)
		}
		waitIdle(t, dec)
	}
	waitIdle(t, pre)
}

// silentListener returns the address of a port that accepts connections and never
// answers: a prefill engine frozen (SIGSTOP) while the kernel still accepts for it.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// listenAndClose returns an address nothing listens on.
func listenAndClose(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestKVTransferOptionsValidation: KV sizes and bandwidths that would overflow a read's
// byte count or disable its pacing, and a recompute policy outside vLLM's dialect, are
// refused by New, naming the flag.
func TestKVTransferOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Options)
		want string
	}{
		{"huge KV size", func(o *Options) { o.KVTransfer.BytesPerToken = math.MaxInt64 }, "--kv-bytes-per-token 9223372036854775807 out of range"},
		{"KV size above 16 MiB", func(o *Options) { o.KVTransfer.BytesPerToken = kvtransfer.MaxBytesPerToken + 1 }, "out of range 1-16777216"},
		{"negative bandwidth", func(o *Options) { o.KVTransfer.Bandwidth = -1 }, "--kv-transfer-bandwidth"},
		{"infinite bandwidth", func(o *Options) { o.KVTransfer.Bandwidth = math.Inf(1) }, "--kv-transfer-bandwidth"},
		{"bandwidth below a byte per second", func(o *Options) { o.KVTransfer.Bandwidth = 1e-300 }, "bandwidth"},
		{"read timeout", func(o *Options) { o.KVTransfer.ReadTimeout = -time.Second }, "--kv-transfer-read-timeout"},
		{"connect timeout", func(o *Options) { o.KVTransfer.ConnectTimeout = -time.Second }, "--kv-transfer-connect-timeout"},
		{"policy", func(o *Options) { o.KVTransfer.LoadFailurePolicy = "retry" }, `--kv-load-failure-policy "retry"`},
		{"recompute in SGLang's dialect", func(o *Options) {
			o.Dialect, o.KVTransfer.LoadFailurePolicy = DialectSGLang, LoadFailureRecompute
		}, "recompute is vLLM's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := disaggOptions(t, RoleDecode)
			tc.mut(&o)
			s, err := New(o)
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
