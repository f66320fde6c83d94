#!/usr/bin/env bash
# Downloads every Go module that the checks, the tests and the release use,
# and builds every tool binary they run into the cache outside the
# repository, in the order a test run first needs them; as root it also
# installs the node test's packages from the distribution meanwhile
# (hack/node-packages.sh). Warm, it only checks and takes seconds.
#
# .ci/run starts it in the background before anything else, so that
# downloads and builds fill the cores while the checks and tests that run
# meanwhile wait on the network, on timers or on one another. A script that
# needs a binary still being built here waits for that build rather than
# starting another (cache_lock in hack/lib/tools.sh), so the two can run in
# any order. Each step's duration goes to standard error.
#
#   make prepare
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
# shellcheck source=lib/build-info.sh
source hack/lib/build-info.sh

step() {
  local start=${SECONDS}
  "$@" >/dev/null
  echo "prepare: $* took $((SECONDS - start))s" >&2
}

# The distribution's packages wait on the network and dpkg, not on the cores.
packages_pid=
if [[ $(id -u) -eq 0 ]]; then
  hack/node-packages.sh &
  packages_pid=$!
fi

# Every module's dependencies at once: one go mod download per module,
# side by side, since each waits on the network.
download() {
  local start=${SECONDS} pids=() failed=0 mod
  for mod in $(cle::modules); do
    (cd "${mod}" && go mod download) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "${pid}" || failed=1
  done
  echo "prepare: go mod download of every module took $((SECONDS - start))s" >&2
  return "${failed}"
}
download

# The builds, in the order a run of .ci/run first needs them: krew (make
# verify), helm and kubectl (the chart's tests), the control plane and the
# node's Kubernetes binaries in one pass (the integration tests wait for it),
# then containerd (make e2e waits for it). The node's binaries
# come with the control plane, while the unit tests run and the integration
# tests have not started: built after, at this lane's priority, they got only what the
# integration tests left of the cores, and the node test started too late to
# run beside them and ended the run alone. promtool comes last; .ci/run
# leaves it out (PREPARE_PROMTOOL=0), since the monitoring tests build it
# when they need it, and here it would hold back the node test. cosign, which
# only the node test's last test runs, comes after it; .ci/run leaves it out
# too (PREPARE_COSIGN=0): make e2e builds it beside the node test's first
# tests, which wait mostly on timers.
step hack/krew.sh
step hack/helm.sh
step hack/kube-bin.sh kubectl
step hack/kube-bin.sh kube-apiserver kube-scheduler etcd kubelet kube-controller-manager kube-proxy
step hack/containerd.sh
if [[ "${PREPARE_PROMTOOL:-1}" != 0 ]]; then
  step hack/promtool.sh
fi
if [[ "${PREPARE_COSIGN:-1}" != 0 ]]; then
  step hack/cosign.sh
fi

if [[ -n "${packages_pid}" ]]; then
  wait "${packages_pid}"
fi
