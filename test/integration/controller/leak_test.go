package controller

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/test/integration/framework"
)

// leakMarkers are frames of goroutines that the controller, its informers,
// queues and event broadcaster start. None may outlive Run.
var leakMarkers = []string{
	"github.com/cle-dev/cle/pkg/",
	"k8s.io/client-go/tools/cache.",
	"k8s.io/client-go/util/workqueue.",
	"k8s.io/client-go/tools/events.",
	"k8s.io/apimachinery/pkg/watch.",
}

// controllerGoroutines returns the stacks of live goroutines that belong to
// the controller's machinery.
func controllerGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, m := range leakMarkers {
			if strings.Contains(g, m) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}

// TestNoGoroutineLeftAfterRun runs the controller through an election on the
// real server, stops it, and checks that every goroutine it started is gone.
func TestNoGoroutineLeftAfterRun(t *testing.T) { forEachMode(t, testNoGoroutineLeftAfterRun) }

func testNoGoroutineLeftAfterRun(t *testing.T, m apiMode) {
	var left []string
	settled := func(context.Context) (bool, error) {
		left = controllerGoroutines()
		return len(left) == 0, nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, settled); err != nil {
		t.Fatalf("%d controller goroutines alive before the test, left by an earlier one:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	t.Run("run", func(t *testing.T) {
		ns := m.server.CreateNamespace(t)
		m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name, Workers: 4})
		e := newEnv(t, m, ns)
		e.createCandidate("leak", cand{name: "a", binary: "1.36.0", emulation: "1.36.0"})
		e.createCandidate("leak", cand{name: "b", binary: "1.36.0", emulation: "1.35.0"})
		// a may lead before b exists: then b becomes the preferred holder.
		e.waitLease("leak", 30*time.Second, "holder or preferred b", func(l *coordinationv1.Lease) bool {
			return holderIs("b")(l) || ptr.Deref(l.Spec.PreferredHolder, "") == "b"
		})
		if len(controllerGoroutines()) == 0 {
			t.Fatal("no controller goroutine seen while it runs: the leak check would see nothing")
		}
	}) // the subtest's cleanup stops the controller and waits for Run
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, settled); err != nil {
		t.Fatalf("%d goroutines left after Run returned:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
