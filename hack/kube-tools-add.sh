#!/usr/bin/env bash
# Creates the tools module that builds one Kubernetes release's binaries:
# hack/tools/kube/<minor>/ for VERSION (e.g. v1.37.2), replacing an older patch
# release of the same minor. k8s.io/kubernetes requires its staging modules at
# v0.0.0 and points them at ./staging in its own repository, so each becomes a
# replace to its published release; etcd's server is pinned to the etcd
# release that this Kubernetes release's client is built against.
#
#   hack/kube-tools-add.sh v1.38.1
set -o errexit -o nounset -o pipefail

version=${1:?usage: $0 vMAJOR.MINOR.PATCH}
[[ "${version}" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "kube-tools-add: ${version} is not vMAJOR.MINOR.PATCH" >&2; exit 2; }
minor="1.${BASH_REMATCH[1]}"
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="${root}/hack/tools/kube/${minor}"

gomod=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[[ -f "${gomod}" ]] || { echo "kube-tools-add: cannot download k8s.io/kubernetes@${version}" >&2; exit 1; }
etcd_version=$(awk '$1 == "go.etcd.io/etcd/client/v3" { print $2; exit }' "${gomod}")
staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "${gomod}" | sort -u)
[[ -n "${etcd_version}" && -n "${staging}" ]] || { echo "kube-tools-add: cannot read ${gomod}" >&2; exit 1; }

rm -rf "${dir}"
mkdir -p "${dir}"
{
  echo "// Builds the Kubernetes ${minor} binaries and etcd for the integration and"
  echo "// node tests (hack/kube-bin.sh); made by hack/kube-tools-add.sh."
  echo "module github.com/cle-dev/cle/hack/tools/kube/${minor}"
  echo
  echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0"
  echo
  echo "require ("
  echo "	go.etcd.io/etcd/server/v3 ${etcd_version}"
  echo "	k8s.io/kubernetes ${version}"
  echo ")"
  echo
  echo "replace ("
  for m in ${staging}; do echo "	${m} => ${m} ${staging_version}"; done
  echo ")"
} >"${dir}/go.mod"
cat >"${dir}/tools.go" <<GO
//go:build tools

// Package tools pins the commands that hack/kube-bin.sh builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
(cd "${dir}" && GOFLAGS=-mod=mod go mod tidy)
# The newest tools module selects the project's versions of what they share.
"${root}/hack/align-tools.sh"
echo "kube-tools-add: ${dir} builds Kubernetes ${version} with etcd ${etcd_version}"
