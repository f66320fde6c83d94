#!/usr/bin/env bash
# Runs the integration tests against real kube-apiserver and etcd processes
# built by hack/kube-bin.sh. Each test package starts its own control plane.
# test/integration/monitoring also runs promtool, which it has
# hack/promtool.sh build (or find in the cache; CLE_PROMTOOL names another).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
source hack/lib/build-info.sh
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
export CLE_KUBE_BIN_DIR
# promtool is not asked for here: test/integration/monitoring runs
# hack/promtool.sh itself, so that the other packages' tests need not wait
# for its build (.ci/run's background lane may be doing it).
go test "${cle_raceflags[@]}" -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/integration/...
# The fault-injection suite in its short mode: every kind of fault once.
CHAOS_DURATION='' go test "${cle_raceflags[@]}" -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/chaos/...
# Again beside kube-apiserver's own election controller, as on a cluster with the gate on.
CHAOS_BESIDE_BUILTIN=1 CHAOS_DURATION='' go test "${cle_raceflags[@]}" -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/chaos/...
# The controller-runtime adapter is a module of its own (so that the core
# module does not depend on controller-runtime); its tests run here too.
(cd contrib/controller-runtime && go test "${cle_raceflags[@]}" -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./...)
