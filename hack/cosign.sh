#!/usr/bin/env bash
# Builds cosign from the Go module pinned in hack/tools/cosign/go.mod into a
# per-version cache outside the repository (the cache root of
# hack/kube-bin.sh), and prints the binary's path. A warm run only checks
# that it exists. The node test signs the image it publishes to the stand-in
# registry with it, attests the image's SBOM and provenance, and verifies
# them as a user would (docs/install.md, "Publishing a release").
#
#   "$(hack/cosign.sh)" version
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/tools.sh
source "${root}/hack/lib/tools.sh"
tools="${root}/hack/tools/cosign"
module=github.com/sigstore/cosign/v2
version=$(go_mod_version "${tools}/go.mod" "${module}")
[[ "${version}" =~ ^v2\.[0-9]+\.[0-9]+$ ]] || { echo "cosign: cannot read the ${module} version from ${tools}/go.mod" >&2; exit 1; }

dir=$(tool_cache_dir "cosign-${version}")
bin="${dir}/cosign"
exit_if_built "${bin}"
# Another process may be building it: wait for that build rather than
# starting a second one.
cache_lock "${dir}"
exit_if_built "${bin}"

mkdir -p "${dir}"
cd "${tools}"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "cosign: building cosign ${version} into ${dir}; a cold build takes several minutes" >&2
# Build next to the target and rename, so that an interrupted build never
# looks warm.
tmp=$(mktemp "${dir}/.cosign.XXXXXX")
trap 'rm -f "${tmp}"' EXIT
go build "${cle_goflags[@]}" -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=${version}" \
  -o "${tmp}" "${module}/cmd/cosign"
mv -f "${tmp}" "${bin}"
echo "${bin}"
