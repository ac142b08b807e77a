#!/usr/bin/env bash
# Prints the path of a Consul binary for cluster tests and local clusters, building it
# when there is none.
#
# Order: $TURBINE_CONSUL if set; `consul` on PATH; the cached build under
# ${TURBINE_CACHE_DIR:-~/.cache/turbine}/consul-<version>/consul; else it builds Consul
# (MPL-2.0, the last open-source line) from the Go module proxy into that cache. The build
# takes about ten minutes on two cores and happens once per machine.
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail
version="${TURBINE_CONSUL_VERSION:-v1.14.11}"
if [ -n "${TURBINE_CONSUL:-}" ]; then
  [ -x "$TURBINE_CONSUL" ] || { echo "TURBINE_CONSUL=$TURBINE_CONSUL is not an executable" >&2; exit 1; }
  echo "$TURBINE_CONSUL"; exit 0
fi
if command -v consul >/dev/null 2>&1; then
  command -v consul; exit 0
fi
cache="${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/consul-${version}"
bin="$cache/consul"
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
mkdir -p "$cache"
lock="$cache/.lock"
exec 9>"$lock"
flock 9
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
echo "building consul ${version} from the Go module proxy into $cache (once; about ten minutes)" >&2
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod
# A private module cache keeps the build's dependencies out of the project's go.sum work.
dir="$(cd "$work" && GO111MODULE=on go mod download -json "github.com/hashicorp/consul@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -n "$dir" ] || { echo "go mod download github.com/hashicorp/consul@${version} failed" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
go mod edit -dropreplace=github.com/hashicorp/consul/api \
  -dropreplace=github.com/hashicorp/consul/sdk \
  -dropreplace=github.com/hashicorp/consul/proto-public
go build -mod=mod -trimpath -o "$bin.tmp" . >&2
mv "$bin.tmp" "$bin"
"$bin" version >&2
echo "$bin"
