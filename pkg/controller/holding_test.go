package controller

import (
	"sync/atomic"
	"testing"
	"time"
)

// A replica whose own lock lapsed (paused past it, cut off) may run a step
// before its elector stops it; it makes no Lease write then, and writes
// again once its lock is renewed.
func TestNoLeaseWriteWhileTheOwnLockHasLapsed(t *testing.T) {
	var holding atomic.Bool
	h := newHarness(t, func(o *Options) { o.Holding = holding.Load })
	h.join(candidate("a", "1.30.0", "1.30.0"))
	if d := h.reconcile(); d != ownLockRecheck {
		t.Errorf("requeue = %v, want %v to look again", d, ownLockRecheck)
	}
	h.expectNoWrites("the replica's own lock lapsed")
	holding.Store(true)
	h.step(time.Second)
	h.reconcile()
	if l := h.serverLease(); holderOf(l) != "a" {
		t.Errorf("once the lock is renewed: holder %q, want a", holderOf(l))
	}
}
