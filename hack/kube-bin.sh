#!/usr/bin/env bash
# Builds Kubernetes and etcd binaries from the Go modules pinned in
# hack/tools/kube/<minor>/go.mod into a per-version cache outside the
# repository, and prints the cache directory. CLE_KUBE_VERSION picks the
# Kubernetes minor release (e.g. 1.35); by default the newest one there is.
# Arguments name the binaries to ensure (default: kube-apiserver
# kube-scheduler etcd kubectl; kubectl runs the kubectl-cle plugin and renders
# the kustomize manifests in tests; the node test also needs kubelet,
# kube-controller-manager and kube-proxy, whose tools are pinned from 1.37 on).
# A warm run only checks that they exist.
#
#   hack/kube-bin.sh --list   prints the minor releases there are tools for
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
versions=$(cd "${root}/hack/tools/kube" && ls -d 1.* | sort -V)
if [[ "${1:-}" == --list ]]; then
  echo "${versions}"
  exit 0
fi
minor=${CLE_KUBE_VERSION:-$(tail -n 1 <<<"${versions}")}
minor=${minor#v}
tools="${root}/hack/tools/kube/${minor}"
[[ -f "${tools}/go.mod" ]] || { echo "kube-bin: no tools module for Kubernetes ${minor}; there are: $(echo ${versions}); add one with hack/kube-tools-add.sh" >&2; exit 2; }

mod_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "${tools}/go.mod"; }
kube_version=$(mod_version k8s.io/kubernetes)
etcd_version=$(mod_version go.etcd.io/etcd/server/v3)
[[ -n "${kube_version}" && -n "${etcd_version}" ]] || { echo "kube-bin: cannot read pinned versions from ${tools}/go.mod" >&2; exit 1; }

# shellcheck source=lib/tools.sh
source "${root}/hack/lib/tools.sh"
# The cache key holds everything that changes the output: both versions, the Go
# toolchain, and the platform.
dir=$(tool_cache_dir "kube-${kube_version}_etcd-${etcd_version}")

wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=(kube-apiserver kube-scheduler etcd kubectl)
find_missing() {
  missing=()
  for bin in "${wanted[@]}"; do
    [[ -x "${dir}/${bin}" ]] || missing+=("${bin}")
  done
}
find_missing
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "${dir}"
  exit 0
fi
# Another process may be building into the same directory: wait for it, and
# build only what it did not.
cache_lock "${dir}"
find_missing
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "${dir}"
  exit 0
fi

# kube binaries report the version stamped here; without it they say v0.0.0
# and components refuse to compare versions with them.
major=${kube_version#v}; major=${major%%.*}
minor=${kube_version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
kube_ldflags="-s -w -X ${pkg}.gitVersion=${kube_version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"

mkdir -p "${dir}"
cd "${tools}"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
kube_pkgs=()
for bin in "${missing[@]}"; do
  case "${bin}" in
    kube-apiserver | kube-scheduler | kubectl | kubelet | kube-controller-manager | kube-proxy) kube_pkgs+=("k8s.io/kubernetes/cmd/${bin}") ;;
    etcd) ;;
    *) echo "kube-bin: unknown binary ${bin}" >&2; exit 2 ;;
  esac
done
# Build into a directory next to the target and rename, so that an
# interrupted build never looks warm. One go build for all the Kubernetes
# commands, so that their packages compile in parallel on every core.
tmp=$(mktemp -d "${dir}/.build.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
echo "kube-bin: building ${missing[*]} (kube ${kube_version}, etcd ${etcd_version}) into ${dir}; a cold build takes minutes" >&2
# etcd builds beside them: its own packages keep the cores busy while the
# Kubernetes commands link, which is serial.
etcd_pid=
if [[ " ${missing[*]} " == *" etcd "* ]]; then
  go build "${cle_goflags[@]}" -ldflags "-s -w" -o "${tmp}/etcd" go.etcd.io/etcd/server/v3 &
  etcd_pid=$!
fi
if [[ ${#kube_pkgs[@]} -gt 0 ]]; then
  go build "${cle_goflags[@]}" -ldflags "${kube_ldflags}" -o "${tmp}/" "${kube_pkgs[@]}"
fi
[[ -z "${etcd_pid}" ]] || wait "${etcd_pid}"
for bin in "${missing[@]}"; do
  mv -f "${tmp}/${bin}" "${dir}/${bin}"
done
echo "${dir}"
