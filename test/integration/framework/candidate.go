package framework

import (
	"context"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/candidate"
)

// RunCandidate runs a candidate of the library with cfg until the test ends
// or the returned stop is called (safe to call more than once). Stop waits
// for Run to return: a leader has released the Lease and the LeaseCandidate
// is deleted by then. A nil OnStartedLeading leads until leadership ends.
func RunCandidate(t testing.TB, cfg candidate.Config) (stop func()) {
	t.Helper()
	if cfg.Callbacks.OnStartedLeading == nil {
		cfg.Callbacks.OnStartedLeading = func(ctx context.Context) { <-ctx.Done() }
	}
	c, err := candidate.New(cfg)
	if err != nil {
		t.Fatalf("candidate %s: %v", cfg.Identity, err)
	}
	return runUntilStopped(t, "candidate "+cfg.Identity, c.Run)
}

// RunGroup runs a replica of a shard group of the library with cfg until the
// test ends or the returned stop is called (safe to call more than once),
// which waits for Run to return. A nil OnShardStarted acts on each shard
// until the shard stops.
func RunGroup(t testing.TB, cfg candidate.GroupConfig) (g *candidate.Group, stop func()) {
	t.Helper()
	if cfg.OnShardStarted == nil {
		cfg.OnShardStarted = func(ctx context.Context, _ candidate.Shard) { <-ctx.Done() }
	}
	g, err := candidate.NewGroup(cfg)
	if err != nil {
		t.Fatalf("replica %s: %v", cfg.Identity, err)
	}
	return g, runUntilStopped(t, "replica "+cfg.Identity, g.Run)
}

// runUntilStopped runs run on a context of the test's until the test ends or
// stop is called; an error it returns fails the test, naming who.
func runUntilStopped(t testing.TB, who string, run func(context.Context) error) (stop func()) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			t.Errorf("%s: %v", who, err)
		}
	}()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}

// TermBegun reports whether l names holder and holder's process has renewed
// it since it was named: the holder's term has begun, and its token is l's
// leaseTransitions.
func TermBegun(l *coordinationv1.Lease, holder string) bool {
	return ptr.Deref(l.Spec.HolderIdentity, "") == holder && l.Spec.AcquireTime != nil && l.Spec.RenewTime != nil &&
		!l.Spec.RenewTime.Equal(l.Spec.AcquireTime)
}
