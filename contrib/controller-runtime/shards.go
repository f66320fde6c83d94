package cle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/cle-dev/cle/pkg/candidate"
)

// Shards makes a manager a replica of a shard group (candidate.NewGroup):
// every replica runs the controller, and each reconciles only the objects of
// the shards cle-controller grants it. Add it to the manager (it runs on
// every replica, not only on a leader), filter the controller's events with
// Predicate, add Source so that the objects of a shard are enqueued when the
// replica gains it, and wrap the reconciler with Reconciler:
//
//	shards, err := cle.NewShards(candidate.GroupConfig{Config: ..., Shards: 32})
//	mgr.Add(shards)
//	ctrl.NewControllerManagedBy(mgr).
//		For(&v1.Widget{}, builder.WithPredicates(shards.Predicate())).
//		WatchesRawSource(shards.Source(mgr.GetCache(), &v1.WidgetList{})).
//		Complete(shards.Reconciler(reconciler))
//
// An object's shard is candidate.ShardOf("namespace/name", count) ("name"
// for a cluster-scoped object). A reconcile runs on the context of its
// object's shard: candidate.ShardFrom gives the shard and its fencing token,
// and the clients of Group().WrapConfig let its writes through while the
// replica acts on the shard. A shard goes to another replica only once the
// reconciles of it in flight have returned.
type Shards struct {
	group     *candidate.Group
	onStarted func(context.Context, candidate.Shard)

	mu sync.Mutex
	// idle is signalled when a shard's last reconcile in flight returns.
	idle *sync.Cond
	// inflight counts the reconciles running per shard index.
	inflight map[int]int
	// gained are the shards started since Source last looked.
	gained map[int]candidate.Shard
	notify chan struct{}
}

// NewShards returns the replica of cfg's group. cfg.OnShardStarted may be
// nil; when set it runs as the group's does, beside the controller's
// reconciles of the shard.
func NewShards(cfg candidate.GroupConfig) (*Shards, error) {
	s := &Shards{onStarted: cfg.OnShardStarted, inflight: map[int]int{}, gained: map[int]candidate.Shard{}, notify: make(chan struct{}, 1)}
	s.idle = sync.NewCond(&s.mu)
	cfg.OnShardStarted = s.shardStarted
	g, err := candidate.NewGroup(cfg)
	if err != nil {
		return nil, err
	}
	s.group = g
	return s, nil
}

// Group is the replica's group membership: what it acts on, its guarded
// clients.
func (s *Shards) Group() *candidate.Group { return s.group }

// Start runs the replica until ctx is done (manager.Runnable).
func (s *Shards) Start(ctx context.Context) error { return s.group.Run(ctx) }

// NeedLeaderElection is false: every replica of the group runs.
func (s *Shards) NeedLeaderElection() bool { return false }

// shardStarted is the group's OnShardStarted: it tells Source, runs the
// user's callback, and returns only once the shard must stop and its
// reconciles in flight have returned.
func (s *Shards) shardStarted(ctx context.Context, sh candidate.Shard) {
	s.mu.Lock()
	s.gained[sh.Index] = sh
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if s.onStarted != nil {
		s.onStarted(ctx, sh)
	}
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.inflight[sh.Index] > 0 {
		s.idle.Wait()
	}
}

// Predicate lets through the events of the objects whose shard the replica
// acts on.
func (s *Shards) Predicate() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		_, ok := s.group.Owns(objectKey(obj.GetNamespace(), obj.GetName()))
		return ok
	})
}

// Reconciler wraps r: a request is reconciled only while the replica acts on
// its object's shard, on that shard's context; any other is dropped (the
// replica that gains the shard enqueues it).
func (s *Shards) Reconciler(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		key := objectKey(req.Namespace, req.Name)
		sh, ok := s.group.Owns(key)
		if !ok {
			return reconcile.Result{}, nil
		}
		// Counted before the shard's context is taken: a shard told to
		// stop after this waits for the reconcile, and one told before
		// has no context to give.
		s.enter(sh.Index)
		defer s.leave(sh.Index)
		shardCtx, cancel, ok := s.group.ShardContext(ctx, key)
		defer cancel()
		if got, _ := candidate.ShardFrom(shardCtx); !ok || got != sh {
			return reconcile.Result{}, nil
		}
		return r.Reconcile(shardCtx, req)
	})
}

func (s *Shards) enter(index int) {
	s.mu.Lock()
	s.inflight[index]++
	s.mu.Unlock()
}

func (s *Shards) leave(index int) {
	s.mu.Lock()
	if s.inflight[index]--; s.inflight[index] == 0 {
		delete(s.inflight, index)
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// Source enqueues, each time the replica starts acting on a shard, the
// objects of list's type that reader (the manager's cache) holds in that
// shard: their events came while another replica acted on it, and
// Predicate dropped them.
func (s *Shards) Source(reader client.Reader, list client.ObjectList) source.Source {
	return source.Func(func(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go s.enqueueGained(ctx, reader, list, queue)
		return nil
	})
}

func (s *Shards) enqueueGained(ctx context.Context, reader client.Reader, list client.ObjectList, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	logger := ctrllog.FromContext(ctx)
	for {
		s.mu.Lock()
		gained := s.gained
		s.gained = map[int]candidate.Shard{}
		s.mu.Unlock()
		if len(gained) > 0 {
			if err := s.enqueue(ctx, reader, list, gained, queue); err != nil && ctx.Err() == nil {
				logger.Error(err, "Listing the objects of gained shards failed; their next events enqueue them", "shards", slices.Sorted(maps.Keys(gained)))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.notify:
		}
	}
}

// enqueue adds the objects in reader of the gained shards that the replica
// still acts on.
func (s *Shards) enqueue(ctx context.Context, reader client.Reader, list client.ObjectList, gained map[int]candidate.Shard, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	objects, ok := list.DeepCopyObject().(client.ObjectList)
	if !ok {
		return fmt.Errorf("%T is not an object list", list)
	}
	if err := reader.List(ctx, objects); err != nil {
		return err
	}
	return meta.EachListItem(objects, func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		key := objectKey(m.GetNamespace(), m.GetName())
		if sh, ok := s.group.Owns(key); ok && gained[sh.Index] == sh {
			queue.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
		}
		return nil
	})
}

// objectKey is the key an object's shard is computed from: "namespace/name",
// or "name" for a cluster-scoped object, as client-go's
// MetaNamespaceKeyFunc makes it.
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
