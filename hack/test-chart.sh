#!/usr/bin/env bash
# Tests the Helm chart charts/cle with the helm of hack/helm.sh: helm lint
# --strict with the values a user turns on, then the tests of
# hack/tools/helm (chart_test.go): the objects it renders for values
# equivalent to each release bundle are the bundle's (kubectl kustomize of
# manifests/, with the kubectl of hack/kube-bin.sh), what each value
# changes, the values the schema rejects, files/ as exact copies of
# manifests/, the fences value as what kubectl cle fence prints, and the
# README's values table as values.yaml's.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
helm=$(hack/helm.sh)
kubectl="$(hack/kube-bin.sh kubectl)/kubectl"
# helm keeps no state between runs here, and reaches no cluster.
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
export HELM_CACHE_HOME="${work}" HELM_CONFIG_HOME="${work}" HELM_DATA_HOME="${work}" KUBECONFIG="${work}/none"

for values in \
  "" \
  "apiMode=native" \
  "apiMode=auto,crds.keep=false" \
  "replicas=3,podDisruptionBudget.enabled=false" \
  "monitoring.enabled=true,monitoring.labels.release=prometheus" \
  "monitoring.enabled=true,metricsTLS.certManager.issuerRef.name=ca,metricsTLS.certManager.issuerRef.kind=ClusterIssuer" \
  "metricsTLS.secretName=cle-metrics-tls" \
  "policies.enabled=true" \
  "fences[0].namespace=team-a,fences[0].lease=l,fences[0].serviceAccount=w,fences[0].resources={configmaps,deployments.apps}" \
  "proofOfDeath.enabled=true,proofOfDeath.namespaces={team-a},proofOfDeath.labelSelector=app=x" \
  "rbac.namespaced=true,rbac.namespaces={team-a,team-b},proofOfDeath.enabled=true" \
  "serviceAccount.create=false,serviceAccount.name=platform-cle,priorityClassName=,logLevel=4" \
  "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"; do
  echo "test-chart: helm lint --strict charts/cle ${values:+--set ${values}}" >&2
  "${helm}" lint --strict --quiet charts/cle ${values:+--set "${values}"} >/dev/null
done

# kubectl cle fence, whose objects the chart's fences value must render, and
# the chart's tests: built as make release and the simulation build, whose
# packages they share.
source hack/lib/build-info.sh
CGO_ENABLED=0 go build "${cle_goflags[@]}" -o "${work}/kubectl-cle" ./cmd/kubectl-cle

cd hack/tools/helm
CLE_HELM="${helm}" CLE_KUBECTL="${kubectl}" CLE_KUBECTL_CLE="${work}/kubectl-cle" CGO_ENABLED=0 go test "${cle_goflags[@]}" -count=1 ./...
