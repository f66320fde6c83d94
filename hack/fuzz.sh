#!/usr/bin/env bash
# Runs every fuzz target of every package that has one for FUZZTIME each (default 10s). go test takes one
# package and one target per -fuzz, so the packages are found by their fuzz tests, their targets listed from each
# package, and run one after the other. New interesting inputs go to the Go build cache; only a failing input is
# written, under the package's testdata/fuzz, and the run fails.
set -o errexit -o nounset -o pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZTIME=${FUZZTIME:-10s}
# How much the fuzzer may spend shrinking each new input it keeps: go test's default, 60s each, lets the first
# finds of a target whose inputs take milliseconds use up a short run.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-50x}

# Packages of this module (not of the tools modules under hack/) with a func Fuzz in a test file.
mapfile -t pkgs < <(grep -rlE --include='*_test.go' '^func Fuzz[A-Z0-9_]' pkg cmd internal 2>/dev/null |
	xargs -r -n1 dirname | sort -u | sed 's|^|./|')
if [[ ${#pkgs[@]} -eq 0 ]]; then
	echo "no fuzz targets found" >&2
	exit 1
fi

for pkg in "${pkgs[@]}"; do
	targets=$(go test -list='^Fuzz' "${pkg}" | grep '^Fuzz' || true)
	for target in ${targets}; do
		echo "fuzzing ${pkg} ${target} for ${FUZZTIME}"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME}" -fuzzminimizetime="${FUZZMINIMIZETIME}" "${pkg}"
	done
done
