#!/usr/bin/env bash
# Runs the shard benchmark (test/bench BenchmarkShards): a shard group of cle
# side by side with Knative's buckets (knative.dev/pkg/leaderelection, the
# real module), on one local kube-apiserver in one run. A group of 32 shards
# starts with 3 replicas, 2 join, 2 leave, and the busiest replica is
# SIGKILLed; then the steady write cost of 3 replicas is counted at 32 and at
# 128 shards. The table goes to stdout and into docs/benchmarks.md (between
# its shards markers), with the command, the machine and the versions.
#
#   QUICK=1    one repetition, 20 s write-cost windows (about 8 minutes; the
#              full run, 3 repetitions with 60 s windows, about 30)
#   REPS=N     repetitions per side (default 3)
#   DIR=path   keep every process's log there
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh)
export CLE_KUBE_BIN_DIR

reps=${REPS:-3}
steady=60s
command="make bench-shards"
if [[ -n "${QUICK:-}" ]]; then
  reps=1
  steady=20s
  command="make bench-shards QUICK=1"
fi
out=$(mktemp)
trap 'rm -f "${out}"' EXIT
go test -count=1 -run='^$' -bench='^BenchmarkShards$' -benchtime=1x -timeout=3h ./test/bench \
  -args -bench.reps="${reps}" -bench.steady="${steady}" -bench.out="${out}" -bench.dir="${DIR:-}" >&2
cat "${out}"

kube=$("${CLE_KUBE_BIN_DIR}/kube-apiserver" --version | awk '{print $2}')
knative=$(cd test/bench/knative && go list -m -f '{{.Version}}' knative.dev/pkg)
knative_clientgo=$(cd test/bench/knative && go list -m -f '{{.Version}}' k8s.io/client-go)
{
  echo "<!-- shards:begin -->"
  echo "\`${command}\` at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)'); kube-apiserver ${kube}, knative.dev/pkg ${knative} (client-go ${knative_clientgo})."
  echo
  cat "${out}"
  echo "<!-- shards:end -->"
} >"${out}.section"
doc=docs/benchmarks.md
if [[ -f "${doc}" ]] && grep -q '<!-- shards:begin -->' "${doc}"; then
  awk -v section="${out}.section" '
    /<!-- shards:begin -->/ { while ((getline line < section) > 0) print line; skip = 1; next }
    /<!-- shards:end -->/ { skip = 0; next }
    !skip { print }
  ' "${doc}" >"${doc}.new"
  mv "${doc}.new" "${doc}"
  echo "bench-shards: the table is in ${doc}" >&2
fi
rm -f "${out}.section"
