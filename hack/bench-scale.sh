#!/usr/bin/env bash
# Runs cle-controller's scale benchmark (test/scale) on a real kube-apiserver
# and etcd: 1,000 and 10,000 Leases with three candidates each, and 5,000
# node-heartbeat Leases. It takes about 20 minutes and most of two cores.
# Flags go to the benchmark, e.g.:
#   hack/bench-scale.sh --leases=1000 --steady=1m --profile-dir=/tmp/prof
# (see `go run ./test/scale --help`). --flood-writers=64 saturates the
# server on purpose while the candidates are created, on any machine.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
export CLE_KUBE_BIN_DIR
bin=$(mktemp -d)
trap 'rm -rf "${bin}"' EXIT
go build -o "${bin}/scale" ./test/scale
go build -ldflags "-X github.com/cle-dev/cle/internal/version.version=$(git describe --always --dirty 2>/dev/null || echo dev)" \
	-o "${bin}/cle-controller" ./cmd/cle-controller
"${bin}/scale" --controller="${bin}/cle-controller" "$@"
