// Package model reads a model folder: a Hugging Face model directory (tokenizer.json,
// tokenizer_config.json, chat_template.jinja, config.json, generation_config.json) or an
// embedded builtin tokenizer. Gateways use it to turn OpenAI requests into token ids and
// token ids back into text; workers to describe the model they serve; the mock engine to
// tokenize like a real one.
//
// It reads a folder two ways:
//
//   - LoadModel gives a Model: the tokenizer (an embedded offline default, or an HF
//     tokenizer.json model), the chat template (Jinja, from tokenizer_config.json or
//     chat_template.jinja), the EOS ids and the context length. Detokenizer
//     (incremental detokenization) and StopMatcher (stop strings) work on its output.
//     SourceDigest fingerprints the files LoadModel reads; ReadTokenizerFiles carries
//     them to another machine.
//   - FromFolder gives the model deployment card (messages.ModelCard): the context
//     length, the EOS token ids, the tokenizer digest and the architecture figures
//     (layers, heads, KV bytes per token, a parameter estimate) that ReadFolder reads
//     into a Config.
//
// It also reads LoRA adapter folders (adapter.go): ReadAdapter checks a PEFT adapter
// folder (adapter_config.json, a weights file) and Adapter.CheckBase whether it adapts a
// served model (docs/reference.md §26.2).
//
// # Tokenizers
//
// Byte-level BPE tokenizers have tiktoken semantics (see bpeTokenizer). The other HF
// families, SentencePiece-style BPE with byte fallback, WordPiece and Unigram, run HF
// tokenizers' pipeline (see pipelineTokenizer; docs/reference.md §25). Components the
// loader does not know are refused with an error naming the file. The Detokenizer and
// StopMatcher are single-stream state machines, deterministic in their input: one per
// request, not safe for concurrent use (StopMatchers built from equal stop lists share
// one immutable automaton through a process-wide cache). Models and Tokenizers are
// immutable and safe for concurrent use.
//
// # The card
//
// The card's reading touches files and nothing else: no network, no clock, no
// goroutines. ParseConfig and ParseGenerationConfig are pure (bytes in, figures out);
// ReadFolder and FromFolder add the file reads.
//
// Sources, per figure (key names are config.json's; multimodal configs keep the
// language model's keys in "text_config", which is read first, then the top level):
//
//   - architecture: architectures[0] of the top level, else of text_config.
//   - layers, heads, sizes: num_hidden_layers, num_attention_heads, num_key_value_heads
//     (default: num_attention_heads), head_dim (default: hidden_size /
//     num_attention_heads), hidden_size; GPT-2's n_layer, n_head, n_embd and OPT's
//     ffn_dim are read as aliases.
//   - dtype: torch_dtype, or dtype (newer transformers); see DtypeBytes.
//   - context length: as vLLM derives max_model_len (see ParseConfig).
//   - EOS ids: generation_config.json's eos_token_id, else config.json's.
//   - tokenizer digest: SourceDigest of the folder.
//
// Errors start with "model: "; those about a file name it (and, for a bad value, the key).
package model
