package controller

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// simQueue is a controller's work queue in the simulation, with client-go's
// semantics (workqueue.Type, the delaying queue and the rate-limiting
// queue): an item is queued once however often it is added; an item added
// while a worker processes it is queued again when the worker is done; an
// item added after a delay is added when the delay has passed on the
// replica's clock, the earliest of several delays counting. Its delays run
// in simulated time, where client-go's run on a goroutine of their own,
// which would make a run depend on the scheduler; the rate limiter is the
// controller's per-item backoff (electionRetries, gcRetries), without the
// overall bucket (overallRetries), which reads the wall clock. The replica's real
// processNext and processNextGC take items from it: ready is told when an
// item can be taken.
type simQueue struct {
	sc      *simController
	limiter workqueue.TypedRateLimiter[types.NamespacedName]
	queue   []types.NamespacedName
	dirty   map[types.NamespacedName]bool
	// processing holds the items taken and not done yet.
	processing map[types.NamespacedName]bool
	// waiting holds the true instant each delayed item is due.
	waiting  map[types.NamespacedName]time.Time
	shutDown bool
	ready    func()
}

var _ workqueue.TypedRateLimitingInterface[types.NamespacedName] = (*simQueue)(nil)

func newSimQueue(sc *simController, limiter workqueue.TypedRateLimiter[types.NamespacedName], ready func()) *simQueue {
	return &simQueue{
		sc:         sc,
		limiter:    limiter,
		dirty:      map[types.NamespacedName]bool{},
		processing: map[types.NamespacedName]bool{},
		waiting:    map[types.NamespacedName]time.Time{},
		ready:      ready,
	}
}

func (q *simQueue) Add(item types.NamespacedName) {
	if q.shutDown || q.dirty[item] {
		return
	}
	q.dirty[item] = true
	if q.processing[item] {
		return
	}
	q.queue = append(q.queue, item)
	q.ready()
}

func (q *simQueue) Len() int { return len(q.queue) }

// Get takes the first item; the simulation calls the worker only when there
// is one, so it never blocks.
func (q *simQueue) Get() (types.NamespacedName, bool) {
	if len(q.queue) == 0 {
		return types.NamespacedName{}, true
	}
	item := q.queue[0]
	q.queue = slices.Delete(q.queue, 0, 1)
	q.processing[item] = true
	delete(q.dirty, item)
	return item, false
}

func (q *simQueue) Done(item types.NamespacedName) {
	delete(q.processing, item)
	if q.dirty[item] {
		q.queue = append(q.queue, item)
		q.ready()
	}
}

func (q *simQueue) ShutDown()                        { q.shutDown = true }
func (q *simQueue) ShutDownWithDrain()               { q.shutDown = true }
func (q *simQueue) ShuttingDown() bool               { return q.shutDown }
func (q *simQueue) Forget(item types.NamespacedName) { q.limiter.Forget(item) }
func (q *simQueue) NumRequeues(item types.NamespacedName) int {
	return q.limiter.NumRequeues(item)
}

func (q *simQueue) AddRateLimited(item types.NamespacedName) {
	q.AddAfter(item, q.limiter.When(item))
}

// AddAfter adds item once d has passed on the replica's clock.
func (q *simQueue) AddAfter(item types.NamespacedName, d time.Duration) {
	if q.shutDown {
		return
	}
	if d <= 0 {
		q.Add(item)
		return
	}
	sc := q.sc
	w := sc.w
	// The replica's clock runs at its own rate; a wait always lets time
	// pass.
	at := w.Now.Add(max(time.Duration(float64(d)/(1+sc.clk.Drift)), time.Nanosecond) + time.Nanosecond)
	if due, ok := q.waiting[item]; ok && !at.Before(due) {
		return
	}
	q.waiting[item] = at
	w.At(at, func() {
		sc.act(func() {
			if due, ok := q.waiting[item]; !ok || !due.Equal(at) {
				return // an earlier delay took it
			}
			delete(q.waiting, item)
			sc.sync()
			q.Add(item)
		})
	})
}
