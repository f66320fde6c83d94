package controller

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/framework"
	"github.com/cle-dev/cle/test/integration/latency"
)

// Election latency under cle-controller; the built-in controller's figures
// come from the same procedure in test/integration/server/builtin. Run both
// with `make bench`.

func BenchmarkColdElectionLatency(b *testing.B) {
	latency.ColdElection(b, server.Client(), benchNamespace(b))
}

func BenchmarkPreferredHolderLatency(b *testing.B) {
	latency.PreferredHolder(b, server.Client(), benchNamespace(b))
}

// benchNamespace is a fresh namespace with cle's controller running on it.
func benchNamespace(b *testing.B) string {
	ns := server.CreateNamespace(b)
	server.StartController(b, framework.ControllerOptions{Namespaces: []string{ns}})
	return ns
}

func BenchmarkSkewedColdElectionLatency(b *testing.B) {
	latency.SkewedColdElection(b, server.Client(), benchNamespace(b))
}
