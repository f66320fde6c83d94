#!/usr/bin/env bash
# Starts a local control plane (etcd and kube-apiserver on loopback) and prints
# how to point kubectl at it; Ctrl-C stops everything.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh kube-apiserver etcd kubectl)
export CLE_KUBE_BIN_DIR
go build -o bin/local-up ./hack/local-up
exec bin/local-up "$@"
