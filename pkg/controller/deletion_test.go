package controller

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// A holder learns that its Lease was deleted only at its next renewal, and
// may not renew at all (paused, cut off), so it may lead on for a lease
// duration after its last renewal. These tests pin when the controller may
// name anybody else after a deletion, however the deletion reaches it.

// renewUnseen makes the holder renew the Lease on the server every 2s for d,
// at term, while the controller's Lease watch delivers nothing.
func (h *harness) renewUnseen(d time.Duration, term int32) {
	h.t.Helper()
	end := h.clock.Now().Add(d)
	for h.clock.Now().Before(end) {
		h.step(2 * time.Second)
		l := h.serverLease()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
		l.Spec.LeaseTransitions = ptr.To(term)
		h.serverWrite(leasesGVR, l)
	}
}

// holderRenewingUnseen returns a harness where a holds the Lease in term 3
// as the controller last saw it, then renews it every 2s until +12s at term
// while the controller's Lease watch delivers nothing; b is a worse
// candidate.
func holderRenewingUnseen(t *testing.T, term int32) *harness {
	t.Helper()
	h := newHarness(t)
	h.join(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"))
	h.create(lease(heldBy("a"), transitions(3)))
	h.reconcile()
	h.clearWrites()
	h.renewUnseen(12*time.Second, term)
	return h
}

// relistDeletesLease deletes the test Lease on the server and delivers the
// deletion as an informer does after its watch expired (410) and it
// relisted: a DeletedFinalStateUnknown carrying the last copy it had cached,
// however old.
func (h *harness) relistDeletesLease() {
	h.t.Helper()
	if err := h.client.Tracker().Delete(leasesGVR, testNS, testLease); err != nil {
		h.t.Fatal(err)
	}
	store := h.inf.Leases[0].GetIndexer()
	cached, ok, _ := store.GetByKey(testNS + "/" + testLease)
	if !ok {
		h.t.Fatal("the Lease is not in the cache")
	}
	_ = store.Delete(cached)
	h.c.onLeaseDelete(cache.DeletedFinalStateUnknown{Key: testNS + "/" + testLease, Obj: cached})
}

// renewCandidates makes every candidate renew at the present.
func (h *harness) renewCandidates() {
	h.t.Helper()
	for _, name := range []string{"a", "b"} {
		h.renew(name, h.clock.Now())
	}
}

// The cached copy a relist delivers with a deletion may be long out of
// date: the holder renewed meanwhile, unseen. The holder's term is counted
// from when the deletion was observed, not from the last renewal the cache
// showed.
func TestDeletionSeenThroughARelistWaitsFromTheDeletion(t *testing.T) {
	// a renews until +12s; the watch shows none of it, nor that the term
	// went to 7 meanwhile.
	h := holderRenewingUnseen(t, 7)
	h.relistDeletesLease()
	deletedAt := h.clock.Now()
	h.renewCandidates() // both run, and answer until the end
	h.runSteps(14 * time.Second)
	if w := h.leaseWrites(); len(w) != 0 {
		t.Fatalf("wrote %v %v after a deletion observed at +%v, within a lease duration of the holder's unseen renewals",
			w, h.clock.Now().Sub(deletedAt), deletedAt.Sub(t0))
	}
	h.step(time.Second)
	h.renewCandidates()
	h.runSteps(2 * time.Second)
	if l := h.serverLease(); l == nil || holderOf(l) == "" {
		t.Fatalf("no holder named %v after the deleted Lease's term ran out: %v", h.clock.Now().Sub(deletedAt), h.writes())
	}
}

// A Lease deleted while held and created again by someone else (kubectl,
// GitOps, a deposed replica: creates carry no precondition) does not end
// the deleted Lease's term: its holder may still lead, so the controller
// names nobody (nor prefers anybody) before that term has run out, and
// elects the best once it has.
func TestRecreatedLeaseWaitsForTheDeletedHoldersTerm(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recreate []leaseOpt
	}{
		{"vacant", nil},
		{"naming a worse candidate", []leaseOpt{heldBy("b"), transitions(9)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.join(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"), candidate("c", "1.29.0", "1.29.0"))
			h.create(lease(heldBy("a"), transitions(3)))
			h.reconcile()
			h.step(2 * time.Second)
			h.renewLease(h.clock.Now()) // a's last renewal, at +2s; its term runs to +17s
			h.step(time.Second)
			h.deleteLease() // +3s, delivered in order
			h.step(time.Second)
			h.clearWrites()
			h.create(lease(tc.recreate...)) // +4s
			h.runSteps(12 * time.Second)
			if w := h.leaseWrites(); len(w) != 0 {
				t.Fatalf("wrote %v by +16s, within the term of a, the deleted Lease's holder (last renewed at +2s): holder %q, preferred %q",
					w, holderOf(w[0].lease), preferredOf(w[0].lease))
			}
			h.step(2 * time.Second)
			h.renew("c", h.clock.Now())
			h.runSteps(time.Second)
			if l := h.serverLease(); holderOf(l) != "c" && preferredOf(l) != "c" {
				t.Errorf("after a's term: holder %q, preferred %q; want c, the best, named or preferred", holderOf(l), preferredOf(l))
			}
		})
	}
}

// A Lease deleted and created again while the controller's watch was down
// reaches it through the relist as an update of the old object: only its
// UID tells. The old holder is departed then, as for a deletion seen through
// a relist.
func TestLeaseRecreatedBehindARelistIsADeletion(t *testing.T) {
	h := holderRenewingUnseen(t, 3)
	if err := h.client.Tracker().Delete(leasesGVR, testNS, testLease); err != nil {
		t.Fatal(err)
	}
	recreated := lease()
	recreated.UID, recreated.ResourceVersion = "uid-recreated", h.nextRV()
	if err := h.client.Tracker().Add(recreated); err != nil {
		t.Fatal(err)
	}
	h.renewCandidates()
	h.sync() // the relist: the new object replaces the old one in the cache
	h.runSteps(14 * time.Second)
	if w := h.leaseWrites(); len(w) != 0 {
		t.Fatalf("wrote %v within a lease duration of the relist that showed the Lease re-created (a renewed until then, unseen)", w)
	}
	h.step(time.Second)
	h.renewCandidates()
	h.runSteps(2 * time.Second)
	if l := h.serverLease(); holderOf(l) != "a" {
		t.Fatalf("after the departed term: holder %q, want a", holderOf(l))
	}
}

// The Lease this controller created, naming a, may be deleted and created
// again by someone else before its cache ever shows it (the watch expired
// meanwhile): the relist then shows a Lease with another UID, vacant, as
// new, with nothing of the Lease the controller wrote. a may have taken and
// renewed its term until just before, so nobody else is named within a
// lease duration of the relist; then the best is.
func TestOwnCreateReplacedBehindARelistIsADeletion(t *testing.T) {
	h := newHarness(t)
	h.join(candidate("a", "1.31.0", "1.31.0"))
	if _, err := h.reconcileOnly(); err != nil { // the watch shows none of what follows
		t.Fatal(err)
	}
	if l := h.serverLease(); holderOf(l) != "a" {
		t.Fatalf("created %v, want a Lease naming a", l)
	}
	// b, better, joins: the candidates' watch works.
	if err := h.client.Tracker().Add(candidate("b", "1.29.0", "1.29.0", renewedAt(h.clock.Now()))); err != nil {
		t.Fatal(err)
	}
	h.syncCandidates()
	h.clearWrites()
	h.renewUnseen(6*time.Second, ptr.Deref(h.serverLease().Spec.LeaseTransitions, 0))
	if err := h.client.Tracker().Delete(leasesGVR, testNS, testLease); err != nil {
		t.Fatal(err)
	}
	recreated := lease() // kubectl apply: vacant
	recreated.UID, recreated.ResourceVersion = "uid-recreated", h.nextRV()
	if err := h.client.Tracker().Add(recreated); err != nil {
		t.Fatal(err)
	}
	h.renewCandidates()
	h.sync() // the relist: the cache shows the re-created Lease, and never showed a's
	relisted := h.clock.Now()
	h.runSteps(14 * time.Second)
	if w := h.leaseWrites(); len(w) != 0 {
		t.Fatalf("wrote %v (holder %q, preferred %q) within a lease duration of the relist that showed the Lease a held re-created",
			w, holderOf(w[0].lease), preferredOf(w[0].lease))
	}
	h.step(time.Second)
	h.renewCandidates()
	h.runSteps(2 * time.Second)
	if l := h.serverLease(); holderOf(l) != "b" {
		t.Fatalf("%v after the relist: holder %q, want b, the best, once a's term has run out", h.clock.Now().Sub(relisted), holderOf(l))
	}
}

// A replica that starts while a Lease exists with no holder and no history
// cannot tell it from a Lease deleted while held just before and created
// again empty (kubectl, GitOps): its candidates were there before it
// started, so it waits for a holder it could not see, as for a Lease that
// does not exist. A Lease released by its holder keeps its history and is
// elected at once.
func TestEmptyLeaseAtStartWaitsForAHolderItCouldNotSee(t *testing.T) {
	unseen := func(o *Options) { o.UnseenHolderWait = 15 * time.Second }
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		wait  bool
	}{
		{"empty", lease(), true},
		{"released", lease(transitions(4)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, unseen)
			h.list(candidate("a", "1.30.0", "1.30.0"), candidate("b", "1.31.0", "1.31.0"), tc.lease)
			h.renewCandidates()
			h.runSteps(10 * time.Second)
			if got := holderOf(h.serverLease()); (got == "") != tc.wait {
				t.Fatalf("after 10s: holder %q; want it named only after the wait for an unseen holder: %v", got, tc.wait)
			}
			h.renewCandidates()
			h.runSteps(6 * time.Second)
			if got := holderOf(h.serverLease()); got != "a" {
				t.Errorf("after 16s: holder %q, want a", got)
			}
		})
	}
}
