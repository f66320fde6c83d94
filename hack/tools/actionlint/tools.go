//go:build tools

// Package tools pins the command that hack/actionlint.sh builds.
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
