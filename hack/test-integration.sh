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
# Then, side by side, since each waits mostly on timers and needs little of
# the cores: the fault-injection suite in its short mode (every kind of fault
# once), again beside kube-apiserver's own election controller (as on a
# cluster with the gate on), and the controller-runtime adapter's tests (a
# module of its own, so that the core module does not depend on
# controller-runtime). Each has its own control plane; their recovery bounds
# hold beside one another (docs/development.md). Their output is printed in
# that order once all have ended.
testflags=("${cle_raceflags[@]}" -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-})
logs=$(mktemp -d)
trap 'rm -rf "${logs}"' EXIT
CHAOS_DURATION='' go test "${testflags[@]}" ./test/chaos/... >"${logs}/chaos" 2>&1 &
chaos=$!
CHAOS_BESIDE_BUILTIN=1 CHAOS_DURATION='' go test "${testflags[@]}" ./test/chaos/... >"${logs}/beside" 2>&1 &
beside=$!
(cd contrib/controller-runtime && go test "${testflags[@]}" ./...) >"${logs}/contrib" 2>&1 &
contrib=$!
failed=0
wait "${chaos}" || failed=1
wait "${beside}" || failed=1
wait "${contrib}" || failed=1
echo "test-integration: the fault-injection suite"
cat "${logs}/chaos"
echo "test-integration: the fault-injection suite beside kube-apiserver's election controller"
cat "${logs}/beside"
echo "test-integration: the controller-runtime module"
cat "${logs}/contrib"
exit "${failed}"
