// Package controller is cle's election controller: for every Lease that
// LeaseCandidates reference, it checks the candidates that matter are alive,
// elects the best one under the Lease's strategy by creating the Lease or
// naming its holder, and marks preferredHolder when a better candidate than
// the holder appears. It also garbage-collects candidates that stopped
// renewing.
//
// Liveness and expiry are judged on the controller's own clock from what it
// observed and when (see observations.go); the ranking itself lives in
// pkg/strategy, and every API access goes through pkg/access.
//
// It is not a supported API: its exported names serve cle's own programs
// (cle-controller, kubectl-cle, the tests) and may change in any release.
// Components import pkg/candidate, pkg/lock or contrib/controller-runtime.
package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/strategy"
)

// byLeaseIndex indexes LeaseCandidates by "namespace/spec.leaseName".
const byLeaseIndex = "cle.dev/by-lease"

// Informers are the shared informers the controller reads from, one pair per
// watched namespace (or a single pair for all namespaces). Their stores hold
// the objects of the access layer.
type Informers struct {
	Leases     []cache.SharedIndexInformer
	Candidates []cache.SharedIndexInformer
	// Namespaces[i] is the namespace Leases[i] and Candidates[i] watch (""
	// for all). When it does not match them, every informer is searched for
	// every key.
	Namespaces []string
	// Pods, when set, turn the proof of death on (see exits.go): the
	// controller reads from them the kubelet's reports of exited
	// containers. Made by NewPodWatch. Elections never wait for them to
	// sync: without them a holder's Lease expires as it always did.
	Pods []PodSource
}

// NewInformers creates the informers for namespaces (all namespaces if
// empty).
func NewInformers(acc access.Interface, namespaces []string, resync time.Duration) Informers {
	if len(namespaces) == 0 {
		return NewInformersExcept(acc, nil, resync)
	}
	var inf Informers
	for _, ns := range namespaces {
		inf.Leases = append(inf.Leases, acc.NewLeaseInformer(ns, resync, nil))
		inf.Candidates = append(inf.Candidates, acc.NewCandidateInformer(ns, resync, nil))
	}
	inf.Namespaces = namespaces
	return inf
}

// NewInformersExcept creates informers for every namespace but excluded,
// which the server filters out (a field selector), so that their objects
// are never sent, decoded or cached. kube-node-lease is the one to exclude:
// every node renews a Lease there every 10 seconds, and none of them is
// ever elected.
func NewInformersExcept(acc access.Interface, excluded []string, resync time.Duration) Informers {
	var tweak func(*metav1.ListOptions)
	if len(excluded) > 0 {
		terms := make([]fields.Selector, 0, len(excluded))
		for _, ns := range excluded {
			terms = append(terms, fields.OneTermNotEqualSelector("metadata.namespace", ns))
		}
		sel := fields.AndSelectors(terms...).String()
		tweak = func(o *metav1.ListOptions) { o.FieldSelector = sel }
	}
	return Informers{
		Leases:     []cache.SharedIndexInformer{acc.NewLeaseInformer("", resync, tweak)},
		Candidates: []cache.SharedIndexInformer{acc.NewCandidateInformer("", resync, tweak)},
		Namespaces: []string{""},
	}
}

// Start runs every informer until ctx is done. The function returned waits
// until they have all stopped.
func (i Informers) Start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	var runs []func(context.Context)
	for _, inf := range slices.Concat(i.Leases, i.Candidates) {
		runs = append(runs, inf.RunWithContext)
	}
	for _, src := range i.Pods {
		runs = append(runs, src.RunWithContext)
	}
	for _, run := range runs {
		wg.Go(func() { run(ctx) })
	}
	return wg.Wait
}

// Controller elects the holders of Leases from their LeaseCandidates.
type Controller struct {
	access    access.Interface
	informers Informers
	opts      Options

	queue   workqueue.TypedRateLimitingInterface[types.NamespacedName]
	gcQueue workqueue.TypedRateLimitingInterface[types.NamespacedName]
	obs     *observations
	groups  *groups
	events  *eventDeduper
	pings   *pingBudget
	// probes are the registration probes, by the namespace of the candidate
	// watch ("" for one of every namespace): see registrationProbe.
	probes map[string]*registrationProbe
	// tokens is the fencing token bound (nil: off).
	tokens *tokenBound

	// neededSince is when each pending election became needed, for the
	// election latency metric. Only workers touch it, one key at a time.
	neededMu    sync.Mutex
	neededSince map[types.NamespacedName]time.Time

	// exits are the process instances the kubelet reported exited; nil
	// without Pod sources.
	exits *exits

	// queuedAt is when a step of each Lease first became due since a worker
	// last took it up: when an event queued it, or the time an earlier step
	// asked to run again at. Candidates are judged as of then (see
	// view.judgeAt), so that the controller's own backlog never turns fresh
	// evidence stale.
	queuedMu sync.Mutex
	queuedAt map[types.NamespacedName]time.Time

	// leaseStores and candidateStores are the informers' stores by
	// namespace ("" holds the store of all namespaces).
	leaseStores, candidateStores map[string][]cache.Indexer
	// states is the source of the cle_candidates metric while this
	// controller runs.
	states *func() map[string]int
	// leaseStates is the source of the per-Lease metrics, from outcomes:
	// each Lease with candidates as reconcile last judged it.
	leaseStates *func() []leaseReport
	outcomeMu   sync.Mutex
	outcomes    map[types.NamespacedName]leaseOutcome

	registrations    []registration
	podRegistrations []registration
}

type registration struct {
	informer interface {
		RemoveEventHandler(cache.ResourceEventHandlerRegistration) error
	}
	handle cache.ResourceEventHandlerRegistration
}

// New builds a controller on informers that have not been started yet (it adds
// an index to the candidate informers).
func New(acc access.Interface, informers Informers, opts Options) (*Controller, error) {
	if acc == nil {
		return nil, fmt.Errorf("an access layer is required")
	}
	if len(informers.Leases) == 0 || len(informers.Candidates) == 0 {
		return nil, fmt.Errorf("lease and candidate informers are required")
	}
	if err := opts.complete(); err != nil {
		return nil, fmt.Errorf("invalid controller options: %w", err)
	}
	c := &Controller{
		access:    acc,
		informers: informers,
		opts:      opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(electionRetries(), overallRetries()),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{
				Name: "cle_election", Clock: opts.Clock, MetricsProvider: opts.Metrics.queue,
			}),
		gcQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(gcRetries(), overallRetries()),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{
				Name: "cle_candidate_gc", Clock: opts.Clock, MetricsProvider: opts.Metrics.queue,
			}),
		obs:         newObservations(opts.CandidateTTL, opts.LeaseDuration),
		groups:      newGroups(),
		pings:       newPingBudget(opts.PingRate, opts.PingBurst),
		events:      newEventDeduper(opts.Recorder),
		neededSince: map[types.NamespacedName]time.Time{},
		queuedAt:    map[types.NamespacedName]time.Time{},
		outcomes:    map[types.NamespacedName]leaseOutcome{},
	}
	states, leaseStates := c.candidateStates, c.leaseReports
	c.states, c.leaseStates = &states, &leaseStates
	opts.Metrics.candidates.source.Store(c.states)
	opts.Metrics.leases.source.Store(c.leaseStates)
	c.leaseStores = storesByNamespace(informers.Leases, informers.Namespaces)
	c.candidateStores = storesByNamespace(informers.Candidates, informers.Namespaces)

	candidateIndexers, leaseIndexers := cache.Indexers{byLeaseIndex: indexByLease}, cache.Indexers{}
	if len(informers.Pods) > 0 {
		c.exits = newExits(opts.CandidateTTL)
		candidateIndexers[byInstanceIndex] = indexByInstance
		leaseIndexers[byHolderInstanceIndex] = indexByHolderInstance
	}
	c.probes = newProbes(c.candidateStores)
	c.tokens = newTokenBound(&c.opts, acc.Leases)
	c.obs.probeMark = c.probeMark
	for _, inf := range informers.Candidates {
		if err := inf.AddIndexers(candidateIndexers); err != nil {
			return nil, fmt.Errorf("add candidate index: %w", err)
		}
		h, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    c.onCandidateAdd,
			UpdateFunc: c.onCandidateUpdate,
			DeleteFunc: c.onCandidateDelete,
		})
		if err != nil {
			return nil, fmt.Errorf("add candidate handler: %w", err)
		}
		c.registrations = append(c.registrations, registration{inf, h})
	}
	for _, inf := range informers.Leases {
		if len(leaseIndexers) > 0 {
			if err := inf.AddIndexers(leaseIndexers); err != nil {
				return nil, fmt.Errorf("add lease index: %w", err)
			}
		}
		h, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { c.observeLease(obj, initial) },
			UpdateFunc: func(_, obj any) { c.onLease(obj) },
			DeleteFunc: c.onLeaseDelete,
		})
		if err != nil {
			return nil, fmt.Errorf("add lease handler: %w", err)
		}
		c.registrations = append(c.registrations, registration{inf, h})
	}
	for _, inf := range informers.Pods {
		h, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onPod,
			UpdateFunc: func(_, obj any) { c.onPod(obj) },
		})
		if err != nil {
			return nil, fmt.Errorf("add pod handler: %w", err)
		}
		// Not among the registrations whose sync HasSynced waits for.
		c.podRegistrations = append(c.podRegistrations, registration{inf, h})
	}
	return c, nil
}

// newProbes gives a registration probe to each namespace scope whose
// candidates come through one watch (stores keyed as storesByNamespace
// keys them).
func newProbes(stores map[string][]cache.Indexer) map[string]*registrationProbe {
	probes := map[string]*registrationProbe{}
	for ns, watches := range stores {
		if len(watches) == 1 {
			probes[ns] = &registrationProbe{}
		}
	}
	return probes
}

func indexByLease(obj any) ([]string, error) {
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return nil, nil
	}
	return []string{lc.Namespace + "/" + lc.Spec.LeaseName}, nil
}

func leaseKeyOf(lc *coordinationv1beta1.LeaseCandidate) types.NamespacedName {
	return types.NamespacedName{Namespace: lc.Namespace, Name: lc.Spec.LeaseName}
}

func candidateKeyOf(lc *coordinationv1beta1.LeaseCandidate) types.NamespacedName {
	return types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
}

// The event handlers record what was observed and when (see
// observations.go) and enqueue the Leases concerned; reconcile decides.

func (c *Controller) onCandidateAdd(obj any, inInitialList bool) {
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	now := c.opts.Clock.Now()
	c.obs.observeCandidate(lc, now, inInitialList)
	key := leaseKeyOf(lc)
	c.obs.candidateJoined(key, c.leaseOf(key), now, inInitialList)
	c.enqueue(key, now)
	c.gcQueue.AddAfter(candidateKeyOf(lc), c.opts.CandidateTTL)
	c.candidateDelivered(lc)
}

func (c *Controller) onCandidateUpdate(oldObj, newObj any) {
	lc, ok := newObj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	now := c.opts.Clock.Now()
	if c.obs.observeCandidate(lc, now, false) {
		c.gcQueue.AddAfter(candidateKeyOf(lc), c.opts.CandidateTTL)
	}
	key := leaseKeyOf(lc)
	if old, ok := oldObj.(*coordinationv1beta1.LeaseCandidate); ok && old.Spec.LeaseName != lc.Spec.LeaseName {
		c.obs.candidateJoined(key, c.leaseOf(key), now, false)
		c.events.forgetCandidate(leaseKeyOf(old), old.Name)
		c.candidateLeft(leaseKeyOf(old))
	}
	c.enqueue(key, now)
	c.candidateDelivered(lc)
}

func (c *Controller) onCandidateDelete(obj any) {
	tomb, relisted := obj.(cache.DeletedFinalStateUnknown)
	if relisted {
		obj = tomb.Obj
	}
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	c.obs.forgetCandidate(candidateKeyOf(lc))
	c.events.forgetCandidate(leaseKeyOf(lc), lc.Name)
	c.candidateLeft(leaseKeyOf(lc))
	if !relisted {
		c.candidateDelivered(lc)
	}
}

// candidateLeft follows a candidate leaving the Lease key, and enqueues it.
func (c *Controller) candidateLeft(key types.NamespacedName) {
	if !c.hasCandidates(key) {
		c.obs.candidatesLeft(key, c.leaseOf(key) != nil, c.opts.Clock.Now())
	}
	c.enqueue(key, c.opts.Clock.Now())
}

// onLease records the holder of Leases that candidates reference and enqueues
// them, unless the change is a renewal of a Lease whose election is settled.
// Every other Lease (node heartbeats, ordinary leader election) is dropped
// here, at the cost of one index lookup.
func (c *Controller) onLease(obj any) { c.observeLease(obj, false) }

// observeLease is onLease for a Lease the informer shows, initial when it is
// in the informer's first list.
func (c *Controller) observeLease(obj any, initial bool) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	now := c.opts.Clock.Now()
	c.opts.WatchLag.observe(lease, now) // the controller's lock has no candidates
	if group, step := c.groups.observeMember(lease, now, c.opts.LeaseDuration, initial); step {
		c.enqueue(group, now)
	}
	if !c.hasCandidates(key) {
		return
	}
	if c.obs.observeLease(lease, now) {
		c.enqueue(key, now)
	}
}

func (c *Controller) onLeaseDelete(obj any) {
	tomb, relisted := obj.(cache.DeletedFinalStateUnknown)
	if relisted {
		obj = tomb.Obj
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	c.opts.WatchLag.forget(key)
	if group, ok := c.groups.memberDeleted(lease); ok {
		c.enqueue(group, c.opts.Clock.Now())
	}
	referenced := c.hasCandidates(key)
	c.obs.leaseDeleted(key, referenced, relisted, c.opts.Clock.Now())
	if referenced {
		c.enqueue(key, c.opts.Clock.Now())
	}
}

// enqueue queues the election of the Lease key after an event observed at
// now.
func (c *Controller) enqueue(key types.NamespacedName, now time.Time) {
	c.noteDue(key, now)
	c.queue.Add(key)
}

// Reconsider queues a step of every Lease with candidates now: what decides
// which Leases this controller elects has changed (Options.ElectsBuiltin
// turned true), and those it left alone are its own again.
func (c *Controller) Reconsider() {
	now := c.opts.Clock.Now()
	seen := map[string]bool{}
	for _, stores := range c.candidateStores {
		for _, store := range stores {
			for _, lease := range store.ListIndexFuncValues(byLeaseIndex) {
				seen[lease] = true
			}
		}
	}
	for _, lease := range slices.Sorted(maps.Keys(seen)) { // one order, whatever the maps'
		if ns, name, err := cache.SplitMetaNamespaceKey(lease); err == nil {
			c.enqueue(types.NamespacedName{Namespace: ns, Name: name}, now)
		}
	}
}

// requeue queues the election of the Lease key again after d, as its last
// step asked at now: that step is due at now+d, and is judged as of then
// however late a worker gets to it.
func (c *Controller) requeue(key types.NamespacedName, now time.Time, d time.Duration) {
	c.noteDue(key, now.Add(d))
	c.queue.AddAfter(key, d)
}

// noteDue records that a step of key is due at t, keeping the earliest
// such instant until a worker takes the step up.
func (c *Controller) noteDue(key types.NamespacedName, t time.Time) {
	c.queuedMu.Lock()
	defer c.queuedMu.Unlock()
	if due, ok := c.queuedAt[key]; !ok || t.Before(due) {
		c.queuedAt[key] = t
	}
}

// takeQueuedAt returns when an event first queued key since the last call,
// or zero if none has.
func (c *Controller) takeQueuedAt(key types.NamespacedName) time.Time {
	c.queuedMu.Lock()
	defer c.queuedMu.Unlock()
	t := c.queuedAt[key]
	delete(c.queuedAt, key)
	return t
}

func (c *Controller) hasCandidates(key types.NamespacedName) bool {
	for _, store := range c.storesFor(c.candidateStores, key.Namespace) {
		if keys, err := store.IndexKeys(byLeaseIndex, key.String()); err == nil && len(keys) > 0 {
			return true
		}
	}
	return false
}

// storesByNamespace maps each namespace to the store of its informer. Without
// a namespace per informer, the "" entry lists every store.
func storesByNamespace(informers []cache.SharedIndexInformer, namespaces []string) map[string][]cache.Indexer {
	out := map[string][]cache.Indexer{}
	if len(namespaces) != len(informers) {
		for _, inf := range informers {
			out[""] = append(out[""], inf.GetIndexer())
		}
		return out
	}
	for i, inf := range informers {
		out[namespaces[i]] = append(out[namespaces[i]], inf.GetIndexer())
	}
	return out
}

// storesFor returns the stores that may hold objects of namespace ns.
func (c *Controller) storesFor(stores map[string][]cache.Indexer, ns string) []cache.Indexer {
	return inScope(stores, ns)
}

// inScope returns what m keeps for namespace ns: under "" when one watch
// serves every namespace, else under ns.
func inScope[V any](m map[string]V, ns string) V {
	if all, ok := m[""]; ok {
		return all
	}
	return m[ns]
}

// candidatesOf returns the candidates of a Lease from the caches, by
// namespace and name, so that a step's requests, logs and Events come in
// one order whatever order the cache keeps.
func (c *Controller) candidatesOf(key types.NamespacedName) []*coordinationv1beta1.LeaseCandidate {
	var out []*coordinationv1beta1.LeaseCandidate
	for _, store := range c.storesFor(c.candidateStores, key.Namespace) {
		objs, err := store.ByIndex(byLeaseIndex, key.String())
		if err != nil {
			continue
		}
		for _, obj := range objs {
			if lc, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok {
				out = append(out, lc)
			}
		}
	}
	slices.SortFunc(out, func(a, b *coordinationv1beta1.LeaseCandidate) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// leaseOf returns the Lease from the caches, or nil.
func (c *Controller) leaseOf(key types.NamespacedName) *coordinationv1.Lease {
	for _, store := range c.storesFor(c.leaseStores, key.Namespace) {
		obj, exists, err := store.GetByKey(key.String())
		if err == nil && exists {
			if lease, ok := obj.(*coordinationv1.Lease); ok {
				return lease
			}
		}
	}
	return nil
}

// HasSynced reports whether every informer has synced and the handlers have
// seen the initial lists.
func (c *Controller) HasSynced() bool {
	for _, r := range c.registrations {
		if !r.handle.HasSynced() {
			return false
		}
	}
	return true
}

// CacheSyncTimeout bounds each wait for the caches in Run; Run logs and keeps
// waiting after it, and stays not ready meanwhile.
const CacheSyncTimeout = 30 * time.Second

// Run waits for the caches, runs workers election workers and one garbage
// collector until ctx is done, then shuts the queues down, waits for every
// worker and removes the event handlers. The informers must be started by
// the caller.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	defer func() {
		for _, r := range slices.Concat(c.registrations, c.podRegistrations) {
			_ = r.informer.RemoveEventHandler(r.handle)
		}
		// A controller that stopped has no candidates to report.
		c.opts.Metrics.candidates.source.CompareAndSwap(c.states, nil)
		c.opts.Metrics.leases.source.CompareAndSwap(c.leaseStates, nil)
	}()

	var wg sync.WaitGroup
	defer func() {
		c.queue.ShutDown()
		c.gcQueue.ShutDown()
		wg.Wait()
		logger.Info("Election controller stopped")
	}()

	logger.Info("Election controller starting", "mode", c.access.Mode(), "workers", workers)
	for !c.waitForSync(ctx) {
		if ctx.Err() != nil {
			return
		}
		logger.Info("Caches not synced yet; still waiting", "timeout", CacheSyncTimeout)
	}
	logger.Info("Caches synced; electing")
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	wg.Go(func() { wait.UntilWithContext(ctx, c.runGCWorker, time.Second) })
	<-ctx.Done()
}

// cacheSyncPoll is how often Run checks for synced caches. Elections of
// objects that arrive meanwhile wait for it, so it is much shorter than
// client-go's 100ms.
const cacheSyncPoll = 5 * time.Millisecond

func (c *Controller) waitForSync(ctx context.Context) bool {
	err := wait.PollUntilContextTimeout(ctx, cacheSyncPoll, CacheSyncTimeout, true, func(context.Context) (bool, error) {
		return c.HasSynced(), nil
	})
	return err == nil
}

// maxElectionRetry bounds how long a Lease whose election steps keep failing
// waits for the next: whatever the failures were (an API outage, a server
// refusing writes while it catches up), the Lease is looked at again within
// it once the API answers. client-go's default, 1000 s, left a Lease that
// failed through a ten-second outage unelected for about as long again once
// the outage ended.
const maxElectionRetry = 2 * time.Second

// electionRetries is the per-Lease backoff of failed election steps: 5 ms,
// doubling, to at most maxElectionRetry.
func electionRetries() workqueue.TypedRateLimiter[types.NamespacedName] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](5*time.Millisecond, maxElectionRetry)
}

// gcRetries is the per-candidate backoff of failed collections: client-go's
// default, 5 ms to 1000 s (a candidate that cannot be deleted waits).
func gcRetries() workqueue.TypedRateLimiter[types.NamespacedName] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](5*time.Millisecond, 1000*time.Second)
}

// overallRetries bounds the retries of failures of every item together, as
// client-go's default does: 10 a second, in bursts of 100.
func overallRetries() workqueue.TypedRateLimiter[types.NamespacedName] {
	return &workqueue.TypedBucketRateLimiter[types.NamespacedName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)}
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "lease", klog.KRef(key.Namespace, key.Name))
	requeue, err := c.reconcile(klog.NewContext(ctx, logger), key)
	if err != nil {
		if lostRace(err) {
			// Another writer got there first: expected, and resolved by the
			// next step on the newer object.
			logger.V(2).Info("Election step raced with another write; retrying", "err", err)
		} else {
			logger.Error(err, "Election step failed; retrying")
		}
		c.queue.AddRateLimited(key)
		if requeue > 0 {
			c.requeue(key, c.opts.Clock.Now(), requeue)
		}
		return true
	}
	c.queue.Forget(key)
	if requeue > 0 {
		c.requeue(key, c.opts.Clock.Now(), requeue)
	}
	return true
}

func (c *Controller) cachedCandidate(key types.NamespacedName) *coordinationv1beta1.LeaseCandidate {
	for _, store := range c.storesFor(c.candidateStores, key.Namespace) {
		obj, exists, err := store.GetByKey(key.String())
		if err == nil && exists {
			if lc, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok {
				return lc
			}
		}
	}
	return nil
}

// leaseState is the state of an election, as cle_leases reports it.
type leaseState string

// The states of cle_leases.
const (
	leaseOptimal    leaseState = "optimal"
	leasePreempting            = "preempting"
	leaseVacant                = "vacant"
	leaseExpired               = "expired"
	leaseConflict              = "conflict"
	leaseUnmanaged             = "unmanaged"
)

// leaseOutcome is a Lease with candidates as reconcile last left it.
type leaseOutcome struct {
	state leaseState
	// leaderlessSince is when the Lease was first judged vacant or expired
	// since it last had a holder that renewed it; zero while it has one. A
	// holder the controller names counts once it renews the Lease itself:
	// one that never does (wedged, or not allowed to write the Lease) keeps
	// the Lease leaderless through every expiry and election.
	leaderlessSince time.Time
	leaseDuration   time.Duration
	// holderNewer: the holder emulates a newer version than a live
	// candidate (OldestEmulationVersion).
	holderNewer bool
}

// noteOutcome records the state reconcile left the Lease of v in; written
// is the Lease the step wrote, if it wrote one.
func (c *Controller) noteOutcome(v *view, state leaseState, written *coordinationv1.Lease) {
	// Only a preemption makes a newer holder the controller's concern: in
	// other states the older candidate is not one it would elect (another
	// strategy, not known to be alive yet).
	o := leaseOutcome{state: state, leaseDuration: c.opts.LeaseDuration, holderNewer: state == leasePreempting && c.holderNewer(v)}
	// A vacant Lease is measured against the duration the controller gives
	// Leases it elects: a holder that released it may have left 1s there.
	if state != leaseVacant {
		o.leaseDuration = leaseDurationOf(v.lease, c.opts.LeaseDuration)
	}
	lease := v.lease
	if written != nil {
		lease = written
	}
	c.outcomeMu.Lock()
	defer c.outcomeMu.Unlock()
	prev, ok := c.outcomes[v.key]
	wasLeaderless := ok && !prev.leaderlessSince.IsZero()
	switch {
	case state == leaseVacant || state == leaseExpired:
		o.leaderlessSince = v.now
		if wasLeaderless {
			o.leaderlessSince = prev.leaderlessSince
		}
	case wasLeaderless && !renewedByHolder(lease):
		o.leaderlessSince = prev.leaderlessSince
	case written != nil && !renewedByHolder(written):
		o.leaderlessSince = v.now // a holder just named, in this step
	}
	c.outcomes[v.key] = o
}

// renewedByHolder tells whether the Lease's holder renewed it in its term:
// a holder named by the controller has acquireTime and renewTime equal
// until it renews.
func renewedByHolder(l *coordinationv1.Lease) bool {
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.AcquireTime == nil {
		return false
	}
	return l.Spec.RenewTime.After(l.Spec.AcquireTime.Time)
}

// forgetOutcome drops a Lease that has no candidates left.
func (c *Controller) forgetOutcome(key types.NamespacedName) {
	c.outcomeMu.Lock()
	defer c.outcomeMu.Unlock()
	delete(c.outcomes, key)
}

// holderNewer tells whether the holder of v's Lease is a candidate of the
// OldestEmulationVersion strategy that emulates a newer version than a live
// candidate: one that has not expired and did not fail to answer a ping.
func (c *Controller) holderNewer(v *view) bool {
	if v.lease == nil || v.lease.Spec.HolderIdentity == nil {
		return false
	}
	var holder *coordinationv1beta1.LeaseCandidate
	for _, oc := range v.candidates {
		if oc.lc.Name == *v.lease.Spec.HolderIdentity {
			holder = oc.lc
		}
	}
	if holder == nil || !strategy.VersionOrdered(holder.Spec.Strategy) {
		return false
	}
	for _, oc := range v.candidates {
		if oc.lc == holder || oc.rec.unresponsive || !v.now.Before(c.gcDeadline(&oc.rec)) {
			continue
		}
		if cmp, err := strategy.CompareVersions(holder.Spec.EmulationVersion, oc.lc.Spec.EmulationVersion); err == nil && cmp > 0 {
			return true
		}
	}
	return false
}

// leaseReports are the Leases with candidates for the per-Lease metrics.
func (c *Controller) leaseReports() []leaseReport {
	now := c.opts.Clock.Now()
	c.outcomeMu.Lock()
	defer c.outcomeMu.Unlock()
	out := make([]leaseReport, 0, len(c.outcomes))
	for key, o := range c.outcomes {
		if !o.leaderlessSince.IsZero() && o.state != leaseVacant && o.state != leaseExpired && renewedByHolder(c.leaseOf(key)) {
			// The named holder renewed; a renewal of a settled Lease needs
			// no step, so it is seen here.
			o.leaderlessSince = time.Time{}
			c.outcomes[key] = o
		}
		r := leaseReport{key: key, state: o.state, leaseDuration: o.leaseDuration, holderNewer: o.holderNewer}
		if !o.leaderlessSince.IsZero() {
			r.leaderless = true
			r.leaderlessFor = now.Sub(o.leaderlessSince)
		}
		out = append(out, r)
	}
	return out
}

// candidateStates counts candidates by state for the cle_candidates metric.
func (c *Controller) candidateStates() map[string]int {
	now := c.opts.Clock.Now()
	states := map[string]int{"alive": 0, "pinged": 0, "unresponsive": 0, "unknown": 0, candidateExpired: 0}
	for _, r := range c.obs.snapshot() {
		if !now.Before(c.gcDeadline(&r)) {
			states[candidateExpired]++
			continue
		}
		state, _ := r.state(now, c.opts.CandidateFreshness, c.opts.PingTimeout)
		states[state.String()]++
	}
	return states
}
