#!/usr/bin/env bash
# Builds every command of the main module into bin/, and kubectl cle's
# completion helper.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
mkdir -p bin
mapfile -t cmds < <(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/... ./examples/... ./hack/... 2>/dev/null | sed '/^$/d')
if [[ ${#cmds[@]} -gt 0 ]]; then
  go build -ldflags "-X github.com/cle-dev/cle/internal/version.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)" \
    -o bin/ "${cmds[@]}"
fi
# kubectl's completion of kubectl cle asks this helper, next to the plugin.
install -m 0755 cmd/kubectl-cle/kubectl_complete-cle bin/
ls bin
