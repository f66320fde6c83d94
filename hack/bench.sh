#!/usr/bin/env bash
# Runs the benchmarks and prints their figures: the ranking benchmarks of
# pkg/strategy, then election latencies against a real kube-apiserver.
# BENCHTIME sets the iterations of the latency benchmarks (default 9x).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
go test -run='^$' -bench=. -benchmem ./pkg/strategy
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
export CLE_KUBE_BIN_DIR
# Only the packages that have benchmarks: every package starts its own server.
mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Benchmark' test/integration | xargs -n1 dirname | sort -u | sed 's|^|./|')
go test -count=1 -run='^$' -bench=. -benchtime="${BENCHTIME:-9x}" "${pkgs[@]}" 2>&1 |
	grep -E '^(Benchmark|ok|FAIL|PASS|goos|goarch|pkg|cpu)|runs: '
