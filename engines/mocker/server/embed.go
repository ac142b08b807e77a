package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// Runner is what the mock engine serves, as vLLM's --runner.
type Runner string

// The runners.
const (
	RunnerGenerate Runner = "generate" // completions (the default)
	RunnerPooling  Runner = "pooling"  // an embedding model: POST /v1/embeddings
)

// ParseRunner checks a runner name ("" is RunnerGenerate). Errors name the accepted ones.
func ParseRunner(s string) (Runner, error) {
	switch Runner(s) {
	case "", RunnerGenerate:
		return RunnerGenerate, nil
	case RunnerPooling:
		return RunnerPooling, nil
	}
	return "", fmt.Errorf("server: runner %q: want generate or pooling", s)
}

// checkRunner resolves o's runner and embedding size. Errors: an unknown runner, a
// negative size, pooling in a dialect whose engine serves no embeddings (trtllm-serve)
// or in a disaggregated role.
func checkRunner(o *Options) error {
	r, err := ParseRunner(string(o.Runner))
	if err != nil {
		return err
	}
	o.Runner = r
	switch {
	case o.EmbeddingSize < 0:
		return fmt.Errorf("server: --embedding-size %d must not be negative", o.EmbeddingSize)
	case r != RunnerPooling:
		return nil
	case o.Dialect == DialectTRTLLM:
		return fmt.Errorf("server: --runner pooling: trtllm-serve serves no embeddings; use the vllm or sglang dialect")
	case o.Role != "" && o.Role != RoleAggregated:
		return fmt.Errorf("server: --runner pooling: an embedding model has no disaggregated role (got %s)", o.Role)
	}
	if o.EmbeddingSize == 0 {
		o.EmbeddingSize = mocker.DefaultEmbeddingSize
	}
	return nil
}

// pooling reports whether the engine serves embeddings.
func (s *Server) pooling() bool { return s.opts.Runner == RunnerPooling }

// generating wraps a generation route: a pooling engine answers it with vLLM's refusal
// (SGLang's engine refuses generation on an embedding model too).
func (s *Server) generating(api string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.pooling() {
			writeError(w, badRequest("", "The model does not support %s API", api))
			return
		}
		h(w, r)
	}
}

// embeddingRequest is the body of POST /v1/embeddings (OpenAI's, with vLLM's
// truncate_prompt_tokens and add_special_tokens).
type embeddingRequest struct {
	Model                string          `json:"model"`
	Input                json.RawMessage `json:"input"`
	EncodingFormat       string          `json:"encoding_format"`
	Dimensions           *int            `json:"dimensions"`
	TruncatePromptTokens *int            `json:"truncate_prompt_tokens"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
}

type embeddingData struct {
	Index     int    `json:"index"`
	Object    string `json:"object"`
	Embedding any    `json:"embedding"`
}

type embeddingUsage struct {
	PromptTokens        int  `json:"prompt_tokens"`
	TotalTokens         int  `json:"total_tokens"`
	CompletionTokens    int  `json:"completion_tokens"`
	PromptTokensDetails *int `json:"prompt_tokens_details"` // always null
}

// embeddingResponse is vLLM's EmbeddingResponse; SGLang's has no id or created.
type embeddingResponse struct {
	ID      string          `json:"id,omitempty"`
	Object  string          `json:"object"`
	Created int64           `json:"created,omitempty"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   embeddingUsage  `json:"usage"`
}

// embedInputs reads a request's input into token id lists: a string, an array of
// strings, an array of token ids or an array of such arrays.
func (s *Server) embedInputs(req *embeddingRequest) ([][]uint32, error) {
	addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
	encode := func(text string) []uint32 {
		if addSpecial && s.opts.Model != nil {
			return s.opts.Model.EncodePrompt(text)
		}
		return s.tok.Encode(text)
	}
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		return [][]uint32{encode(one)}, nil
	}
	var texts []string
	if json.Unmarshal(req.Input, &texts) == nil && len(texts) > 0 {
		out := make([][]uint32, len(texts))
		for i, t := range texts {
			out[i] = encode(t)
		}
		return out, nil
	}
	var ids []uint32
	if json.Unmarshal(req.Input, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, nil
	}
	var lists [][]uint32
	if json.Unmarshal(req.Input, &lists) == nil && len(lists) > 0 {
		return lists, nil
	}
	return nil, fmt.Errorf("input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
}

// embed answers an embeddings body: the data entries and the prompt tokens, or the
// error to answer with 400.
func (s *Server) embed(body []byte) (*embeddingResponse, error) {
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	if req.Model != "" && req.Model != s.opts.ServedModelName {
		return nil, fmt.Errorf("The model `%s` does not exist.", req.Model)
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		return nil, fmt.Errorf("encoding_format %q: want float or base64", req.EncodingFormat)
	}
	dims := 0
	if req.Dimensions != nil {
		if *req.Dimensions < 1 {
			return nil, fmt.Errorf("Dimensions must be greater than 0")
		}
		dims = *req.Dimensions
	}
	inputs, err := s.embedInputs(&req)
	if err != nil {
		return nil, err
	}
	vocab := s.tok.VocabSize()
	maxLen := s.opts.Engine.MaxModelLen
	resp := &embeddingResponse{Object: "list", Model: s.opts.ServedModelName, Data: make([]embeddingData, len(inputs))}
	for i, ids := range inputs {
		if t := req.TruncatePromptTokens; t != nil {
			keep := *t
			if keep < 0 {
				keep = maxLen
			}
			if keep > 0 && len(ids) > keep {
				ids = ids[len(ids)-keep:]
			}
		}
		switch {
		case len(ids) == 0:
			return nil, fmt.Errorf("input %d has no tokens", i)
		case len(ids) > maxLen:
			return nil, fmt.Errorf("This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.", maxLen, len(ids))
		}
		for _, id := range ids {
			if int(id) >= vocab {
				return nil, fmt.Errorf("Token id %d is out of vocabulary", id)
			}
		}
		v := mocker.Embed(ids, s.opts.EmbeddingSize, dims)
		var e any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
			}
			e = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data[i] = embeddingData{Index: i, Object: "embedding", Embedding: e}
		resp.Usage.PromptTokens += len(ids)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	return resp, nil
}

// handleVLLMEmbeddings serves POST /v1/embeddings in vLLM's dialect: the embedding of
// each input (mocker.Embed), computed at once (no engine step), or vLLM's 400 for a
// generating model or a bad body.
func (s *Server) handleVLLMEmbeddings(w http.ResponseWriter, r *http.Request) {
	if !s.pooling() {
		writeError(w, badRequest("", "The model does not support Embeddings API"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, badRequest("", "reading the request body: %v", err))
		return
	}
	resp, err := s.embed(body)
	if err != nil {
		writeError(w, badRequest("", "%v", err))
		return
	}
	resp.ID, resp.Created = "embd-"+randomID(), time.Now().Unix()
	writeJSON(w, http.StatusOK, resp)
}

// sglangOpenAIError is SGLang's ErrorResponse, the error body of its OpenAI-compatible
// routes.
type sglangOpenAIError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// handleSGLangEmbeddings serves POST /v1/embeddings in SGLang's dialect (an engine
// started with --is-embedding).
func (s *Server) handleSGLangEmbeddings(w http.ResponseWriter, r *http.Request) {
	fail := func(msg string) {
		writeJSON(w, http.StatusBadRequest, sglangOpenAIError{Object: "error", Message: msg, Type: "BadRequestError", Code: http.StatusBadRequest})
	}
	if !s.pooling() {
		fail("This model does not support embeddings: start the server with --is-embedding")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		fail("reading the request body: " + err.Error())
		return
	}
	resp, err := s.embed(body)
	if err != nil {
		fail(err.Error())
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
