#!/usr/bin/env bash
# Builds a release of cle into _output/release (make release VERSION=vX.Y.Z):
#
#   cle-<v>-image.oci.tar          the image, linux/amd64 and linux/arm64, as an OCI
#                                  archive (ctr -n k8s.io images import, skopeo copy
#                                  oci-archive:, crane push after untarring);
#   image/oci/                     the same as an OCI layout directory;
#   cle-<v>-image-linux-<arch>.tar one platform each, for docker load and kind load
#                                  image-archive;
#   cle-<v>.spdx.json              the SBOM: the binaries and the Go modules in them
#                                  (also /sbom.spdx.json in the image);
#   cle-portable.yaml, cle-native.yaml, cle-static-pod.yaml (the Pod for the
#   kubelet's manifest directory) and cle-static-pod-rbac.yaml, cle-policies.yaml,
#   cle-monitoring.yaml, cle-monitoring-static-pod.yaml, cle-examples.yaml:
#                                  the install bundles, one kubectl apply -f each,
#                                  the image pinned by digest;
#   cle-<chart version>.tgz        the Helm chart charts/cle, its version the
#                                  release's without the v, its image pinned by
#                                  digest by default;
#   kubectl-cle_<v>_<os>_<arch>.tar.gz and plugins/cle.yaml: the plugin for
#                                  linux, darwin and windows (each archive with
#                                  its completion helper kubectl_complete-cle
#                                  and LICENSE), and its krew manifest, the
#                                  template plugins/cle.yaml rendered;
#   goproxy/                       the Go modules github.com/cle-dev/cle and
#                                  github.com/cle-dev/cle/contrib/controller-runtime
#                                  at <v>, in the layout of a module proxy, as
#                                  the tags <v> and contrib/controller-runtime/<v>
#                                  will serve them (GOPROXY=file://.../goproxy
#                                  fetches them; docs/install.md);
#   checksums.txt                  sha256 of every file above.
#
# IMAGE_REPO is the repository the bundles name (default ghcr.io/cle-dev/cle);
# pushing the image there is a separate step (crane push image/oci
# <repo>:<v>), and the digest stays the same.
#
# PLATFORMS ("linux/amd64 darwin/arm64", say) builds only those of the
# image's and the plugin's platforms: the image, the archives and the krew
# manifest then hold those alone. Such a release is for testing on those
# platforms (CI tests the node's own, .ci/run), not for publishing: a
# release that is published builds them all, as it does by default. The
# platforms left out are type-checked from source (hack/tools/crosscheck),
# a few seconds each where a build takes minutes: code that would not build
# for one of them fails the release all the same. CROSSCHECK=0 leaves that
# type-check to a later run with CROSSCHECK=only and the same PLATFORMS,
# which type-checks and builds nothing else (.ci/run runs it beside the node
# test, which needs the release but leaves the cores idle).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
version=${VERSION:-}
if [[ ! "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "release: VERSION must be a semantic version such as v0.1.0, got '${version}'" >&2
	exit 2
fi
repo=${IMAGE_REPO:-ghcr.io/cle-dev/cle}
source hack/lib/build-info.sh
revision=$(cle::revision)
case "${revision}" in
unknown)
	echo "release: not a git checkout; a release records the commit it was built from" >&2
	exit 2
	;;
*-dirty)
	echo "release: the tree has uncommitted changes; the release records revision ${revision}" >&2
	;;
esac
created=$(git log -1 --format=%cI)
out=_output/release
build="${out}/.build"
ldflags=$(cle::ldflags "${version}" "${revision}")
crosscheck=${CROSSCHECK:-1}
case "${crosscheck}" in
0 | 1 | only) ;;
*) echo "release: CROSSCHECK must be 1 (the default), 0 or only, got '${crosscheck}'" >&2; exit 2 ;;
esac

# The platforms: the image's, and the plugin's as its krew manifest names them.
image_platforms=(linux/amd64 linux/arm64)
mapfile -t plugin_platforms < <(sed -n 's|^ *uri: .*/kubectl-cle_[^_]*_\([a-z0-9]*\)_\([a-z0-9]*\)\.tar\.gz$|\1/\2|p' plugins/cle.yaml)
wanted=" $(printf '%s\n' "${image_platforms[@]}" "${plugin_platforms[@]}" | sort -u | tr '\n' ' ')"
if [[ -n "${PLATFORMS:-}" ]]; then
	for p in ${PLATFORMS//,/ }; do
		if [[ "${wanted}" != *" ${p} "* ]]; then
			echo "release: PLATFORMS names ${p}; a release builds only${wanted% }" >&2
			exit 2
		fi
	done
	wanted=" ${PLATFORMS//,/ } "
	wanted_list=${wanted# }; echo "release: only ${wanted_list% }: a release for testing on those platforms, not for publishing" >&2
fi
included() { [[ "${wanted}" == *" $1 "* ]]; }
image_archs=()
for p in "${image_platforms[@]}"; do
	if included "${p}"; then image_archs+=("${p#linux/}"); fi
done
if [[ ${#image_archs[@]} -eq 0 ]]; then
	echo "release: PLATFORMS must name one of the image's platforms (${image_platforms[*]})" >&2
	exit 2
fi
# The platforms left out, type-checked instead: the image's commands for
# the image's platforms, the plugin for the plugin's others.
image_left=() plugin_left=()
for p in "${image_platforms[@]}"; do
	if ! included "${p}"; then image_left+=(-platform "${p}"); fi
done
for p in "${plugin_platforms[@]}"; do
	if ! included "${p}" && [[ " ${image_platforms[*]} " != *" ${p} "* ]]; then plugin_left+=(-platform "${p}"); fi
done
if [[ "${crosscheck}" != 0 ]]; then
	if [[ ${#image_left[@]} -gt 0 ]]; then
		cle::tool crosscheck -C "${root}" "${image_left[@]}" ./cmd/cle-controller ./cmd/kubectl-cle ./examples/candidate
	fi
	if [[ ${#plugin_left[@]} -gt 0 ]]; then
		cle::tool crosscheck -C "${root}" "${plugin_left[@]}" ./cmd/kubectl-cle
	fi
	if [[ "${crosscheck}" == only ]]; then
		echo "release: the platforms left out type-check; nothing built (CROSSCHECK=only)" >&2
		exit 0
	fi
else
	echo "release: the platforms left out are not type-checked (CROSSCHECK=0): run CROSSCHECK=only with the same PLATFORMS" >&2
fi
rm -rf "${out}"
mkdir -p "${out}"

# The image's binaries, one directory per platform.
platforms=()
for arch in "${image_archs[@]}"; do
	CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build "${cle_goflags[@]}" -ldflags "${ldflags}" \
		-o "${build}/linux-${arch}/" ./cmd/cle-controller ./cmd/kubectl-cle ./examples/candidate
	platforms+=(--platform="linux/${arch}=${root}/${build}/linux-${arch}")
done
line=$(cle::tool image "${platforms[@]}" --license="${root}/LICENSE" --tag="${repo}:${version}" \
	--layout="${root}/${out}/image/oci" --oci-archive="${root}/${out}/cle-${version}-image.oci.tar" \
	--tarball="${root}/${out}/cle-${version}-image-linux-{arch}.tar" --sbom="${root}/${out}/cle-${version}.spdx.json" \
	--version="${version}" --revision="${revision}" --created="${created}")
digest=${line##* }
[[ "${digest}" == sha256:* ]] || { echo "release: no digest from the image builder: ${line}" >&2; exit 1; }
echo "release: image ${repo}:${version}@${digest}" >&2

# The bundles: each kustomization rendered with the image pinned by digest.
kubectl="$(hack/kube-bin.sh kubectl)/kubectl"
render() { # bundle-file manifests-dir
	local overlay="${build}/bundles/${1%.yaml}"
	mkdir -p "${overlay}"
	cat >"${overlay}/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../../../manifests/$2
images:
  - name: ghcr.io/cle-dev/cle
    newName: ${repo}
    newTag: ${version}
    digest: ${digest}
YAML
	{
		echo "# cle ${version} (${revision}): manifests/$2, the image pinned by digest."
		"${kubectl}" kustomize "${overlay}"
	} >"${out}/$1"
	if grep -n 'image: ' "${out}/$1" | grep -v "@${digest}"; then
		echo "release: $1 names an image not pinned to ${digest}" >&2
		exit 1
	fi
}
render cle-portable.yaml portable
render cle-native.yaml controller
render cle-static-pod.yaml static-pod
render cle-static-pod-rbac.yaml static-pod/rbac
render cle-policies.yaml policies
render cle-monitoring.yaml monitoring
render cle-monitoring-static-pod.yaml monitoring/static-pod
render cle-examples.yaml examples

# The Helm chart: version and appVersion the release's, the default image the
# one built here by digest. The archive helm package writes is repacked with
# fixed times and owners, so that the same chart gives the same file.
helm=$(hack/helm.sh)
chart_version=${version#v}
mkdir -p "${build}/chart" "${build}/chart-archive"
cp -R charts/cle "${build}/chart/cle"
sed -i -e "s|^  repository: ghcr.io/cle-dev/cle\$|  repository: ${repo}|" -e "s|^  digest: \"\"\$|  digest: ${digest}|" "${build}/chart/cle/values.yaml"
# Its documentation links lead to the release's docs, not to main's.
sed -i -e "s|github.com/cle-dev/cle/blob/main/|github.com/cle-dev/cle/blob/${version}/|g" \
	-e "s|github.com/cle-dev/cle/tree/main/|github.com/cle-dev/cle/tree/${version}/|g" \
	"${build}/chart/cle/README.md" "${build}/chart/cle/Chart.yaml"
"${helm}" package --version "${chart_version}" --app-version "${version}" -d "${build}/chart" "${build}/chart/cle" >/dev/null
tar -xzmf "${build}/chart/cle-${chart_version}.tgz" -C "${build}/chart-archive"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "${build}/chart-archive" -cf - cle | gzip -n >"${out}/cle-${chart_version}.tgz"
if ! grep -qF "image: ${repo}:${version}@${digest}" <<<"$("${helm}" template cle "${out}/cle-${chart_version}.tgz")"; then
	echo "release: the chart cle-${chart_version}.tgz does not run ${repo}:${version}@${digest} by default" >&2
	exit 1
fi
if grep -q 'github.com/cle-dev/cle/\(blob\|tree\)/main/' <<<"$(tar -xzOf "${out}/cle-${chart_version}.tgz" cle/README.md cle/Chart.yaml)"; then
	echo "release: the chart cle-${chart_version}.tgz links to the docs of main, not of ${version}" >&2
	exit 1
fi

# kubectl-cle for each platform of its krew manifest, plugins/cle.yaml, with
# its completion helper and the license; then the manifest rendered for this
# release: its version in place of the template's, each archive's sha256 in
# place of the zeros.
sums="${build}/kubectl-cle.sha256"
: >"${sums}"
for target in "${plugin_platforms[@]}"; do
	included "${target}" || continue
	os=${target%/*} arch=${target#*/}
	exe=kubectl-cle complete=kubectl_complete-cle
	[[ "${os}" == windows ]] && exe=kubectl-cle.exe complete=kubectl_complete-cle.cmd
	dir="${build}/kubectl-cle_${os}_${arch}"
	mkdir -p "${dir}"
	CGO_ENABLED=0 GOOS="${os}" GOARCH="${arch}" go build "${cle_goflags[@]}" -ldflags "${ldflags}" -o "${dir}/${exe}" ./cmd/kubectl-cle
	cp LICENSE "${dir}/LICENSE"
	install -m 0755 "cmd/kubectl-cle/${complete}" "${dir}/${complete}"
	archive="kubectl-cle_${version}_${os}_${arch}.tar.gz"
	# The same files give the same archive: names sorted, times and owners fixed.
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "${dir}" -cf - "${exe}" "${complete}" LICENSE | gzip -n >"${out}/${archive}"
	(cd "${out}" && sha256sum "${archive}") >>"${sums}"
done
mkdir -p "${out}/plugins"
# Of the template's platforms, those built: each entry of its list, from its
# "- selector:" to the next, kept when its archive is.
built=$(sed -n 's|.*_\([a-z0-9]*_[a-z0-9]*\)\.tar\.gz$|\1|p' "${sums}" | tr '\n' ' ')
awk -v built=" ${built}" '
	function flush() { if (entry != "" && keep) printf "%s", entry; entry = "" }
	/^    - selector:/ { flush(); in_entry = 1; keep = 1 }
	in_entry && !/^    - selector:/ && !/^      / { flush(); in_entry = 0 }
	in_entry {
		if ($1 == "uri:" && match($2, /_[a-z0-9]+_[a-z0-9]+\.tar\.gz$/) &&
			index(built, " " substr($2, RSTART + 1, RLENGTH - 8) " ") == 0) keep = 0
		entry = entry $0 "\n"; next
	}
	{ print }
	END { flush() }' plugins/cle.yaml |
awk -v to="${version}" -v sums="${sums}" '
	BEGIN { while ((getline line < sums) > 0) { split(line, f, " "); sum[f[2]] = f[1] } }
	!started && /^#/ { next } # the comment above the template
	{ started = 1 }
	$1 == "version:" && from == "" { from = $2 }
	from != "" { # the version, literally, wherever it is
		done = ""; rest = $0
		while ((i = index(rest, from)) > 0) { done = done substr(rest, 1, i - 1) to; rest = substr(rest, i + length(from)) }
		$0 = done rest
	}
	$1 == "uri:" { n = split($2, p, "/"); archive = p[n] }
	$1 == "sha256:" {
		if (!(archive in sum)) { print "release: plugins/cle.yaml names " archive ", not built" >"/dev/stderr"; failed = 1 }
		sub(/"[0-9a-f]+"/, "\"" sum[archive] "\"")
		used[archive] = 1; archive = ""
	}
	{ print }
	END {
		for (a in sum) if (!(a in used)) { print "release: no sha256 of " a " in plugins/cle.yaml" >"/dev/stderr"; failed = 1 }
		exit failed
	}' >"${out}/plugins/cle.yaml"

# The Go modules as a module proxy serves them: a module zip each (without
# the nested modules), go.mod without its replace directives.
cle::tool modproxy --version="${version}" --time="${created}" --out="${root}/${out}/goproxy" \
	"${root}" "${root}/contrib/controller-runtime" >&2

rm -rf "${build}"
(cd "${out}" && { find . -maxdepth 1 -type f ! -name checksums.txt -printf '%P\n'; echo plugins/cle.yaml; } | LC_ALL=C sort | xargs sha256sum >checksums.txt)
ls -l "${out}" >&2
echo "${repo}:${version}@${digest}"
