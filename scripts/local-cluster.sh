#!/usr/bin/env bash
# A local Turbine cluster of separate processes: a Consul dev agent, frontends and nodes.
#
#   scripts/local-cluster.sh up            Consul + 1 frontend (:8000) + 2 nodes × 2 mock workers
#   scripts/local-cluster.sh up --prefill X --decode Y
#                                          an xPyD layout instead: X prefill and Y decode
#                                          workers, one node each (prefill-1…, decode-1…)
#   scripts/local-cluster.sh add-frontend  one more frontend on the next free port from 8001
#   scripts/local-cluster.sh add-node [--role aggregated|prefill|decode] [--workers N]
#                                          one more node (named <role>-<n>) with N workers
#                                          (default 1) of that role, while the cluster serves
#   scripts/local-cluster.sh remove-node NAME
#                                          drain and stop one node (its workers leave routing
#                                          first; requests in flight finish)
#   scripts/local-cluster.sh status        processes, members in Consul, served models
#   scripts/local-cluster.sh down          stop everything this script started
#
# Everything lives in $TURBINE_CLUSTER_DIR (default .cluster/ in the repository): logs/
# (one file per process), pids/, and the turbine binary built from this checkout.
# Settings: CONSUL_HTTP_PORT (8500), TURBINE_FRONTEND_PORT (8000), TURBINE_NODES (2),
# TURBINE_WORKERS (workers per node, 2), TURBINE_MODEL (turbine-mock); any other
# TURBINE_<FLAG> variable reaches every turbine process as usual (e.g.
# TURBINE_MAX_LOCAL_PREFILL_TOKENS=0 sends every request with an uncached token to a
# prefill worker).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${TURBINE_CLUSTER_DIR:-$root/.cluster}"
consul_port="${CONSUL_HTTP_PORT:-8500}"
fe_port="${TURBINE_FRONTEND_PORT:-8000}"
nodes="${TURBINE_NODES:-2}"
workers="${TURBINE_WORKERS:-2}"
model="${TURBINE_MODEL:-turbine-mock}"
bin="$dir/bin/turbine"
exec 3>&2 # the script's own stderr, for messages from inside silenced checks
mkdir -p "$dir/logs" "$dir/pids" "$dir/bin"

# start NAME CMD... : runs CMD in its own process group, logs to logs/NAME.log.
start() {
  local name=$1; shift
  setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null 3>&- &
  echo $! >"$dir/pids/$name.pid"
}

alive() { [ -f "$dir/pids/$1.pid" ] && kill -0 "$(cat "$dir/pids/$1.pid")" 2>/dev/null; }

# wait_for WHAT SECONDS CMD... : polls CMD until it succeeds.
wait_for() {
  local what=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out after ${limit}s waiting for $what (logs in $dir/logs)" >&2
      return 1
    fi
    sleep 0.2
  done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port_from N: the first free port from N up.
free_port_from() {
  local p=$1
  while ! port_free "$p"; do p=$((p + 1)); done
  echo "$p"
}

# consul_leader: succeeds once the agent has elected itself; fails the whole script at
# once (with its log) when the agent has exited.
consul_leader() {
  if ! alive consul; then
    echo "the Consul agent exited; its log ($dir/logs/consul.log) ends with:" >&3
    tail -5 "$dir/logs/consul.log" >&3
    exit 1
  fi
  curl -fsS "http://127.0.0.1:$consul_port/v1/status/leader" | grep -q :
}

# ready_workers NODE: how many workers of node NODE the router lists as ready.
ready_workers() {
  curl -fsS "http://127.0.0.1:$fe_port/metrics" 2>/dev/null |
    grep -c "^turbine_router_worker_ready{model=\"$model\",worker=\"$1-[0-9]*\"} 1\$" || true
}

# enough_ready NODE N: succeeds once the router lists N ready workers of NODE.
enough_ready() { [ "$(ready_workers "$1")" -ge "$2" ]; }

# start_node NAME ROLE WORKERS: one node member with WORKERS workers of ROLE; its HTTP
# port (/live, /health, /metrics) on a free port, logged as "node HTTP port listening".
start_node() {
  TURBINE_DISCOVERY="consul://127.0.0.1:$consul_port" TURBINE_MODEL="$model" TURBINE_LOG_FORMAT=json TURBINE_HTTP_PORT=0 \
    start "$1" "$bin" node --node-id "$1" --worker-role "$2" --workers "$3"
}

up() {
  local prefill=0 decode=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --prefill) prefill="$2"; shift 2 ;;
      --decode) decode="$2"; shift 2 ;;
      *) echo "up: unknown argument $1 (want --prefill N --decode N)" >&2; exit 2 ;;
    esac
  done
  case "$prefill$decode" in *[!0-9]*) echo "up: --prefill and --decode take a number of workers" >&2; exit 2 ;; esac
  if [ "$prefill" -gt 0 ] && [ "$decode" -eq 0 ]; then
    echo "up: --prefill $prefill without --decode: nothing would decode" >&2; exit 2
  fi
  if alive consul; then echo "a local cluster is already up (scripts/local-cluster.sh down stops it)" >&2; exit 1; fi
  for p in "$consul_port" "$fe_port"; do
    port_free "$p" || { echo "port $p is taken: set CONSUL_HTTP_PORT / TURBINE_FRONTEND_PORT" >&2; exit 1; }
  done
  local t0=$SECONDS consul
  consul="$("$root/scripts/ensure-consul.sh")"
  echo "building turbine into $bin"
  (cd "$root" && CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations" go build -o "$bin" ./cmd/turbine)
  # Every Consul port is chosen here (free ones above the HTTP port for the server and
  # serf), and DNS and gRPC are off, so that another agent on this machine cannot collide.
  local server lan wan
  server="$(free_port_from $((consul_port + 1)))"
  lan="$(free_port_from $((server + 1)))"
  wan="$(free_port_from $((lan + 1)))"
  start consul "$consul" agent -dev -node "turbine-local-$consul_port" -disable-host-node-id \
    -bind 127.0.0.1 -client 127.0.0.1 -advertise 127.0.0.1 -http-port "$consul_port" \
    -server-port "$server" -serf-lan-port "$lan" -serf-wan-port "$wan" \
    -dns-port -1 -grpc-port -1 -grpc-tls-port -1
  wait_for "Consul's leader" 30 consul_leader
  local t_boot=$SECONDS
  export TURBINE_DISCOVERY="consul://127.0.0.1:$consul_port" TURBINE_MODEL="$model" TURBINE_LOG_FORMAT=json
  start frontend-0 "$bin" frontend --port "$fe_port"
  local layout
  if [ $((prefill + decode)) -gt 0 ]; then
    for i in $(seq 1 "$prefill"); do start_node "prefill-$i" prefill 1; done
    for i in $(seq 1 "$decode"); do start_node "decode-$i" decode 1; done
    layout="${prefill}P${decode}D: prefill-1..$prefill, decode-1..$decode"
  else
    for i in $(seq 1 "$nodes"); do start_node "node-$i" aggregated "$workers"; done
    layout="$nodes nodes × $workers workers"
  fi
  wait_for "the model on http://127.0.0.1:$fe_port/v1/models" 120 \
    sh -c "curl -fsS http://127.0.0.1:$fe_port/v1/models | grep -q '\"$model\"'"
  echo "local cluster up in $((SECONDS - t_boot))s after Consul ($((SECONDS - t0))s in all):"
  echo "  OpenAI API  http://127.0.0.1:$fe_port/v1   (model $model, $layout)"
  echo "  Consul UI   http://127.0.0.1:$consul_port/ui"
  echo "  logs        $dir/logs/"
  echo "  stop with   scripts/local-cluster.sh down"
}

add_frontend() {
  alive consul || { echo "no local cluster is up (scripts/local-cluster.sh up)" >&2; exit 1; }
  local n=1 p=$((fe_port + 1))
  while [ -f "$dir/pids/frontend-$n.pid" ] && alive "frontend-$n"; do n=$((n + 1)); done
  while ! port_free "$p"; do p=$((p + 1)); done
  TURBINE_DISCOVERY="consul://127.0.0.1:$consul_port" TURBINE_LOG_FORMAT=json start "frontend-$n" "$bin" frontend --port "$p"
  wait_for "the model on http://127.0.0.1:$p/v1/models" 60 \
    sh -c "curl -fsS http://127.0.0.1:$p/v1/models | grep -q '\"$model\"'"
  echo "frontend-$n serving http://127.0.0.1:$p/v1 (the same models as every frontend)"
}

add_node() {
  alive consul || { echo "no local cluster is up (scripts/local-cluster.sh up)" >&2; exit 1; }
  local role=aggregated n_workers=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --role) role="$2"; shift 2 ;;
      --workers) n_workers="$2"; shift 2 ;;
      *) echo "add-node: unknown argument $1 (want --role R --workers N)" >&2; exit 2 ;;
    esac
  done
  case "$role" in aggregated|prefill|decode) ;; *) echo "add-node: --role $role: want aggregated, prefill or decode" >&2; exit 2 ;; esac
  case "$n_workers" in ''|*[!0-9]*|0) echo "add-node: --workers $n_workers: want a number ≥ 1" >&2; exit 2 ;; esac
  local prefix=$role n=1
  [ "$role" = aggregated ] && prefix=node
  while alive "$prefix-$n"; do n=$((n + 1)); done
  local name="$prefix-$n"
  start_node "$name" "$role" "$n_workers"
  wait_for "$n_workers ready workers of $name in the router" 120 enough_ready "$name" "$n_workers"
  echo "$name up: $n_workers $role worker(s), routed without a restart (remove it with: $0 remove-node $name)"
}

remove_node() {
  local name="${1:-}" f pid
  [ -n "$name" ] || { echo "usage: $0 remove-node NAME (see $0 status)" >&2; exit 2; }
  case "$name" in frontend-*|consul) echo "remove-node: $name is not a node" >&2; exit 2 ;; esac
  f="$dir/pids/$name.pid"
  alive "$name" || { echo "remove-node: no running node $name" >&2; rm -f "$f"; exit 1; }
  pid="$(cat "$f")"
  # SIGTERM drains: the node's workers leave routing at once, requests in flight finish.
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$f"
  echo "removed $name"
}

status() {
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] || { echo "no local cluster"; return; }
    local name; name="$(basename "$f" .pid)"
    if alive "$name"; then echo "  $name  pid $(cat "$f")  running"; else echo "  $name  stopped"; fi
  done
  local members
  members="$(curl -fsS "http://127.0.0.1:$consul_port/v1/health/service/${TURBINE_CLUSTER_NAME:-turbine}?passing" 2>/dev/null |
    grep -o '"ServiceID": *"[^"]\+"' | sort -u | wc -l)" || true
  echo "  consul: ${members:-0} members passing their checks"
  curl -fsS "http://127.0.0.1:$fe_port/v1/models" 2>/dev/null | sed 's/^/  models: /' || true
  echo
  # Workers by role, from the router's gauges (turbine_router_worker_role).
  curl -fsS "http://127.0.0.1:$fe_port/metrics" 2>/dev/null |
    sed -n 's/^turbine_router_worker_role{model="\([^"]*\)",worker="\([^"]*\)",role="\([^"]*\)"} 1$/  worker \2  \3  (model \1)/p' || true
}

down() {
  # Members first (they leave the cluster gracefully on SIGTERM), Consul last.
  local f name pid
  for f in "$dir"/pids/frontend-*.pid "$dir"/pids/node-*.pid "$dir"/pids/prefill-*.pid "$dir"/pids/decode-*.pid \
    "$dir"/pids/consul.pid; do
    [ -e "$f" ] || continue
    name="$(basename "$f" .pid)"; pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      echo "stopped $name"
    fi
    rm -f "$f"
  done
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  up) up "$@" ;;
  add-frontend) add_frontend ;;
  add-node) add_node "$@" ;;
  remove-node) remove_node "$@" ;;
  ready-workers) ready_workers "$@" ;;
  status) status ;;
  down) down ;;
  *) echo "usage: $0 up [--prefill X --decode Y]|add-frontend|add-node [--role R] [--workers N]|remove-node NAME|status|down" >&2; exit 2 ;;
esac
