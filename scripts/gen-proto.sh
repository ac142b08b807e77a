#!/usr/bin/env bash
# Regenerates the Go code for messages/*.proto (protoc-gen-go and protoc-gen-go-grain,
# both pinned as tools in go.mod). Needs protoc (Debian: protobuf-compiler).
# Usage: scripts/gen-proto.sh [OUTDIR]   (default: messages/, in place)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-messages}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grain" github.com/asynkron/protoactor-go/protobuf/protoc-gen-go-grain
# The grain generator does not support proto3 optional: it runs on services.proto only.
PATH="$bin:$PATH" protoc -I messages \
  --go_out="$out" --go_opt=paths=source_relative \
  messages/*.proto
PATH="$bin:$PATH" protoc -I messages \
  --go-grain_out="$out" --go-grain_opt=paths=source_relative \
  messages/services.proto
