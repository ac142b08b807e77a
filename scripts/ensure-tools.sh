#!/usr/bin/env bash
# Installs what the build and tests need beyond Go itself, when missing:
#   protoc (Debian's protobuf-compiler) to check that generated code is current;
#   python3-zmq and python3-msgpack (Debian) for the libzmq interoperability tests of the
#   KV-event stream: an independent implementation of the engines' side;
#   redis-server and redis-tools (Debian) as the reference the KV block manager's RESP
#   server is compared with byte for byte (docs/reference.md §9.3);
#   iproute2 and nftables (Debian) for the chaos soak's hosts and partitions (network
#   namespaces, nft drop rules; docs/chaos.md);
#   helm, built once from the Go module proxy into ${TURBINE_CACHE_DIR:-~/.cache/turbine}/bin
#   (about five minutes on two cores) unless one is on PATH, for the chart's tests
#   (deploy/helm, docs/kubernetes.md).
# Idempotent and quiet when everything is already there.
set -euo pipefail
missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if ! /usr/bin/python3 -c 'import zmq, msgpack' >/dev/null 2>&1; then
  missing+=(python3 python3-zmq python3-msgpack)
fi
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
helm_version="${TURBINE_HELM_VERSION:-v3.22.0}"
helm_dir="${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/bin"
if ! command -v helm >/dev/null 2>&1 && ! "$helm_dir/helm" version >/dev/null 2>&1; then
  echo "building helm ${helm_version} from the Go module proxy into $helm_dir (once; about five minutes)"
  mkdir -p "$helm_dir"
  GOBIN="$helm_dir" go install "helm.sh/helm/v3/cmd/helm@${helm_version}"
fi
