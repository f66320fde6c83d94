package builtin

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/latency"
)

// Election latency under the controller built into kube-apiserver (with the
// short timers the framework gives it), by the same procedure as cle's in
// test/integration/controller. Run both with `make bench`.

func BenchmarkBuiltinColdElectionLatency(b *testing.B) {
	latency.ColdElection(b, server.Client(), server.CreateNamespace(b))
}

func BenchmarkBuiltinPreferredHolderLatency(b *testing.B) {
	latency.PreferredHolder(b, server.Client(), server.CreateNamespace(b))
}

func BenchmarkBuiltinSkewedColdElectionLatency(b *testing.B) {
	latency.SkewedColdElection(b, server.Client(), server.CreateNamespace(b))
}
