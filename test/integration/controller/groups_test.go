package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// groupReplica is a replica of a shard group played by the test, as the
// sharded library is specified to behave (docs/design.md, "What a replica
// does"): it renews its member Lease, records a granted shard there before it
// acts on it, and lets go of a shard it is asked to move, saying so with the
// grant's token.
type groupReplica struct {
	e      *env
	group  string
	name   string
	epoch  int32
	period time.Duration // between its reads of the group Lease
	// leaseSeconds is its member Lease's duration.
	leaseSeconds int32
	cancel       context.CancelFunc
	done         chan struct{}

	mu       sync.Mutex
	last     shard.Group // the last group Lease it saw
	acting   map[int]int64
	released map[int]int64
	highest  int64
	renewed  time.Time // when its last renewal of the member Lease was sent
}

const groupLeaseSeconds = 3

// replicaOpts is how a replica the test plays is built.
type replicaOpts struct {
	count     int
	period    time.Duration // between its reads of the group Lease
	emulation string        // default 1.36.0
	strategy  string        // default shard.StrategyShards
	// leaseSeconds is the member Lease's duration (default
	// groupLeaseSeconds).
	leaseSeconds int32
	// memberFirst writes the member Lease before the LeaseCandidate: the
	// controller learns of the group from a member.
	memberFirst bool
}

func (e *env) startReplica(group, name string, o replicaOpts) *groupReplica {
	e.t.Helper()
	const epoch = 1
	if o.emulation == "" {
		o.emulation = "1.36.0"
	}
	if o.strategy == "" {
		o.strategy = shard.StrategyShards
	}
	if o.leaseSeconds == 0 {
		o.leaseSeconds = groupLeaseSeconds
	}
	count, period := o.count, o.period
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupReplica{e: e, group: group, name: name, epoch: epoch, period: period, leaseSeconds: o.leaseSeconds, cancel: cancel, done: make(chan struct{}),
		acting: map[int]int64{}, released: map[int]int64{}}
	if o.memberFirst {
		if err := r.step(ctx, e.acc.Leases(e.ns), shard.MemberLeaseName(group, name)); err != nil {
			e.t.Fatalf("replica %s: %v", name, err)
		}
	}
	if _, err := e.acc.LeaseCandidates(e.ns).Get(context.Background(), name); apierrors.IsNotFound(err) {
		_, err := e.acc.LeaseCandidates(e.ns).Create(context.Background(), &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{shard.DeclaredAnnotation: fmt.Sprint(count)}},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: group, BinaryVersion: "1.37.0", EmulationVersion: o.emulation,
				Strategy:  coordinationv1.CoordinatedLeaseStrategy(o.strategy),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
			},
		})
		if err != nil {
			e.t.Fatalf("create candidate %s: %v", name, err)
		}
		e.keepRenewing(name, 10*time.Second)
	}
	go r.run(ctx)
	e.t.Cleanup(r.crash)
	return r
}

// crash stops the replica at once, as a killed process: it acts on nothing
// and renews nothing from now on.
func (r *groupReplica) crash() {
	r.mu.Lock()
	r.acting = map[int]int64{}
	r.mu.Unlock()
	r.cancel()
	<-r.done
}

func (r *groupReplica) actingOn() map[int]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.acting)
}

func (r *groupReplica) run(ctx context.Context) {
	defer close(r.done)
	leases := r.e.acc.Leases(r.e.ns)
	member := shard.MemberLeaseName(r.group, r.name)
	for ctx.Err() == nil {
		if err := r.step(ctx, leases, member); err != nil && ctx.Err() == nil {
			r.e.t.Logf("replica %s: %v", r.name, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(r.period):
		}
	}
}

// step renews the member Lease with what the replica acts on, having read
// the group Lease: shards granted and not asked back are recorded, then
// acted on; shards asked back stop, then are released.
func (r *groupReplica) step(ctx context.Context, leases access.LeaseClient, member string) error {
	// A deleted group Lease changes nothing: the replica goes by the last
	// one it saw until the controller writes another.
	r.mu.Lock()
	g := r.last
	r.mu.Unlock()
	// So does one that carries no group (created again by hand).
	switch gl, err := leases.Get(ctx, r.group); {
	case err == nil && shard.HasGroup(gl.Annotations):
		if g, err = shard.ParseGroup(gl.Annotations); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	me := shard.Owner{Member: r.name, Epoch: int64(r.epoch)}
	granted, letGo := shard.Mine(g, me)

	r.mu.Lock()
	r.last = g
	// Stop first: what is asked back, and what is no longer granted.
	for s, t := range r.acting {
		if granted[s] != t || letGo[s] {
			delete(r.acting, s)
		}
	}
	for s := range letGo {
		r.released[s] = granted[s]
	}
	record := maps.Clone(r.acting)
	for s, t := range granted {
		r.highest = max(r.highest, t)
		if !letGo[s] && r.released[s] != t {
			record[s] = t
		}
	}
	acting := shard.Acting{Count: g.Count, Highest: r.highest, Shards: record}.Encode()
	released := shard.EncodeReleased(r.released)
	r.mu.Unlock()

	sent := time.Now()
	now := metav1.NewMicroTime(sent)
	lease, err := leases.Get(ctx, member)
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: member, Annotations: map[string]string{
				shard.GroupAnnotation: r.group, shard.ActingAnnotation: acting, shard.ReleasedAnnotation: released}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.name), LeaseDurationSeconds: ptr.To(r.leaseSeconds),
				LeaseTransitions: ptr.To(r.epoch), AcquireTime: &now, RenewTime: &now},
		})
	case err == nil:
		lease.Annotations[shard.ActingAnnotation] = acting
		lease.Annotations[shard.ReleasedAnnotation] = released
		lease.Spec.HolderIdentity, lease.Spec.LeaseTransitions, lease.Spec.RenewTime = ptr.To(r.name), ptr.To(r.epoch), &now
		_, err = leases.Update(ctx, lease)
	}
	if err != nil {
		return err
	}
	// Recorded: the replica may act on those shards now.
	r.mu.Lock()
	r.renewed = sent
	if ctx.Err() == nil {
		for s, t := range record {
			r.acting[s] = t
		}
	}
	r.mu.Unlock()
	return nil
}

// replicaSet is the replicas of a test, read by its witness as they join.
type replicaSet struct {
	mu   sync.Mutex
	list []*groupReplica
}

func (rs *replicaSet) add(r *groupReplica) *groupReplica {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.list = append(rs.list, r)
	return r
}

func (rs *replicaSet) all() []*groupReplica {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.list)
}

// witness checks, every few milliseconds until stopped, that no shard is
// acted on by two replicas and that no shard's token goes down on the group
// Lease.
type witness struct {
	stop func() []string
}

func watchGroup(e *env, group string, replicas func() []*groupReplica) *witness {
	ctx, cancel := context.WithCancel(context.Background())
	var problems []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		tokens := map[int]int64{}
		for ctx.Err() == nil {
			owner := map[int]string{}
			for _, r := range replicas() {
				for s := range r.actingOn() {
					if other, ok := owner[s]; ok {
						problem := fmt.Sprintf("shard %d acted on by %s and %s", s, other, r.name)
						if !slices.Contains(problems, problem) {
							problems = append(problems, problem)
						}
					}
					owner[s] = r.name
				}
			}
			if gl, err := e.acc.Leases(e.ns).Get(ctx, group); err == nil {
				if g, err := shard.ParseGroup(gl.Annotations); err == nil {
					for s, t := range g.Tokens {
						if t < tokens[s] {
							problems = append(problems, fmt.Sprintf("shard %d's token went from %d to %d", s, tokens[s], t))
						}
						tokens[s] = t
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return &witness{stop: func() []string { cancel(); <-done; return problems }}
}

// waitGroup polls the group Lease until cond holds, and returns the group.
func (e *env) waitGroup(name string, timeout time.Duration, what string, cond func(shard.Group) bool) shard.Group {
	e.t.Helper()
	var got shard.Group
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		lease, err := e.acc.Leases(e.ns).Get(ctx, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		g, err := shard.ParseGroup(lease.Annotations)
		if err != nil {
			lastErr = err
			return false, nil
		}
		got = g
		return cond(g), nil
	})
	if err != nil {
		e.t.Fatalf("group %s: %s not reached within %s (last: %+v, %v): %v", name, what, timeout, got, lastErr, err)
	}
	return got
}

// waitActing polls until every replica acts on what g grants it.
func waitActing(t *testing.T, g shard.Group, replicas []*groupReplica) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		for _, r := range replicas {
			granted, _ := shard.Mine(g, shard.Owner{Member: r.name, Epoch: int64(r.epoch)})
			if !maps.Equal(granted, r.actingOn()) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the replicas do not act on what the group grants them: %v", err)
	}
}

// balancedOver says every shard is owned, none is moving, and the owners
// are exactly members, each with its share (differing by at most one).
func balancedOver(count int, members ...string) func(shard.Group) bool {
	return func(g shard.Group) bool {
		ok, _ := framework.GroupBalanced(g, members...)
		return ok && g.Count == count
	}
}

// TestShardGroup: three replicas join a group of 32 shards one after the
// other and end with 11, 11 and 10; a fourth joins and takes 8, moved only once their owners let go; a
// replica crashes and its shards go to the others once its member Lease has
// expired by the controller's observation. Throughout, no shard is acted on
// by two replicas and no token goes down.
func TestShardGroup(t *testing.T) { forEachMode(t, testShardGroup) }

func testShardGroup(t *testing.T, m apiMode) {
	const group, count = "sharded", 32
	e := startController(t, m, controller.Options{LeaseDuration: groupLeaseSeconds * time.Second})
	var rs replicaSet
	all := rs.all
	// a reads the group Lease seldom: a shard granted away from it before
	// it let go would be acted on twice for a while.
	start := func(name string) *groupReplica {
		period := 200 * time.Millisecond
		if name == "a" {
			period = 1500 * time.Millisecond
		}
		return rs.add(e.startReplica(group, name, replicaOpts{count: count, period: period}))
	}
	w := watchGroup(e, group, all)
	defer func() {
		for _, p := range w.stop() {
			t.Error(p)
		}
	}()

	start("a")
	start("b")
	start("c")
	first := e.waitGroup(group, 20*time.Second, "32 shards over a, b and c", balancedOver(count, "a", "b", "c"))
	waitActing(t, first, all())
	for s, tok := range first.Tokens {
		if tok < 1 {
			t.Errorf("shard %d is owned with token %d", s, tok)
		}
	}
	e.expectEvent(t, group, controller.ReasonShardsAssigned)

	start("d")
	joined := e.waitGroup(group, 20*time.Second, "32 shards over a, b, c and d", balancedOver(count, "a", "b", "c", "d"))
	waitActing(t, joined, all())
	moved := 0
	for s := range count {
		if joined.Owners[s] != first.Owners[s] {
			moved++
			if joined.Owners[s].Member != "d" || joined.Tokens[s] <= first.Tokens[s] {
				t.Errorf("shard %d moved from %v to %v with token %d", s, first.Owners[s], joined.Owners[s], joined.Tokens[s])
			}
		}
	}
	if moved != 8 {
		t.Errorf("%d shards moved when d joined, want the 8 of its share", moved)
	}
	e.expectEvent(t, group, controller.ReasonShardsMoving)

	b := all()[1]
	b.crash()
	after := e.waitGroup(group, 30*time.Second, "32 shards over a, c and d", balancedOver(count, "a", "c", "d"))
	b.mu.Lock()
	renewed := b.renewed
	b.mu.Unlock()
	if since := time.Since(renewed); since < groupLeaseSeconds*time.Second {
		t.Errorf("b's shards were granted again %s after its last renewal, before its member Lease could expire", since)
	}
	for s := range count {
		if joined.Owners[s].Member == "b" && after.Tokens[s] <= joined.Tokens[s] {
			t.Errorf("shard %d of b went to %v with token %d, not above %d", s, after.Owners[s], after.Tokens[s], joined.Tokens[s])
		}
	}
	e.expectEvent(t, group, controller.ReasonShardsFreed)
	if got := promtest.Gauge(e.metrics.Shards.WithLabelValues(e.ns+"/"+group, "owned")); got != count {
		t.Errorf("cle_shards{state=owned} = %v, want %d", got, count)
	}
}

// groupOfTwo is a group of replicas a and b that cle-controller (first) has
// assigned: before is its balanced group Lease, which they act on.
type groupOfTwo struct {
	e      *env
	rs     replicaSet
	o      framework.ControllerOptions
	first  *framework.RunningController
	before shard.Group
}

// startGroupOfTwo starts cle-controller and replicas a and b of group, with
// a witness that fails t if a shard is acted on by both or its token goes
// down, and waits until they act on a balanced assignment.
func startGroupOfTwo(t *testing.T, m apiMode, group string, count int) *groupOfTwo {
	t.Helper()
	ns := m.server.CreateNamespace(t)
	f := &groupOfTwo{o: framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name, Controller: controller.Options{LeaseDuration: groupLeaseSeconds * time.Second}}}
	f.first = m.server.StartController(t, f.o)
	f.e = newEnv(t, m, ns)
	for _, name := range []string{"a", "b"} {
		f.rs.add(f.e.startReplica(group, name, replicaOpts{count: count, period: 200 * time.Millisecond}))
	}
	w := watchGroup(f.e, group, f.rs.all)
	t.Cleanup(func() {
		for _, p := range w.stop() {
			t.Error(p)
		}
	})
	f.before = f.e.waitGroup(group, 20*time.Second, fmt.Sprintf("%d shards over a and b", count), balancedOver(count, "a", "b"))
	waitActing(t, f.before, f.rs.all())
	return f
}

// TestShardGroupLeaseLost: the group Lease is deleted while cle-controller is
// down. The controller started again, with no memory of it, rebuilds the
// group from what the member Leases say their replicas act on: every shard
// stays with the replica acting on it, and the next grants are numbered above
// every token in use.
func TestShardGroupLeaseLost(t *testing.T) { forEachMode(t, testShardGroupLeaseLost) }

func testShardGroupLeaseLost(t *testing.T, m apiMode) {
	const group, count = "lost", 12
	f := startGroupOfTwo(t, m, group, count)
	e, rs, o, before := f.e, &f.rs, f.o, f.before
	highest := int64(0)
	for _, tok := range before.Tokens {
		highest = max(highest, tok)
	}

	f.first.Stop()
	if err := e.client.CoordinationV1().Leases(e.ns).Delete(context.Background(), group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// c joins while the group has no Lease and no controller.
	rs.add(e.startReplica(group, "c", replicaOpts{count: count, period: 200 * time.Millisecond}))
	m.server.StartController(t, o)

	after := e.waitGroup(group, 30*time.Second, "12 shards over a, b and c", balancedOver(count, "a", "b", "c"))
	for s := range count {
		switch o := after.Owners[s]; {
		case o == before.Owners[s]:
			if after.Tokens[s] != before.Tokens[s] {
				t.Errorf("shard %d stayed with %v but its token went from %d to %d", s, o, before.Tokens[s], after.Tokens[s])
			}
		case after.Tokens[s] <= highest:
			t.Errorf("shard %d went to %v with token %d, not above %d, the highest in use before the loss", s, o, after.Tokens[s], highest)
		}
	}
}

// TestShardGroupLeaseEmptied: the group Lease loses the group's annotations,
// first stripped while cle-controller runs, then deleted and created again
// from a bare copy while it is down. The replicas go by the
// last group they read; the controller writes the group back, from memory or
// rebuilt from the member Leases, with every shard still with its owner
// under its token: nothing is granted over a replica that acts on it.
func TestShardGroupLeaseEmptied(t *testing.T) { forEachMode(t, testShardGroupLeaseEmptied) }

func testShardGroupLeaseEmptied(t *testing.T, m apiMode) {
	const group, count = "emptied", 12
	f := startGroupOfTwo(t, m, group, count)
	e, rs, o, before := f.e, &f.rs, f.o, f.before
	unchanged := func(g shard.Group) bool {
		return slices.Equal(g.Owners, before.Owners) && slices.Equal(g.Tokens, before.Tokens)
	}
	leases := e.client.CoordinationV1().Leases(e.ns)
	// While the controller runs: the group's annotations are stripped (a
	// delete and a create would race its writing the group back).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gl, err := leases.Get(context.Background(), group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		gl.Annotations = nil
		_, err = leases.Update(context.Background(), gl, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitGroup(group, 10*time.Second, "the group written back as it was", unchanged)
	waitActing(t, before, rs.all())

	// While it is down: deleted, and created again from a bare copy.
	f.first.Stop()
	if err := leases.Delete(context.Background(), group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: group}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.server.StartController(t, o)
	e.waitGroup(group, 30*time.Second, "the group rebuilt as it was", unchanged)
	waitActing(t, before, rs.all())
}

// TestShardGroupNewStartsAtOnce: a group whose replicas join while
// cle-controller runs is assigned at once, though its member Leases last a
// minute: this controller saw every epoch begin, so nobody granted them
// anything. A controller started afterwards, which finds the group Lease gone
// and the member Leases already there, grants nothing, not even to a replica
// that joins under it, until it has watched them for their lease duration.
func TestShardGroupNewStartsAtOnce(t *testing.T) { forEachMode(t, testShardGroupNewStartsAtOnce) }

func testShardGroupNewStartsAtOnce(t *testing.T, m apiMode) {
	const group, count, leaseSeconds = "fresh", 8, 60
	ns := m.server.CreateNamespace(t)
	o := framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name, Controller: controller.Options{LeaseDuration: groupLeaseSeconds * time.Second}}
	first := m.server.StartController(t, o)
	e := newEnv(t, m, ns)
	for _, name := range []string{"a", "b"} {
		e.startReplica(group, name, replicaOpts{count: count, period: 200 * time.Millisecond, leaseSeconds: leaseSeconds, memberFirst: true})
	}
	// Well within the minute the member Leases last.
	e.waitGroup(group, 20*time.Second, "8 shards over a and b", balancedOver(count, "a", "b"))

	first.Stop()
	if err := e.client.CoordinationV1().Leases(ns).Delete(context.Background(), group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.server.StartController(t, o)
	// c joins, and would take a share at once; but a and b may be recording
	// grants of the lost Lease: nothing is written for their lease duration.
	// Five seconds of it are watched.
	e.startReplica(group, "c", replicaOpts{count: count, period: 200 * time.Millisecond, leaseSeconds: leaseSeconds, memberFirst: true})
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoordinationV1().Leases(ns).Get(ctx, group, metav1.GetOptions{})
		if err == nil {
			return false, errors.New("the group Lease was written before the member Leases were watched for their lease duration")
		}
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	})
	if !wait.Interrupted(err) {
		t.Error(err)
	}
}

// TestShardGroupRollingUpgrade: under cle.dev/ShardsOldestEmulationVersion,
// replicas of a newer emulation version wait as standbys while one of the
// oldest is a member, and take every shard when the last of them leaves.
func TestShardGroupRollingUpgrade(t *testing.T) { forEachMode(t, testShardGroupRollingUpgrade) }

func testShardGroupRollingUpgrade(t *testing.T, m apiMode) {
	const group, count = "upgraded", 8
	e := startController(t, m, controller.Options{LeaseDuration: groupLeaseSeconds * time.Second})
	var rs replicaSet
	w := watchGroup(e, group, rs.all)
	defer func() {
		for _, p := range w.stop() {
			t.Error(p)
		}
	}()
	start := func(name, emulation string) *groupReplica {
		return rs.add(e.startReplica(group, name, replicaOpts{count: count, period: 200 * time.Millisecond, emulation: emulation,
			strategy: shard.StrategyShardsOldestEmulationVersion}))
	}
	oldA, oldB := start("old-a", "1.35.0"), start("old-b", "1.35.0")
	start("new-c", "1.36.0")
	g := e.waitGroup(group, 20*time.Second, "8 shards over the two replicas of 1.35", balancedOver(count, "old-a", "old-b"))
	waitActing(t, g, rs.all())
	e.expectEvent(t, group, controller.ReasonMemberStandby)

	oldA.crash()
	e.waitGroup(group, 20*time.Second, "every shard on the last replica of 1.35", balancedOver(count, "old-b"))
	oldB.crash()
	e.waitGroup(group, 20*time.Second, "every shard on the replica of 1.36", balancedOver(count, "new-c"))
}
