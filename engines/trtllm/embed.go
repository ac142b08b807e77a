package trtllm

import "errors"

// ErrNoEmbeddings refuses an embedding model (`--runner pooling`): trtllm-serve serves
// no /v1/embeddings, so the launcher is not built (docs/reference.md §23). Serve
// embedding models with vLLM or SGLang.
var ErrNoEmbeddings = errors.New("launcher: trtllm: TensorRT-LLM's trtllm-serve serves no embeddings: --runner pooling needs --engine vllm or sglang")
