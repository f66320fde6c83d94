#!/usr/bin/env bash
# Builds containerd, ctr and containerd-shim-runc-v2 of the release pinned
# here into a per-version cache outside the repository (the cache root of
# hack/kube-bin.sh), and prints the directory. A warm run only checks that
# they exist. The node test (test/e2e) runs its kubelet on them, with runc and
# the CNI plugins from the distribution.
#
# containerd's go.mod has no replace directives, so `go install pkg@version`
# builds it with exactly the dependencies it was released with. The snapshot
# drivers the node does not use (it uses overlayfs) are left out.
set -o errexit -o nounset -o pipefail

version=${CLE_CONTAINERD_VERSION:-v2.4.2}
module=github.com/containerd/containerd/v2
tags="no_btrfs no_devmapper no_zfs no_aufs urfave_cli_no_docs"

# shellcheck source=lib/tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"
dir=$(tool_cache_dir "containerd-${version}")
bins=(containerd ctr containerd-shim-runc-v2)
if all_built "${dir}" "${bins[@]}"; then
  echo "${dir}"
  exit 0
fi
# Another process may be building it: wait for that build rather than
# starting a second one.
cache_lock "${dir}"
if all_built "${dir}" "${bins[@]}"; then
  echo "${dir}"
  exit 0
fi

mkdir -p "${dir}"
echo "containerd: building containerd ${version} into ${dir}; a cold build takes minutes" >&2
# Build into a directory next to the target and rename, so that an
# interrupted build never looks warm.
tmp=$(mktemp -d "${dir}/.build.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
ldflags="-s -w -X ${module}/version.Version=${version}"
export CGO_ENABLED=0 GOBIN="${tmp}" GOFLAGS=
(cd "${tmp}" && go install "${cle_goflags[@]}" -tags "${tags}" -ldflags "${ldflags}" \
  "${module}/cmd/containerd@${version}" "${module}/cmd/ctr@${version}")
# The shim talks ttrpc only.
(cd "${tmp}" && go install "${cle_goflags[@]}" -tags "${tags} no_grpc" -ldflags "${ldflags}" \
  "${module}/cmd/containerd-shim-runc-v2@${version}")
for bin in "${bins[@]}"; do
  mv -f "${tmp}/${bin}" "${dir}/${bin}"
done
echo "${dir}"
