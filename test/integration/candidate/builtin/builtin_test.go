// Package builtin runs the candidate library's integration cases under the
// election controller built into kube-apiserver (native mode, not idled),
// the same cases the cle package runs under cle-controller.
package builtin

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/candidate/suite"
	"github.com/cle-dev/cle/test/integration/framework"
)

var env = &suite.Env{Controller: "built-in controller"}

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true}, func(s *framework.Server) {
		env.Server = s
		// The built-in controller serves every namespace.
		env.Setup = func(t *testing.T) string { return s.CreateNamespace(t) }
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
