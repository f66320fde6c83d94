//go:build tools

// Package tools pins the command that hack/helm.sh builds.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
