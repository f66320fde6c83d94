#!/usr/bin/env bash
# Builds promtool from the Prometheus Go module pinned in
# hack/tools/prometheus/go.mod into a per-version cache outside the repository
# (the cache root of hack/kube-bin.sh), and prints the binary's path. A warm
# run only checks that it exists. promtool checks and unit-tests the alerting
# rules of manifests/monitoring (test/integration/monitoring).
#
#   "$(hack/promtool.sh)" check rules rules.yaml
#
# It is built without Prometheus's service discovery plugins, as Prometheus's
# own plugins.yml allows: promtool imports the kubernetes one itself (and the
# plugins package its minimum, file and http), which is all the scrape config
# of manifests/monitoring uses. That more than halves a cold build (the cloud
# providers' SDKs are most of it); a configuration using another discovery
# (ec2_sd_configs, consul_sd_configs, ...) does not parse with this promtool.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/tools.sh
source "${root}/hack/lib/tools.sh"
tools="${root}/hack/tools/prometheus"
module=github.com/prometheus/prometheus
# The Go module's v0.3MM.P is Prometheus v3.MM.P.
mod_version=$(go_mod_version "${tools}/go.mod" "${module}")
[[ "${mod_version}" =~ ^v0\.3([0-9][0-9])\.([0-9]+)$ ]] || { echo "promtool: cannot read the ${module} version (v0.3MM.P) from ${tools}/go.mod" >&2; exit 1; }
version="3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"

# The cache key holds everything that changes the output: the version, what
# is left out, the Go toolchain, and the platform.
dir=$(tool_cache_dir "promtool-v${version}-kubernetes-sd")
bin="${dir}/promtool"
exit_if_built "${bin}"
# Another process may be building it: wait for that build rather than
# starting a second one.
cache_lock "${dir}"
exit_if_built "${bin}"

mkdir -p "${dir}"
cd "${tools}"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "promtool: building promtool ${version} into ${dir}; a cold build takes a few minutes" >&2
# Build next to the target and rename: concurrent runs each rename a complete
# binary into place, and an interrupted build never looks warm.
tmp=$(mktemp "${dir}/.promtool.XXXXXX")
work=$(mktemp -d)
trap 'rm -f "${tmp}"; rm -rf "${work}"' EXIT

# A copy of the module whose plugins package registers no discovery of its
# own, used through a replace in a copy of the tools module's go.mod.
go mod download "${module}"
src=$(go list -m -f '{{.Dir}}' "${module}")
[[ -d "${src}" ]] || { echo "promtool: cannot find ${module} ${mod_version} in the module cache" >&2; exit 1; }
cp -R "${src}" "${work}/prometheus"
chmod -R u+w "${work}/prometheus"
cat >"${work}/prometheus/plugins/plugins.go" <<'GO'
// Package plugins registers no service discovery beyond minimum.go's: a
// promtool for rules and kubernetes_sd_configs (hack/promtool.sh).
package plugins
GO
cp go.mod go.sum "${work}/"
echo "replace ${module} => ${work}/prometheus" >>"${work}/go.mod"

pkg=github.com/prometheus/common/version
ldflags="-s -w -X ${pkg}.Version=${version} -X ${pkg}.Branch=HEAD -X ${pkg}.Revision=${mod_version} -X ${pkg}.BuildUser=cle -X ${pkg}.BuildDate=19700101-00:00:00"
go build -modfile="${work}/go.mod" "${cle_goflags[@]}" -ldflags "${ldflags}" -o "${tmp}" "${module}/cmd/promtool"
mv -f "${tmp}" "${bin}"
echo "${bin}"
