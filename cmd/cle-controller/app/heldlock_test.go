package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/cle-dev/cle/internal/instant"
)

// fakeLock answers the elector's writes with err.
type fakeLock struct {
	resourcelock.Interface
	id  string
	err error
}

func (f *fakeLock) Identity() string { return f.id }
func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}

func TestHeldLock(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	inner := &fakeLock{id: "me"}
	l := &heldLock{Interface: inner, renewDeadline: 10 * time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	if l.holding() {
		t.Fatal("holding before any acquisition")
	}
	if err := l.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	now = now.Add(9 * time.Second)
	if !l.holding() {
		t.Error("not holding 9s after acquiring, within the 10s renew deadline")
	}
	inner.err = errors.New("unavailable")
	if err := l.Update(ctx, mine); err == nil {
		t.Fatal("the failed renewal's error was lost")
	}
	now = now.Add(time.Second)
	if l.holding() {
		t.Error("holding 10s after the last successful write, though a renewal failed since")
	}
	inner.err = nil
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""}); err != nil {
		t.Fatal(err)
	}
	if l.holding() {
		t.Error("a release counted as a renewal")
	}
	if err := l.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if !l.holding() {
		t.Error("not holding right after a successful renewal")
	}
}

// TestHeldLockTellsWhenHeldAgain: the replica is told each time a write
// makes it hold the lock when it did not: an acquisition, and a renewal that
// lands after the holding lapsed while client-go's elector still led (it
// gives up a retry period later than the holding ends). The Leases that
// controller.Options.ElectsBuiltin left alone meanwhile are its to elect
// again, and nothing else would look at them.
func TestHeldLockTellsWhenHeldAgain(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	inner := &fakeLock{id: "me"}
	regained := 0
	l := &heldLock{Interface: inner, renewDeadline: 10 * time.Second, now: func() time.Time { return now },
		regained: func() { regained++ }}
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	step := func(what string, write func() error, want int) {
		t.Helper()
		_ = write()
		if regained != want {
			t.Errorf("%s: told %d times in all, want %d", what, regained, want)
		}
	}
	step("acquired", func() error { return l.Create(ctx, mine) }, 1)
	now = now.Add(2 * time.Second)
	step("renewed while holding", func() error { return l.Update(ctx, mine) }, 1)
	now = now.Add(11 * time.Second)
	if l.holding() {
		t.Fatal("holding 11s after the last renewal")
	}
	step("renewed after the holding lapsed", func() error { return l.Update(ctx, mine) }, 2)
	step("released", func() error { return l.Update(ctx, resourcelock.LeaderElectionRecord{}) }, 2)
	inner.err = errors.New("unavailable")
	step("a failed acquisition", func() error { return l.Update(ctx, mine) }, 2)
	inner.err = nil
	step("acquired again", func() error { return l.Update(ctx, mine) }, 3)
}

// TestHeldLockCountsASuspend: a replica whose machine was suspended past the
// renew deadline is not holding when it wakes, although its monotonic clock
// stood still meanwhile; a wall clock set back does not make it hold longer.
func TestHeldLockCountsASuspend(t *testing.T) {
	wall := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct{ wall, mono time.Duration }{
		"suspended 30s":          {wall: 30 * time.Second, mono: time.Second},
		"wall clock set back 2m": {wall: -2 * time.Minute, mono: 11 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			now := instant.At(wall, time.Hour)
			l := &heldLock{Interface: &fakeLock{id: "me"}, renewDeadline: 10 * time.Second, now: func() time.Time { return now }}
			if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
				t.Fatal(err)
			}
			now = instant.At(wall.Add(tc.wall), time.Hour+tc.mono)
			if l.holding() {
				t.Errorf("holding %s of wall-clock time and %s of monotonic time after the last renewal (renew deadline 10s)", tc.wall, tc.mono)
			}
		})
	}
}

// recordLock serves a record to Get and counts the writes that reach it.
type recordLock struct {
	fakeLock
	record resourcelock.LeaderElectionRecord
	getErr error
	writes int
}

func (r *recordLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if r.getErr != nil {
		return nil, nil, r.getErr
	}
	rec := r.record
	return &rec, []byte(rec.HolderIdentity + "/" + rec.RenewTime.String()), nil
}

func (r *recordLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	r.writes++
	return r.fakeLock.Update(ctx, ler)
}

// TestDeferringLock: cle-controller takes or renews kube-apiserver's
// controller's lock only while it holds its own; it takes it from another
// holder only once its record has stood unchanged, over reads that
// succeeded, for the record's lease duration and the extra, unless that
// holder is a cle-controller replica; it takes a vacant lock, and renews its
// own, at once.
func TestDeferringLock(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	inner := &recordLock{fakeLock: fakeLock{id: "me"}}
	inner.record = resourcelock.LeaderElectionRecord{HolderIdentity: "apiserver-a", LeaseDurationSeconds: 15}
	own := false
	l := &deferringLock{Interface: inner, extra: 15 * time.Second, now: func() time.Time { return now },
		ownHeld: func() bool { return own }, cleHolder: func(h string) bool { return h == "cle-b" }}
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	take := func() error {
		if _, _, err := l.Get(ctx); err != nil {
			return err
		}
		return l.Update(ctx, mine)
	}
	now = now.Add(time.Hour)
	if err := take(); !errors.Is(err, errNotActive) {
		t.Fatalf("took the lock, unrenewed for an hour, without holding its own: %v", err)
	}
	own = true
	inner.record.RenewTime = metav1.NewTime(now) // renewed again
	if err := take(); err == nil {
		t.Fatal("took a lock another holder had just renewed")
	}
	now = now.Add(20 * time.Second)
	if err := take(); err == nil {
		t.Fatal("took the lock 20s after its holder last renewed it; want 30s (its lease duration and the extra)")
	}
	inner.getErr = errors.New("unavailable")
	now = now.Add(5 * time.Second)
	if _, _, err := l.Get(ctx); err == nil {
		t.Fatal("the failed read's error was lost")
	}
	inner.getErr = nil
	now = now.Add(5 * time.Second)
	if err := take(); err == nil {
		t.Fatal("took the lock right after reads failed: the holder gets its whole wait once the lock can be read again")
	}
	now = now.Add(30 * time.Second)
	if err := take(); err != nil {
		t.Fatalf("did not take a lock unchanged for 30s of reads: %v", err)
	}
	inner.record = resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 15}
	if err := take(); err != nil {
		t.Fatalf("did not renew its own lock: %v", err)
	}
	inner.record = resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 15} // released by its holder
	if err := take(); err != nil {
		t.Fatalf("did not take a vacant lock at once: %v", err)
	}
	inner.record = resourcelock.LeaderElectionRecord{HolderIdentity: "cle-b", LeaseDurationSeconds: 15}
	if err := take(); err != nil {
		t.Fatalf("deferred to a cle-controller replica's record: %v", err)
	}
	own = false
	inner.record = resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 15}
	if err := take(); !errors.Is(err, errNotActive) {
		t.Fatalf("renewed the lock without holding its own: %v", err)
	}
	if inner.writes != 4 {
		t.Errorf("%d writes reached the lock, want 4", inner.writes)
	}
}

// TestDeferringLockReleased: a released lock counts as the holder's that
// released it. kube-apiserver releases its lock as it shuts down, and its
// next process takes it back within a couple of seconds; cle-controller
// waits out the record's lease duration and the extra from the release
// first, unless the holder it last saw was a cle-controller replica. A
// released lock whose holder it never saw waits too.
func TestDeferringLockReleased(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	inner := &recordLock{fakeLock: fakeLock{id: "me"}}
	newLock := func() *deferringLock {
		return &deferringLock{Interface: inner, extra: 15 * time.Second, now: func() time.Time { return now },
			ownHeld: func() bool { return true }, cleHolder: func(h string) bool { return h == "cle-b" }}
	}
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	take := func(l *deferringLock) error {
		if _, _, err := l.Get(ctx); err != nil {
			return err
		}
		return l.Update(ctx, mine)
	}
	// What client-go's elector writes when it releases a lock.
	released := func() resourcelock.LeaderElectionRecord {
		return resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: metav1.NewTime(now), RenewTime: metav1.NewTime(now)}
	}

	l := newLock()
	inner.record = resourcelock.LeaderElectionRecord{HolderIdentity: "apiserver-a", LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(now)}
	if err := take(l); err == nil {
		t.Fatal("took a lock kube-apiserver had just renewed")
	}
	now = now.Add(2 * time.Second)
	inner.record = released() // kube-apiserver shuts down
	err := take(l)
	if err == nil {
		t.Fatal("took the lock at once after kube-apiserver released it; its next process takes it back first")
	}
	if !strings.Contains(err.Error(), "released by apiserver-a") {
		t.Errorf("the refusal does not say who released the lock: %v", err)
	}
	now = now.Add(15 * time.Second)
	if err := take(l); err == nil {
		t.Fatal("took a released lock 15s after the release; want 16s (the record's lease duration and the extra)")
	}
	now = now.Add(time.Second)
	if err := take(l); err != nil {
		t.Fatalf("did not take a lock released 16s ago: %v", err)
	}

	l = newLock() // a replica that starts with the lock released
	inner.record = released()
	if err := take(l); err == nil {
		t.Fatal("took at once a released lock whose holder it never saw")
	}
	now = now.Add(16 * time.Second)
	if err := take(l); err != nil {
		t.Fatalf("did not take a lock released 16s ago by a holder it never saw: %v", err)
	}

	l = newLock()
	inner.record = resourcelock.LeaderElectionRecord{HolderIdentity: "cle-b", LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(now)}
	if _, _, err := l.Get(ctx); err != nil {
		t.Fatal(err)
	}
	inner.record = released() // another cle-controller replica steps down
	if err := take(l); err != nil {
		t.Fatalf("did not take at once a lock a cle-controller replica released: %v", err)
	}
	if inner.writes != 3 {
		t.Errorf("%d writes reached the lock, want 3", inner.writes)
	}
}
