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
#   kubectl-cle_<v>_<os>_<arch>.tar.gz and cle.krew.yaml: the plugin for linux,
#                                  darwin and windows (each archive with
#                                  LICENSE), and its krew manifest;
#   checksums.txt                  sha256 of every file above.
#
# IMAGE_REPO is the repository the bundles name (default ghcr.io/cle-dev/cle);
# pushing the image there is a separate step (crane push image/oci
# <repo>:<v>), and the digest stays the same.
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
rm -rf "${out}"
mkdir -p "${out}"
build="${out}/.build"
ldflags=$(cle::ldflags "${version}" "${revision}")

# The image's binaries, one directory per platform.
platforms=()
for arch in amd64 arm64; do
	CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build -trimpath -ldflags "${ldflags}" \
		-o "${build}/linux-${arch}/" ./cmd/cle-controller ./cmd/kubectl-cle ./examples/candidate
	platforms+=(--platform="linux/${arch}=${root}/${build}/linux-${arch}")
done
line=$(cd hack/tools/image && go run . "${platforms[@]}" --license="${root}/LICENSE" --tag="${repo}:${version}" \
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

# kubectl-cle for each platform krew installs on, and its krew manifest.
krew="${out}/cle.krew.yaml"
cat >"${krew}" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: cle
spec:
  version: ${version}
  homepage: https://github.com/cle-dev/cle
  shortDescription: Show coordinated leader elections and who leads
  description: |
    kubectl cle shows coordinated leader elections (KEP-4355), run by
    cle-controller or by the controller built into kube-apiserver: who holds
    each Lease, who should and why, the candidates in rank order, and which
    election controller acts. It needs only read access (ClusterRole
    cle-viewer, aggregated to view).
  platforms:
YAML
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64; do
	os=${target%/*} arch=${target#*/}
	exe=kubectl-cle
	[[ "${os}" == windows ]] && exe=kubectl-cle.exe
	dir="${build}/kubectl-cle_${os}_${arch}"
	mkdir -p "${dir}"
	CGO_ENABLED=0 GOOS="${os}" GOARCH="${arch}" go build -trimpath -ldflags "${ldflags}" -o "${dir}/${exe}" ./cmd/kubectl-cle
	cp LICENSE "${dir}/LICENSE"
	archive="kubectl-cle_${version}_${os}_${arch}.tar.gz"
	# The same files give the same archive: names sorted, times and owners fixed.
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "${dir}" -cf - "${exe}" LICENSE | gzip -n >"${out}/${archive}"
	sha=$(sha256sum "${out}/${archive}" | cut -d' ' -f1)
	cat >>"${krew}" <<YAML
    - selector:
        matchLabels:
          os: ${os}
          arch: ${arch}
      uri: https://github.com/cle-dev/cle/releases/download/${version}/${archive}
      sha256: ${sha}
      bin: ${exe}
YAML
done

rm -rf "${build}"
(cd "${out}" && find . -maxdepth 1 -type f ! -name checksums.txt -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >checksums.txt)
ls -l "${out}" >&2
echo "${repo}:${version}@${digest}"
