//go:build tools

// Package tools pins the command that hack/cosign.sh builds.
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
