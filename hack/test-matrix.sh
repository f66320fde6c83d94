#!/usr/bin/env bash
# Runs the integration suites (hack/test-integration.sh: both API modes, the
# demo, the manifests, the controller-runtime adapter) against each
# Kubernetes minor release that has a tools module in hack/tools/kube, or
# those named in VERSIONS (e.g. VERSIONS="1.34 1.37"). Each release's
# binaries are built once into the version-keyed cache (hack/kube-bin.sh).
# Logs go to _output/matrix/<minor>.log; a summary with each release's
# result and times is printed at the end, and the run fails if any failed.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
versions=${VERSIONS:-$(hack/kube-bin.sh --list)}
out="${root}/_output/matrix"
mkdir -p "${out}"

seconds() { local s=$1; printf '%dm%02ds' $((s / 60)) $((s % 60)); }

rows=()
failed=0
for v in ${versions}; do
  tools="hack/tools/kube/${v}"
  log="${out}/${v}.log"
  echo "=== Kubernetes ${v}: ${tools}, log ${log}"
  if ! (cd "${tools}" && go mod tidy -diff) >"${log}" 2>&1; then
    rows+=("${v}|?|-|FAIL: ${tools}/go.mod is not tidy|-")
    failed=1
    continue
  fi
  kube_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "${tools}/go.mod")

  # Binaries: cold when the cache lacked one of them, warm otherwise.
  begin=$(date +%s)
  build_log=$(mktemp)
  if ! CLE_KUBE_VERSION="${v}" hack/kube-bin.sh >/dev/null 2>"${build_log}"; then
    cat "${build_log}" >>"${log}"
    rm -f "${build_log}"
    rows+=("${v}|${kube_version}|-|FAIL: building the binaries|-")
    failed=1
    continue
  fi
  temperature=warm
  grep -q '^kube-bin: building' "${build_log}" && temperature=cold
  cat "${build_log}" >>"${log}"
  rm -f "${build_log}"
  build="$(seconds $(($(date +%s) - begin))) ${temperature}"

  begin=$(date +%s)
  if CLE_KUBE_VERSION="${v}" hack/test-integration.sh >>"${log}" 2>&1; then
    result=PASS
  else
    result=FAIL
    failed=1
  fi
  packages=$(grep -cE '^ok ' "${log}" || true)
  failing=$(grep -E '^(FAIL|--- FAIL)' "${log}" | sed 's/^--- FAIL: //; s/ (.*//' | sort -u | paste -sd ' ' - || true)
  [[ "${result}" == PASS ]] && detail="${packages} packages" || detail="${failing}"
  rows+=("${v}|${kube_version}|${build}|${result} (${detail})|$(seconds $(($(date +%s) - begin)))")
  echo "=== Kubernetes ${v}: ${result}"
done

echo
printf '%-7s %-9s %-16s %-10s %s\n' MINOR VERSION BINARIES SUITE RESULT
for row in "${rows[@]}"; do
  IFS='|' read -r v kv build result took <<<"${row}"
  printf '%-7s %-9s %-16s %-10s %s\n' "${v}" "${kv}" "${build}" "${took}" "${result}"
done
exit "${failed}"
