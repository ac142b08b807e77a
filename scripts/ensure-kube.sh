#!/usr/bin/env bash
# Builds etcd and kube-apiserver from the Go module proxy into ~/.cache/turbine/kube/bin
# (once; later calls find them), for the tests that run the Helm chart's objects against a
# real API server (deploy/kubeserver). k8s.io/kubernetes cannot be `go install`ed (its
# go.mod replaces its staging modules), so a throwaway module outside the repository
# requires it and maps each staging module to its published v0.x version.
set -euo pipefail

KUBE_VERSION=1.37.2
ETCD_VERSION=3.7.3
dir="${TURBINE_KUBE_DIR:-$HOME/.cache/turbine/kube}"
bin="$dir/bin"
if [[ -x "$bin/kube-apiserver" && -x "$bin/etcd" && -f "$bin/.v$KUBE_VERSION-$ETCD_VERSION" ]]; then
  echo "kube-apiserver $KUBE_VERSION and etcd $ETCD_VERSION: $bin"
  exit 0
fi
mkdir -p "$dir/src/etcd" "$bin"
cd "$dir/src"
go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" > /dev/null
kmod="$(go env GOMODCACHE)/k8s.io/kubernetes@v$KUBE_VERSION/go.mod"
{
  printf 'module turbinekube\n\ngo 1.26\n\n'
  printf 'require k8s.io/kubernetes v%s\n' "$KUBE_VERSION"
  printf 'require go.etcd.io/etcd/server/v3 v%s\n\n' "$ETCD_VERSION"
  awk '/=> \.\/staging/ {print $1}' "$kmod" | while read -r m; do
    printf 'replace %s => %s v0.%s\n' "$m" "$m" "${KUBE_VERSION#1.}"
  done
} > go.mod
cat > etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
GOFLAGS=-mod=mod go mod tidy
CGO_ENABLED=0 go build -trimpath -o "$bin/etcd" ./etcd
CGO_ENABLED=0 go build -trimpath -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
touch "$bin/.v$KUBE_VERSION-$ETCD_VERSION"
echo "kube-apiserver $KUBE_VERSION and etcd $ETCD_VERSION: $bin"
