#!/usr/bin/env bash
# Starts a local control plane (etcd and kube-apiserver on loopback), the
# cle-controller and three example candidates at different emulation
# versions, and prints the kubectl commands that show the election; Ctrl-C
# stops everything. Arguments go to hack/local-up (e.g. --controller=builtin).
# It never touches another cluster, whatever KUBECONFIG says.
#
# hack/run.sh --cluster (make run-cluster) runs the same demonstration on the
# cluster of the current kubeconfig context instead, deployed from
# manifests/: it builds the image (make image), loads it into a kind cluster
# when the context is one, applies manifests/portable (unless cle-controller
# is installed) and manifests/examples, and deletes what it created on exit.
# IMAGE names the image the cluster pulls (default
# ghcr.io/cle-dev/cle:<the version in VERSION>, what make image tags).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
if [[ "${1:-}" == --cluster ]]; then
	shift
	if command -v kubectl >/dev/null; then
		kubectl=kubectl
	else
		CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh kubectl)
		export CLE_KUBE_BIN_DIR
		kubectl="${CLE_KUBE_BIN_DIR}/kubectl"
	fi
	context=$("${kubectl}" config current-context)
	echo "Deploying to the cluster of context ${context} (make run starts a local control plane instead)." >&2
	hack/build.sh >/dev/null
	IMAGE="${IMAGE:-ghcr.io/cle-dev/cle:$(cat VERSION)}"
	export IMAGE
	hack/image.sh
	if [[ "${context}" == kind-* ]] && command -v kind >/dev/null; then
		kind load image-archive _output/image/cle.tar --name "${context#kind-}"
	fi
	exec bin/local-up --cluster --bin-dir="${root}/bin" --image="${IMAGE}" --manifests="${root}/manifests" "$@"
fi
CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh kube-apiserver etcd kubectl)
export CLE_KUBE_BIN_DIR
hack/build.sh >/dev/null
exec bin/local-up --bin-dir="${root}/bin" "$@"
