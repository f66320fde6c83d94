#!/usr/bin/env bash
# Shows that the simulation catches the defects it was built to catch: each
# patch in hack/knockouts/ takes one fix out of a copy of the tree (the
# patch's first lines say which, and which test fails without it), and the
# simulation runs on that copy until a seed finds a violation. It prints, per
# knockout, the first failing seed and what it found, and fails if any
# knockout goes unnoticed within SEEDS seeds. The tree itself is not touched.
#
#   KNOCKOUTS="watch-lag tombstone"   only these (default: all of them)
#   SEEDS=N                           seeds to try per knockout (default 20000)
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
seeds=${SEEDS:-20000}
names=${KNOCKOUTS:-$(cd hack/knockouts && ls *.patch | sed 's/\.patch$//')}

work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
# The tree as it is, uncommitted changes included.
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e "${f}" ]] && printf '%s\0' "${f}"; done |
  tar --null -T - -cf "${work}/tree.tar"

export GOGC="${GOGC:-400}"
missed=0
for name in ${names}; do
  patch="${root}/hack/knockouts/${name}.patch"
  [[ -f "${patch}" ]] || { echo "sim-knockouts: no knockout ${name}" >&2; exit 2; }
  dir="${work}/${name}"
  mkdir -p "${dir}"
  tar -xf "${work}/tree.tar" -C "${dir}"
  (cd "${dir}" && git apply "${patch}")
  (cd "${dir}" && go test -c -o "${work}/${name}.test" ./pkg/controller)
  start=${SECONDS}
  set +o errexit
  out=$(cd "${dir}/pkg/controller" && SIM_REPORT=1 "${work}/${name}.test" -test.run '^TestSimulation$' -test.timeout=0 -sim.seeds="${seeds}" 2>&1)
  status=$?
  set -o errexit
  took=$((SECONDS - start))
  if [[ ${status} -eq 0 ]]; then
    echo "${name}: NOT FOUND in ${seeds} seeds (${took}s)"
    missed=1
  else
    found=$(grep -m1 -oE 'seed [0-9]+: .*' <<<"${out}" || true)
    [[ -n "${found}" ]] || { echo "${name}: the run failed without a seed:"; tail -20 <<<"${out}"; missed=1; continue; }
    echo "${name}: ${found} (${took}s)"
  fi
  rm -rf "${dir}"
done
exit "${missed}"
