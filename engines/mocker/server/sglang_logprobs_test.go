package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// sglangLogprobMeta is meta_info's logprob members as a test reads them.
type sglangLogprobMeta struct {
	CompletionTokens    int        `json:"completion_tokens"`
	InputTokenLogprobs  [][3]any   `json:"input_token_logprobs"`
	OutputTokenLogprobs [][3]any   `json:"output_token_logprobs"`
	InputTopLogprobs    [][][3]any `json:"input_top_logprobs"`
	OutputTopLogprobs   [][][3]any `json:"output_top_logprobs"`
}

// SGLang's logprobs: triples [logprob, id, text], the first prompt token's logprob null,
// the sampled token among the top 2 of its top list, cumulative on every streamed chunk
// (with and without incremental output_ids), the same values streamed and not.
func TestSGLangLogprobs(t *testing.T) {
	prompt := promptIDs(6)
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("incremental=%v", incremental), func(t *testing.T) {
			_, hs := startServer(t, sglangOptions(t, incremental))
			body := func(stream bool) string {
				return fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":5,"ignore_eos":true,"sampling_seed":3},"return_logprob":true,"top_logprobs_num":2,"logprob_start_len":0,"return_text_in_logprobs":true,"stream":%v}`,
					jsonIDs(prompt), stream)
			}
			resp, b := postJSON(t, hs.URL+"/generate", body(false))
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var full struct {
				OutputIDs []uint32          `json:"output_ids"`
				Meta      sglangLogprobMeta `json:"meta_info"`
			}
			if err := json.Unmarshal(b, &full); err != nil {
				t.Fatal(err)
			}
			m := full.Meta
			if len(m.InputTokenLogprobs) != len(prompt) || m.InputTokenLogprobs[0][0] != nil || m.InputTopLogprobs[0] != nil ||
				len(m.OutputTokenLogprobs) != 5 || len(m.OutputTopLogprobs) != 5 {
				t.Fatalf("shapes: %s", b)
			}
			for i, tr := range m.OutputTokenLogprobs {
				if uint32(tr[1].(float64)) != full.OutputIDs[i] || tr[2].(string) == "" || len(m.OutputTopLogprobs[i]) != 2 {
					t.Fatalf("output %d: %v %v", i, tr, m.OutputTopLogprobs[i])
				}
				if a, b := m.OutputTopLogprobs[i][0], m.OutputTopLogprobs[i][1]; a[1] != tr[1] && b[1] != tr[1] || a[0].(float64) < b[0].(float64) {
					t.Fatalf("output %d: token %v not among the top 2 %v", i, tr, m.OutputTopLogprobs[i])
				}
			}
			for i, tr := range m.InputTokenLogprobs {
				if uint32(tr[1].(float64)) != prompt[i] || (i > 0 && tr[0] == nil) {
					t.Fatalf("input %d: %v", i, tr)
				}
			}
			resp, b = postJSON(t, hs.URL+"/generate", body(true))
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var last sglangLogprobMeta
			prev := 0
			for _, ev := range sseEvents(t, bytes.NewReader(b)) {
				if ev == "[DONE]" {
					continue
				}
				var f struct {
					Meta sglangLogprobMeta `json:"meta_info"`
				}
				if err := json.Unmarshal([]byte(ev), &f); err != nil {
					t.Fatal(err)
				}
				if n := len(f.Meta.OutputTokenLogprobs); n != f.Meta.CompletionTokens || n < prev || len(f.Meta.InputTokenLogprobs) != len(prompt) {
					t.Fatalf("chunk not cumulative: %s", ev)
				}
				prev, last = len(f.Meta.OutputTokenLogprobs), f.Meta
			}
			if fmt.Sprint(last.OutputTokenLogprobs) != fmt.Sprint(m.OutputTokenLogprobs) || fmt.Sprint(last.InputTopLogprobs) != fmt.Sprint(m.InputTopLogprobs) {
				t.Fatalf("streamed %v, not %v", last.OutputTokenLogprobs, m.OutputTokenLogprobs)
			}
		})
	}
	// Without top_logprobs_num no top lists; without logprob_start_len no prompt entries;
	// without return_logprob no members at all.
	_, hs := startServer(t, sglangOptions(t, false))
	_, b := postJSON(t, hs.URL+"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2},"return_logprob":true}`)
	var m map[string]map[string]any
	_ = json.Unmarshal(b, &m)
	if in, ok := m["meta_info"]["input_token_logprobs"].([]any); !ok || len(in) != 0 || m["meta_info"]["output_top_logprobs"] != nil {
		t.Fatalf("%s", b)
	}
	_, b = postJSON(t, hs.URL+"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}`)
	if bytes.Contains(b, []byte("logprobs")) {
		t.Fatalf("%s", b)
	}
}
