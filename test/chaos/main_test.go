package chaos

import (
	"testing"

	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: true},
		func(s *framework.Server) { server = s })
}
