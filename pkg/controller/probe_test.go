package controller

import (
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestFirstHolderIncludesRegistrationsTheWatchHasNotShown pins the first
// election on a server whose candidate watch lags: a candidate registered
// before the Lease was created, that the watch has not shown yet when the
// gathering window closes, is still the one named. The Lease is created
// naming nobody; the controller pings the best candidate it sees, and names
// a holder only once the watch has delivered that ping, and with it every
// registration applied before it.
func TestFirstHolderIncludesRegistrationsTheWatchHasNotShown(t *testing.T) {
	h := newHarness(t, withGather(time.Second))
	h.create(candidate("worse", "1.36.0", "1.36.0"))
	// Registered on the server, not shown by the watch yet.
	better := candidate("better", "1.36.0", "1.35.0")
	better.ResourceVersion = h.nextRV()
	if err := h.client.Tracker().Add(better); err != nil {
		t.Fatal(err)
	}
	if _, err := h.reconcileOnly(); err != nil {
		t.Fatal(err)
	}
	h.expectNobodyNamed("gathering")
	if l := h.serverLease(); l == nil || holderOf(l) != "" {
		t.Fatalf("Lease %v, want it created naming nobody", l)
	}
	h.syncLeases()
	h.clearWrites()

	// The window closes: the controller probes (a ping of the best it
	// sees) and waits for the watch to show the probe.
	h.step(time.Second)
	if _, err := h.reconcileOnly(); err != nil {
		t.Fatal(err)
	}
	h.expectNobodyNamed("before the watch shows the probe")
	if p := h.pings(); !slices.Equal(p, []string{"worse"}) {
		t.Fatalf("probe pinged %v, want [worse]", p)
	}
	if got := h.metric("cle_registration_probes_total"); got != 1 {
		t.Errorf("cle_registration_probes_total = %v, want 1", got)
	}
	// Still not shown: still waiting, and no second probe.
	h.step(100 * time.Millisecond)
	if _, err := h.reconcileOnly(); err != nil {
		t.Fatal(err)
	}
	h.expectNobodyNamed("the probe still in flight")
	if p := h.pings(); len(p) != 1 {
		t.Fatalf("pinged %v, want the one probe", p)
	}

	// The watch delivers, in order: the registration, then the probe.
	h.syncCandidates()
	h.clearWrites()
	if l := h.expectFirstHolder("better"); l == nil {
		t.Fatal("no first holder")
	}
}

// TestFirstElectionGoesOnWithoutAProbe pins the bound on the wait: a probe
// that no write gets through (the candidates cannot be written to) holds
// the first election back a ping timeout after the Lease was seen, then it
// names the best candidate it sees.
func TestFirstElectionGoesOnWithoutAProbe(t *testing.T) {
	h := newHarness(t, withGather(time.Second))
	h.create(candidate("a", "1.36.0", "1.36.0"))
	h.reconcile() // opens the Lease
	h.failOn("update", "leasecandidates", -1, apierrors.NewForbidden(candidatesGVR.GroupResource(), "a", errors.New("denied by policy")))
	h.step(time.Second)
	if _, err := h.reconcileOnly(); err == nil {
		t.Fatal("want the failed probe reported")
	}
	h.expectNobodyNamed("within the ping timeout")
	h.clearWrites()
	h.step(DefaultPingTimeout)
	if _, err := h.reconcileOnly(); err != nil {
		t.Logf("step: %v", err) // the probe failed again
	}
	var named []string
	for _, w := range h.leaseWrites() {
		if holderOf(w.lease) != "" {
			named = append(named, holderOf(w.lease))
		}
	}
	if !slices.Equal(named, []string{"a"}) {
		t.Fatalf("named %v a ping timeout after the Lease was seen, want [a]", named)
	}
}

// TestRegistrationProbe pins the probe's bookkeeping: one probe in flight
// serves every Lease that asks, each is woken once it is delivered (in key
// order), a delivery before the write's response counts, a lost probe is
// replaced once stale, and a resourceVersion that is not a number turns
// the probes off.
func TestRegistrationProbe(t *testing.T) {
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	now := time.Unix(1000, 0)
	var p registrationProbe
	if p.mark() != 0 || p.view().proved != 0 || !p.view().usable {
		t.Fatalf("zero probe: mark %d, view %+v", p.mark(), p.view())
	}
	n, send := p.start(key("b"), now, time.Second)
	if !send || n != 1 {
		t.Fatalf("first start: %d, %v; want 1, true", n, send)
	}
	if _, send := p.start(key("a"), now.Add(time.Millisecond), time.Second); send {
		t.Fatal("a second probe while one is in flight")
	}
	if woken := p.delivered("40"); woken != nil {
		t.Fatalf("delivery before the probe's write returned woke %v", woken)
	}
	if woken := p.written(1, "50"); woken != nil {
		t.Fatalf("written below what the watch delivered woke %v", woken)
	}
	if woken := p.delivered("49"); woken != nil {
		t.Fatalf("an earlier resourceVersion woke %v", woken)
	}
	if woken := p.delivered("52"); !slices.Equal(woken, []types.NamespacedName{key("a"), key("b")}) {
		t.Fatalf("delivery woke %v, want a and b", woken)
	}
	if v := p.view(); v.proved != 1 || p.mark() != 1 {
		t.Fatalf("after delivery: view %+v, mark %d; want proved 1, mark 1", v, p.mark())
	}

	// Delivered before its response: settled by the response.
	n, _ = p.start(key("c"), now, time.Second)
	p.delivered("60")
	if woken := p.written(n, "55"); !slices.Equal(woken, []types.NamespacedName{key("c")}) {
		t.Fatalf("response after the delivery woke %v, want c", woken)
	}

	// Lost: replaced once stale, and the lost one's late response ignored.
	lost, _ := p.start(key("d"), now, time.Second)
	if _, send := p.start(key("d"), now.Add(999*time.Millisecond), time.Second); send {
		t.Fatal("replaced before it was stale")
	}
	next, send := p.start(key("d"), now.Add(time.Second), time.Second)
	if !send || next != lost+1 {
		t.Fatalf("stale probe not replaced: %d, %v", next, send)
	}
	if woken := p.written(lost, "100"); woken != nil {
		t.Fatalf("the lost probe's response woke %v", woken)
	}
	p.failed(next)
	if _, send := p.start(key("d"), now.Add(time.Second), time.Second); !send {
		t.Fatal("no new probe after a failed one")
	}

	var q registrationProbe
	n, _ = q.start(key("e"), now, time.Second)
	if woken := q.written(n, "not-a-number"); !slices.Equal(woken, []types.NamespacedName{key("e")}) || q.view().usable {
		t.Fatalf("opaque resourceVersion: woke %v, view %+v; want e woken, unusable", woken, q.view())
	}
}

// TestProbeTimeNeverTakesBackAPing pins the probe's pingTime: past both the
// candidate's renewTime and a pending ping's time, on the candidate's own
// clock, so that the write always changes the object and never lowers a
// ping another step (or replica) wrote.
func TestProbeTimeNeverTakesBackAPing(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	renew, ping := now.Add(-time.Hour), now.Add(time.Hour) // clocks apart
	lc := candidate("a", "1.36.0", "1.36.0")
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
	if got, want := probeTime(lc, now), renew.Add(time.Microsecond); !got.Equal(want) {
		t.Errorf("no ping pending: %v, want %v", got, want)
	}
	lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(ping))
	if got, want := probeTime(lc, now), ping.Add(time.Microsecond); !got.Equal(want) {
		t.Errorf("a ping pending: %v, want %v", got, want)
	}
	lc.Spec.RenewTime, lc.Spec.PingTime = nil, nil
	if got := probeTime(lc, now); !got.Equal(now) {
		t.Errorf("neither: %v, want now", got)
	}
}
