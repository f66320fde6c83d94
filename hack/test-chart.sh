#!/usr/bin/env bash
# Tests the Helm chart charts/cle with the helm of hack/helm.sh: helm lint
# --strict with the values a user turns on, then the tests of
# hack/tools/helm (chart_test.go): the objects it renders for values
# equivalent to each release bundle are the bundle's (kubectl kustomize of
# manifests/, with the kubectl of hack/kube-bin.sh), what each value
# changes, the values the schema rejects, and files/ as exact copies of
# manifests/.
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
  "policies.enabled=true" \
  "proofOfDeath.enabled=true,proofOfDeath.namespaces={team-a},proofOfDeath.labelSelector=app=x" \
  "rbac.namespaced=true,rbac.namespaces={team-a,team-b},proofOfDeath.enabled=true" \
  "serviceAccount.create=false,serviceAccount.name=platform-cle,priorityClassName=,logLevel=4" \
  "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"; do
  echo "test-chart: helm lint --strict charts/cle ${values:+--set ${values}}" >&2
  "${helm}" lint --strict --quiet charts/cle ${values:+--set "${values}"} >/dev/null
done

cd hack/tools/helm
CLE_HELM="${helm}" CLE_KUBECTL="${kubectl}" go test -count=1 ./...
