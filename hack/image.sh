#!/usr/bin/env bash
# Builds cle's container image without a container runtime: static binaries of
# cle-controller, kubectl-cle and examples/candidate in one layer, user 65532:65532, entrypoint
# cle-controller. Writes _output/image/cle.tar (docker load, kind load
# image-archive, ctr images import) and _output/image/oci (an OCI layout for
# crane push or skopeo), tagged ghcr.io/cle-dev/cle:<VERSION>, the version in the
# file VERSION that the manifests' image defaults name too, so that `kind load
# image-archive` then `kubectl apply -k manifests/portable` runs this build.
# The source revision goes into the binaries and the image's labels. VERSION,
# IMAGE and GOARCH override the defaults; make release builds the released,
# multi-platform image.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
source hack/lib/build-info.sh
version=${VERSION:-$(cat VERSION)}
revision=$(cle::revision)
arch=${GOARCH:-amd64}
image=${IMAGE:-ghcr.io/cle-dev/cle:${version}}
out=_output/image
mkdir -p "${out}/bin"
CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build "${cle_goflags[@]}" \
	-ldflags "$(cle::ldflags "${version}" "${revision}")" \
	-o "${out}/bin/" ./cmd/cle-controller ./cmd/kubectl-cle ./examples/candidate
# The commit time, not the build time: the same commit gives the same image.
created=$(git log -1 --format=%cI 2>/dev/null || true)
cle::tool image --bin-dir="${root}/${out}/bin" --tarball="${root}/${out}/cle.tar" \
	--layout="${root}/${out}/oci" --license="${root}/LICENSE" --tag="${image}" --version="${version}" --revision="${revision}" \
	--arch="${arch}" ${created:+--created="${created}"}
