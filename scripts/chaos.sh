#!/usr/bin/env bash
# The chaos soak (docs/chaos.md): builds turbine, finds Consul, and runs `turbine chaos`
# with the given flags (e.g. --duration 3m --seed 7 --out chaos-out). It needs root (the
# hosts are network namespaces), iproute2 and nftables (scripts/ensure-tools.sh installs
# them). Prints the checker's summary line; exits 1 when the checker finds a violation.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "chaos: needs root to make network namespaces; skipped" >&2
  exit 0
fi
scripts/ensure-tools.sh
TURBINE_CONSUL="$(scripts/ensure-consul.sh)"
export TURBINE_CONSUL
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
mkdir -p bin
go build -o bin/turbine ./cmd/turbine
exec bin/turbine chaos "$@"
