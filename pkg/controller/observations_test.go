package controller

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
)

func TestObserveCandidate(t *testing.T) {
	o := newObservations(DefaultCandidateTTL, DefaultLeaseDuration)
	key := keyOf("a")
	lc := candidate("a", "1.30.0", "1.30.0")

	if !o.observeCandidate(lc, t0, true) {
		t.Error("a new candidate is not reported")
	}
	if r := o.candidates[key]; !r.renewedAt.IsZero() || !r.lastRenewal().Equal(t0) {
		t.Errorf("listed candidate: renewedAt %v lastRenewal %v, want unknown freshness since t0", r.renewedAt, r.lastRenewal())
	}
	if o.observeCandidate(lc, t0.Add(time.Second), false) {
		t.Error("an update without a new renewTime counts as a renewal")
	}

	o.notePing(lc, t0.Add(time.Second), true, false)
	if r := o.candidates[key]; !r.pingedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("pingedAt = %v", r.pingedAt)
	}
	if _, _, ok := o.noteUnanswered(key, lc.UID, t0, t0.Add(6*time.Second), 5*time.Second); ok {
		t.Error("marked unresponsive for another ping")
	}
	if _, verdict, ok := o.noteUnanswered(key, lc.UID, t0.Add(time.Second), t0.Add(6*time.Second), 5*time.Second); !ok ||
		verdict != verdictUnresponsive || !o.candidates[key].unresponsive {
		t.Error("not marked unresponsive")
	}

	renewed := lc.DeepCopy()
	renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour)))
	if !o.observeCandidate(renewed, t0.Add(2*time.Second), false) {
		t.Error("a new renewTime is not a renewal")
	}
	if r := o.candidates[key]; r.unresponsive || !r.pingedAt.IsZero() || !r.renewedAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("after a renewal: %+v, want alive since t0+2s, no ping, responsive", r)
	}

	// A ping based on a stale renewTime is not recorded.
	o.notePing(lc, t0.Add(3*time.Second), true, false)
	if r := o.candidates[key]; !r.pingedAt.IsZero() {
		t.Errorf("ping recorded against an old renewTime: %+v", r)
	}

	recreated := renewed.DeepCopy()
	recreated.UID = "other"
	if !o.observeCandidate(recreated, t0.Add(4*time.Second), false) {
		t.Error("a recreated candidate is not reported")
	}
	if r := o.candidates[key]; r.uid != "other" || !r.firstSeen.Equal(t0.Add(4*time.Second)) {
		t.Errorf("record %+v, want a new one", r)
	}
	if _, _, ok := o.noteUnanswered(key, lc.UID, time.Time{}, t0, 5*time.Second); ok {
		t.Error("marked the old UID unresponsive")
	}

	// A candidate whose handler has not run is judged as just created, and
	// reading it records nothing: only the handlers create records.
	if got := o.candidate(candidate("b", "1.30.0", "1.30.0"), t0); !got.firstSeen.Equal(t0) || !got.renewedAt.Equal(t0) {
		t.Errorf("unseen candidate: %+v, want seen created now", got)
	}
	if n := len(o.snapshot()); n != 1 {
		t.Errorf("snapshot has %d records, want 1: reading must not insert", n)
	}
	o.forgetCandidate(key)
	if n := len(o.snapshot()); n != 0 {
		t.Errorf("snapshot has %d records after forget, want 0", n)
	}
}

func TestCandidateRecordState(t *testing.T) {
	const fresh, timeout = 15 * time.Second, 5 * time.Second
	tests := []struct {
		name         string
		rec          candidateRecord
		now          time.Time
		want         liveness
		wantDeadline time.Time
	}{
		{"never renewed", candidateRecord{firstSeen: t0}, t0, unknown, time.Time{}},
		{"fresh", candidateRecord{renewedAt: t0}, t0.Add(14 * time.Second), alive, t0.Add(fresh)},
		{"freshness lapsed", candidateRecord{renewedAt: t0}, t0.Add(fresh), unknown, time.Time{}},
		{"pinged", candidateRecord{pingedAt: t0}, t0.Add(time.Second), pinged, t0.Add(timeout)},
		{"pinged past the timeout", candidateRecord{pingedAt: t0}, t0.Add(time.Hour), pinged, t0.Add(timeout)},
		{"fresh wins over a ping", candidateRecord{renewedAt: t0, pingedAt: t0}, t0, alive, t0.Add(fresh)},
		{"unresponsive", candidateRecord{renewedAt: t0, unresponsive: true}, t0, unresponsive, time.Time{}},
	}
	for _, tc := range tests {
		got, deadline := tc.rec.state(tc.now, fresh, timeout)
		if got != tc.want || !deadline.Equal(tc.wantDeadline) {
			t.Errorf("%s: state = %v until %v, want %v until %v", tc.name, got, deadline, tc.want, tc.wantDeadline)
		}
	}
}

func TestObserveLease(t *testing.T) {
	o := newObservations(DefaultCandidateTTL, DefaultLeaseDuration)
	l := lease(heldBy("a"))
	record := func() leaseRecord { return o.lease(leaseKey, nil, t0.Add(time.Hour)) }
	if !o.observeLease(l, t0) {
		t.Error("a first observation needs no reconcile")
	}
	if r := record(); !r.observedAt.Equal(t0) || r.holder != "a" || !r.held {
		t.Errorf("first observation %+v, want holder a at t0, held", r)
	}
	o.observeLease(l.DeepCopy(), t0.Add(time.Second))
	if r := record(); !r.observedAt.Equal(t0) {
		t.Errorf("unchanged holder record re-observed at %v", r.observedAt)
	}
	for i, change := range []func(*coordinationv1.Lease){
		func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour))) },
		func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") },
		func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](9) },
		func(l *coordinationv1.Lease) { l.Spec = coordinationv1.LeaseSpec{} },
	} {
		change(l)
		at := t0.Add(time.Duration(i+2) * time.Second)
		o.observeLease(l.DeepCopy(), at)
		if r := record(); !r.observedAt.Equal(at) {
			t.Errorf("change %d observed at %v, want %v", i, r.observedAt, at)
		}
	}
	// Other fields (preferredHolder, strategy) are not the holder's record.
	l.Spec.PreferredHolder = ptr.To("z")
	o.observeLease(l, t0.Add(time.Hour))
	if r := record(); !r.observedAt.Equal(t0.Add(5*time.Second)) || r.maxTransitions != 9 {
		t.Errorf("after a preferredHolder change: observed at %v, max transitions %d; want t0+5s, 9", r.observedAt, r.maxTransitions)
	}

	// A deleted Lease that candidates still reference keeps its history.
	o.leaseDeleted(leaseKey, true, false, t0)
	if r := record(); r.observed || !r.held || r.maxTransitions != 9 {
		t.Errorf("after deletion: %+v, want not observed, held, max transitions 9", r)
	}
	o.leaseDeleted(leaseKey, false, false, t0)
	if _, ok := o.leases[leaseKey]; ok {
		t.Error("a Lease nobody references is kept after its deletion")
	}
}

// TestLeaseRenewalOfSettledLease pins which Lease changes wake the
// controller: a renewal of a Lease whose election is settled does not; any
// other change, and the controller's own write arriving, do.
func TestLeaseRenewalOfSettledLease(t *testing.T) {
	o := newObservations(DefaultCandidateTTL, DefaultLeaseDuration)
	l := lease(heldBy("a"))
	o.observeLease(l, t0)
	renew := func(at time.Duration) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(at)))
		l.ResourceVersion = at.String()
		return l
	}
	if !o.observeLease(renew(time.Second), t0.Add(time.Second)) {
		t.Error("a renewal of a Lease not yet settled needs no reconcile")
	}
	o.noteSettled(leaseKey, l)
	if o.observeLease(renew(2*time.Second), t0.Add(2*time.Second)) {
		t.Error("a renewal of a settled Lease asks for a reconcile")
	}
	if r := o.lease(leaseKey, nil, t0.Add(3*time.Second)); !r.observedAt.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("the renewal was not recorded: observed at %v", r.observedAt)
	}
	preferred := renew(3 * time.Second)
	preferred.Spec.PreferredHolder = ptr.To("b")
	if !o.observeLease(preferred, t0.Add(3*time.Second)) {
		t.Error("a preferredHolder change of a settled Lease needs no reconcile")
	}
	o.noteSettled(leaseKey, l)
	replaced := l
	own := renew(4 * time.Second)
	o.noteWritten(leaseKey, replaced, own, t0.Add(4*time.Second))
	if r := o.lease(leaseKey, l, t0.Add(4*time.Second)); !r.writing || r.replaced != replaced.ResourceVersion {
		t.Errorf("pending write over %q (%v), want over %q", r.replaced, r.writing, replaced.ResourceVersion)
	}
	if !o.observeLease(own, t0.Add(4*time.Second)) {
		t.Error("the controller's own write arriving needs no reconcile")
	}
	if r := o.lease(leaseKey, l, t0.Add(4*time.Second)); r.writing {
		t.Error("write still pending after it arrived")
	}

	// The write's own event may arrive before its response: the write is
	// then not pending at all once noted, as the cache is past what it
	// replaced.
	o.noteSettled(leaseKey, own)
	next := renew(5 * time.Second)
	o.observeLease(next, t0.Add(5*time.Second))
	o.noteWritten(leaseKey, own, next, t0.Add(5*time.Second))
	if r := o.lease(leaseKey, next, t0.Add(5*time.Second)); !r.writing || r.replaced != own.ResourceVersion {
		t.Errorf("pending write over %q, want over %q: reconcile compares it with the cache", r.replaced, own.ResourceVersion)
	}
}

func TestEventDeduper(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	d := newEventDeduper(rec)
	other := leaseKey
	other.Name = "other"

	d.emit(leaseKey, nil, "Warning", "R", "A", "note %d", 1) // no Lease yet: still emitted
	d.emit(leaseKey, lease(), "Warning", "R", "A", "note %d", 1)
	d.emit(other, nil, "Warning", "R", "A", "note %d", 1)
	d.emitFor(leaseKey, "t1", nil, nil, "Warning", "R", "A", "note %d", 1)
	d.emitFor(leaseKey, "t2", nil, nil, "Warning", "R", "A", "note %d", 1)
	d.emitFor(leaseKey, "t2", nil, nil, "Warning", "R", "A", "note %d", 1)
	d.emit(leaseKey, nil, "Warning", "R", "A", "note %d", 2)
	d.forget(leaseKey)
	d.emit(leaseKey, nil, "Warning", "R", "A", "note %d", 2)

	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	want := []string{"Warning R note 1", "Warning R note 1", "Warning R note 1", "Warning R note 1", "Warning R note 2", "Warning R note 2"}
	if len(got) != len(want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// TestPingTimedOut is the one rule for a ping gone unanswered, which decide
// (judging the candidate) and the records (marking it) both apply.
func TestPingTimedOut(t *testing.T) {
	const timeout = 5 * time.Second
	now := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name   string
		rec    candidateRecord
		want   candidateRecord
		reason pingVerdict
	}{{
		name:   "the ping reached it: unresponsive until it writes again",
		rec:    candidateRecord{pingedAt: now.Add(-6 * time.Second), pingSent: true},
		want:   candidateRecord{unresponsive: true},
		reason: verdictUnresponsive,
	}, {
		name:   "no ping reached it, the API failed: passed over until a ping timeout past the ping's own",
		rec:    candidateRecord{pingedAt: now.Add(-6 * time.Second)},
		want:   candidateRecord{unreachable: unreachable{until: now.Add(4 * time.Second)}},
		reason: verdictUnreachable,
	}, {
		name:   "no ping reached it, refused for the candidate: backed off from now, doubling",
		rec:    candidateRecord{pingedAt: now.Add(-6 * time.Second), pingRefused: true, unreachable: unreachable{backoff: 20 * time.Second}},
		want:   candidateRecord{unreachable: unreachable{until: now.Add(40 * time.Second), backoff: 40 * time.Second}},
		reason: verdictUnreachable,
	}, {
		name:   "no ping reached it and the first attempt is too old to say anything: asked again now",
		rec:    candidateRecord{pingedAt: now.Add(-11 * time.Second)},
		want:   candidateRecord{unreachable: unreachable{until: now.Add(-time.Second)}},
		reason: verdictAskAgain,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.rec
			got, reason := tc.rec.pingTimedOut(now, timeout)
			if reason != tc.reason {
				t.Errorf("verdict = %v, want %v", reason, tc.reason)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(candidateRecord{}, unreachable{})); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			if tc.rec != before {
				t.Error("the record given was changed")
			}
		})
	}
}

// TestLeaseRecordTransitions follows a Lease record through the functions
// that make each next record: each returns a new record and leaves the one
// it was given as it was.
func TestLeaseRecordTransitions(t *testing.T) {
	const def = 15 * time.Second
	l := lease(heldBy("a"), transitions(3), durationSeconds(40))
	var r leaseRecord
	r = r.joined(nil, t0, false, def)
	r, step := r.leaseSeen(l, t0.Add(time.Second), def)
	if !step || !r.held || r.holder != "a" || r.maxTransitions != 3 || r.longestDuration != 40*time.Second {
		t.Fatalf("after the Lease was seen: step %v, %+v", step, r)
	}
	seen := r
	gone := r.leaseGone(false, t0.Add(2*time.Second), def)
	if !reflect.DeepEqual(seen, r) {
		t.Error("leaseGone changed the record it was given")
	}
	if gone.observed || gone.departed != (departedHolder{holder: "a", until: t0.Add(41 * time.Second)}) {
		t.Errorf("deleted in order: departed %+v, want a until its last renewal seen plus its 40s", gone.departed)
	}
	relisted := r.leaseGone(true, t0.Add(10*time.Second), def)
	if relisted.departed != (departedHolder{holder: "a", until: t0.Add(50 * time.Second)}) {
		t.Errorf("deleted through a relist: departed %+v, want a until 40s after the deletion was seen", relisted.departed)
	}
	recreated := lease(heldBy(""))
	recreated.UID = "another"
	behind, _ := r.leaseSeen(recreated, t0.Add(10*time.Second), def)
	if behind.departed != relisted.departed || behind.holder != "" {
		t.Errorf("re-created behind a relist: departed %+v holder %q, want the old holder departed as through a relist", behind.departed, behind.holder)
	}
	// The process that made the last renewal, when the renewal said so:
	// kept through a deletion in order, not through a relist, whose copy
	// may be older than another process's renewal.
	process := proof.Process{Instance: "0123456789abcdef0123456789abcdef", Pod: "ns/a-0", Container: "app"}
	stamped := lease(heldBy("a"), transitions(3), durationSeconds(40))
	stamped.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(time.Second)))
	proof.Stamp(stamped, process)
	withProcess, _ := r.leaseSeen(stamped, t0.Add(3*time.Second), def)
	if got := proof.ProcessOf(withProcess.stamp, withProcess.holder, withProcess.renewTime); got != process {
		t.Fatalf("a stamped renewal seen: process %+v, want %+v", got, process)
	}
	if got := withProcess.leaseGone(false, t0.Add(4*time.Second), def).departed.process; got != process {
		t.Errorf("deleted in order: departed process %+v, want %+v", got, process)
	}
	if got := withProcess.leaseGone(true, t0.Add(4*time.Second), def).departed.process; got.Known() {
		t.Errorf("deleted through a relist: departed process %+v, want none", got)
	}
	if left := gone.candidatesGone(); !reflect.DeepEqual(left.leaseHistory, gone.leaseHistory) || left.observed || !left.firstJoin.IsZero() {
		t.Errorf("after the last candidate left: %+v, want only the history", left)
	}
}

// TestRenewGap: the holder's cadence is how often it renews, not how close
// together its renewals happen to reach the controller: on a slow server a
// renewal held up and the next one on time arrive a moment apart, and
// taking that moment for the cadence would make a live holder look late
// (and pinged) long before its Lease runs out.
func TestRenewGap(t *testing.T) {
	const def = 15 * time.Second
	renewal := func(at time.Time) *coordinationv1.Lease {
		l := lease(heldBy("a"), durationSeconds(20))
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at))
		return l
	}
	var r leaseRecord
	r = r.joined(nil, t0, false, def)
	// Renewals every 15s by the holder's clock; the second one reaches the
	// controller 8s late, the third on time.
	r, _ = r.leaseSeen(renewal(t0), t0.Add(100*time.Millisecond), def)
	r, _ = r.leaseSeen(renewal(t0.Add(15*time.Second)), t0.Add(23*time.Second), def)
	r, _ = r.leaseSeen(renewal(t0.Add(30*time.Second)), t0.Add(30*time.Second+100*time.Millisecond), def)
	if r.renewGap != 15*time.Second {
		t.Errorf("renewGap = %s, want the holder's 15s", r.renewGap)
	}
	// Renewals seen further apart than the holder made them (the watch
	// stalled, or a renewal failed): the gap seen.
	r, _ = r.leaseSeen(renewal(t0.Add(45*time.Second)), t0.Add(70*time.Second), def)
	if r.renewGap != 39900*time.Millisecond {
		t.Errorf("renewGap = %s, want the 39.9s between the renewals seen", r.renewGap)
	}
}
