#!/usr/bin/env bash
# Checks that a GPU machine can run turbine's real engines (a few minutes at most).
#
# Usage: bash deploy/gpu-check.sh [MODEL_FOLDER]
#
#   1. Prints the driver's view (nvidia-smi -L) and turbine's own NVML discovery: the
#      start-up log lines of `turbine node` (one "GPU" line per device, then the node's GPU
#      count). Fails when the node finds no GPU, with the reason it logged.
#   2. With MODEL_FOLDER (a small model downloaded from the Hugging Face hub, e.g.
#      Qwen/Qwen3-0.6B: config.json, tokenizer files, weights) and the engine installed,
#      starts one worker with `turbine node --engine $ENGINE --model MODEL_FOLDER`, waits
#      until the engine answers /health, sends it one completion directly and prints the
#      answer and the engine's KV cache figures. Fails when the engine does not come up,
#      printing its last output lines.
#
# The node runs alone (--discovery local): no Consul, no frontend. Its workers therefore
# log "register with router failed" every heartbeat, which this script filters out; KV
# events and routing are not checked here (they need a frontend: see README).
#
# Environment:
#   TURBINE         the turbine binary (default: bin/turbine, else turbine on PATH, else
#                   built with go into a temporary folder)
#   ENGINE          vllm (default), sglang or trtllm
#   READY_TIMEOUT   how long the engine may take to answer /health, in seconds with an
#                   "s" suffix (default 200s)
#   GPU_MEMORY      --gpu-memory-utilization (default 0.5)
#   KEEP_LOGS=1     keep the node logs (their folder is printed)
set -uo pipefail

ENGINE=${ENGINE:-vllm}
READY_TIMEOUT=${READY_TIMEOUT:-200s}
GPU_MEMORY=${GPU_MEMORY:-0.5}
MODEL=${1:-}
start=$SECONDS

work=$(mktemp -d "${TMPDIR:-/tmp}/turbine-gpu-check.XXXXXX")
node_pid=
cleanup() {
	if [ -n "$node_pid" ] && kill -0 "$node_pid" 2>/dev/null; then
		kill -TERM "$node_pid" 2>/dev/null
		for _ in $(seq 1 60); do kill -0 "$node_pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$node_pid" 2>/dev/null
	fi
	if [ "${KEEP_LOGS:-}" = 1 ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

section() { printf '\n== %s\n' "$*"; }
fail() {
	printf '\nFAIL: %s\n' "$*"
	exit 1
}

# field NAME: the JSON field NAME of the log line on stdin (strings without quotes).
field() { sed -n -e "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" -e t -e "s/.*\"$1\":\([^\",}]*\).*/\1/p" | head -1; }

# wait_for FILE PATTERN SECONDS [FAIL_PATTERN]: waits until FILE has a line matching
# PATTERN (0), a line matching FAIL_PATTERN (2), the node exits or the time runs out (1).
wait_for() {
	local file=$1 pattern=$2 limit=$3 failing=${4:-} i
	for i in $(seq 1 $((limit * 2))); do
		grep -q -- "$pattern" "$file" 2>/dev/null && return 0
		[ -n "$failing" ] && grep -q -- "$failing" "$file" 2>/dev/null && return 2
		kill -0 "$node_pid" 2>/dev/null || return 1
		sleep 0.5
	done
	return 1
}

stop_node() {
	kill -TERM "$node_pid" 2>/dev/null
	for _ in $(seq 1 60); do kill -0 "$node_pid" 2>/dev/null || break; sleep 0.5; done
	kill -KILL "$node_pid" 2>/dev/null
	wait "$node_pid" 2>/dev/null
	node_pid=
}

section "turbine binary"
if [ -z "${TURBINE:-}" ]; then
	root=$(cd "$(dirname "$0")/.." && pwd)
	if [ -x "$root/bin/turbine" ]; then
		TURBINE=$root/bin/turbine
	elif command -v turbine >/dev/null; then
		TURBINE=$(command -v turbine)
	elif command -v go >/dev/null; then
		echo "building turbine (go build ./cmd/turbine) ..."
		(cd "$root" && go build -o "$work/turbine" ./cmd/turbine) || fail "go build ./cmd/turbine failed"
		TURBINE=$work/turbine
	else
		fail "no turbine binary: set TURBINE, put turbine on PATH, or install Go to build it"
	fi
fi
[ -x "$TURBINE" ] || fail "TURBINE=$TURBINE is not an executable"
echo "$TURBINE"

section "NVIDIA driver (nvidia-smi -L)"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi -L || echo "nvidia-smi failed: the driver is not loaded or sees no GPU"
else
	echo "nvidia-smi not found: no NVIDIA driver installed on this machine (or not on PATH)"
fi

section "NVML discovery (turbine node start-up)"
log=$work/discovery.log
"$TURBINE" node --discovery local --workers 0 --node-id gpu-check --log-format json >"$log" 2>&1 &
node_pid=$!
wait_for "$log" '"message":"node agent joined the cluster"' 30
joined=$?
stop_node
grep -E '"message":"(GPU|no NVIDIA driver|GPU discovery failed|TURBINE_FAKE_GPUS)' "$log" | while IFS= read -r line; do
	case $line in
	*'"message":"GPU"'*)
		printf 'GPU %s: %s, %s bytes, %s\n' "$(field index <<<"$line")" "$(field name <<<"$line")" \
			"$(field memory_bytes <<<"$line")" "$(field uuid <<<"$line")"
		;;
	*) printf '%s: %s %s\n' "$(field level <<<"$line")" "$(field message <<<"$line")" "$(field error <<<"$line")" ;;
	esac
done
[ "$joined" = 0 ] || { tail -20 "$log"; fail "turbine node did not start within 30 s (log above)"; }
line=$(grep '"message":"node agent joined the cluster"' "$log")
gpus=$(field gpus <<<"$line")
cpu_only=$(field cpu_only <<<"$line")
echo "node: $gpus GPU(s), cpu_only=$cpu_only"
if [ "$cpu_only" = true ] || [ "${gpus:-0}" = 0 ]; then
	reason=$(grep -E '"message":"(no NVIDIA driver|GPU discovery failed)' "$log" | field error)
	fail "turbine found no GPU${reason:+: $reason}. Real engines need an NVIDIA driver and at least one GPU."
fi
if grep -q TURBINE_FAKE_GPUS "$log"; then
	echo "note: TURBINE_FAKE_GPUS is set: these are fake GPUs (for testing this script), not a real check"
fi

section "engine launch ($ENGINE)"
case $ENGINE in
vllm) have() { command -v vllm >/dev/null; }; what="vllm on PATH"; extra=(-- --enforce-eager) ;;
sglang) have() { python3 -c 'import sglang' 2>/dev/null; }; what="python3 -c 'import sglang'"; extra=() ;;
trtllm) have() { command -v trtllm-serve >/dev/null; }; what="trtllm-serve on PATH"; extra=() ;;
*) fail "ENGINE=$ENGINE: want vllm, sglang or trtllm" ;;
esac
if [ -z "$MODEL" ]; then
	printf '\nOK: NVML sees %s GPU(s). Engine launch skipped: give a small model folder as the argument to try one.\n' "$gpus"
	exit 0
fi
[ -d "$MODEL" ] || fail "$MODEL is not a folder (download the model first, e.g. huggingface-cli download Qwen/Qwen3-0.6B --local-dir ./qwen3-0.6b)"
if ! have; then
	printf '\nOK: NVML sees %s GPU(s). Engine launch skipped: %s not found.\n' "$gpus" "$what"
	exit 0
fi
log=$work/engine.log
echo "turbine node --engine $ENGINE --model $MODEL (ready timeout $READY_TIMEOUT, GPU memory $GPU_MEMORY)"
"$TURBINE" node --discovery local --workers 1 --node-id gpu-check --engine "$ENGINE" --model "$MODEL" \
	--served-model-name gpu-check --max-model-len 4096 --gpu-memory-utilization "$GPU_MEMORY" \
	--ready-timeout "$READY_TIMEOUT" --log-format json "${extra[@]}" >"$log" 2>&1 &
node_pid=$!
launched=$SECONDS
limit=$(($(sed 's/s$//' <<<"$READY_TIMEOUT") + 30))
wait_for "$log" '"message":"engine ready"' "$limit" '"message":"engine \(exited\|start failed\|did not become ready\)'
state=$?
grep -E '"message":"(model card|worker started|engine started|engine ready|engine exited|engine start failed|engine did not become ready)"' "$log" |
	while IFS= read -r line; do
		printf '  %s %s\n' "$(field message <<<"$line")" \
			"$(sed -e 's/.*"level":"[a-z]*",//' -e 's/,"time":"[^"]*","message":"[^"]*"}$//' <<<"$line")"
	done
if [ "$state" != 0 ]; then
	echo "last engine output:"
	grep '"stream":"std' "$log" | tail -40 | sed -e 's/.*"message":"//' -e 's/"}$//' -e 's/^/  | /'
	fail "the $ENGINE engine did not become ready (rerun with KEEP_LOGS=1 to keep the node log)"
fi
echo "engine ready $((SECONDS - launched)) s after launch"
port=$(grep '"message":"engine started"' "$log" | tail -1 | field port)
base=http://127.0.0.1:$port
case $ENGINE in
sglang)
	answer=$(curl -sS -m 60 "$base/generate" -H 'Content-Type: application/json' \
		-d '{"text": "The capital of France is", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}')
	;;
*)
	name=gpu-check
	[ "$ENGINE" = trtllm ] && name=$(basename "$MODEL")
	answer=$(curl -sS -m 60 "$base/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"model\": \"$name\", \"prompt\": \"The capital of France is\", \"max_tokens\": 16, \"temperature\": 0}")
	;;
esac
echo "completion from $base: $answer"
if [ "$ENGINE" != trtllm ]; then # trtllm-serve's /metrics is drained by the worker's collector
	echo "KV cache figures ($base/metrics):"
	curl -sS -m 10 "$base/metrics" | grep -E '^(vllm:cache_config_info|vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc|sglang:max_total_num_tokens|sglang:token_usage)' |
		head -5 | sed 's/^/  /'
fi
if grep -q '"message":"KV event subscription ended' "$log"; then
	echo "warning: the KV event subscription failed (see 'KV event subscription ended' in the node log)"
fi
stop_node
case $answer in
*'"text"'*) ;;
*) fail "the engine answered /health but not the completion (answer above)" ;;
esac
printf '\nOK: NVML sees %s GPU(s); %s served a completion (%d s in all).\n' "$gpus" "$ENGINE" $((SECONDS - start))
