package access

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// scripted is a ListerWatcher that answers each call with the next scripted
// result and records the options of every call.
type scripted struct {
	mu      sync.Mutex
	lists   []any // *coordinationv1.LeaseList or error
	watches []any // *watch.FakeWatcher or error
	listed  []metav1.ListOptions
	watched []metav1.ListOptions
	// watchCtxs are the contexts the watches were started with.
	watchCtxs []context.Context
	called    chan struct{}
}

func newScripted() *scripted { return &scripted{called: make(chan struct{}, 100)} }

func (s *scripted) ListWithContext(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed = append(s.listed, o)
	return pop[*coordinationv1.LeaseList](&s.lists, "list")
}

func (s *scripted) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watched = append(s.watched, o)
	s.watchCtxs = append(s.watchCtxs, ctx)
	select {
	case s.called <- struct{}{}:
	default:
	}
	return pop[*watch.FakeWatcher](&s.watches, "watch")
}

// pop returns the next scripted result, a 503 once there is none.
func pop[T any](script *[]any, what string) (T, error) {
	var zero T
	if len(*script) == 0 {
		return zero, apierrors.NewServiceUnavailable("no " + what + " scripted")
	}
	next := (*script)[0]
	*script = (*script)[1:]
	if err, ok := next.(error); ok {
		return zero, err
	}
	return next.(T), nil
}

func (s *scripted) watchOptions() []metav1.ListOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metav1.ListOptions(nil), s.watched...)
}

func lease(name, rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func leaseList(rv string, items ...*coordinationv1.Lease) *coordinationv1.LeaseList {
	l := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, it := range items {
		l.Items = append(l.Items, *it)
	}
	return l
}

func fastSteady(lw cache.ListerWatcherWithContext) *steadyListWatch {
	s := newSteadyListWatch(lw, &coordinationv1.Lease{})
	s.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 4 * time.Millisecond}
	return s
}

var errRefused = fmt.Errorf("dial tcp 127.0.0.1:6443: connect: %w", syscall.ECONNREFUSED)

func TestSteadyRetriesWhatCanBeRetried(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lw := newScripted()
	fw := watch.NewFake()
	lw.watches = []any{errRefused, apierrors.NewServiceUnavailable("starting"), apierrors.NewTooManyRequests("busy", 1), apierrors.NewInternalError(fmt.Errorf("etcd")), fw}
	lw.lists = []any{errRefused, apierrors.NewTooManyRequests("busy", 1), leaseList("7", lease("a", "7"))}
	s := fastSteady(lw)

	list, err := s.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if got := len(list.(*coordinationv1.LeaseList).Items); got != 1 || len(lw.listed) != 3 {
		t.Errorf("list returned %d items after %d calls, want 1 after 3", got, len(lw.listed))
	}
	w, err := s.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "7"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	if got := len(lw.watchOptions()); got != 5 {
		t.Errorf("watch started after %d calls, want 5", got)
	}
	fw.Modify(lease("a", "8"))
	expectEvent(t, w, watch.Modified, "a", "8")
}

// Every watch of the server, the first included, runs under the steady
// watch's own context: stopping the steady watch ends it, and when the
// reflector's context ends, the steady watch has seen it end by the time the
// watch of the server reports its end, which is then no failure to log and
// retry (a one-shot kubectl cle logged "Watch failed; watching again" on its
// way out when the first watch ran under the reflector's context instead).
func TestSteadyWatchOwnsItsServerWatches(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lw := newScripted()
	lw.watches = []any{watch.NewFake()}
	w, err := fastSteady(lw).WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	lw.mu.Lock()
	started := lw.watchCtxs[0]
	lw.mu.Unlock()
	w.Stop()
	if started.Err() == nil {
		t.Error("the first watch of the server goes on after the steady watch was stopped")
	}
	for range w.ResultChan() {
	}
}

func TestSteadyPassesOtherErrors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", fmt.Errorf("no"))
	lw := newScripted()
	lw.lists = []any{forbidden}
	lw.watches = []any{forbidden}
	s := fastSteady(lw)
	if _, err := s.ListWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list: got %v, want the 403", err)
	}
	if _, err := s.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"}); !apierrors.IsForbidden(err) {
		t.Errorf("watch: got %v, want the 403", err)
	}
	if len(lw.listed) != 1 || len(lw.watched) != 1 {
		t.Errorf("%d lists and %d watches, want one of each", len(lw.listed), len(lw.watched))
	}
}

func TestSteadyResumesAnEndedWatch(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lw := newScripted()
	first, second := watch.NewFake(), watch.NewFake()
	lw.watches = []any{first, errRefused, second}
	s := fastSteady(lw)
	w := mustWatch(ctx, t, s, "3")
	first.Modify(lease("a", "4"))
	expectEvent(t, w, watch.Modified, "a", "4")
	first.Stop() // the server ends the watch
	second.Add(lease("b", "5"))
	expectEvent(t, w, watch.Added, "b", "5")
	opts := lw.watchOptions()
	if len(opts) != 3 || opts[1].ResourceVersion != "4" || opts[2].ResourceVersion != "4" {
		t.Errorf("watches started from %v, want 3, 4, 4", rvs(opts))
	}

	// An error event retrying can fix starts another watch; nothing goes up.
	second.Error(&apierrors.NewInternalError(fmt.Errorf("etcd")).ErrStatus)
	poll(t, "another watch", func() bool { return len(lw.watchOptions()) > 3 })
	select {
	case ev, ok := <-w.ResultChan():
		t.Fatalf("a retriable watch error went up: %v %v", ev, ok)
	default:
	}
}

func TestSteadyListsAgainWhenTheWatchExpires(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lw := newScripted()
	first, second := watch.NewFake(), watch.NewFake()
	lw.lists = []any{
		leaseList("10", lease("a", "1"), lease("b", "2"), lease("c", "3")),
		errRefused,
		leaseList("20", lease("a", "1"), lease("b", "12"), lease("d", "15")),
	}
	lw.watches = []any{first, second}
	s := fastSteady(lw)
	if _, err := s.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	w := mustWatch(ctx, t, s, "10")
	first.Modify(lease("b", "11"))
	expectEvent(t, w, watch.Modified, "b", "11")
	first.Error(&apierrors.NewResourceExpired("too old resource version: 10 (18)").ErrStatus)

	expectEvent(t, w, watch.Deleted, "c", "3")
	expectEvent(t, w, watch.Modified, "b", "12")
	expectEvent(t, w, watch.Added, "d", "15")
	expectEvent(t, w, watch.Bookmark, "", "20")
	second.Modify(lease("a", "21"))
	expectEvent(t, w, watch.Modified, "a", "21")
	if opts := lw.watchOptions(); len(opts) != 2 || opts[1].ResourceVersion != "20" {
		t.Errorf("watches started from %v, want 10, 20", rvs(opts))
	}
	if lw.listed[1].ResourceVersion != "" || lw.listed[2].ResourceVersion != "" {
		t.Errorf("lists again at %q, %q; want the latest", lw.listed[1].ResourceVersion, lw.listed[2].ResourceVersion)
	}
}

func TestSteadyStop(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lw := newScripted()
	fw := watch.NewFake()
	lw.watches = []any{fw}
	w, err := fastSteady(lw).WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	poll(t, "the server's watch stopped", fw.IsStopped)
	for range w.ResultChan() {
	}
}

// TestSteadyInformer runs a SharedIndexInformer over a steadyListWatch
// whose watch expires while objects change: the informer ends with the
// server's objects, told of each change, having listed once.
func TestSteadyInformer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lw := newScripted()
	first, second := watch.NewFake(), watch.NewFake()
	lw.lists = []any{
		leaseList("10", lease("a", "1"), lease("b", "2")),
		leaseList("20", lease("b", "12"), lease("c", "15")),
	}
	lw.watches = []any{first, second}
	inf := cache.NewSharedIndexInformer(fastSteady(lw), &coordinationv1.Lease{}, 0, cache.Indexers{})
	events := make(chan string, 10)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { events <- "add " + obj.(*coordinationv1.Lease).Name },
		UpdateFunc: func(_, obj any) { events <- "update " + obj.(*coordinationv1.Lease).Name },
		DeleteFunc: func(obj any) { events <- "delete " + obj.(*coordinationv1.Lease).Name },
	}); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	want := func(w string) {
		t.Helper()
		select {
		case got := <-events:
			if got != w {
				t.Fatalf("got %q, want %q", got, w)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatalf("no %q", w)
		}
	}
	want("add a")
	want("add b")
	<-lw.called
	first.Error(&apierrors.NewGone("too old resource version").ErrStatus)
	want("delete a")
	want("update b")
	want("add c")
	poll(t, "the informer at resourceVersion 20", func() bool { return inf.LastSyncResourceVersion() == "20" })
	second.Delete(lease("c", "21"))
	want("delete c")
	if len(lw.listed) != 2 {
		t.Errorf("%d lists, want 2 (the informer's, then one after the expiry)", len(lw.listed))
	}
}

// mustWatch starts a watch from rv, stopped when the test ends.
func mustWatch(ctx context.Context, t *testing.T, s *steadyListWatch, rv string) watch.Interface {
	t.Helper()
	w, err := s.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name, rv string) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed, want %s %s@%s", typ, name, rv)
		}
		l, _ := ev.Object.(*coordinationv1.Lease)
		if ev.Type != typ || l == nil || l.Name != name || l.ResourceVersion != rv {
			t.Fatalf("got %s %#v, want %s %s@%s", ev.Type, ev.Object, typ, name, rv)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no event, want %s %s@%s", typ, name, rv)
	}
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("no %s", what)
	}
}

func rvs(opts []metav1.ListOptions) []string {
	var out []string
	for _, o := range opts {
		out = append(out, o.ResourceVersion)
	}
	return out
}

// TestSteadyInformerTransformed runs the informer as cle-controller does,
// managedFields stripped by a transform and its store read all along, while
// a watch expires and a list drops an object that came from the watch.
func TestSteadyInformerTransformed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lw := newScripted()
	first, second := watch.NewFake(), watch.NewFake()
	lw.lists = []any{
		leaseList("10", lease("a", "1")),
		leaseList("20", lease("a", "1")),
	}
	lw.watches = []any{first, second}
	steady := fastSteady(lw)
	inf := cache.NewSharedIndexInformer(steady, &coordinationv1.Lease{}, 0, cache.Indexers{})
	steady.cached = inf.GetIndexer().GetByKey
	if err := inf.SetTransform(StripManagedFields); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan *coordinationv1.Lease, 1)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { deleted <- obj.(*coordinationv1.Lease) },
	}); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	var readers sync.WaitGroup
	readers.Go(func() {
		for ctx.Err() == nil {
			for _, obj := range inf.GetStore().List() {
				_ = obj.(*coordinationv1.Lease).DeepCopy()
			}
		}
	})
	defer readers.Wait()
	defer cancel()

	<-lw.called
	withFields := lease("b", "11")
	withFields.Spec.HolderIdentity = ptr.To("x")
	withFields.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "test"}}
	first.Add(withFields)
	poll(t, "b in the store", func() bool { _, ok, _ := inf.GetStore().GetByKey("ns/b"); return ok })
	first.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	select {
	case l := <-deleted:
		if l.Name != "b" || ptr.Deref(l.Spec.HolderIdentity, "") != "x" || l.ManagedFields != nil {
			t.Errorf("deleted %#v, want b as the informer stored it", l)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("b was not deleted")
	}
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != "ns/a" {
		t.Errorf("store holds %v, want ns/a", keys)
	}
}

func TestSteadyPaginatedList(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lw := newScripted()
	page1 := leaseList("10", lease("a", "1"))
	page1.Continue = "next"
	lw.lists = []any{page1, leaseList("10", lease("b", "2")), leaseList("20", lease("b", "2"))}
	fw := watch.NewFake()
	lw.watches = []any{fw, watch.NewFake()}
	s := fastSteady(lw)
	if _, err := s.ListWithContext(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListWithContext(ctx, metav1.ListOptions{Limit: 1, Continue: "next"}); err != nil {
		t.Fatal(err)
	}
	w := mustWatch(ctx, t, s, "10")
	fw.Error(&apierrors.NewGone("too old").ErrStatus)
	// Both pages were recorded: only a, gone since, differs.
	expectEvent(t, w, watch.Deleted, "a", "1")
	expectEvent(t, w, watch.Bookmark, "", "20")
}

func TestSteadyResourceVersionTooLarge(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tooLarge := apierrors.NewTimeoutError("Too large resource version", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
	lw := newScripted()
	lw.lists = []any{tooLarge, leaseList("5", lease("a", "5"))}
	fw := watch.NewFake()
	lw.watches = []any{tooLarge, fw}
	s := fastSteady(lw)
	// The reflector's own list goes up: it knows to list from scratch.
	if _, err := s.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "50"}); !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Errorf("list: got %v, want the error", err)
	}
	// A watch ahead of the server lists the current state instead.
	w := mustWatch(ctx, t, s, "50")
	expectEvent(t, w, watch.Added, "a", "5")
	expectEvent(t, w, watch.Bookmark, "", "5")
	poll(t, "a watch from the list", func() bool { return len(lw.watchOptions()) == 2 })
	if opts := lw.watchOptions(); opts[1].ResourceVersion != "5" {
		t.Errorf("watches started from %v, want 50, 5", rvs(opts))
	}
}
