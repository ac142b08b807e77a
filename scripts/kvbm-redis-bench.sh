#!/usr/bin/env bash
# kvbm-redis-bench.sh: redis-benchmark against the kvbm's RESP server and against
# redis-server on the same machine, in the same run; prints ops/s and GB/s side by side
# (docs/reference.md §9.3).
#
#   scripts/kvbm-redis-bench.sh [-d BYTES] [-n REQUESTS] [-c CLIENTS] [-P PIPELINE]
#
# Needs redis-server and redis-benchmark (Debian: apt-get install -y redis-server
# redis-tools) and Go.
set -euo pipefail
size=2097152 n=400 clients=4 pipeline=1
while getopts "d:n:c:P:" o; do
	case $o in
	d) size=$OPTARG ;; n) n=$OPTARG ;; c) clients=$OPTARG ;; P) pipeline=$OPTARG ;;
	*) sed -n 2,9p "$0"; exit 2 ;;
	esac
done
for tool in redis-server redis-benchmark go; do
	command -v "$tool" >/dev/null || { echo "kvbm-redis-bench: $tool not found (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
done
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
	for _ in $(seq 100); do
		redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "kvbm-redis-bench: nothing answers on port $1" >&2
	return 1
}

(cd "$root" && CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" go build -o "$work/kvbmresp" ./kvbm/resp/internal/kvbmresp)
kport=$(free_port)
"$work/kvbmresp" -addr "127.0.0.1:$kport" -host-bytes $((16 * size * clients * pipeline + (1 << 30))) 2>"$work/kvbm.log" &
pids+=($!)
rport=$(free_port)
redis-server --save "" --appendonly no --port "$rport" --bind 127.0.0.1 --databases 1 --logfile "$work/redis.log" &
pids+=($!)
wait_port "$kport"
wait_port "$rport"

# bench PORT: "test ops/s" lines from redis-benchmark's CSV output.
bench() {
	redis-benchmark -p "$1" -t set,get -d "$size" -n "$n" -c "$clients" -P "$pipeline" --csv 2>/dev/null |
		awk -F, 'NR > 1 { gsub(/"/, ""); print $1, $2 }'
}
echo "redis-benchmark -t set,get -d $size -n $n -c $clients -P $pipeline ($(nproc) cores)"
printf '%-6s %14s %10s %14s %10s\n' test "kvbm ops/s" "kvbm GB/s" "redis ops/s" "redis GB/s"
paste -d' ' <(bench "$kport") <(bench "$rport") |
	awk -v size="$size" '{ printf "%-6s %14.1f %10.3f %14.1f %10.3f\n", $1, $2, $2 * size / 1e9, $4, $4 * size / 1e9 }'
