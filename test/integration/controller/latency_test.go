package controller

import (
	"testing"

	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
	"github.com/cle-dev/cle/test/integration/latency"
)

// Election latency under cle-controller; the built-in controller's figures
// come from the same procedure in test/integration/server/builtin. Run both
// with `make bench`.

// BenchmarkColdElectionLatency runs with the default options: the first
// election of a new Lease waits for the gathering window to close (a fifth of
// --election-gather after the last candidate joined).
func BenchmarkColdElectionLatency(b *testing.B) {
	latency.ColdElection(b, server.Client(), benchNamespace(b))
}

// BenchmarkColdElectionLatencyNoGather is the same with the gathering window
// off: the cost of the election itself.
func BenchmarkColdElectionLatencyNoGather(b *testing.B) {
	latency.ColdElection(b, server.Client(), benchNamespace(b, controller.Options{ElectionGather: controller.NoElectionGather}))
}

func BenchmarkPreferredHolderLatency(b *testing.B) {
	latency.PreferredHolder(b, server.Client(), benchNamespace(b))
}

// benchNamespace is a fresh namespace with cle's controller running on it,
// with the given options (the defaults if none).
func benchNamespace(b *testing.B, opts ...controller.Options) string {
	ns := server.CreateNamespace(b)
	o := framework.ControllerOptions{Namespaces: []string{ns}}
	if len(opts) > 0 {
		o.Controller = opts[0]
	}
	server.StartController(b, o)
	return ns
}

// BenchmarkSkewedColdElectionLatency measures what a skewed clock costs, so
// the gathering window is off, as in BenchmarkColdElectionLatencyNoGather.
func BenchmarkSkewedColdElectionLatency(b *testing.B) {
	latency.SkewedColdElection(b, server.Client(), benchNamespace(b, controller.Options{ElectionGather: controller.NoElectionGather}))
}
