package kubectlcle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/cle-dev/cle/pkg/strategy"
)

// startedWatcher is a Watcher past its initial listing, with the Lease and
// candidates given, fed by calling its event handlers in the order a test
// chooses, as the two informers may deliver them.
func startedWatcher(t *testing.T, clk *testingclock.FakeClock, out *strings.Builder) *Watcher {
	t.Helper()
	return startedWatcherWith(t, clk, out, func(*Watcher) {})
}

// startedWatcherWith is startedWatcher with more settings.
func startedWatcherWith(t *testing.T, clk *testingclock.FakeClock, out *strings.Builder, set func(*Watcher)) *Watcher {
	t.Helper()
	w := &Watcher{
		Judge:     Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, DefaultLeaseDuration: 15 * time.Second},
		Clock:     clk,
		Out:       out,
		Namespace: "ns",
		Name:      "l",
	}
	set(w)
	w.init()
	w.onCandidate(cand(newer), false)
	w.onLease(lease(leaseSpec{holder: "newer", term: 1}), false)
	w.mu.Lock()
	w.started = true
	w.report(types.NamespacedName{Namespace: "ns", Name: "l"})
	w.mu.Unlock()
	return w
}

func lines(out string) []string {
	var ls []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		// Drop the stamp and key.
		ls = append(ls, l[strings.Index(l, "ns/l  ")+len("ns/l  "):])
	}
	return ls
}

// TestWatchPrintsTheCandidateBeforeTheLeaseChangeNamingIt: the controller
// sets preferredHolder to a candidate the moment it sees it join, and the
// Lease's watch can deliver that write before the candidates' watch
// delivers the join. The watch still tells the cause first.
func TestWatchPrintsTheCandidateBeforeTheLeaseChangeNamingIt(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	var out strings.Builder
	w := startedWatcher(t, clk, &out)
	out.Reset()

	w.onLease(lease(leaseSpec{holder: "newer", preferred: "old", term: 1}), false)
	if out.Len() != 0 {
		t.Fatalf("a preferredHolder the watch has no candidate for printed before the candidate:\n%s", out.String())
	}
	w.onCandidate(cand(old), false)
	got := lines(out.String())
	want := []string{
		"candidates +old(emulation 1.35.0, binary 1.36.0, OldestEmulationVersion)  [preempting, best old]",
		"preferredHolder <none> -> old  [preempting, best old]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(w.held) != 0 || clk.HasWaiters() {
		t.Errorf("the held change's timer is still set")
	}

	// A Lease change naming a known candidate prints at once.
	out.Reset()
	w.onLease(lease(leaseSpec{holder: "old", preferred: "old", term: 2}), false)
	if got := lines(out.String()); len(got) != 1 || got[0] != "holder newer -> old (term 2)  [optimal, best old]" {
		t.Errorf("handover: %q", got)
	}
}

// TestWatchPrintsAHeldLeaseChangeWhenItsCandidateDoesNotCome: a holder that
// is no candidate (a client-go elector outside coordinated election) is
// printed after CandidateWait, and a later write of the Lease prints the
// latest state instead of the held one.
func TestWatchPrintsAHeldLeaseChangeWhenItsCandidateDoesNotCome(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	var out strings.Builder
	w := startedWatcher(t, clk, &out)
	out.Reset()

	w.onLease(lease(leaseSpec{holder: "outsider", term: 2}), false)
	clk.Step(DefaultCandidateWait - time.Millisecond)
	if out.Len() != 0 || !clk.HasWaiters() {
		t.Fatalf("released before CandidateWait:\n%s", out.String())
	}
	clk.Step(time.Millisecond)
	if err := waitFor(func() bool { w.mu.Lock(); defer w.mu.Unlock(); return out.Len() > 0 }); err != nil {
		t.Fatal("the held change was not printed after CandidateWait")
	}
	w.mu.Lock()
	got := lines(out.String())
	w.mu.Unlock()
	if len(got) != 1 || got[0] != "holder newer -> outsider (term 2)  [unmanaged, best newer]" {
		t.Errorf("got %q", got)
	}

	// Held, then overtaken by a write naming a known candidate.
	w.mu.Lock()
	out.Reset()
	w.mu.Unlock()
	w.onLease(lease(leaseSpec{holder: "ghost", term: 3}), false)
	w.onLease(lease(leaseSpec{holder: "newer", term: 4}), false)
	if got := lines(out.String()); len(got) != 1 || got[0] != "holder outsider -> newer (term 4)  [optimal, best newer]" {
		t.Errorf("got %q", got)
	}
	if clk.HasWaiters() {
		t.Error("the overtaken change's timer is still set")
	}

	// Nothing prints once the watch has ended.
	w.onLease(lease(leaseSpec{holder: "ghost", term: 5}), false)
	w.close()
	out.Reset()
	clk.Step(DefaultCandidateWait)
	if out.Len() != 0 || clk.HasWaiters() {
		t.Errorf("printed after close: %q", out.String())
	}
}

// waitFor polls cond for the goroutine of a fake clock's AfterFunc.
func waitFor(cond func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

var errTimeout = errorString("timed out")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestWatchPrintsObjects: with -o json, one LeaseChange per report, the
// changes seen together in one object; with -o name, the Lease.
func TestWatchPrintsObjects(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	var out strings.Builder
	w := startedWatcherWith(t, clk, &out, func(w *Watcher) { w.Format = printerFor(t, "json") })
	var first LeaseChange
	if err := json.Unmarshal([]byte(out.String()), &first); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if first.Kind != KindLeaseChange || first.APIVersion != "kubectl.cle.dev/v1alpha1" || first.Lease.Holder != "newer" || first.Lease.Kind != KindLeaseStatus ||
		len(first.Changes) != 1 || !strings.HasPrefix(first.Changes[0], "holder newer (term 1)") {
		t.Errorf("first report: %s", out.String())
	}

	out.Reset()
	w.onLease(lease(leaseSpec{holder: "newer", preferred: "old", term: 1}), false)
	w.onCandidate(cand(old), false)
	var change LeaseChange
	if err := json.Unmarshal([]byte(out.String()), &change); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	want := []string{"candidates +old(emulation 1.35.0, binary 1.36.0, OldestEmulationVersion)", "preferredHolder <none> -> old"}
	if strings.Join(change.Changes, "\n") != strings.Join(want, "\n") || change.Lease.State != StatePreempting || change.Lease.PreferredHolder != "old" ||
		!change.Time.Equal(&metav1.MicroTime{Time: now}) {
		t.Errorf("change: %s", out.String())
	}

	out.Reset()
	w.Format = printerFor(t, "yaml")
	w.onLease(lease(leaseSpec{holder: "newer", term: 1}), false)
	w.onLease(lease(leaseSpec{holder: "newer", preferred: "old", term: 1}), false)
	if docs := strings.Split(out.String(), "---\n"); len(docs) != 2 || !strings.HasPrefix(docs[0], "apiVersion: kubectl.cle.dev/v1alpha1\n") || !strings.Contains(docs[1], "\nkind: LeaseChange\n") {
		t.Errorf("-o yaml, two changes: %q", out.String())
	}

	out.Reset()
	w.Format = printerFor(t, "name")
	w.onLease(lease(leaseSpec{holder: "old", term: 2}), false)
	if out.String() != "lease.coordination.k8s.io/l\n" {
		t.Errorf("-o name: %q", out.String())
	}
}

// TestWatchListedOnly: with a label selector, a Lease the Lease watch does
// not see is not reported, and one it stops seeing is reported gone.
func TestWatchListedOnly(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	var out strings.Builder
	w := startedWatcherWith(t, clk, &out, func(w *Watcher) { w.ListedOnly = true; w.Name = "" })
	if got := lines(out.String()); len(got) != 1 || !strings.HasPrefix(got[0], "holder newer (term 1)") {
		t.Fatalf("first report: %q", got)
	}

	out.Reset()
	other := cand(old)
	other.Spec.LeaseName = "unselected"
	w.onCandidate(other, false)
	if out.Len() != 0 {
		t.Errorf("a candidate of a Lease the selector leaves out printed: %q", out.String())
	}

	w.onLease(lease(leaseSpec{holder: "newer", term: 1}), true)
	if got := lines(out.String()); len(got) != 1 || got[0] != "Lease no longer selected (deleted, or its labels changed)" {
		t.Errorf("Lease gone: %q", got)
	}
}
