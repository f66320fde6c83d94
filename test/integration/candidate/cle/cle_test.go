// Package cle runs the candidate library's integration cases under
// cle-controller, in native mode, with the controller built into
// kube-apiserver idled.
package cle

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/candidate/suite"
	"github.com/cle-dev/cle/test/integration/framework"
)

var env = &suite.Env{Controller: "cle-controller", APIMode: "native"}

func TestMain(m *testing.M) {
	suite.Main(m, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: true}, env, true)
}

func TestCases(t *testing.T) { suite.Run(t, env) }
