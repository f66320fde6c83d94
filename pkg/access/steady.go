package access

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// retryBackoff is how the informers of this package retry a list or a
// watch that failed for a reason retrying can fix: 100 ms, doubling, at most
// 2 s (3 s with jitter) apart, for as long as it takes. Every node's kubelet
// renews its Lease as often; the objects listed are small.
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 2 * time.Second}
}

// steadyListWatch shields an informer's reflector from a flapping API
// server.
//
// The reflector waits before every new list, and before every watch it
// restarts after an error, with a backoff that grows from 0.8 s to 30 s (60 s
// with jitter) and resets only after two minutes without such a wait, and a
// SharedIndexInformer cannot change it. A few kube-apiserver restarts in two
// minutes (each one ends every watch with 410 Gone and refuses connections
// for a while) then leave an informer blind for up to a minute: a candidate
// would not see the ping it must answer within the ping timeout, and the
// election controller would not see the answer.
//
// So a steadyListWatch handles those failures itself, and its watch only
// ends when the reflector stops it or for an error retrying cannot fix:
//   - a list or watch that fails with a network error, 429, 500, 502, 503
//     or 504 is retried with backoff (retryBackoff);
//   - a watch the server ends is started again from the last
//     resourceVersion seen;
//   - a watch that expired (410), or is ahead of the server, is replaced
//     by a list of the current state, whose difference
//     from what the reflector was last sent goes up as ADDED, MODIFIED and
//     DELETED events, then a bookmark at the list's resourceVersion, and a
//     watch from there.
//
// Other errors (403, 404, ...) go up unchanged, for the reflector to handle
// as it always does. It never uses watch-list streams: the objects it
// serves are small, and it must see every list to know what the reflector
// holds.
type steadyListWatch struct {
	lw cache.ListerWatcherWithContext
	// example is an object of the listed type, copied to make bookmarks.
	example runtime.Object
	what    string
	backoff wait.Backoff
	clock   clock.Clock

	// cached looks an object up in the informer's store, to send it as
	// DELETED when a list no longer has it.
	cached func(key string) (any, bool, error)

	mu sync.Mutex
	// sent is the resourceVersion, by key, of every object the reflector
	// has been given, as of the last list and the events sent up since. It
	// may lag the reflector (an event sent but not yet recorded), never
	// lead it for long: a lagging entry only makes a later difference send
	// an object again.
	sent map[string]string
	// listing collects a paginated list until its last page.
	listing map[string]string
	// generation changes with each complete list: a watch started before
	// it stops recording.
	generation uint64
}

func newSteadyListWatch(lw cache.ListerWatcherWithContext, example runtime.Object) *steadyListWatch {
	return &steadyListWatch{
		lw:      lw,
		example: example,
		what:    fmt.Sprintf("%T", example),
		backoff: retryBackoff(),
		clock:   clock.RealClock{},
		cached:  func(string) (any, bool, error) { return nil, false, nil },
		sent:    map[string]string{},
	}
}

// IsWatchListSemanticsUnSupported keeps the reflector on list-then-watch.
func (s *steadyListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (s *steadyListWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), o)
}

func (s *steadyListWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), o)
}

// ListWithContext lists, retrying what can be retried, and records the
// objects for later differences.
func (s *steadyListWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	var list runtime.Object
	err := s.retry(ctx, "list", func() error {
		var err error
		list, err = s.lw.ListWithContext(ctx, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	versions, cont, _, err := listVersions(list)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.Continue == "" || s.listing == nil {
		s.listing = map[string]string{}
	}
	for k, rv := range versions {
		s.listing[k] = rv
	}
	if cont == "" {
		s.sent, s.listing = s.listing, nil
		s.generation++
	}
	return list, nil
}

// WatchWithContext starts a watch, retrying what can be retried, and keeps
// it going until the reflector stops it.
func (s *steadyListWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	// Every watch of the server runs under the steady watch's own
	// context: one that ends is then known to have ended (ctx.Err) by the
	// time the watch of the server reports it, and is not taken for a
	// failure to retry and log.
	ctx, cancel := context.WithCancel(ctx)
	up, err := s.startWatch(ctx, o)
	if err != nil && !needsList(err) {
		cancel()
		return nil, err
	}
	s.mu.Lock()
	generation := s.generation
	s.mu.Unlock()
	w := &steadyWatch{s: s, ctx: ctx, cancel: cancel, out: make(chan watch.Event), generation: generation}
	go w.run(up, o)
	return w, nil
}

// startWatch starts a watch from o.ResourceVersion, retrying what can be
// retried.
func (s *steadyListWatch) startWatch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	var w watch.Interface
	err := s.retry(ctx, "watch", func() error {
		var err error
		w, err = s.lw.WatchWithContext(ctx, o)
		return err
	})
	if err != nil {
		// Whatever came with the error (a typed nil, say) is no watch.
		return nil, err
	}
	return w, nil
}

// retry calls f until it succeeds, fails for good, or ctx is done. The
// first failure is logged, then one a minute while they last.
func (s *steadyListWatch) retry(ctx context.Context, verb string, f func() error) error {
	logger := klog.FromContext(ctx)
	backoff := s.backoff
	start := s.clock.Now()
	var logged time.Time
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			if attempt > 1 {
				logger.Info("List or watch works again", "type", s.what, "verb", verb, "attempts", attempt, "after", s.clock.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if !retriable(ctx, err) {
			return err
		}
		delay := backoff.Step()
		if now := s.clock.Now(); now.Sub(logged) >= time.Minute {
			logger.Info("List or watch failed; retrying", "type", s.what, "verb", verb, "err", err, "attempt", attempt, "retryIn", delay.Round(time.Millisecond))
			logged = now
		} else {
			logger.V(4).Info("List or watch failed again", "type", s.what, "verb", verb, "err", err, "attempt", attempt, "retryIn", delay.Round(time.Millisecond))
		}
		if err := s.sleep(ctx, delay); err != nil {
			return err
		}
	}
}

func (s *steadyListWatch) sleep(ctx context.Context, d time.Duration) error {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// retriable tells a failure that may pass (the server is down, restarting
// or overloaded, or the network failed) from one a retry repeats. A
// resourceVersion the server has not reached is not retried: it needs a
// fresh list (needsList).
func retriable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	if needsList(err) {
		return false
	}
	switch status.Status().Code {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// needsList tells a watch the server cannot serve from its resourceVersion,
// too old (expired) or newer than the server (after etcd was restored from
// a backup): only a list of the current state can go on from there.
func needsList(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// listVersions returns a list's resourceVersions by key, its continue token
// and its resourceVersion.
func listVersions(list runtime.Object) (map[string]string, string, string, error) {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, "", "", fmt.Errorf("list of %T: %w", list, err)
	}
	versions := map[string]string{}
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		key, rv, err := keyAndVersion(obj)
		versions[key] = rv
		return err
	})
	if err != nil {
		return nil, "", "", fmt.Errorf("list of %T: %w", list, err)
	}
	return versions, lm.GetContinue(), lm.GetResourceVersion(), nil
}

func keyAndVersion(obj runtime.Object) (string, string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", "", err
	}
	key, err := cache.MetaNamespaceKeyFunc(obj)
	return key, m.GetResourceVersion(), err
}

// steadyWatch is one watch as the reflector sees it, made of as many watches
// of the server as it takes.
type steadyWatch struct {
	s          *steadyListWatch
	ctx        context.Context
	cancel     context.CancelFunc
	out        chan watch.Event
	generation uint64
}

func (w *steadyWatch) Stop()                          { w.cancel() }
func (w *steadyWatch) ResultChan() <-chan watch.Event { return w.out }

// run forwards the events of up, and of the watches and lists that replace
// it, until the reflector stops the watch or an error cannot be retried.
func (w *steadyWatch) run(up watch.Interface, o metav1.ListOptions) {
	defer close(w.out)
	defer w.cancel()
	logger := klog.FromContext(w.ctx)
	s := w.s
	rv := o.ResourceVersion
	backoff := s.backoff
	// relist is set when the server cannot go on from rv; listed when the
	// last thing done was a list, so that a server that cannot serve a
	// watch from its own list's resourceVersion is not listed in a loop.
	relist, listed := up == nil, false
	for {
		if relist {
			if listed {
				if err := s.sleep(w.ctx, backoff.Step()); err != nil {
					return
				}
			}
			listRV, err := w.relist()
			if err != nil {
				w.fail(err)
				return
			}
			rv, relist, listed = listRV, false, true
		}
		o.ResourceVersion = rv
		if up == nil {
			var err error
			if up, err = s.startWatch(w.ctx, o); err != nil {
				if needsList(err) {
					relist = true
					continue
				}
				w.fail(err)
				return
			}
		}
		start, events := s.clock.Now(), 0
		end := w.forward(up, &rv, &events)
		up.Stop()
		up = nil
		if events > 0 {
			backoff, listed = s.backoff, false
		}
		switch {
		case errors.Is(end, errStopped) || w.ctx.Err() != nil:
			return
		case end == nil && (events > 0 || s.clock.Since(start) >= time.Second):
			// The server ended the watch (its timeout); go on at once.
			continue
		case end == nil:
			// A watch that ends at once without an event is a server
			// going away.
		case needsList(end):
			logger.V(2).Info("Watch cannot go on; listing again", "type", s.what, "resourceVersion", rv, "err", end)
			relist = true
			continue
		case retriable(w.ctx, end):
			logger.Info("Watch failed; watching again", "type", s.what, "resourceVersion", rv, "err", end)
		default:
			w.fail(end)
			return
		}
		if err := s.sleep(w.ctx, backoff.Step()); err != nil {
			return
		}
	}
}

var errStopped = errors.New("watch stopped")

// forward sends up's events on until up ends (nil), sends an error (the
// error), or the watch is stopped (errStopped). It keeps *rv at the last
// resourceVersion sent.
func (w *steadyWatch) forward(up watch.Interface, rv *string, events *int) error {
	for {
		select {
		case <-w.ctx.Done():
			return errStopped
		case ev, ok := <-up.ResultChan():
			if !ok {
				return nil
			}
			if ev.Type == watch.Error {
				return apierrors.FromObject(ev.Object)
			}
			*events++
			sentRV, ok := w.send(ev)
			if !ok {
				return errStopped
			}
			if sentRV != "" {
				*rv = sentRV
			}
		}
	}
}

// relist lists again and sends the difference from what the reflector was
// sent, then a bookmark at the list's resourceVersion, which it returns.
// The list is not paginated (no limit): the difference needs all of it.
func (w *steadyWatch) relist() (string, error) {
	s := w.s
	var list runtime.Object
	err := s.retry(w.ctx, "list", func() error {
		var err error
		list, err = s.lw.ListWithContext(w.ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		return "", err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", fmt.Errorf("list of %T: %w", list, err)
	}
	// Each item gets its own allocation, so that the informer's store
	// does not keep the whole list alive.
	objs, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return "", fmt.Errorf("items of %T: %w", list, err)
	}
	items := make(map[string]runtime.Object, len(objs))
	for _, obj := range objs {
		key, _, err := keyAndVersion(obj)
		if err != nil {
			return "", fmt.Errorf("list of %T: %w", list, err)
		}
		items[key] = obj
	}

	s.mu.Lock()
	sent := maps.Clone(s.sent)
	s.mu.Unlock()

	var evs []watch.Event
	for _, k := range slices.Sorted(maps.Keys(sent)) {
		if _, ok := items[k]; !ok {
			evs = append(evs, watch.Event{Type: watch.Deleted, Object: s.lastKnown(k, sent[k])})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(items)) {
		_, rv, _ := keyAndVersion(items[k])
		switch was, ok := sent[k]; {
		case !ok:
			evs = append(evs, watch.Event{Type: watch.Added, Object: items[k]})
		case was != rv:
			evs = append(evs, watch.Event{Type: watch.Modified, Object: items[k]})
		}
	}
	bookmark := s.example.DeepCopyObject()
	if m, err := meta.Accessor(bookmark); err == nil {
		m.SetResourceVersion(lm.GetResourceVersion())
	}
	evs = append(evs, watch.Event{Type: watch.Bookmark, Object: bookmark})
	klog.FromContext(w.ctx).V(2).Info("Listed again", "type", s.what, "resourceVersion", lm.GetResourceVersion(), "changes", len(evs)-1)
	for _, ev := range evs {
		if _, ok := w.send(ev); !ok {
			return "", errStopped
		}
	}
	return lm.GetResourceVersion(), nil
}

// lastKnown is what to send as DELETED for an object a list no longer has:
// a copy of the informer's, or, if the informer has not stored it yet, an
// object with only its name.
func (s *steadyListWatch) lastKnown(key, rv string) runtime.Object {
	if obj, ok, err := s.cached(key); err == nil && ok {
		if o, ok := obj.(runtime.Object); ok {
			return o.DeepCopyObject()
		}
	}
	o := s.example.DeepCopyObject()
	if m, err := meta.Accessor(o); err == nil {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		m.SetNamespace(ns)
		m.SetName(name)
		m.SetResourceVersion(rv)
	}
	return o
}

// send gives ev to the reflector, then records it, unless the watch is
// stopped first, and returns the event's resourceVersion. Recording after
// sending keeps the record from leading the reflector; the key and
// resourceVersion are read before, as the object is the informer's once
// sent.
func (w *steadyWatch) send(ev watch.Event) (string, bool) {
	key, rv, err := keyAndVersion(ev.Object)
	select {
	case <-w.ctx.Done():
		return "", false
	case w.out <- ev:
	}
	if err != nil || ev.Type == watch.Bookmark {
		return rv, true
	}
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.ctx.Err() != nil || w.generation != s.generation {
		return rv, true
	}
	if ev.Type == watch.Deleted {
		delete(s.sent, key)
	} else {
		s.sent[key] = rv
	}
	return rv, true
}

// fail sends err up as the watch's last event, unless it was stopped.
func (w *steadyWatch) fail(err error) {
	if errors.Is(err, errStopped) || w.ctx.Err() != nil {
		return
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	select {
	case <-w.ctx.Done():
	case w.out <- watch.Event{Type: watch.Error, Object: &st}:
	}
}
