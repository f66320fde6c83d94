#!/usr/bin/env bash
# Runs the integration tests against real kube-apiserver and etcd processes
# built by hack/kube-bin.sh. Each test package starts its own control plane.
# test/integration/monitoring also runs promtool, built by hack/promtool.sh.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
CLE_PROMTOOL=$(hack/promtool.sh)
export CLE_KUBE_BIN_DIR CLE_PROMTOOL
go test -race -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/integration/...
# The fault-injection suite in its short mode: every kind of fault once.
CHAOS_DURATION='' go test -race -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/chaos/...
# Again beside kube-apiserver's own election controller, as on a cluster with the gate on.
CHAOS_BESIDE_BUILTIN=1 CHAOS_DURATION='' go test -race -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/chaos/...
# The controller-runtime adapter is a module of its own (so that the core
# module does not depend on controller-runtime); its tests run here too.
(cd contrib/controller-runtime && go test -race -count=1 -timeout="${INTEGRATION_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./...)
