#!/usr/bin/env bash
# Builds krew, the kubectl plugin manager, from the Go module pinned in
# hack/tools/krew/go.mod into a per-version cache outside the repository (the
# cache root of hack/kube-bin.sh), and prints the binary's path. Beside it is
# validate-krew-manifest, krew-index's check of a plugin manifest. A warm run
# only checks that both exist.
#
#   KREW_ROOT=$(mktemp -d) "$(hack/krew.sh)" install --manifest=... --archive=...
#   "$(dirname "$(hack/krew.sh)")/validate-krew-manifest" -manifest plugins/cle.yaml -skip-install
#
# The node test (test/e2e) installs kubectl cle with it from a release, as a
# user does, and hack/verify.sh checks plugins/cle.yaml with the validator.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/tools.sh
source "${root}/hack/lib/tools.sh"
tools="${root}/hack/tools/krew"
module=sigs.k8s.io/krew
version=$(go_mod_version "${tools}/go.mod" "${module}")
[[ "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "krew: cannot read the ${module} version from ${tools}/go.mod" >&2; exit 1; }

# The cache key holds everything that changes the output: the version, the Go
# toolchain, and the platform.
dir=$(tool_cache_dir "krew-${version}")
commands=(krew validate-krew-manifest)
if all_built "${dir}" "${commands[@]}"; then
  echo "${dir}/krew"
  exit 0
fi
# Another process may be building it: wait for that build rather than
# starting a second one.
cache_lock "${dir}"
if all_built "${dir}" "${commands[@]}"; then
  echo "${dir}/krew"
  exit 0
fi

mkdir -p "${dir}"
cd "${tools}"
export CGO_ENABLED=0
echo "krew: building krew ${version} into ${dir}; a cold build takes a minute or two" >&2
# Build next to the targets and rename: concurrent runs each rename complete
# binaries into place, and an interrupted build never looks warm.
tmp=$(mktemp -d "${dir}/.build.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
# Stamped as krew's release build is, but for the commit, which the module
# does not record: kubectl krew version says the tag.
ldflags="-s -w -X ${module}/internal/version.gitTag=${version}"
go build "${cle_goflags[@]}" -ldflags "${ldflags}" -o "${tmp}/" "${module}/cmd/krew" "${module}/cmd/validate-krew-manifest"
for c in "${commands[@]}"; do
  mv -f "${tmp}/${c}" "${dir}/${c}"
done
echo "${dir}/krew"
