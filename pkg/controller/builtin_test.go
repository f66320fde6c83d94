package controller

import (
	"sync/atomic"
	"testing"

	"github.com/cle-dev/cle/pkg/strategy"
)

// Beside kube-apiserver's election controller (native mode, the gate on),
// a replica that does not hold the lock they share leaves the Leases of
// OldestEmulationVersion alone and elects those of cle's strategies; once it
// holds that lock too, it elects the others without waiting for an event.
func TestBuiltinStrategiesLeftToKubeAPIServer(t *testing.T) {
	var shared atomic.Bool
	h := newHarness(t, func(o *Options) { o.ElectsBuiltin = shared.Load })
	h.create(
		candidate("old", "1.30.0", "1.30.0"), candidate("mid", "1.31.0", "1.31.0"),
		cleOEV(candidate("c-old", "1.30.0", "1.30.0", forLease("cle"))), cleOEV(candidate("c-mid", "1.31.0", "1.31.0", forLease("cle"))),
	)
	h.reconcile()
	if _, err := h.c.reconcile(h.ctx, keyOf("cle")); err != nil {
		t.Fatal(err)
	}
	h.sync()
	for _, w := range h.writes() {
		if w.name != "cle" || w.verb != "create" {
			t.Errorf("%s %s %s while kube-apiserver's controller elects OldestEmulationVersion; want only the create of Lease cle", w.verb, w.resource, w.name)
		}
	}
	if l := h.serverLeaseNamed("cle"); l == nil || holderOf(l) != "c-old" {
		t.Fatalf("Lease cle of %s: %v, want created for c-old", strategy.OldestEmulationVersionByCleName, l)
	}
	if l := h.serverLease(); l != nil {
		t.Fatalf("Lease %s created by cle while kube-apiserver's controller elects it: %v", testLease, l)
	}
	if got := h.metric("cle_lease_state", "namespace", testNS, "lease", testLease, "state", string(leaseUnmanaged)); got != 1 {
		t.Errorf("cle_lease_state of %s unmanaged = %v, want 1", testLease, got)
	}

	h.clearWrites()
	for h.c.queue.Len() > 0 { // what the events queued
		key, _ := h.c.queue.Get()
		h.c.queue.Done(key)
	}
	shared.Store(true)
	h.c.Reconsider()
	if n := h.c.queue.Len(); n != 2 {
		t.Errorf("Reconsider queued %d Leases, want both", n)
	}
	h.reconcile()
	if l := h.serverLease(); l == nil || holderOf(l) != "old" {
		t.Fatalf("Lease %s: %v, want created for old once this replica holds the shared lock", testLease, l)
	}
}
