#!/usr/bin/env bash
# Builds actionlint, the linter of GitHub Actions workflows, from the Go
# module pinned in hack/tools/actionlint/go.mod into a per-version cache
# outside the repository (the cache root of hack/kube-bin.sh), and prints the
# binary's path. A warm run only checks that it exists. make verify checks
# .github/workflows with it.
#
#   "$(hack/actionlint.sh)" .github/workflows/*.yml
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/tools.sh
source "${root}/hack/lib/tools.sh"
tools="${root}/hack/tools/actionlint"
module=github.com/rhysd/actionlint
version=$(go_mod_version "${tools}/go.mod" "${module}")
[[ "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "actionlint: cannot read the ${module} version from ${tools}/go.mod" >&2; exit 1; }

dir=$(tool_cache_dir "actionlint-${version}")
bin="${dir}/actionlint"
exit_if_built "${bin}"
cache_lock "${dir}"
exit_if_built "${bin}"

mkdir -p "${dir}"
cd "${tools}"
echo "actionlint: building actionlint ${version} into ${dir}" >&2
tmp=$(mktemp "${dir}/.actionlint.XXXXXX")
trap 'rm -f "${tmp}"' EXIT
CGO_ENABLED=0 go build "${cle_goflags[@]}" -ldflags "-s -w -X ${module}.version=${version}" -o "${tmp}" "${module}/cmd/actionlint"
mv -f "${tmp}" "${bin}"
echo "${bin}"
