#!/usr/bin/env bash
# Starts a local control plane (etcd and kube-apiserver on loopback), the
# cle-controller and three example candidates at different emulation
# versions, and prints the kubectl commands that show the election; Ctrl-C
# stops everything. Arguments go to hack/local-up (e.g. --controller=builtin).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh kube-apiserver etcd kubectl)
export CLE_KUBE_BIN_DIR
hack/build.sh >/dev/null
exec bin/local-up --bin-dir="${root}/bin" "$@"
