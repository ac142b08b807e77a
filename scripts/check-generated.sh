#!/usr/bin/env bash
# Fails when the committed Go code in messages/ differs from what the .proto files generate.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/gen-proto.sh "$tmp" >/dev/null
for f in "$tmp"/*.go; do
  if ! cmp -s "$f" "messages/$(basename "$f")"; then
    echo "messages/$(basename "$f") is stale: run scripts/gen-proto.sh (or 'task proto') and commit the result" >&2
    diff -u "messages/$(basename "$f")" "$f" | head -20 >&2 || true
    exit 1
  fi
done
for f in messages/*.pb.go; do
  [ -f "$tmp/$(basename "$f")" ] || { echo "$f has no .proto source any more: delete it" >&2; exit 1; }
done
echo "generated code is current"
