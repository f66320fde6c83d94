package controller

import (
	"errors"
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// boundNS is where the harness keeps the fencing token bound.
const boundNS = "kube-system"

// withTokenBound turns the fencing token bound on.
func withTokenBound(o *Options) {
	o.TokenBound = types.NamespacedName{Namespace: boundNS, Name: DefaultTokenBoundName}
}

// boundLease is the bound as the server has it.
func boundLease(n int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: boundNS, Name: DefaultTokenBoundName, ResourceVersion: "50"},
		Spec:       coordinationv1.LeaseSpec{LeaseTransitions: ptr.To(n)},
	}
}

// serverBound is the bound on the server (-1: none).
func (h *harness) serverBound() int32 {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(leasesGVR, boundNS, DefaultTokenBoundName)
	if apierrors.IsNotFound(err) {
		return -1
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return ptr.Deref(obj.(*coordinationv1.Lease).Spec.LeaseTransitions, 0)
}

// boundThenLease are the indexes among the controller's writes of the first
// write of the bound and of the first naming of a holder of the test Lease
// (-1: none).
func (h *harness) boundThenLease() (bound, election int) {
	bound, election = -1, -1
	for i, w := range h.writes() {
		switch {
		case w.lease == nil:
		case w.lease.Name == DefaultTokenBoundName && bound < 0:
			bound = i
		case w.lease.Name == testLease && election < 0 && holderOf(w.lease) != "":
			election = i
		}
	}
	return bound, election
}

// TestTokensStartAboveTheBound pins the hole the bound closes: a controller
// that has never seen a Lease, whose candidates record no token (those that
// held or saw it exited, deleting their LeaseCandidates), numbers its term
// above every token earlier controllers handed out, and raises the bound
// above it before the Lease names anybody.
func TestTokensStartAboveTheBound(t *testing.T) {
	h := newHarness(t, withTokenBound)
	if err := h.client.Tracker().Add(boundLease(500)); err != nil {
		t.Fatal(err)
	}
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.reconcile()
	got := h.serverLease()
	if got == nil || holderOf(got) != "a" {
		t.Fatalf("Lease %v, want a named", got)
	}
	if n := ptr.Deref(got.Spec.LeaseTransitions, 0); n != 501 {
		t.Errorf("leaseTransitions = %d, want 501, above the bound 500", n)
	}
	if b := h.serverBound(); b < 501+tokenSlack/2 {
		t.Errorf("bound = %d after handing out 501, want at least %d", b, 501+tokenSlack/2)
	}
	if bound, election := h.boundThenLease(); bound < 0 || election < 0 || bound > election {
		t.Errorf("writes %v: want the bound raised before the Lease names a holder", h.writes())
	}

	// A Lease deleted since its last naming may have gone on unseen (its
	// holder counting terms itself): created again, it is numbered above
	// the bound as it is now.
	h.clearWrites()
	h.deleteHeldLease()
	h.reconcile()
	if n := ptr.Deref(h.serverLease().Spec.LeaseTransitions, 0); n != 602 {
		t.Errorf("leaseTransitions after the deletion = %d, want 602, above the bound 601", n)
	}

	// Later terms of the Lease go on from its own count, with no write of
	// the bound while they stay well below it.
	h.clearWrites()
	h.step(h.c.opts.LeaseDuration + time.Second)
	h.renew("a", h.clock.Now())
	h.reconcile()
	if n := ptr.Deref(h.serverLease().Spec.LeaseTransitions, 0); n != 603 {
		t.Errorf("leaseTransitions of the next term = %d, want 603", n)
	}
	if bound, _ := h.boundThenLease(); bound >= 0 {
		t.Errorf("writes %v: the bound was raised again, though 603 is well below it", h.writes())
	}
}

// TestTokenBoundCreatedWithTheFirstToken: with no bound on the server (a new
// installation) the first term is numbered 1, and the bound is created
// before anybody is named.
func TestTokenBoundCreatedWithTheFirstToken(t *testing.T) {
	h := newHarness(t, withTokenBound)
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.reconcile()
	if n := ptr.Deref(h.serverLease().Spec.LeaseTransitions, 0); n != 1 {
		t.Errorf("leaseTransitions = %d, want 1", n)
	}
	if b := h.serverBound(); b != 1+tokenSlack {
		t.Errorf("bound = %d, want %d", b, 1+tokenSlack)
	}
	if bound, election := h.boundThenLease(); bound < 0 || election < 0 || bound > election || h.writes()[bound].verb != "create" {
		t.Errorf("writes %v: want the bound created before the Lease names a holder", h.writes())
	}
}

// TestTokenBoundFollowsTheHoldersTokens: tokens a holder counts itself (a
// handover to the preferred holder) are not handed out by the controller;
// the bound is raised once the controller sees them come near it.
func TestTokenBoundFollowsTheHoldersTokens(t *testing.T) {
	h := newHarness(t, withTokenBound)
	if err := h.client.Tracker().Add(boundLease(100)); err != nil {
		t.Fatal(err)
	}
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.list(lease(heldBy("a"), transitions(40)))
	h.reconcile()
	if b := h.serverBound(); b != 100 {
		t.Errorf("bound = %d with the Lease at 40, want it left at 100", b)
	}
	l := h.serverLease()
	l.Spec.LeaseTransitions = ptr.To[int32](60)
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
	h.serverUpdate(leasesGVR, l)
	h.reconcile()
	if b := h.serverBound(); b != 60+tokenSlack {
		t.Errorf("bound = %d with the Lease at 60, want %d", b, 60+tokenSlack)
	}
}

// TestTokenBoundRaiseFailedNamesNobody: a bound that cannot be raised (the
// server fails the write) holds the naming back; it goes on once the bound
// is raised. A bound raised meanwhile by another replica is read again and
// never lowered.
func TestTokenBoundRaiseFailedNamesNobody(t *testing.T) {
	h := newHarness(t, withTokenBound)
	if err := h.client.Tracker().Add(boundLease(500)); err != nil {
		t.Fatal(err)
	}
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.failOn("update", "leases", 1, apierrors.NewServiceUnavailable("etcd is down"))
	if _, err := h.reconcileOnly(); err == nil {
		t.Fatal("reconcile succeeded, want the failed raise returned")
	}
	h.sync()
	if l := h.serverLease(); l != nil && holderOf(l) != "" {
		t.Fatalf("Lease names %q though the bound was not raised above its token", holderOf(l))
	}

	// Another replica (a deposed one's write in flight) raised the bound
	// meanwhile: this one's conditional write conflicts; it reads the
	// bound again and goes on from there.
	if err := h.client.Tracker().Update(leasesGVR, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: boundNS, Name: DefaultTokenBoundName, ResourceVersion: "60"},
		Spec:       coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](900)},
	}, boundNS); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if l := h.serverLease(); l == nil || holderOf(l) != "a" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 501 {
		t.Errorf("Lease %v, want a named at 501", l)
	}
	if b := h.serverBound(); b != 900 {
		t.Errorf("bound = %d, want 900 kept", b)
	}
}

// TestTokenBoundForbidden: a controller not granted the bound's Lease (RBAC
// from an older release) elects as without it, and says so once.
func TestTokenBoundForbidden(t *testing.T) {
	h := newHarness(t, withTokenBound)
	forbidden := apierrors.NewForbidden(leasesGVR.GroupResource(), DefaultTokenBoundName, errors.New("RBAC: not granted"))
	h.client.PrependReactor("get", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.GetAction).GetName() == DefaultTokenBoundName {
			return true, nil, forbidden
		}
		return false, nil, nil
	})
	h.create(candidate("a", "1.30.0", "1.30.0"))
	h.reconcile()
	if l := h.serverLease(); l == nil || holderOf(l) != "a" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
		t.Errorf("Lease %v, want a named at 1", l)
	}
	if b := h.serverBound(); b != -1 {
		t.Errorf("bound = %d, want none written", b)
	}
}

// TestTokensAboveAnUnseenHandover: a holder asked to hand over counts its
// successor's term itself. When the Lease is deleted before the controller's
// watch shows that handover (and the successor exits, deleting its
// LeaseCandidate and the token it records), the controller still numbers the
// next term above it: one above the Lease it last saw asking for a handover.
func TestTokensAboveAnUnseenHandover(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.30.0", "1.29.0"))
	h.list(lease(heldBy("a"), transitions(8), preferring("b")))
	h.reconcile()
	h.clearWrites()

	// On the server, unseen: a hands over to b (term 9), b leads, the
	// Lease is deleted, and b exits.
	l := h.serverLease()
	l.Spec.HolderIdentity, l.Spec.PreferredHolder, l.Spec.LeaseTransitions = ptr.To("b"), nil, ptr.To[int32](9)
	if err := h.client.Tracker().Update(leasesGVR, l, testNS); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Tracker().Delete(leasesGVR, testNS, testLease); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Tracker().Delete(candidatesGVR, testNS, "b"); err != nil {
		t.Fatal(err)
	}
	h.sync()
	// a runs on, renewing its LeaseCandidate, until the controller names it
	// again once its own term, unreleased, has run out.
	for range 80 {
		h.renew("a", h.clock.Now())
		if _, err := h.reconcileOnly(); err != nil {
			t.Fatal(err)
		}
		h.sync()
		if l := h.serverLease(); l != nil && holderOf(l) != "" {
			break
		}
		h.step(500 * time.Millisecond)
	}
	got := h.serverLease()
	if got == nil || holderOf(got) != "a" {
		t.Fatalf("Lease %v, want a named again", got)
	}
	if n := ptr.Deref(got.Spec.LeaseTransitions, 0); n <= 9 {
		t.Errorf("leaseTransitions = %d, want above the 9 of the handover the controller never saw", n)
	}
}

// TestTokenNotReusedAfterAnUnansweredNaming: a naming whose answer is lost
// (a timeout after the server applied it) may have started a term under its
// token; a Lease deleted before the controller sees that term is created
// again above it, not with the same token for another term.
func TestTokenNotReusedAfterAnUnansweredNaming(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0"))
	applied := false
	h.client.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if applied {
			return false, nil, nil
		}
		applied = true
		_, _, _ = h.serve(a)
		return true, nil, apierrors.NewTimeoutError("request timed out", 1)
	})
	if _, err := h.reconcileOnly(); err == nil {
		t.Fatal("reconcile succeeded, want the timeout returned")
	}
	l := h.serverLease()
	if l == nil || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
		t.Fatalf("Lease %v, want it applied at 1", l)
	}
	// Deleted before the controller's cache showed it.
	if err := h.client.Tracker().Delete(leasesGVR, testNS, testLease); err != nil {
		t.Fatal(err)
	}
	h.sync()
	h.reconcile()
	if l := h.serverLease(); l == nil || ptr.Deref(l.Spec.LeaseTransitions, 0) != 2 {
		t.Errorf("Lease %v, want it created again at 2, above the unanswered 1", l)
	}
}

// TestTokensAboveTheCandidatesRecords: without a bound (or with one lowered
// by hand), a Lease the controller never saw is still numbered above the
// highest token any of its candidates records on its LeaseCandidate.
func TestTokensAboveTheCandidatesRecords(t *testing.T) {
	h := newHarness(t)
	h.create(candidate("a", "1.30.0", "1.30.0", withAnnotation(access.HighestTokenAnnotation, "7")))
	h.reconcile()
	if l := h.serverLease(); l == nil || ptr.Deref(l.Spec.LeaseTransitions, 0) != 8 {
		t.Errorf("Lease %v, want it created at 8, above the 7 its candidate records", l)
	}
}

// TestTokenBoundIgnoresCountsFromOutside: a Lease whose count was set far
// above anything cle handed out (here the int32 maximum) does not lift the
// bound, which would exhaust every other Lease's tokens after a restart or a
// deletion.
func TestTokenBoundIgnoresCountsFromOutside(t *testing.T) {
	for _, tc := range []struct {
		count, want int32
	}{
		{count: math.MaxInt32, want: 100},
		{count: tokenBoundCeiling + 1, want: 100},
		{count: tokenBoundCeiling, want: tokenBoundCeiling + tokenSlack},
	} {
		h := newHarness(t, withTokenBound)
		if err := h.client.Tracker().Add(boundLease(100)); err != nil {
			t.Fatal(err)
		}
		h.create(candidate("a", "1.30.0", "1.30.0"))
		h.list(lease(heldBy("a"), transitions(tc.count)))
		h.reconcile()
		if b := h.serverBound(); b != tc.want {
			t.Errorf("bound = %d with a Lease at %d, want %d", b, tc.count, tc.want)
		}
	}
}
