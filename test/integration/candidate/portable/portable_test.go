// Package portable runs the candidate library's integration cases under
// cle-controller in portable mode, on a kube-apiserver with the
// CoordinatedLeaderElection gate off: LeaseCandidates are the cle.dev custom
// resource and a Lease carries its strategy and preferred holder in
// annotations. The cases are the ones the cle and builtin packages run.
package portable

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/candidate/suite"
	"github.com/cle-dev/cle/test/integration/framework"
)

var env = &suite.Env{Controller: "cle-controller (portable)", APIMode: "portable"}

func TestMain(m *testing.M) {
	// With the gate off the built-in controller does not run at all, so
	// there is nothing to idle.
	framework.Main(m, framework.Options{PortableCRD: true}, func(s *framework.Server) {
		env.Server = s
		env.Setup = func(t *testing.T) string {
			ns := s.CreateNamespace(t)
			s.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: env.APIMode})
			return ns
		}
	})
}

func TestElectsBestCandidate(t *testing.T)           { suite.ElectsBestCandidate(t, env) }
func TestPreemption(t *testing.T)                    { suite.Preemption(t, env) }
func TestGracefulHandover(t *testing.T)              { suite.GracefulHandover(t, env) }
func TestBlockedRenewals(t *testing.T)               { suite.BlockedRenewals(t, env) }
func TestPausedProcess(t *testing.T)                 { suite.PausedProcess(t, env) }
func TestRestartRefreshesCandidate(t *testing.T)     { suite.RestartRefreshesCandidate(t, env) }
func TestWrapConfig(t *testing.T)                    { suite.WrapConfig(t, env) }
func TestRenewalsKeepCoordinatedFields(t *testing.T) { suite.RenewalsKeepCoordinatedFields(t, env) }
func TestLatency(t *testing.T)                       { suite.Latency(t, env, 5) }
