#!/usr/bin/env bash
# Runs the unit tests with the race detector, then a short run of every fuzz
# target. The integration tests and the fault-injection suite, which need
# kube-apiserver and etcd, run in hack/test-integration.sh; the node test,
# which needs root and a release, in hack/e2e.sh.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
mapfile -t pkgs < <(go list ./... | grep -v -e '/test/integration/' -e '/test/chaos' -e '/test/e2e')
source hack/lib/build-info.sh
go test "${cle_raceflags[@]}" -count=1 "${pkgs[@]}"
# The simulation of elections, without the race detector, for a budget of
# wall-clock time, then 50 runs of the elector simulation and 50 of its shard
# groups (the race run above covers them briefly); make sim runs more, and
# prints the coverage figures this run leaves out.
BUDGET="${SIM_BUDGET:-60s}" ELECTOR_SEEDS="${ELECTOR_SEEDS:-50}" COVER=0 hack/sim.sh
# The tools' tests are built as make verify vets them and make release builds
# (CGO_ENABLED=0 and cle_goflags), so that they reuse the packages those
# compiled instead of compiling every dependency once more in a
# configuration of their own.
tools_test() { (cd "$1" && CGO_ENABLED=0 go test "${cle_goflags[@]}" -count=1 ./...); }
# The image builder: builds the static binaries and reads the image back.
tools_test hack/tools/image
# The module proxy layout writer of make release.
tools_test hack/tools/modproxy
# The type check make release runs for the platforms it leaves out.
tools_test hack/tools/crosscheck
hack/test-chart.sh
# FuzzReconcile's fuzzing needs its own build of every dependency of
# pkg/controller, instrumented for coverage: about 9 minutes of CPU on a cold
# machine, for 10 seconds of fuzzing. make fuzz runs it; here its seeds and
# TestReconcileRandomScenarios ran under the race detector above.
FUZZ_SKIP="${FUZZ_SKIP-FuzzReconcile}" hack/fuzz.sh
