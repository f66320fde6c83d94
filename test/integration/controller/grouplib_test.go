package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// shardWitness is told by every replica's shard work when it starts and when
// it returns, and records every shard acted on by two replicas at once and
// every grant whose token is not above the shard's earlier ones.
type shardWitness struct {
	mu       sync.Mutex
	active   map[int]string
	tokens   map[int]int64
	problems []string
}

func newShardWitness() *shardWitness {
	return &shardWitness{active: map[int]string{}, tokens: map[int]int64{}}
}

// work is OnShardStarted for replica: it acts on s until ctx ends.
func (w *shardWitness) work(replica string) func(context.Context, candidate.Shard) {
	return func(ctx context.Context, s candidate.Shard) {
		w.mu.Lock()
		if other, ok := w.active[s.Index]; ok {
			w.problems = append(w.problems, fmt.Sprintf("shard %d started by %s while %s acts on it", s.Index, replica, other))
		}
		if s.Token <= w.tokens[s.Index] {
			w.problems = append(w.problems, fmt.Sprintf("shard %d started by %s with token %d, not above %d", s.Index, replica, s.Token, w.tokens[s.Index]))
		}
		if tok, ok := candidate.ShardFrom(ctx); !ok || tok != s {
			w.problems = append(w.problems, fmt.Sprintf("shard %d's context says %+v, %v", s.Index, tok, ok))
		}
		w.active[s.Index], w.tokens[s.Index] = replica, max(w.tokens[s.Index], s.Token)
		w.mu.Unlock()
		<-ctx.Done()
		// Work takes a while to wind down: the shard may go to another
		// replica only once it has.
		time.Sleep(50 * time.Millisecond)
		w.mu.Lock()
		if w.active[s.Index] == replica {
			delete(w.active, s.Index)
		}
		w.mu.Unlock()
	}
}

func (w *shardWitness) report(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.problems {
		t.Error(p)
	}
}

// libReplica is a replica of a group run by the library.
type libReplica struct {
	name string
	g    *candidate.Group
	stop func()
}

// runGroupReplica runs name as a replica of group with the library until
// the test ends or stop is called; leave says whether it deletes its
// candidate and releases its member Lease when stopped (false: as a crash
// looks to the others).
func (e *env) runGroupReplica(group, name string, count int, w *shardWitness, leave bool) *libReplica {
	e.t.Helper()
	clients, err := access.NewClients(e.mode.server.Config())
	if err != nil {
		e.t.Fatal(err)
	}
	g, stop := framework.RunGroup(e.t, candidate.GroupConfig{
		Config: candidate.Config{
			Clients: clients, APIMode: e.mode.name, Namespace: e.ns, LeaseName: group, Identity: name,
			BinaryVersion: "1.36.0", Strategy: shard.StrategyShards,
			LeaseDuration: groupLeaseSeconds * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
			ReleaseOnCancel: ptr.To(leave), DeleteCandidateOnExit: ptr.To(leave),
		},
		Shards:         count,
		OnShardStarted: w.work(name),
	})
	return &libReplica{name: name, g: g, stop: stop}
}

// waitLibActing polls until every replica acts on exactly what g grants it.
func waitLibActing(t *testing.T, g shard.Group, replicas ...*libReplica) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		for _, r := range replicas {
			acting := r.g.Acting()
			want := 0
			for s, o := range g.Owners {
				if o.Member != r.name {
					continue
				}
				want++
				if got, ok := acting[s]; !ok || got.Token != g.Tokens[s] || got.Count != g.Count {
					last = fmt.Sprintf("%s acts on shard %d as %+v (%v), granted token %d", r.name, s, got, ok, g.Tokens[s])
					return false, nil
				}
			}
			if len(acting) != want {
				last = fmt.Sprintf("%s acts on %d shards, granted %d", r.name, len(acting), want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the replicas do not act on what the group grants them (%s): %v", last, err)
	}
}

// TestShardGroupLibrary runs replicas of the library (candidate.NewGroup)
// against cle-controller: they join and share 32 shards, a fourth joins and
// takes its share, one leaves cleanly and one crashes, and the crashed one
// comes back in place in a new epoch. Every shard's work is watched: no
// shard is ever acted on by two replicas, and every grant's token is above
// the shard's earlier ones. Writes through the group's guarded clients pass
// only on the context of a shard the replica acts on.
func TestShardGroupLibrary(t *testing.T) { forEachMode(t, testShardGroupLibrary) }

func testShardGroupLibrary(t *testing.T, m apiMode) {
	const group, count = "library", 32
	e := startController(t, m, controller.Options{LeaseDuration: groupLeaseSeconds * time.Second})
	w := newShardWitness()
	defer w.report(t)

	a := e.runGroupReplica(group, "a", count, w, true)
	b := e.runGroupReplica(group, "b", count, w, false)
	c := e.runGroupReplica(group, "c", count, w, true)
	first := e.waitGroup(group, 30*time.Second, "32 shards over a, b and c", balancedOver(count, "a", "b", "c"))
	waitLibActing(t, first, a, b, c)

	d := e.runGroupReplica(group, "d", count, w, true)
	joined := e.waitGroup(group, 30*time.Second, "32 shards over a, b, c and d", balancedOver(count, "a", "b", "c", "d"))
	waitLibActing(t, joined, a, b, c, d)
	moved := 0
	for s := range count {
		if joined.Owners[s] != first.Owners[s] {
			moved++
		}
	}
	if moved != 8 {
		t.Errorf("%d shards moved when d joined, want the 8 of its share", moved)
	}

	checkShardGuard(t, e, a)

	// c leaves: its shards go to the others as soon as their work returned,
	// not a lease duration later. Its member Lease was released, and is
	// deleted once the others' record tokens as high as its highest.
	c.stop()
	lease, err := e.acc.Leases(e.ns).Get(context.Background(), shard.MemberLeaseName(group, "c"))
	if err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "" || err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("c's member Lease after it left: %v, holder %v", err, lease.Spec.HolderIdentity)
	}
	left := e.waitGroup(group, 30*time.Second, "32 shards over a, b and d", balancedOver(count, "a", "b", "d"))
	waitLibActing(t, left, a, b, d)
	e.waitMemberLeaseDeleted(group, "c")

	// b crashes (it neither releases nor deletes anything) and comes back
	// in place: it waits for its member Lease to stay unchanged for a lease
	// duration, then joins in a new epoch. Its LeaseCandidate stays, so its
	// member Lease is kept.
	b.stop()
	e.waitGroup(group, 30*time.Second, "32 shards over a and d", balancedOver(count, "a", "d"))
	if _, err := e.acc.Leases(e.ns).Get(context.Background(), shard.MemberLeaseName(group, "b")); err != nil {
		t.Errorf("b's member Lease, whose LeaseCandidate stays after its crash: %v", err)
	}
	b2 := e.runGroupReplica(group, "b", count, w, true)
	back := e.waitGroup(group, 30*time.Second, "32 shards over a, b and d again", balancedOver(count, "a", "b", "d"))
	waitLibActing(t, back, a, b2, d)
	for s, o := range back.Owners {
		if o.Member == "b" && o.Epoch < 2 {
			t.Errorf("shard %d is granted to b in epoch %d, want a new epoch after the crash", s, o.Epoch)
		}
	}
}

// waitMemberLeaseDeleted waits until the controller has deleted the member
// Lease of replica and said so in an Event on the group Lease.
func (e *env) waitMemberLeaseDeleted(group, replica string) {
	e.t.Helper()
	name := shard.MemberLeaseName(group, replica)
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := e.acc.Leases(e.ns).Get(ctx, name); !apierrors.IsNotFound(err) {
			last = fmt.Sprintf("the member Lease is still there (%v)", err)
			return false, nil
		}
		events, err := e.mode.server.Client().CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.Reason == controller.ReasonMemberLeaseDeleted && ev.InvolvedObject.Name == group && strings.Contains(ev.Message, name) {
				return true, nil
			}
		}
		last = "no " + controller.ReasonMemberLeaseDeleted + " Event names " + name
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("the member Lease %s of %s, which left: %s: %v", name, replica, last, err)
	}
}

// checkShardGuard writes through r's guarded clients: on the context of a
// shard it acts on the write passes; on any other it is refused.
func checkShardGuard(t *testing.T, e *env, r *libReplica) {
	t.Helper()
	client, err := kubernetes.NewForConfig(r.g.WrapConfig(e.mode.server.Config()))
	if err != nil {
		t.Fatal(err)
	}
	var mine, other string
	for i := 0; mine == "" || other == ""; i++ {
		key := fmt.Sprintf("%s/object-%d", e.ns, i)
		if _, ok := r.g.Owns(key); ok {
			mine = key
		} else {
			other = key
		}
	}
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	ctx, cancel, ok := r.g.ShardContext(context.Background(), mine)
	defer cancel()
	if !ok {
		t.Fatalf("%s owns %s but has no context for it", r.name, mine)
	}
	if s, ok := candidate.ShardFrom(ctx); !ok || !s.Contains(mine) {
		t.Errorf("the context of %s is of shard %+v (%v)", mine, s, ok)
	}
	if _, err := client.CoreV1().ConfigMaps(e.ns).Create(ctx, cm("mine"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a write on the context of a shard %s acts on: %v", r.name, err)
	}
	if _, _, ok := r.g.ShardContext(context.Background(), other); ok {
		t.Errorf("%s has a context for %s, whose shard it does not act on", r.name, other)
	}
	_, err = client.CoreV1().ConfigMaps(e.ns).Create(context.Background(), cm("none"), metav1.CreateOptions{})
	if !errors.Is(err, candidate.ErrNotLeader) {
		t.Errorf("a write on no shard's context: %v, want ErrNotLeader", err)
	}
	if _, err := client.CoreV1().ConfigMaps(e.ns).Get(context.Background(), "mine", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("a read through the guarded client: %v", err)
	}
}
