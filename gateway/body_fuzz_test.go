package gateway

import (
	"encoding/json"
	"testing"
)

// The request bodies of the endpoints the chat and completion fuzzers do not reach:
// Anthropic's /v1/messages (and count_tokens), /v1/embeddings and the LoRA adapter
// loads. Each either refuses the body with a well-formed 4xx catalogue error, or accepts
// a body encoding/json accepts, with the invariants each parser documents.

func FuzzParseMessagesRequest(f *testing.F) {
	seedBodies(f, anthMessagesPath)
	f.Add([]byte(`{"model":"m","max_tokens":16,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":1024}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, countOnly := range []bool{false, true} {
			req, e := parseMessagesRequest(body, countOnly)
			if !accepted(t, body, req != nil, e) {
				continue
			}
			if req.MaxTokens < 0 || (req.MaxTokens > 0 && req.MinTokens > req.MaxTokens) {
				t.Fatalf("accepted max_tokens %d min_tokens %d", req.MaxTokens, req.MinTokens)
			}
		}
	})
}

func FuzzParseEmbeddingRequest(f *testing.F) {
	seedBodies(f, "/v1/embeddings")
	f.Add([]byte(`{"model":"m","input":["a","b"],"encoding_format":"base64","dimensions":8,"truncate_prompt_tokens":-1}`))
	f.Add([]byte(`{"model":"m","input":[[1,2,3],[4]],"add_special_tokens":false}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := parseEmbeddingRequest(body)
		if !accepted(t, body, req != nil, e) {
			return
		}
		if len(req.Inputs) == 0 || req.Dimensions < 0 || (req.Truncate != nil && *req.Truncate < -1) {
			t.Fatalf("accepted %d inputs, dimensions %d, truncate %v", len(req.Inputs), req.Dimensions, req.Truncate)
		}
		for i, in := range req.Inputs {
			if !in.isIDs && len(in.ids) > 0 {
				t.Fatalf("input %d: ids %v but isIDs %v", i, in.ids, in.isIDs)
			}
		}
	})
}

func FuzzParseLoraBody(f *testing.F) {
	seedBodies(f, loadPath)
	seedBodies(f, unloadPath)
	f.Add([]byte(`{"lora_name":"a","lora_path":"/x","model":"m","workers":2,"pinned":true}`))
	f.Add([]byte(`{"lora_name":"a","lora_int_id":3}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, load := range []bool{true, false} {
			b, e := parseLoraBody(body, load)
			if !accepted(t, body, b != nil, e) {
				continue
			}
			if b.Name == "" || (load && (b.Path == "" || b.Workers < 0 || b.Workers > MaxLoraWorkers)) {
				t.Fatalf("accepted %+v (load %v)", b, load)
			}
		}
	})
}

// accepted checks a parser's answer to body: a well-formed refusal (false), or an
// accepted body that encoding/json accepts too (true); never both or neither.
func accepted(t *testing.T, body []byte, parsed bool, e *APIError) bool {
	t.Helper()
	if e != nil {
		if parsed {
			t.Fatal("both a parsed body and an error")
		}
		checkParseError(t, e)
		return false
	}
	if !parsed {
		t.Fatal("neither a parsed body nor an error")
	}
	if !json.Valid(body) {
		t.Fatalf("accepted a body that is not JSON: %q", body)
	}
	return true
}
