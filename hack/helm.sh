#!/usr/bin/env bash
# Builds helm from the Go module pinned in hack/tools/helm/go.mod into a
# per-version cache outside the repository (the cache root of
# hack/kube-bin.sh), and prints the binary's path. A warm run only checks
# that it exists. helm lints, renders and packages the chart charts/cle
# (hack/test-chart.sh, hack/release.sh) and installs it in the node test.
#
#   "$(hack/helm.sh)" template cle charts/cle
#
# The binary is stamped as helm's own release build is: its version, and the
# Kubernetes version of the client-go it is built with, which helm template
# and helm lint take for the cluster's when they have none to ask (a chart's
# kubeVersion constraint is checked against it).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/tools.sh
source "${root}/hack/lib/tools.sh"
tools="${root}/hack/tools/helm"
module=helm.sh/helm/v3
version=$(go_mod_version "${tools}/go.mod" "${module}")
client_go=$(go_mod_version "${tools}/go.mod" k8s.io/client-go)
[[ "${version}" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || { echo "helm: cannot read the ${module} version from ${tools}/go.mod" >&2; exit 1; }
[[ "${client_go}" =~ ^v0\.([0-9]+)\.[0-9]+$ ]] || { echo "helm: cannot read the k8s.io/client-go version from ${tools}/go.mod" >&2; exit 1; }
kube_minor=${BASH_REMATCH[1]}

# The cache key holds everything that changes the output: the version, the Go
# toolchain, and the platform.
dir=$(tool_cache_dir "helm-${version}")
bin="${dir}/helm"
exit_if_built "${bin}"
# Another process may be building it: wait for that build rather than
# starting a second one.
cache_lock "${dir}"
exit_if_built "${bin}"

mkdir -p "${dir}"
cd "${tools}"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "helm: building helm ${version} into ${dir}; a cold build takes a few minutes" >&2
# Build next to the target and rename: concurrent runs each rename a complete
# binary into place, and an interrupted build never looks warm.
tmp=$(mktemp "${dir}/.helm.XXXXXX")
trap 'rm -f "${tmp}"' EXIT
ldflags="-s -w -X ${module}/internal/version.version=${version} -X ${module}/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X ${module}/${pkg}.k8sVersionMajor=1 -X ${module}/${pkg}.k8sVersionMinor=${kube_minor}"
done
go build "${cle_goflags[@]}" -ldflags "${ldflags}" -o "${tmp}" "${module}/cmd/helm"
mv -f "${tmp}" "${bin}"
echo "${bin}"
