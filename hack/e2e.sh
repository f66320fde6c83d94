#!/usr/bin/env bash
# Runs the node test (test/e2e): a release installed on a real node, a
# kubelet with containerd, runc and CNI, inside namespaces the test makes.
# It needs root. What it needs from the distribution (runc, the CNI plugins,
# iptables, conntrack, iproute2, util-linux) is installed with apt-get when
# missing (hack/node-packages.sh); containerd, the Kubernetes binaries,
# helm, krew and cosign are built into the cache (hack/containerd.sh,
# hack/kube-bin.sh, hack/helm.sh, hack/krew.sh, hack/cosign.sh). It tests
# the release in RELEASE_DIR (default _output/release), made by make
# release.
#
#   make release VERSION=v0.1.0 && make e2e
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"

if [[ $(id -u) -ne 0 ]]; then
  echo "e2e: the node test runs a kubelet and containerd and needs root" >&2
  exit 2
fi
release=${RELEASE_DIR:-${root}/_output/release}
if [[ ! -f "${release}/checksums.txt" ]]; then
  echo "e2e: no release in ${release}: run make release VERSION=$(cat VERSION) first (or set RELEASE_DIR)" >&2
  exit 2
fi

hack/node-packages.sh

CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh kube-apiserver kube-scheduler etcd kubectl kubelet kube-controller-manager kube-proxy)
CLE_CONTAINERD_DIR=$(hack/containerd.sh)
CLE_HELM=$(hack/helm.sh)
CLE_KREW=$(hack/krew.sh)
CLE_RELEASE_DIR=${release}
# Built as make release and the node's test programs are (CGO_ENABLED=0 and
# cle_goflags), reusing the packages those builds compiled.
source hack/lib/build-info.sh
# The publish tool: the node test publishes the release with it to
# stand-ins of the registry and the release downloads, and installs from
# them.
tools=$(mktemp -d)
trap 'rm -rf "${tools}"' EXIT
(cd hack/tools/image && CGO_ENABLED=0 go build "${cle_goflags[@]}" -o "${tools}/publish" ./publish)
CLE_PUBLISH=${tools}/publish
# cosign, which only the last test runs (TestSignedRelease), is built
# meanwhile at the lowest priority, unless the cache has it: the tests
# before it wait mostly on timers. The test waits for the build's status
# (CLE_COSIGN_BUILD.rc); a build the tests did not wait for ends into the
# cache on its own.
CLE_COSIGN_BUILD=${tools}/cosign
( nice -n 19 hack/cosign.sh >"${CLE_COSIGN_BUILD}.path" 2>"${CLE_COSIGN_BUILD}.log"; echo $? >"${CLE_COSIGN_BUILD}.rc" ) &
export CLE_KUBE_BIN_DIR CLE_CONTAINERD_DIR CLE_HELM CLE_KREW CLE_RELEASE_DIR CLE_PUBLISH CLE_COSIGN_BUILD
CGO_ENABLED=0 go test "${cle_goflags[@]}" -count=1 -v -timeout="${E2E_TIMEOUT:-30m}" ${GOTESTFLAGS:-} ./test/e2e/
