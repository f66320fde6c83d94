package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cle "github.com/cle-dev/cle/contrib/controller-runtime"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// ownerAnnotation is where the test's reconciler writes which replica
// reconciled a ConfigMap, and under which token of its shard.
const ownerAnnotation = "test.cle.dev/reconciled-by"

// shardWitness checks that no shard is reconciled by two replicas at once,
// and that no replica reconciles a shard under a token below one another
// replica already reconciled it under (a deposed owner still acting).
type shardWitness struct {
	mu       sync.Mutex
	active   map[int]map[string]int
	highest  map[int]int64
	problems []string
}

func (w *shardWitness) enter(who string, s candidate.Shard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for other, n := range w.active[s.Index] {
		if other != who && n > 0 {
			w.problems = append(w.problems, fmt.Sprintf("shard %d reconciled by %s while %s reconciles it", s.Index, who, other))
		}
	}
	if s.Token < w.highest[s.Index] {
		w.problems = append(w.problems, fmt.Sprintf("shard %d reconciled by %s under token %d after token %d", s.Index, who, s.Token, w.highest[s.Index]))
	}
	w.highest[s.Index] = max(w.highest[s.Index], s.Token)
	if w.active[s.Index] == nil {
		w.active[s.Index] = map[string]int{}
	}
	w.active[s.Index][who]++
}

func (w *shardWitness) leave(who string, s candidate.Shard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.active[s.Index][who]--
}

// shardReplica is a manager running one replica of a shard group.
type shardReplica struct {
	id string
	// stop stops the manager and returns what its Start returned.
	stop func() error
}

// startShardedManager runs a manager whose ConfigMap controller is one
// replica of group: it reconciles only the ConfigMaps of its shards,
// writing its name and the shard's token on each through the group's
// guarded client.
func (e *env) startShardedManager(t *testing.T, w *shardWitness, ns, group, id string, count int) *shardReplica {
	t.Helper()
	cfg := e.s.Config()
	mgr, err := manager.New(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	clients, err := access.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := cle.NewShards(candidate.GroupConfig{
		Config: candidate.Config{Clients: clients, APIMode: e.apiMode, Namespace: ns, LeaseName: group, Identity: id,
			BinaryVersion: "1.36.0", Strategy: shard.StrategyShards,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod},
		Shards: count,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(shards); err != nil {
		t.Fatal(err)
	}
	guarded, err := client.New(shards.Group().WrapConfig(cfg), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reader := mgr.GetClient()
	reconciler := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		s, ok := candidate.ShardFrom(ctx)
		if !ok {
			t.Errorf("%s reconciles %s outside a shard's context", id, req)
			return reconcile.Result{}, nil
		}
		w.enter(id, s)
		defer w.leave(id, s)
		// A step of work that does not stop at once when the shard does:
		// the shard may go to another replica only once it returned.
		time.Sleep(100 * time.Millisecond)
		var cm corev1.ConfigMap
		if err := reader.Get(ctx, req.NamespacedName, &cm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		want := fmt.Sprintf("%s@%d", id, s.Token)
		if cm.Annotations[ownerAnnotation] == want {
			return reconcile.Result{}, nil
		}
		cm.Annotations = map[string]string{ownerAnnotation: want}
		return reconcile.Result{}, guarded.Update(ctx, &cm)
	})
	// Several managers of one process run a controller each.
	err = builder.ControllerManagedBy(mgr).Named("sharded-"+id).WithOptions(controller.Options{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 8}).
		For(&corev1.ConfigMap{}, builder.WithPredicates(shards.Predicate())).
		WatchesRawSource(shards.Source(mgr.GetCache(), &corev1.ConfigMapList{})).
		Complete(shards.Reconciler(reconciler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	r := &shardReplica{id: id, stop: sync.OnceValue(func() error {
		cancel()
		return <-done
	})}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// reconciledByOwners reports whether the group Lease is balanced over owners
// (framework.GroupBalanced), and every ConfigMap
// of ns carries the name of the replica its shard is granted to, with that
// grant's token.
func (e *env) reconciledByOwners(ns, group string, n int, owners ...string) (bool, string) {
	lease, err := e.s.Client().CoordinationV1().Leases(ns).Get(context.Background(), group, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	g, err := shard.ParseGroup(lease.Annotations)
	if err != nil {
		return false, err.Error()
	}
	if ok, why := framework.GroupBalanced(g, owners...); !ok {
		return false, why
	}
	for i := range n {
		name := fmt.Sprintf("object-%d", i)
		cm, err := e.s.Client().CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := candidate.ShardOf(ns+"/"+name, g.Count)
		want := fmt.Sprintf("%s@%d", g.Owners[s].Member, g.Tokens[s])
		if got := cm.Annotations[ownerAnnotation]; got != want {
			return false, fmt.Sprintf("%s (shard %d) reconciled by %q, owner %s", name, s, got, want)
		}
	}
	return true, ""
}

// TestShardedManagers: three managers share the ConfigMaps of a namespace
// over 16 shards; each ConfigMap is reconciled by the replica that owns its
// shard. One replica stops: the others gain its shards and reconcile their
// ConfigMaps without any new event. A fourth joins and takes its share.
// Throughout, no shard is reconciled by two replicas at once or by a deposed
// owner.
func TestShardedManagers(t *testing.T) {
	for _, e := range envs {
		if !e.cleController {
			continue // the controller built into kube-apiserver runs no groups
		}
		t.Run(e.name, func(t *testing.T) {
			const group, count, objects = "sharded", 16, 40
			ns := e.setup(t)
			w := &shardWitness{active: map[int]map[string]int{}, highest: map[int]int64{}}
			defer func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				for _, p := range w.problems {
					t.Error(p)
				}
			}()
			for i := range objects {
				_, err := e.s.Client().CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("object-%d", i)}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			}
			// Objects keep changing, so that reconciles are in flight
			// when shards move.
			churnCtx, stopChurn := context.WithCancel(context.Background())
			churned := make(chan struct{})
			defer func() { stopChurn(); <-churned }()
			go func() {
				defer close(churned)
				for i := 0; churnCtx.Err() == nil; i++ {
					patch := fmt.Appendf(nil, `{"data":{"tick":"%d"}}`, i)
					_, _ = e.s.Client().CoreV1().ConfigMaps(ns).Patch(churnCtx, fmt.Sprintf("object-%d", i%objects), types.MergePatchType, patch, metav1.PatchOptions{})
					select {
					case <-churnCtx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			}()
			a := e.startShardedManager(t, w, ns, group, "a", count)
			e.startShardedManager(t, w, ns, group, "b", count)
			e.startShardedManager(t, w, ns, group, "c", count)
			settled := func(what string, owners ...string) {
				t.Helper()
				var last string
				err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, waitLong, true, func(context.Context) (bool, error) {
					ok, why := e.reconciledByOwners(ns, group, objects, owners...)
					last = why
					return ok, nil
				})
				if err != nil {
					t.Fatalf("%s: not within %s (last: %s)", what, waitLong, last)
				}
			}
			settled("every ConfigMap reconciled by its shard's owner", "a", "b", "c")

			if err := a.stop(); err != nil {
				t.Errorf("manager a: %v", err)
			}
			settled("a's ConfigMaps reconciled by the replicas that gained its shards", "b", "c")

			e.startShardedManager(t, w, ns, group, "d", count)
			settled("d's share reconciled by d", "b", "c", "d")
		})
	}
}
