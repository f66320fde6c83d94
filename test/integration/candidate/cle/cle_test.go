// Package cle runs the candidate library's integration cases under
// cle-controller, in native mode, with the controller built into
// kube-apiserver idled.
package cle

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/candidate/suite"
	"github.com/cle-dev/cle/test/integration/framework"
)

var env = &suite.Env{Controller: "cle-controller"}

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: true}, func(s *framework.Server) {
		env.Server = s
		env.Setup = func(t *testing.T) string {
			ns := s.CreateNamespace(t)
			s.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}})
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
