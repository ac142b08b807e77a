package model

import (
	"fmt"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// BuiltinPrefix starts the source of an embedded tokenizer ("builtin:cl100k_base").
const BuiltinPrefix = "builtin:"

// builtinEncoding describes one embedded tiktoken encoding. Ranks come from
// github.com/pkoukk/tiktoken-go-loader, which embeds OpenAI's published .tiktoken files
// (no download at run time); the patterns and special tokens are those of OpenAI's
// tiktoken (tiktoken_ext/openai_public.py).
//
// ChatML needs <|im_start|> and <|im_end|>, which neither encoding defines. Turbine adds
// them as special tokens: for cl100k_base at 100264 and 100265, the ids tiktoken's README
// gives for its "cl100k_im" extension (inside cl100k_base's unused special range); for
// o200k_base, which has no published ChatML ids, right above its highest special token
// (200019 and 200020). <|im_end|> ends a turn and is the EOS token; <|endoftext|> also
// stops generation.
type builtinEncoding struct {
	file     string // name of the embedded ranks file
	pattern  string
	specials map[string]uint32
	// vocabSize is the highest id + 1, the added ChatML tokens included.
	vocabSize int
}

var builtinEncodings = map[string]builtinEncoding{
	"cl100k_base": {
		file:    "cl100k_base.tiktoken",
		pattern: cl100kPattern,
		specials: map[string]uint32{
			"<|endoftext|>":   100257,
			"<|fim_prefix|>":  100258,
			"<|fim_middle|>":  100259,
			"<|fim_suffix|>":  100260,
			"<|im_start|>":    100264,
			"<|im_end|>":      100265,
			"<|endofprompt|>": 100276,
		},
		vocabSize: 100277,
	},
	"o200k_base": {
		file:    "o200k_base.tiktoken",
		pattern: o200kPattern,
		specials: map[string]uint32{
			"<|endoftext|>":   199999,
			"<|endofprompt|>": 200018,
			"<|im_start|>":    200019,
			"<|im_end|>":      200020,
		},
		vocabSize: 200021,
	},
}

// chatMLTemplate is the chat template of the builtin models: ChatML
// ("<|im_start|>role\ncontent<|im_end|>\n", generation prompt "<|im_start|>assistant\n").
// Tools are listed in a system turn as one JSON object a line inside <tools></tools>
// (merged with the first system message when there is one); assistant tool calls are
// written as {"name", "arguments"} objects inside <tool_call></tool_call>, the layout of
// Qwen's ChatML templates.
const chatMLTemplate = `
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if messages and messages[0].role == 'system' -%}
    {{- messages[0].content + '\n\n' -}}
  {%- endif -%}
  {{- '# Tools\n\nYou may call one or more functions. Their signatures, one JSON object a line, are within <tools></tools>:\n<tools>' -}}
  {%- for tool in tools -%}
    {{- '\n' + (tool | tojson) -}}
  {%- endfor -%}
  {{- '\n</tools>\n\nTo call a function, write a JSON object with its name and arguments within <tool_call></tool_call>:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- if not (tools and loop.first and message.role == 'system') -%}
    {{- '<|im_start|>' + message.role + '\n' + message.content -}}
    {%- if message.tool_calls -%}
      {%- for tool_call in message.tool_calls -%}
        {%- if message.content or not loop.first -%}{{- '\n' -}}{%- endif -%}
        {{- '<tool_call>\n{"name": "' + tool_call.function.name + '", "arguments": ' + (tool_call.function.arguments | tojson) + '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
`

// loadBuiltin builds the model of an embedded encoding (name without the prefix).
func loadBuiltin(source, name string) (*Model, error) {
	enc, ok := builtinEncodings[name]
	if !ok {
		return nil, fmt.Errorf("model: unknown builtin tokenizer %q (known: %s)", source, builtinNames())
	}
	tok, err := newBuiltinTokenizer(enc)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", source, err)
	}
	m := &Model{
		Source:      source,
		Tokenizer:   tok,
		EOSToken:    "<|im_end|>",
		EOSTokenIDs: []uint32{enc.specials["<|im_end|>"], enc.specials["<|endoftext|>"]},
		tokenVars:   map[string]string{"eos_token": "<|im_end|>"},
	}
	if err := m.setChatTemplate(chatMLTemplate); err != nil {
		return nil, fmt.Errorf("model: %s: %w", source, err)
	}
	return m, nil
}

func builtinNames() string {
	return BuiltinPrefix + "cl100k_base, " + BuiltinPrefix + "o200k_base"
}

func newBuiltinTokenizer(enc builtinEncoding) (*bpeTokenizer, error) {
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(enc.file)
	if err != nil {
		return nil, fmt.Errorf("embedded ranks %s: %v", enc.file, err)
	}
	sp, err := newSplitter(enc.pattern)
	if err != nil {
		return nil, fmt.Errorf("pattern: %v", err)
	}
	tok := &bpeTokenizer{
		ranks:   make(map[string]uint32, len(ranks)),
		splits:  []pieceSplitter{sp},
		tokens:  make([][]byte, enc.vocabSize),
		special: make([]bool, enc.vocabSize),
		isAdded: make([]bool, enc.vocabSize),
	}
	for b, r := range ranks {
		if r < 0 || r >= enc.vocabSize {
			return nil, fmt.Errorf("embedded ranks %s: rank %d is out of range", enc.file, r)
		}
		tok.ranks[b] = uint32(r)
		tok.tokens[r] = []byte(b)
	}
	added := make([]addedToken, 0, len(enc.specials))
	for s, id := range enc.specials {
		if tok.tokens[id] != nil {
			return nil, fmt.Errorf("special token %s: id %d is already a token", s, id)
		}
		tok.tokens[id] = []byte(s)
		tok.special[id] = true
		tok.isAdded[id] = true
		added = append(added, addedToken{content: s, id: id, special: true})
	}
	tok.added = newAddedMatcher(added)
	return tok, nil
}
