#!/usr/bin/env bash
# Runs the benchmarks: the ranking benchmarks of pkg/strategy, then the whole
# life of an election side by side (test/bench): cle against the
# coordinated election built into Kubernetes, on one local kube-apiserver in
# one run. The table goes to stdout and into docs/benchmarks.md (between its
# bench markers), with the command, the machine and the versions.
#
#   QUICK=1    each scenario once, 20 s write-cost windows (about 10
#              minutes; the full run, 5 repetitions with 30 s windows, about 50)
#   REPS=N     repetitions per scenario and side (default 5)
#   SCENARIOS  a comma-separated subset: cold,handover,preemption,failover,
#              upgrade,writes,restart,adopt-handover,adopt-preemption,
#              adopt-failover,scheduler
#   DIR=path   keep every process's log there (kube-apiserver's included),
#              to trace where an election's time went
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
go test -run='^$' -bench=. -benchmem ./pkg/strategy
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
export CLE_KUBE_BIN_DIR

reps=${REPS:-5}
steady=30s
command="make bench"
if [[ -n "${QUICK:-}" ]]; then
  reps=1
  steady=20s
  command="make bench QUICK=1"
fi
out=$(mktemp)
trap 'rm -f "${out}"' EXIT
go test -count=1 -run='^$' -bench='^BenchmarkElections$' -benchtime=1x -timeout=3h ./test/bench \
  -args -bench.reps="${reps}" -bench.steady="${steady}" -bench.scenarios="${SCENARIOS:-}" -bench.out="${out}" -bench.dir="${DIR:-}" >&2
cat "${out}"

kube=$("${CLE_KUBE_BIN_DIR}/kube-apiserver" --version | awk '{print $2}')
clientgo=$(go list -m -f '{{.Version}}' k8s.io/client-go)
ctrlruntime=$(cd contrib/controller-runtime && go list -m -f '{{.Version}}' sigs.k8s.io/controller-runtime)
{
  echo "<!-- bench:begin -->"
  echo "\`${command}\` at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)'); kube-apiserver and kube-scheduler ${kube}, client-go ${clientgo}, controller-runtime ${ctrlruntime}."
  echo
  cat "${out}"
  echo "<!-- bench:end -->"
} >"${out}.section"
doc=docs/benchmarks.md
if [[ -f "${doc}" ]] && grep -q '<!-- bench:begin -->' "${doc}"; then
  awk -v section="${out}.section" '
    /<!-- bench:begin -->/ { while ((getline line < section) > 0) print line; skip = 1; next }
    /<!-- bench:end -->/ { skip = 0; next }
    !skip { print }
  ' "${doc}" >"${doc}.new"
  mv "${doc}.new" "${doc}"
  echo "bench: the table is in ${doc}" >&2
fi
rm -f "${out}.section"
