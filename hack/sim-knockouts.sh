#!/usr/bin/env bash
# Shows that the simulation catches the defects it was built to catch: each
# knockout listed in hack/knockouts/list applies its patches to a copy of the
# tree, taking one fix out (the patch's first lines say which, and which test
# fails without it), and the simulation runs on that copy until a seed finds
# a violation. It prints, per knockout, the first failing seed and what it
# found, and fails if any knockout goes unnoticed within SEEDS seeds. The
# tree itself is not touched.
#
#   KNOCKOUTS="watch-lag a+b"   only these; a+b takes out a and b together
#                               (default: those in hack/knockouts/list)
#   SEEDS=N                     seeds to try per knockout (default 20000)
#   FIRST=S                     start at seed S (default 1; a line of the list
#                               may give its own: "name S")
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
seeds=${SEEDS:-20000}
if [[ -n "${KNOCKOUTS:-}" ]]; then
  list=$(tr ' ' '\n' <<<"${KNOCKOUTS}" | grep -v '^$')
else
  list=$(grep -v -e '^#' -e '^$' hack/knockouts/list)
fi

work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
# The tree as it is, uncommitted changes included.
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e "${f}" ]] && printf '%s\0' "${f}"; done |
  tar --null -T - -cf "${work}/tree.tar"

missed=0
while read -r name first <&3; do
  first=${first:-${FIRST:-1}}
  dir="${work}/${name}"
  mkdir -p "${dir}"
  tar -xf "${work}/tree.tar" -C "${dir}"
  for part in ${name//+/ }; do
    patch="${root}/hack/knockouts/${part}.patch"
    [[ -f "${patch}" ]] || { echo "sim-knockouts: no knockout ${part} (${patch})" >&2; exit 2; }
    (cd "${dir}" && git apply "${patch}")
  done
  start=${SECONDS}
  set +o errexit
  # The copy's own make sim, from its first seed.
  out=$(cd "${dir}" && SEEDS="${seeds}" FIRST="${first}" BUDGET='' DURATION='' SEED='' CHECKPOINT='' SIM_REPLAY=0 hack/sim.sh 2>&1)
  status=$?
  set -o errexit
  took=$((SECONDS - start))
  if [[ ${status} -eq 0 ]]; then
    echo "${name}: NOT FOUND in ${seeds} seeds from ${first} (${took}s)"
    missed=1
  else
    found=$(grep -m1 -oE 'seed [0-9]+: .*' <<<"${out}" || true)
    [[ -n "${found}" ]] || { echo "${name}: the run failed without a seed:"; tail -20 <<<"${out}"; missed=1; continue; }
    echo "${name}: ${found} (${took}s)"
  fi
  rm -rf "${dir}"
done 3<<<"${list}"
exit "${missed}"
