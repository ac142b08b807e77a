package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// Disaggregated serving in the TensorRT-LLM and SGLang dialects: the same transfer as
// vLLM's, behind their own parameters.

func dialectEngine(t *testing.T, d DialectName, role Role) engine {
	o := disaggOptions(t, role)
	o.Dialect = d
	return startEngine(t, o)
}

func trtllmBody(prompt []uint32, disagg string) string {
	b := fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":12,"ignore_eos":true,"detokenize":false`, jsonIDs(prompt))
	if disagg != "" {
		b += `,"disaggregated_params":` + disagg
	}
	return b + "}"
}

func trtllmFirstChoice(t *testing.T, b []byte) map[string]any {
	t.Helper()
	return decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
}

func TestTRTLLMDisaggregated(t *testing.T) {
	agg := dialectEngine(t, DialectTRTLLM, RoleAggregated)
	ctxE := dialectEngine(t, DialectTRTLLM, RolePrefill)
	gen := dialectEngine(t, DialectTRTLLM, RoleDecode)
	prompt := promptIDs(40)
	_, b := post(t, agg.url, trtllmBody(prompt, ""))
	want := ids(trtllmFirstChoice(t, b)["token_ids"])

	contextLeg := func() map[string]any {
		t.Helper()
		resp, b := post(t, ctxE.url, trtllmBody(prompt, `{"request_type":"context_only"}`))
		if resp.StatusCode != 200 {
			t.Fatalf("context leg: %d %s", resp.StatusCode, b)
		}
		c := trtllmFirstChoice(t, b)
		dp, _ := c["disaggregated_params"].(map[string]any)
		if dp == nil || dp["request_type"] != "context_only" || dp["ctx_request_id"] == nil || dp["encoded_opaque_state"] == "" ||
			len(dp["first_gen_tokens"].([]any)) != 1 || c["finish_reason"] != "length" || len(ids(c["token_ids"])) != 1 {
			t.Fatalf("context leg choice %v", c)
		}
		return dp
	}
	genBody := func(dp map[string]any, mut func(map[string]any)) string {
		m := map[string]any{}
		for k, v := range dp {
			m[k] = v
		}
		m["request_type"] = "generation_only"
		if mut != nil {
			mut(m)
		}
		b, _ := json.Marshal(m)
		return trtllmBody(prompt, string(b))
	}

	dp := contextLeg()
	resp, b := post(t, gen.url, genBody(dp, nil))
	if resp.StatusCode != 200 {
		t.Fatalf("generation leg: %d %s", resp.StatusCode, b)
	}
	if got := ids(trtllmFirstChoice(t, b)["token_ids"]); !slices.Equal(got, want) {
		t.Fatalf("generation leg %v, want %v", got, want)
	}
	if ts := gen.s.TransferStats(); ts.Reads != 1 || ts.Bytes != 2*16*testKVBytesPerToken {
		t.Fatalf("generation engine transfers %+v", ts)
	}
	waitIdle(t, agg, ctxE, gen)

	dp = contextLeg()
	for _, tc := range []struct {
		name, body, msg string
		status          int
	}{
		{"request type", trtllmBody(prompt, `{"request_type":"prefill"}`), "disaggregated_params.request_type", 400},
		{"not an object", trtllmBody(prompt, `"context_only"`), "disaggregated_params must be an object", 400},
		{"no state", genBody(dp, func(m map[string]any) { delete(m, "encoded_opaque_state") }), "disaggregated_params.encoded_opaque_state is required", 400},
		{"bad state", genBody(dp, func(m map[string]any) { m["encoded_opaque_state"] = "e30=" }), "disaggregated_params.encoded_opaque_state: kvtransfer: handle", 400},
		{"no id", genBody(dp, func(m map[string]any) { delete(m, "ctx_request_id") }), "disaggregated_params.ctx_request_id must be", 400},
		{"other id", genBody(dp, func(m map[string]any) { m["ctx_request_id"] = 7 }), "ctx_request_id 7 is not the context request", 400},
		{"first tokens", genBody(dp, func(m map[string]any) { m["first_gen_tokens"] = "x" }), "first_gen_tokens must be a list", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, gen.url, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.msg) {
				t.Fatalf("%d %s, want %d with %q", resp.StatusCode, b, tc.status, tc.msg)
			}
		})
	}
	// Released on the transfer port, the blocks are gone: the generation leg's KV cache
	// transfer fails, a request-level error (500 KVTransferError, DISAGG_TRANS_ERROR).
	h, err := kvtransfer.DecodeHandle(dp["encoded_opaque_state"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := kvtransfer.Release(context.Background(), h.Addr(), h.EngineID, h.Key); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	resp, b = post(t, gen.url, genBody(dp, nil))
	er := decodeMap(t, b)
	if resp.StatusCode != 500 || er["type"] != KVTransferErrorType ||
		!strings.Contains(fmt.Sprint(er["message"]), "disaggregated_params.ctx_request_id: the KV cache transfer of context request "+h.Key+" failed (DISAGG_TRANS_ERROR): KV transfer from") {
		t.Fatalf("generation leg after the release: %d %s", resp.StatusCode, b)
	}
	// The Prometheus families are on /prometheus/metrics (/metrics is the JSON
	// iteration stats).
	mresp, err := http.Get(gen.url + TRTLLMPrometheusPath)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if mresp.StatusCode != 200 || !strings.Contains(string(mb), MetricPinnedBlocks+" 0\n") ||
		!strings.Contains(string(mb), MetricTransfers+`{result="failed"} 1`) {
		t.Fatalf("GET %s: %d\n%s", TRTLLMPrometheusPath, mresp.StatusCode, mb)
	}
	waitIdle(t, agg, ctxE, gen)
}

func sglangBody(prompt []uint32, bootstrap string) string {
	b := fmt.Sprintf(`{"rid":"r","input_ids":%s,"sampling_params":{"max_new_tokens":12,"ignore_eos":true}`, jsonIDs(prompt))
	if bootstrap != "" {
		b += "," + bootstrap
	}
	return b + "}"
}

func bootstrapOf(e engine, room uint64) string {
	host, port, _ := net.SplitHostPort(e.s.KVTransferAddr())
	return fmt.Sprintf(`"bootstrap_host":%q,"bootstrap_port":%s,"bootstrap_room":%d`, host, port, room)
}

func TestSGLangDisaggregated(t *testing.T) {
	agg := dialectEngine(t, DialectSGLang, RoleAggregated)
	pre := dialectEngine(t, DialectSGLang, RolePrefill)
	dec := dialectEngine(t, DialectSGLang, RoleDecode)
	prompt := promptIDs(40)
	_, b := postJSON(t, agg.url+"/generate", sglangBody(prompt, ""))
	want := ids(decodeMap(t, b)["output_ids"])

	// Both legs at once; the decode leg is sent first and waits for the room.
	const room = 1<<62 + 12345
	body := sglangBody(prompt, bootstrapOf(pre, room))
	got := make(chan []byte, 1)
	go func() {
		resp, err := http.Post(dec.url+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			got <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		var m json.RawMessage
		json.NewDecoder(resp.Body).Decode(&m)
		got <- m
	}()
	waitUntil(t, "the decode leg to wait for its room", func() bool { return waiting(pre) })
	var m strings.Builder
	pre.s.metrics.WritePrometheus(&m)
	if !strings.Contains(m.String(), MetricWaitingReads+" 1\n") {
		t.Fatalf("the prefill engine's metrics lack the waiting read:\n%s", m.String())
	}
	resp, b := postJSON(t, pre.url+"/generate", body)
	if resp.StatusCode != 200 || len(ids(decodeMap(t, b)["output_ids"])) != 1 {
		t.Fatalf("prefill leg: %d %s", resp.StatusCode, b)
	}
	db := <-got
	if out := ids(decodeMap(t, db)["output_ids"]); !slices.Equal(out, want) {
		t.Fatalf("decode leg %s, want %v", db, want)
	}
	waitIdle(t, agg, pre, dec)

	// A decode leg that gives up while waiting: the room's blocks are released as soon
	// as the prefill leg pins them.
	body = sglangBody(prompt, bootstrapOf(pre, 7))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", dec.url+"/generate", strings.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitUntil(t, "the decode leg to wait", func() bool { return waiting(pre) })
	cancel()
	<-done
	waitUntil(t, "the room to be abandoned", func() bool { return !waiting(pre) })
	if resp, b := postJSON(t, pre.url+"/generate", body); resp.StatusCode != 200 {
		t.Fatalf("prefill leg: %d %s", resp.StatusCode, b)
	}
	waitUntil(t, "the release", func() bool { return pre.s.TransferStats().Released[kvtransfer.ReasonClosed] == 1 })
	waitIdle(t, agg, pre, dec)

	// /abort_request of a pinned prefill leg releases its room.
	if resp, b := postJSON(t, pre.url+"/generate", sglangBody(prompt, bootstrapOf(pre, 8))); resp.StatusCode != 200 {
		t.Fatalf("prefill leg: %d %s", resp.StatusCode, b)
	}
	if st := pre.s.Stats(); st.PinnedRequests != 1 {
		t.Fatalf("prefill engine %+v", st)
	}
	postJSON(t, pre.url+"/abort_request", `{"rid":"r"}`)
	waitIdle(t, pre)

	// A decode leg whose prefill engine is gone is aborted as SGLang's decode scheduler
	// does: 500 "Decode transfer failed ... KVTransferError(...)".
	_, closedPort, _ := net.SplitHostPort(listenAndClose(t))
	resp, b = postJSON(t, dec.url+"/generate", sglangBody(prompt, fmt.Sprintf(`"bootstrap_host":"127.0.0.1","bootstrap_port":%s,"bootstrap_room":11`, closedPort)))
	if msg := fmt.Sprint(decodeMap(t, b)["error"]); resp.StatusCode != 500 ||
		!strings.Contains(msg, "Decode transfer failed for request rid=r bootstrap_room=11 with exception KVTransferError(bootstrap_room=11): KV transfer from") {
		t.Fatalf("decode leg without its prefill engine: %d %s", resp.StatusCode, b)
	}
	waitIdle(t, dec)

	for _, tc := range []struct {
		name string
		e    engine
		body string
		msg  string
	}{
		{"aggregated engine", agg, sglangBody(prompt, bootstrapOf(pre, 9)), "need an engine started with --role prefill or decode"},
		{"no room", dec, sglangBody(prompt, `"bootstrap_host":"127.0.0.1","bootstrap_port":1`), "bootstrap_room must be"},
		{"port", dec, sglangBody(prompt, `"bootstrap_host":"127.0.0.1","bootstrap_port":"x","bootstrap_room":1`), "bootstrap_port must be"},
		{"host", dec, sglangBody(prompt, `"bootstrap_host":"","bootstrap_port":1,"bootstrap_room":1`), "bootstrap_host must be"},
		{"room", dec, sglangBody(prompt, `"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":-1`), "bootstrap_room must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := postJSON(t, tc.e.url+"/generate", tc.body)
			if resp.StatusCode != 400 || !strings.Contains(string(b), tc.msg) {
				t.Fatalf("%d %s, want 400 with %q", resp.StatusCode, b, tc.msg)
			}
		})
	}
	waitIdle(t, agg, pre, dec)
}

// waiting reports whether a decode leg waits for a room on e's transfer port.
func waiting(e engine) bool { return e.s.xfer.srv.Waiting() > 0 }
