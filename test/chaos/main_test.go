package chaos

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

// besideBuiltin (CHAOS_BESIDE_BUILTIN=1) runs the suite on a cluster as it is
// with the CoordinatedLeaderElection gate on: kube-apiserver's own election
// controller runs and holds its lock, the candidates ask for
// cle.dev/OldestEmulationVersion, and cle-controller elects them under its
// own lock in kube-system, beside kube-apiserver's controller, which pings
// them and writes their Lease's strategy.
var besideBuiltin = os.Getenv("CHAOS_BESIDE_BUILTIN") != ""

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: !besideBuiltin, Epilogue: outcome.String},
		func(s *framework.Server) { server = s })
}

// outcome is what a failed run ends its output with, after every process's
// log and the servers': its seed, its summary, and why it failed.
var outcome = &notes{}

// notes are lines kept for the end of the output; safe for concurrent use.
type notes struct {
	mu    sync.Mutex
	lines []string
}

func (n *notes) add(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, fmt.Sprintf(format, args...))
}

func (n *notes) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "==== chaos: the outcome (above: the log of every process and of the servers) ====\n" + strings.Join(n.lines, "\n")
}
