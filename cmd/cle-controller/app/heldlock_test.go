package app

import (
	"context"
	"errors"
	"testing"
	"time"

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
