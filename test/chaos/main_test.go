package chaos

import (
	"os"
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
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: !besideBuiltin},
		func(s *framework.Server) { server = s })
}
