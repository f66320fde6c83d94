// Package integration runs controller-runtime managers that use
// cle.ManagerOptions against real kube-apiservers: with cle-controller in
// native mode (the built-in controller idled) and in portable mode, and with
// the controller built into kube-apiserver electing.
package integration

import (
	"testing"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// env is one election environment.
type env struct {
	name string
	s    *framework.Server
	// apiMode is the candidates' (and cle-controller's) API mode.
	apiMode string
	// cleController: cle-controller elects; otherwise the controller built
	// into kube-apiserver does.
	cleController bool
}

var envs = []*env{
	{name: "native", apiMode: "native", cleController: true},
	{name: "portable", apiMode: "portable", cleController: true},
	{name: "builtin", apiMode: "native"},
}

func TestMain(m *testing.M) {
	ctrllog.SetLogger(klog.Background())
	framework.MainServers(m, []framework.Options{
		{CoordinatedLeaderElection: true, IdleBuiltinController: true},
		{PortableCRD: true},
		{CoordinatedLeaderElection: true},
	}, func(servers []*framework.Server) {
		for i, s := range servers {
			envs[i].s = s
		}
	})
}

// setup creates a namespace for one test and, with cle-controller, runs it
// for that namespace until the test ends. Its gathering window is wider
// than the default (1s, closing 200ms after the last join): a test starts
// its managers one after another, and on a loaded machine their candidates
// may join further apart than that.
func (e *env) setup(t *testing.T) string {
	ns := e.s.CreateNamespace(t)
	if e.cleController {
		e.s.StartController(t, framework.ControllerOptions{
			Namespaces: []string{ns},
			APIMode:    e.apiMode,
			Controller: controller.Options{ElectionGather: 5 * time.Second},
		})
	}
	return ns
}
