package controller

import (
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
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

// The lock is checked right before the Lease write, after the fencing token
// bound was raised for it: a replica paused while that raise was in flight
// (its answer held until it resumed) finds its lock lapsed and names nobody
// (the simulation's seed 17015 with candidates' relists).
func TestNoLeaseWriteWhenTheOwnLockLapsedDuringTheRaise(t *testing.T) {
	var holding atomic.Bool
	holding.Store(true)
	h := newHarness(t, withTokenBound, func(o *Options) { o.Holding = holding.Load })
	h.join(candidate("a", "1.30.0", "1.30.0"))
	h.client.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(clienttesting.CreateAction); ok {
			if l, ok := o.GetObject().(*coordinationv1.Lease); ok && l.Name == DefaultTokenBoundName {
				holding.Store(false)
			}
		}
		return false, nil, nil
	})
	if d := h.reconcile(); d != ownLockRecheck {
		t.Errorf("requeue = %v, want %v to look again", d, ownLockRecheck)
	}
	if l := h.serverLease(); l != nil && holderOf(l) != "" {
		t.Fatalf("the Lease names %q, written after the replica's own lock lapsed", holderOf(l))
	}
}
