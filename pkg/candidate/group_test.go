package candidate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
)

// memberName is the test replica's member Lease.
var memberName = shard.MemberLeaseName(testLease, me)

// startGroup runs a replica of the group testLease declaring four shards,
// whose shard work the journal records, and returns it with the function
// that stops it (and waits for Run).
func (h *harness) startGroup(tweaks ...func(*GroupConfig)) (*Group, func()) {
	h.t.Helper()
	cfg := GroupConfig{
		Config: Config{access: access.NewNative(h.client), Namespace: testNS, LeaseName: testLease, Identity: me,
			BinaryVersion: "1.36.0", Clock: h.clock, ProofOfDeath: NoProofOfDeath},
		Shards: 4,
		OnShardStarted: func(ctx context.Context, s Shard) {
			h.log("start %d@%d", s.Index, s.Token)
			<-ctx.Done()
			h.log("stop %d@%d", s.Index, s.Token)
		},
	}
	for _, f := range tweaks {
		f(&cfg)
	}
	g, err := NewGroup(cfg)
	if err != nil {
		h.t.Fatalf("NewGroup: %v", err)
	}
	_, ctx := ktesting.NewTestContext(h.t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	synctest.Wait()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run: %v", err)
			}
		}
	}
	h.t.Cleanup(stop)
	return g, stop
}

func (h *harness) lease2(name string) *coordinationv1.Lease {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(leasesGVR, testNS, name)
	if err != nil {
		return nil
	}
	return obj.(*coordinationv1.Lease)
}

// grant writes the group Lease as cle-controller does: owners[s] owns shard
// s with token tokens[s]; moving shards are asked back.
func (h *harness) grant(owners []shard.Owner, tokens []int64, moving ...int) {
	h.t.Helper()
	g := shard.Group{Generation: 1, Count: len(owners), Owners: owners, Tokens: tokens, Moving: map[int]string{}}
	for _, s := range moving {
		g.Moving[s] = ""
	}
	annotations, err := g.Annotations()
	if err != nil {
		h.t.Fatal(err)
	}
	lease := h.lease2(testLease)
	if lease == nil {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
			Spec: coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy(shard.StrategyShards))}}
	} else {
		lease = lease.DeepCopy()
	}
	lease.Annotations = annotations
	h.put(lease)
}

// acting is what the member Lease says the replica acts on.
func (h *harness) acting() shard.Acting {
	h.t.Helper()
	a, err := shard.ParseActing(h.lease2(memberName).Annotations[shard.ActingAnnotation])
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

func indexes(m map[int]Shard) []int { return slices.Sorted(maps.Keys(m)) }

// TestGroupActsOnRecordedGrants: a replica joins in epoch 1, records what it
// is granted on its member Lease before it acts on it, lets a shard go only
// once its work returned (saying so with the grant's token), and drops the
// release once the controller has moved the shard.
func TestGroupActsOnRecordedGrants(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		g, _ := h.startGroup()
		member := h.lease2(memberName)
		if member == nil || holder(member) != me || ptr.Deref(member.Spec.LeaseTransitions, 0) != 1 || member.Annotations[shard.GroupAnnotation] != testLease {
			t.Fatalf("member Lease after joining: %+v", member)
		}
		if got := h.candidate(me).Annotations[shard.DeclaredAnnotation]; got != "4" {
			t.Errorf("declared count on the LeaseCandidate = %q, want 4", got)
		}
		mine, other := shard.Owner{Member: me, Epoch: 1}, shard.Owner{Member: "other", Epoch: 1}
		h.grant([]shard.Owner{mine, mine, other, other}, []int64{3, 4, 5, 6})
		if got := indexes(g.Acting()); !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("acting on %v, want [0 1]", got)
		}
		if a := h.acting(); a.Count != 4 || a.Highest != 4 || !maps.Equal(a.Shards, map[int]int64{0: 3, 1: 4}) {
			t.Errorf("member Lease records %+v", a)
		}
		journal := h.entries()
		if !slices.Contains(journal, "start 0@3") || !slices.Contains(journal, "start 1@4") {
			t.Errorf("journal: %v", journal)
		}
		// The member Lease recorded the grants before the work started.
		if i, j := slices.Index(journal, "update Lease "+memberName), slices.Index(journal, "start 0@3"); i < 0 || i > j {
			t.Errorf("shard 0 started before the member Lease recorded it: %v", journal)
		}
		if s, ok := g.Owns(keyOfShard(0, 4)); !ok || s.Token != 3 {
			t.Errorf("Owns(a key of shard 0) = %+v, %v", s, ok)
		}

		h.grant([]shard.Owner{mine, mine, other, other}, []int64{3, 4, 5, 6}, 1)
		if got := indexes(g.Acting()); !slices.Equal(got, []int{0}) {
			t.Errorf("acting on %v after shard 1 was asked back, want [0]", got)
		}
		journal = h.entries()
		if i, j := slices.Index(journal, "stop 1@4"), lastIndex(journal, "update Lease "+memberName); i < 0 || j < i {
			t.Errorf("shard 1 released before its work returned: %v", journal)
		}
		if got := h.lease2(memberName).Annotations[shard.ReleasedAnnotation]; got != "1=4" {
			t.Errorf("released = %q, want 1=4", got)
		}
		if a := h.acting(); !maps.Equal(a.Shards, map[int]int64{0: 3}) {
			t.Errorf("member Lease records %+v after the release", a)
		}

		h.grant([]shard.Owner{mine, other, other, other}, []int64{3, 7, 5, 6})
		h.step(DefaultRetryPeriod)
		if got := h.lease2(memberName).Annotations[shard.ReleasedAnnotation]; got != "" {
			t.Errorf("released = %q once the shard moved, want none", got)
		}
	})
}

// keyOfShard finds a key of shard s of n.
// TestGroupReleasesAShardAskedBackBeforeItStarted: the group Lease grants a
// shard and asks it back before the replica started it (the controller
// rebalanced as another replica joined). The replica lets it go without
// acting on it; otherwise the move would wait for its epoch to end.
func TestGroupReleasesAShardAskedBackBeforeItStarted(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		g, _ := h.startGroup()
		mine, other := shard.Owner{Member: me, Epoch: 1}, shard.Owner{Member: "other", Epoch: 1}
		h.grant([]shard.Owner{mine, mine, mine, other}, []int64{3, 4, 5, 6}, 2)
		if got := indexes(g.Acting()); !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("acting on %v, want [0 1]", got)
		}
		if got := h.lease2(memberName).Annotations[shard.ReleasedAnnotation]; got != "2=5" {
			t.Errorf("released = %q, want 2=5", got)
		}
		if slices.ContainsFunc(h.entries(), func(e string) bool { return strings.HasPrefix(e, "start 2@") }) {
			t.Errorf("shard 2 was started though it was asked back: %v", h.entries())
		}
		if a := h.acting(); !maps.Equal(a.Shards, map[int]int64{0: 3, 1: 4}) {
			t.Errorf("member Lease records %+v", a)
		}
	})
}

// TestGroupKeepsActingOnALeaseWithoutTheGroup: the group Lease is replaced
// by one without the group's annotations (deleted, then applied again from a
// bare copy). It says nothing of the group: the replica goes on acting on
// what the last group Lease granted, as when the Lease is deleted, and takes
// the group in again once cle-controller writes it back.
func TestGroupKeepsActingOnALeaseWithoutTheGroup(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		g, _ := h.startGroup()
		mine, other := shard.Owner{Member: me, Epoch: 1}, shard.Owner{Member: "other", Epoch: 1}
		h.grant([]shard.Owner{mine, mine, other, other}, []int64{3, 4, 5, 6})
		if got := indexes(g.Acting()); !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("acting on %v, want [0 1]", got)
		}
		bare := h.lease2(testLease).DeepCopy()
		bare.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
		h.put(bare)
		h.step(DefaultRetryPeriod)
		if got := indexes(g.Acting()); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("acting on %v once the group Lease carried no group, want [0 1]", got)
		}
		if slices.ContainsFunc(h.entries(), func(e string) bool { return strings.HasPrefix(e, "stop ") }) {
			t.Errorf("a shard stopped: %v", h.entries())
		}
		h.grant([]shard.Owner{mine, other, other, other}, []int64{3, 7, 5, 6})
		if got := indexes(g.Acting()); !slices.Equal(got, []int{0}) {
			t.Errorf("acting on %v once the group was written back without shard 1, want [0]", got)
		}
	})
}

func keyOfShard(s, n int) string {
	for i := 0; ; i++ {
		if key := fmt.Sprintf("ns/object-%d", i); ShardOf(key, n) == s {
			return key
		}
	}
}

// TestGroupStopsAtRenewDeadline: a replica that cannot renew its member
// Lease stops every shard at the renew deadline, its guarded writes are
// refused from then on, and once it renews again it joins a new epoch in
// which nothing of the old grants is acted on.
func TestGroupStopsAtRenewDeadline(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		g, _ := h.startGroup()
		mine := shard.Owner{Member: me, Epoch: 1}
		h.grant([]shard.Owner{mine, mine, mine, mine}, []int64{1, 1, 1, 1})
		if len(g.Acting()) != 4 {
			t.Fatalf("acting on %v, want every shard", indexes(g.Acting()))
		}
		ctx, cancel, ok := g.ShardContext(context.Background(), keyOfShard(2, 4))
		defer cancel()
		if !ok {
			t.Fatal("no context for a shard acted on")
		}
		guarded := &guard{gate: g, next: okTransport{}}
		if err := guardedWrite(ctx, guarded); err != nil {
			t.Fatalf("a write on a shard acted on: %v", err)
		}

		h.failLeaseUpdates.Store(true)
		for range 4 {
			h.step(DefaultRetryPeriod)
		}
		if len(g.Acting()) != 4 {
			t.Fatalf("stopped acting before the renew deadline: %v", indexes(g.Acting()))
		}
		h.step(DefaultRetryPeriod) // the renew deadline, 10s after the last renewal
		if len(g.Acting()) != 0 || ctx.Err() == nil {
			t.Fatalf("still acting on %v at the renew deadline (shard context: %v)", indexes(g.Acting()), ctx.Err())
		}
		if err := guardedWrite(ctx, guarded); !errors.Is(err, ErrNotLeader) {
			t.Errorf("a write after the renew deadline: %v, want ErrNotLeader", err)
		}
		for s := range 4 {
			if !slices.Contains(h.entries(), fmt.Sprintf("stop %d@1", s)) {
				t.Errorf("shard %d's work was not stopped: %v", s, h.entries())
			}
		}

		h.failLeaseUpdates.Store(false)
		h.step(DefaultRetryPeriod)
		if got := ptr.Deref(h.lease2(memberName).Spec.LeaseTransitions, 0); got != 2 {
			t.Errorf("epoch after renewing again = %d, want 2", got)
		}
		if len(g.Acting()) != 0 {
			t.Errorf("acting on %v under grants of the lapsed epoch", indexes(g.Acting()))
		}
	})
}

// TestGroupWaitsForEarlierProcess: a member Lease renewed by an earlier
// process of the same replica is taken only once it has stayed unchanged
// for a lease duration, in the next epoch, carrying the highest token.
func TestGroupWaitsForEarlierProcess(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		now := metav1.NewMicroTime(h.clock.Now())
		h.put(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: memberName, Annotations: map[string]string{
				shard.GroupAnnotation: testLease, shard.ActingAnnotation: "n=4;h=9;0=9"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me), LeaseTransitions: ptr.To[int32](3),
				LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &now, AcquireTime: &now},
		})
		h.startGroup()
		h.step(DefaultLeaseDuration - time.Second)
		if got := ptr.Deref(h.lease2(memberName).Spec.LeaseTransitions, 0); got != 3 {
			t.Fatalf("took the member Lease (epoch %d) before it stayed unchanged for a lease duration", got)
		}
		h.step(time.Second)
		member := h.lease2(memberName)
		if got := ptr.Deref(member.Spec.LeaseTransitions, 0); got != 4 {
			t.Errorf("epoch = %d, want 4", got)
		}
		if a := h.acting(); a.Highest != 9 || len(a.Shards) != 0 {
			t.Errorf("member Lease records %+v, want the highest token 9 and no shards", a)
		}
	})
}

// TestGroupShutdown: on shutdown every shard's work returns, then the
// LeaseCandidate is deleted and the member Lease released.
func TestGroupShutdown(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		g, stop := h.startGroup()
		mine := shard.Owner{Member: me, Epoch: 1}
		h.grant([]shard.Owner{mine, mine, {}, {}}, []int64{1, 2, 0, 0})
		if len(g.Acting()) != 2 {
			t.Fatalf("acting on %v", indexes(g.Acting()))
		}
		stop()
		journal := h.entries()
		last := slices.Index(journal, "delete LeaseCandidate "+me)
		for _, s := range []string{"stop 0@1", "stop 1@2"} {
			if i := slices.Index(journal, s); i < 0 || i > last {
				t.Errorf("%s not before the LeaseCandidate's deletion: %v", s, journal)
			}
		}
		member := h.lease2(memberName)
		if holder := lead.HolderOf(member); holder != "" {
			t.Errorf("member Lease still held by %q", holder)
		}
		if a := h.acting(); len(a.Shards) != 0 || a.Highest != 2 {
			t.Errorf("released member Lease records %+v", a)
		}
	})
}

func TestNewGroupValidates(t *testing.T) {
	base := func() GroupConfig {
		return GroupConfig{Config: Config{Clients: access.Clients{Kube: fakeKube()}, Namespace: "ns", LeaseName: "g", Identity: "r",
			BinaryVersion: "1.36.0"}, Shards: 8, OnShardStarted: func(context.Context, Shard) {}}
	}
	for name, tc := range map[string]struct {
		change func(*GroupConfig)
		want   string
	}{
		"no shards":         {func(c *GroupConfig) { c.Shards = 0 }, "Shards must be 1 to 4096"},
		"too many shards":   {func(c *GroupConfig) { c.Shards = shard.MaxShards + 1 }, "Shards must be 1 to 4096"},
		"no work":           {func(c *GroupConfig) { c.OnShardStarted = nil }, "OnShardStarted is required"},
		"a single strategy": {func(c *GroupConfig) { c.Strategy = coordinationv1.OldestEmulationVersion }, "is not a shard group's"},
		"too long a member": {func(c *GroupConfig) {
			c.LeaseName = string(slices.Repeat([]byte("a"), 200))
			c.Identity = c.LeaseName[:60]
		}, "longer than 253"},
		"and the base checks": {func(c *GroupConfig) { c.BinaryVersion = "dev" }, "BinaryVersion"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := base()
			tc.change(&cfg)
			_, err := NewGroup(cfg)
			if !errors.Is(err, ErrInvalidConfig) || !containsText(err, tc.want) {
				t.Errorf("NewGroup: %v, want ErrInvalidConfig saying %q", err, tc.want)
			}
		})
	}
	if g, err := NewGroup(base()); err != nil || g.c.cfg.Strategy != shard.StrategyShardsOldestEmulationVersion {
		t.Errorf("NewGroup of a valid config: %v, strategy %q", err, g.c.cfg.Strategy)
	}
	if _, err := New(Config{Clients: access.Clients{Kube: fakeKube()}, Namespace: "ns", LeaseName: "l", Identity: "r", BinaryVersion: "1.36.0",
		Strategy: shard.StrategyShards, Callbacks: Callbacks{OnStartedLeading: func(context.Context) {}}}); !containsText(err, "join a group with NewGroup") {
		t.Errorf("New with a group's strategy: %v", err)
	}
}

func containsText(err error, text string) bool {
	return err != nil && strings.Contains(err.Error(), text)
}

// okTransport answers every request with 200.
type okTransport struct{}

func (okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// guardedWrite sends a POST through g on ctx.
func guardedWrite(ctx context.Context, g *guard) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://server/api/v1/namespaces/ns/configmaps", http.NoBody)
	if err != nil {
		return err
	}
	resp, err := g.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

func lastIndex(s []string, v string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return i
		}
	}
	return -1
}
