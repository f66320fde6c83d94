package controller

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// TestTokenSurvivesDeletionDuringRestart: a Lease whose terms reached token T
// is deleted while cle-controller is down, and a candidate that never saw it
// starts; the controller, started again with no memory of the Lease, creates
// it for that candidate numbered above T, from the highest token the
// candidates that held or saw T record on their LeaseCandidates. Without
// those records the Lease started over at 1, below a fence that accepted T.
func TestTokenSurvivesDeletionDuringRestart(t *testing.T) {
	forEachMode(t, testTokenSurvivesDeletionDuringRestart)
}

func testTokenSurvivesDeletionDuringRestart(t *testing.T, m apiMode) {
	const lease = "fenced"
	ns := m.server.CreateNamespace(t)
	o := framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name, Controller: controller.Options{LeaseDuration: 3 * time.Second}}
	first := m.server.StartController(t, o)
	e := newEnv(t, m, ns)

	// Terms one after another: a leads, hands over to b as it stops, and
	// a's next process takes the Lease back.
	stopA, _ := e.runShortCandidate(lease, "a", "1.34.0")
	e.runShortCandidate(lease, "b", "1.35.0")
	e.waitLease(lease, 20*time.Second, "a leads", renewedBy("a"))
	for range 2 {
		stopA()
		e.waitLease(lease, 20*time.Second, "b leads", renewedBy("b"))
		stopA, _ = e.runShortCandidate(lease, "a", "1.34.0")
		e.waitLease(lease, 20*time.Second, "a leads again", renewedBy("a"))
	}
	held := ptr.Deref(e.waitLease(lease, 20*time.Second, "a leads", renewedBy("a")).Spec.LeaseTransitions, 0)
	if held < 5 {
		t.Fatalf("five terms were led, but the token is %d", held)
	}
	// The holder records its token at once.
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		lc, err := e.acc.LeaseCandidates(ns).Get(ctx, "a")
		return err == nil && access.HighestToken(lc.Annotations) >= held, nil
	}); err != nil {
		t.Fatalf("a did not record its token %d on its LeaseCandidate: %v", held, err)
	}

	first.Stop()
	if err := e.client.CoordinationV1().Leases(ns).Delete(context.Background(), lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.electedAbove(t, o, lease, held)
}

// electedAbove starts a candidate c of the deleted Lease, whose process
// never saw it (so its own memory cannot number its term above held), and a
// controller with no memory of it, and checks that c leads the re-created
// Lease in a term, and with a token, above held. It returns the Lease.
func (e *env) electedAbove(t *testing.T, o framework.ControllerOptions, lease string, held int32) *coordinationv1.Lease {
	t.Helper()
	_, tokens := e.runShortCandidate(lease, "c", "1.33.0")
	e.mode.server.StartController(t, o)

	got := e.waitLease(lease, 30*time.Second, "c leads the re-created Lease", renewedBy("c"))
	if n := ptr.Deref(got.Spec.LeaseTransitions, 0); n <= held {
		t.Errorf("the re-created Lease's term is numbered %d, not above the deleted Lease's %d", n, held)
	}
	select {
	case token := <-tokens:
		if token <= held {
			t.Errorf("c leads with token %d, not above the %d a fenced resource may have accepted", token, held)
		}
	case <-time.After(10 * time.Second):
		t.Error("c's leader work did not start")
	}
	return got
}

// TestTokenSurvivesEveryoneLeaving: a Lease whose terms reached token T is
// left by every candidate (each deletes its LeaseCandidate, and with it the
// token it records) and deleted while cle-controller is down; a candidate
// that never saw it starts, and the controller, started again with no memory
// of the Lease, numbers its term above T: every token a controller hands out
// stays below the bound it keeps in a Lease of its own, and a controller
// numbers every term above the bound it read as it started. Without the
// bound the Lease started over at 1.
func TestTokenSurvivesEveryoneLeaving(t *testing.T) {
	forEachMode(t, testTokenSurvivesEveryoneLeaving)
}

func testTokenSurvivesEveryoneLeaving(t *testing.T, m apiMode) {
	const lease = "fenced"
	ns := m.server.CreateNamespace(t)
	o := framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name, Controller: controller.Options{LeaseDuration: 3 * time.Second}}
	first := m.server.StartController(t, o)
	e := newEnv(t, m, ns)

	stopA, _ := e.runShortCandidate(lease, "a", "1.34.0")
	stopB, _ := e.runShortCandidate(lease, "b", "1.35.0")
	e.waitLease(lease, 20*time.Second, "a leads", renewedBy("a"))
	stopA()
	e.waitLease(lease, 20*time.Second, "b leads", renewedBy("b"))
	stopA, _ = e.runShortCandidate(lease, "a", "1.34.0")
	held := ptr.Deref(e.waitLease(lease, 20*time.Second, "a leads again", renewedBy("a")).Spec.LeaseTransitions, 0)
	if held < 3 {
		t.Fatalf("three terms were led, but the token is %d", held)
	}

	// Everyone leaves, gracefully: no LeaseCandidate records the token.
	stopA()
	stopB()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{"a", "b"} {
			if _, err := e.acc.LeaseCandidates(ns).Get(ctx, name); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the candidates did not delete their LeaseCandidates: %v", err)
	}
	first.Stop()
	if err := e.client.CoordinationV1().Leases(ns).Delete(context.Background(), lease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	got := e.electedAbove(t, o, lease, held)
	bound, err := e.client.CoordinationV1().Leases(ns).Get(context.Background(), controller.DefaultTokenBoundName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the token bound: %v", err)
	}
	if b := ptr.Deref(bound.Spec.LeaseTransitions, 0); b < ptr.Deref(got.Spec.LeaseTransitions, 0) {
		t.Errorf("the token bound is %d, below the token %d handed out", b, ptr.Deref(got.Spec.LeaseTransitions, 0))
	}
}

// renewedBy holds for a Lease whose holder id has begun its term.
func renewedBy(id string) func(*coordinationv1.Lease) bool {
	return func(l *coordinationv1.Lease) bool { return framework.TermBegun(l, id) }
}

// runShortCandidate runs a library candidate of the Lease with short timings
// until the test ends or stop is called (a graceful stop: it hands over and
// deletes its LeaseCandidate). Each term's token, from its leader work's
// context, is sent on tokens.
func (e *env) runShortCandidate(lease, name, emulation string) (stop func(), tokens <-chan int32) {
	e.t.Helper()
	clients, err := access.NewClients(e.mode.server.Config())
	if err != nil {
		e.t.Fatal(err)
	}
	ch := make(chan int32, 16)
	stop = framework.RunCandidate(e.t, candidate.Config{
		Clients: clients, APIMode: e.mode.name, Namespace: e.ns, LeaseName: lease, Identity: name,
		BinaryVersion: "1.36.0", EmulationVersion: emulation,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Callbacks: candidate.Callbacks{OnStartedLeading: func(ctx context.Context) {
			if token, ok := candidate.TokenFrom(ctx); ok {
				select {
				case ch <- token:
				default:
				}
			}
			<-ctx.Done()
		}},
	})
	return stop, ch
}
