// Package migration performs the documented move of a running election from
// one API mode to the other (docs/migration.md) on a server that can do both:
// a controller of the new mode joins the old one, the candidates are rolled
// one at a time to the new mode, and the old controller leaves. The Lease is
// never leaderless for longer than one election.
package migration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{
		CoordinatedLeaderElection: true,
		IdleBuiltinController:     true,
		PortableCRD:               true,
	}, func(s *framework.Server) { server = s })
}

// maxLeaderless bounds each moment without a leader. An election takes
// milliseconds; the bound leaves room for a loaded machine and is far below
// the lease duration, which a missed handover would cost.
const maxLeaderless = 2 * time.Second

func TestMigration(t *testing.T) {
	for _, tc := range []struct{ from, to access.Mode }{
		{access.ModePortable, access.ModeNative},
		{access.ModeNative, access.ModePortable},
	} {
		t.Run(fmt.Sprintf("%s-to-%s", tc.from, tc.to), func(t *testing.T) { testMigration(t, tc.from, tc.to) })
	}
}

func testMigration(t *testing.T, from, to access.Mode) {
	ns := server.CreateNamespace(t)
	leaders := &leadership{}
	ids := []string{"a", "b", "c"}

	// The election runs in the old mode.
	oldController := server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: string(from)})
	running := map[string]*runningCandidate{}
	for _, id := range ids {
		running[id] = startCandidate(t, ns, id, from, leaders)
	}
	leader := waitLiveHolder(t, ns, running)
	t.Logf("%s mode: %s leads", from, leader)

	// Step 1: a controller of the new mode joins. It leaves the Lease, held
	// by a candidate it does not see, alone.
	server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: string(to)})
	if got := waitLiveHolder(t, ns, running); got != leader {
		t.Errorf("the %s controller moved the Lease from %s to %s", to, leader, got)
	}

	// Step 2: the candidates move to the new mode one at a time, the leader
	// last; each stops (handing over if it leads) and starts again.
	order := append(slicesWithout(ids, leader), leader)
	for _, id := range order {
		running[id].stop()
		running[id] = startCandidate(t, ns, id, to, leaders)
		got := waitLiveHolder(t, ns, running)
		t.Logf("%s moved to %s mode; %s leads", id, to, got)
	}

	// Step 3: the old controller leaves. The new one alone elects: stop the
	// leader, and another candidate of the new mode takes over.
	oldController.Stop()
	leader = waitLiveHolder(t, ns, running)
	running[leader].stop()
	delete(running, leader)
	if got := waitLiveHolder(t, ns, running); got == leader {
		t.Errorf("%s still holds the Lease after stopping", got)
	}
	for _, c := range running {
		if c.mode != to {
			t.Errorf("candidate %s is still in %s mode", c.id, c.mode)
		}
	}

	if gap := leaders.check(t); gap > maxLeaderless {
		t.Errorf("no candidate led for %s, want at most %s; terms:\n%s", gap, maxLeaderless, leaders)
	} else {
		t.Logf("longest moment without a leader: %s; terms:\n%s", gap, leaders)
	}
}

func slicesWithout(s []string, drop string) []string {
	var out []string
	for _, v := range s {
		if v != drop {
			out = append(out, v)
		}
	}
	return out
}

type runningCandidate struct {
	id   string
	mode access.Mode
	stop func()
}

// startCandidate runs a candidate of the library in mode until stopped.
func startCandidate(t *testing.T, ns, id string, mode access.Mode, leaders *leadership) *runningCandidate {
	t.Helper()
	stop := framework.RunCandidate(t, candidate.Config{
		RestConfig: server.Config(), APIMode: string(mode), Namespace: ns, LeaseName: "example", Identity: id,
		BinaryVersion: "1.36.0", EmulationVersion: "1.36.0",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
		Callbacks: candidate.Callbacks{OnStartedLeading: leaders.callback(id)},
	})
	return &runningCandidate{id: id, mode: mode, stop: stop}
}

// waitLiveHolder waits until the Lease is held by a running candidate and
// returns it.
func waitLiveHolder(t *testing.T, ns string, running map[string]*runningCandidate) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := server.Client().CoordinationV1().Leases(ns).Get(ctx, "example", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		_, ok := running[holder]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("no running candidate holds the Lease (last holder %q): %v", holder, err)
	}
	return holder
}

// leadership records when each candidate acted as leader: from its
// OnStartedLeading until that callback's context ended.
type leadership struct {
	mu    sync.Mutex
	terms []term
}

type term struct {
	id         string
	start, end time.Time // end is zero while it leads
}

func (l *leadership) callback(id string) func(context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		i := len(l.terms)
		l.terms = append(l.terms, term{id: id, start: time.Now()})
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		l.terms[i].end = time.Now()
		l.mu.Unlock()
	}
}

// check reports two candidates leading at once, and returns the longest
// time between one leader's end and the next one's start.
func (l *leadership) check(t *testing.T) time.Duration {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(l.terms); i++ {
		prev, cur := l.terms[i-1], l.terms[i]
		if prev.end.IsZero() || cur.start.Before(prev.end) {
			t.Errorf("%s started leading at %s while %s led (since %s)", cur.id, cur.start.Format(time.StampMicro), prev.id, prev.start.Format(time.StampMicro))
			continue
		}
		longest = max(longest, cur.start.Sub(prev.end))
	}
	return longest
}

func (l *leadership) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, tm := range l.terms {
		end := "leading"
		if !tm.end.IsZero() {
			end = tm.end.Format(time.StampMicro)
		}
		fmt.Fprintf(&b, "  %-2s %s .. %s\n", tm.id, tm.start.Format(time.StampMicro), end)
	}
	return b.String()
}
