// Package portable runs the candidate library's integration cases under
// cle-controller in portable mode, on a kube-apiserver with the
// CoordinatedLeaderElection gate off (so no built-in controller runs) and the
// LeaseCandidate CRD installed.
package portable

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/candidate/suite"
	"github.com/cle-dev/cle/test/integration/framework"
)

var env = &suite.Env{Controller: "cle-controller (portable)", APIMode: "portable"}

func TestMain(m *testing.M) {
	suite.Main(m, framework.Options{PortableCRD: true}, env, true)
}

func TestCases(t *testing.T) { suite.Run(t, env) }
