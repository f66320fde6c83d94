#!/usr/bin/env bash
# Runs the fault-injection suite of test/chaos against real kube-apiserver,
# etcd, cle-controller and candidate processes, and prints its summary.
# DURATION (e.g. 30m) keeps injecting faults that long; empty runs the short
# mode, every kind of fault once. SEED replays an earlier run; SLACK changes
# the recovery bound's slack over the lease duration (default 1s).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
export CLE_KUBE_BIN_DIR
export CHAOS_DURATION="${DURATION:-}" CHAOS_SEED="${SEED:-}" CHAOS_SLACK="${SLACK:-}"
# The run lasts DURATION (Go's syntax, in h, m and s) plus start-up, the last
# fault and the summary: allow 30 minutes more.
seconds=0
rest="${DURATION:-}"
while [[ "${rest}" =~ ^([0-9]+)([hms])(.*)$ ]]; do
	case "${BASH_REMATCH[2]}" in
	h) seconds=$((seconds + BASH_REMATCH[1] * 3600)) ;;
	m) seconds=$((seconds + BASH_REMATCH[1] * 60)) ;;
	s) seconds=$((seconds + BASH_REMATCH[1])) ;;
	esac
	rest="${BASH_REMATCH[3]}"
done
if [[ -n "${rest}" ]]; then
	echo "DURATION=${DURATION}: use whole hours, minutes and seconds, such as 30m or 1h30m" >&2
	exit 2
fi
timeout="$((seconds + 1800))s"
go test -count=1 -v -run='^TestChaos$' -timeout="${timeout}" ./test/chaos/ 2>&1 |
	grep -vE '^[IWE][0-9]{4} ' # kube-apiserver's own log lines, dumped on failure
