//go:build tools

// Package tools pins the command that hack/promtool.sh builds.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
