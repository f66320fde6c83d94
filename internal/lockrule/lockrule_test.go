package lockrule

import (
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestRecordOf(t *testing.T) {
	lease := func(holder, preferred string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To[int32](15),
			LeaseTransitions:     ptr.To[int32](3),
			RenewTime:            ptr.To(metav1.NewMicroTime(time.Unix(1000, 0))),
		}}
		if holder != "-" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		if preferred != "" {
			l.Spec.PreferredHolder = ptr.To(preferred)
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		// term and leading: the elector leads in the term of token term.
		term              int32
		leading           bool
		holder, preferred string
		seconds           int
	}{
		{"names me", lease("me", ""), 0, false, "me", "", 15},
		{"names me, I am preferred", lease("me", "me"), 0, false, "me", "", 15},
		{"names me, another preferred", lease("me", "better"), 0, false, "better", "better", Forever},
		{"names me, another preferred, I lead in its term", lease("me", "better"), 3, true, "me", "better", 15},
		{"names me, another preferred, I lead in an earlier term", lease("me", "better"), 2, true, "better", "better", Forever},
		{"names me in a term I do not lead", lease("me", ""), 2, true, "me", "", 15},
		{"names another", lease("other", ""), 0, false, "other", "", Forever},
		{"names another, I lead in its term", lease("other", "better"), 3, true, "other", "better", Forever},
		{"names another, I am preferred", lease("other", "me"), 0, false, "other", "", Forever},
		{"vacant", lease("", ""), 0, false, NoHolder, "", Forever},
		{"no holder", lease("-", ""), 0, false, NoHolder, "", Forever},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RecordOf(tc.lease, "me", tc.term, tc.leading)
			if r.HolderIdentity != tc.holder || r.PreferredHolder != tc.preferred || r.LeaseDurationSeconds != tc.seconds {
				t.Errorf("RecordOf = holder %q preferred %q leaseDurationSeconds %d; want %q, %q, %d",
					r.HolderIdentity, r.PreferredHolder, r.LeaseDurationSeconds, tc.holder, tc.preferred, tc.seconds)
			}
			if r.LeaderTransitions != 3 || !r.RenewTime.Equal(&metav1.Time{Time: time.Unix(1000, 0)}) {
				t.Errorf("RecordOf lost transitions or renewTime: %+v", r)
			}
		})
	}
	if r := RecordOf(nil, "me", 3, true); r.HolderIdentity != NoHolder || r.LeaseDurationSeconds != Forever {
		t.Errorf("RecordOf(nil) = holder %q leaseDurationSeconds %d; want %q, Forever", r.HolderIdentity, r.LeaseDurationSeconds, NoHolder)
	}
}

func TestReleaseFor(t *testing.T) {
	for _, tc := range []struct {
		afterWork, sound, tracked bool
		want                      Release
	}{
		{true, true, false, HandOverNow},
		{true, true, true, HandOverNow},
		{true, false, false, LeaveToExpire},
		{true, false, true, HandOverOnceWorkReturned},
		{false, true, false, LeaveToExpire},
		{false, true, true, HandOverOnceWorkReturned},
		{false, false, true, HandOverOnceWorkReturned},
		{false, false, false, LeaveToExpire},
	} {
		if got := ReleaseFor(tc.afterWork, tc.sound, tc.tracked); got != tc.want {
			t.Errorf("ReleaseFor(afterWork %v, sound %v, tracked %v) = %d, want %d", tc.afterWork, tc.sound, tc.tracked, got, tc.want)
		}
	}
}

func TestTimingCheck(t *testing.T) {
	newCheck := func() *TimingCheck {
		return &TimingCheck{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Margin: time.Second}
	}
	if got := newCheck().ElectorRetryPeriod(); got != 1295*time.Millisecond {
		t.Fatalf("ElectorRetryPeriod = %s, want 1.295s", got)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// reads at the given offsets from t0, each returning at once, then a
	// renewal 1ms after the last read.
	check := func(c *TimingCheck, reads ...time.Duration) error {
		for _, at := range reads {
			c.ObserveGet(t0.Add(at))
			c.ReadReturned(t0.Add(at))
		}
		now := t0.Add(reads[len(reads)-1] + time.Millisecond)
		err, _ := c.Check(15, now.Add(10*time.Second), true, now)
		return err
	}

	if err := check(newCheck(), 0); !errors.Is(err, ErrRetryPeriodUnconfirmed) {
		t.Errorf("first read: %v, want ErrRetryPeriodUnconfirmed", err)
	}
	if err := check(newCheck(), 0, 2849*time.Millisecond); err != nil {
		t.Errorf("a gap of 2.2 x 1.295s: %v, want accepted", err)
	}
	if err := check(newCheck(), 0, 4*time.Second); !errors.Is(err, ErrRetryPeriodUnconfirmed) {
		t.Errorf("one gap of 4s: %v, want ErrRetryPeriodUnconfirmed", err)
	}
	c := newCheck()
	if err := check(c, 0, 7*time.Second); !errors.Is(err, ErrTimingMismatch) {
		t.Errorf("a gap of 7s: %v, want ErrTimingMismatch", err)
	}
	if err, refusedNow := c.Check(15, time.Time{}, false, t0.Add(time.Minute)); !errors.Is(err, ErrTimingMismatch) || refusedNow {
		t.Errorf("after a mismatch: %v, refusedNow %v; want the mismatch, reported once", err, refusedNow)
	}
	// A gap within the limit proves the RetryPeriod: the long one was a
	// stop of the process.
	if err := check(c, 9*time.Second); err != nil {
		t.Errorf("a gap of 2s after one of 7s: %v, want accepted", err)
	}
	// A renewal let through (it may take up to the renew deadline) makes
	// the gap it falls in uncounted.
	c = newCheck()
	c.ObserveGet(t0)
	c.ReadReturned(t0)
	c.minGap = 2 * time.Second // proved by earlier gaps
	if err, _ := c.Check(15, time.Time{}, false, t0); err != nil {
		t.Fatalf("proved: %v", err)
	}
	c.Renewed(false, t0.Add(9*time.Second)) // the renewal failed after 9s
	c.minGap, c.maxGap = 0, 0
	if err := check(c, 9*time.Second+2*time.Second); !errors.Is(err, ErrRetryPeriodUnconfirmed) {
		t.Errorf("a gap spanning a renewal: %v, want it uncounted (unconfirmed)", err)
	}
	if c.maxGap != 0 {
		t.Errorf("a gap spanning a renewal was counted: max %s", c.maxGap)
	}
	if err, _ := newCheck().Check(10, time.Time{}, false, t0); !errors.Is(err, ErrTimingMismatch) {
		t.Errorf("LeaseDurationSeconds 10: %v, want ErrTimingMismatch", err)
	}
	if err, _ := newCheck().Check(15, t0.Add(11*time.Second), true, t0); !errors.Is(err, ErrTimingMismatch) {
		t.Errorf("a deadline 11s away: %v, want ErrTimingMismatch", err)
	}

	c = newCheck()
	if c.SoundRelease(t0) {
		t.Error("a release before the elector ever renewed is sound")
	}
	if first := c.Renewed(true, t0); !first {
		t.Error("the first success is not reported first")
	}
	if first := c.Renewed(false, t0.Add(time.Second)); first {
		t.Error("a failure is reported as the first success")
	}
	if first := c.Renewed(true, t0.Add(-time.Second)); first {
		t.Error("a second success is reported first")
	}
	c.Renewed(true, t0)
	// A release within RenewDeadline of the last success comes from a
	// cancelled context (client-go gives up on its own RetryPeriod +
	// RenewDeadline after it at the earliest), failed renewals since or
	// not; one later may come from the elector giving up.
	if !c.SoundRelease(t0.Add(c.RenewDeadline - time.Millisecond)) {
		t.Error("a release within RenewDeadline of the last success, after a failed renewal, is not sound")
	}
	if c.SoundRelease(t0.Add(c.RenewDeadline)) {
		t.Error("a release RenewDeadline after the last success is sound")
	}
	c.Renewed(true, t0.Add(11*time.Second))
	if !c.SoundRelease(t0.Add(20 * time.Second)) {
		t.Error("a release 9s after a later success is not sound")
	}
	if err := check(c, 0, 30*time.Second); err != nil {
		t.Errorf("after the acquisition, gaps do not count: %v", err)
	}
}

func TestWakesStandBy(t *testing.T) {
	for _, tc := range []struct {
		holder, reported string
		want             bool
	}{
		{"other", "other", false},
		{"me", "other", true},
		{"next", "other", true},
		{NoHolder, "other", false},
		{"next", NoHolder, true},
		{NoHolder, NoHolder, false},
	} {
		if got := WakesStandBy(tc.holder, tc.reported); got != tc.want {
			t.Errorf("WakesStandBy(%q, %q) = %v, want %v", tc.holder, tc.reported, got, tc.want)
		}
	}
}

// An elector stands by only before it acquired the Lease, behind another
// holder, once a gap has proved its RetryPeriod.
func TestStandsBy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &TimingCheck{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Margin: time.Second}
	if c.StandsBy("other", "me") {
		t.Error("stands by before a gap proved its RetryPeriod")
	}
	c.ObserveGet(t0)
	c.ReadReturned(t0)
	c.ObserveGet(t0.Add(10 * time.Second))
	if c.StandsBy("other", "me") {
		t.Error("stands by after a gap longer than the limit")
	}
	c.ReadReturned(t0.Add(10 * time.Second))
	c.ObserveGet(t0.Add(12 * time.Second))
	for _, tc := range []struct {
		reported string
		want     bool
	}{{"other", true}, {NoHolder, true}, {"me", false}, {"", false}} {
		if got := c.StandsBy(tc.reported, "me"); got != tc.want {
			t.Errorf("StandsBy(%q) with a proved RetryPeriod = %v, want %v", tc.reported, got, tc.want)
		}
	}
	c.Renewed(true, t0.Add(13*time.Second))
	if c.StandsBy("other", "me") {
		t.Error("stands by once it acquired the Lease")
	}
}
