#!/usr/bin/env bash
# Installs what the build and tests need beyond Go itself, when missing:
#   protoc (Debian's protobuf-compiler) to check that generated code is current;
#   python3-zmq and python3-msgpack (Debian) for the libzmq interoperability tests of the
#   KV-event stream: an independent implementation of the engines' side.
# Idempotent and quiet when everything is already there.
set -euo pipefail
missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if ! /usr/bin/python3 -c 'import zmq, msgpack' >/dev/null 2>&1; then
  missing+=(python3 python3-zmq python3-msgpack)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
