#!/usr/bin/env bash
# Runs every fuzz target of pkg/strategy for FUZZTIME each (default 10s). go test takes one target per -fuzz,
# so the targets are listed from the package itself and run one after the other. New interesting inputs go to
# the Go build cache; only a failing input is written under pkg/strategy/testdata/fuzz, and the run fails.
set -o errexit -o nounset -o pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZTIME=${FUZZTIME:-10s}
pkg=./pkg/strategy

targets=$(go test -list='^Fuzz' "${pkg}" | grep '^Fuzz')
for target in ${targets}; do
	echo "fuzzing ${target} for ${FUZZTIME}"
	go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME}" "${pkg}"
done
