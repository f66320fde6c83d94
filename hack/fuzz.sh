#!/usr/bin/env bash
# Runs every fuzz target of every package that has one for FUZZTIME each (default 10s). go test takes one
# package and one target per -fuzz, so the packages are found by their fuzz tests, their targets listed from each
# package, and run one after the other. New interesting inputs go to the Go build cache; only a failing input is
# written, under the package's testdata/fuzz, and the run fails.
set -o errexit -o nounset -o pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZTIME=${FUZZTIME:-10s}
# Targets to leave out, by name (make test leaves out FuzzReconcile: hack/test-unit.sh).
FUZZ_SKIP=${FUZZ_SKIP:-}
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

# Go 1.26's fuzzing coordinator can fail a run whose -fuzztime deadline expires while a worker is busy, with a
# bare "context deadline exceeded" and no failing input (go.dev/issue/75804, fixed in Go 1.27). A real failure
# always writes its input under testdata/fuzz/<target>; a run that failed that way without one is run again, once.
corpus() { if [[ -d "$1/testdata/fuzz/$2" ]]; then find "$1/testdata/fuzz/$2" -type f | sort; fi; }
for pkg in "${pkgs[@]}"; do
	# Read from the source: go test -list would compile the package's tests once more, in a configuration
	# nothing else builds.
	targets=$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "${pkg}"/*_test.go | sort -u)
	for target in ${targets}; do
		if [[ " ${FUZZ_SKIP} " == *" ${target} "* ]]; then
			echo "fuzzing ${pkg} ${target}: left out (FUZZ_SKIP)"
			continue
		fi
		for attempt in 1 2; do
			echo "fuzzing ${pkg} ${target} for ${FUZZTIME}"
			before=$(corpus "${pkg}" "${target}")
			log=$(mktemp)
			if go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME}" -fuzzminimizetime="${FUZZMINIMIZETIME}" "${pkg}" 2>&1 | tee "${log}"; then
				rm -f "${log}"
				break
			fi
			if [[ ${attempt} == 1 && "$(corpus "${pkg}" "${target}")" == "${before}" ]] &&
				grep -qx '    context deadline exceeded' "${log}"; then
				echo "${target}: the fuzzing deadline raced a worker (go.dev/issue/75804), no failing input; once more"
				rm -f "${log}"
				continue
			fi
			rm -f "${log}"
			exit 1
		done
	done
done
