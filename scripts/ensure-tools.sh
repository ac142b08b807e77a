#!/usr/bin/env bash
# Installs what the build and tests need beyond Go itself, when missing:
#   protoc (Debian's protobuf-compiler) to check that generated code is current.
# Idempotent and quiet when everything is already there.
set -euo pipefail
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protoc (Debian package protobuf-compiler)..."
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq protobuf-compiler >/dev/null
fi
