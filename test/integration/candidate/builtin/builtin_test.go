// Package builtin runs the candidate library's integration cases under the
// election controller built into kube-apiserver (native mode, gate on, not
// idled), which serves every namespace.
package builtin

import (
	"testing"
	"time"

	"github.com/cle-dev/cle/test/integration/candidate/suite"
	"github.com/cle-dev/cle/test/integration/framework"
)

var env = &suite.Env{Controller: "built-in controller", APIMode: "native", ElectionAllowance: 10 * time.Second}

func TestMain(m *testing.M) {
	suite.Main(m, framework.Options{CoordinatedLeaderElection: true}, env, false)
}

func TestCases(t *testing.T) { suite.Run(t, env) }
