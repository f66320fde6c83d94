package kubectlcle

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// TimeFormat is how watch stamps its lines.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Watcher prints one line per change of a Lease's holder, preferred holder
// or candidate set (a candidate joining, leaving or changing its versions or
// strategy), stamped with the time the change was seen.
//
// It keeps its own view of the Leases and candidates, updated in the order
// each informer delivers its events, so that two quick writes of a Lease
// (preferredHolder set, then the handover) print as two lines in order.
//
// Leases and candidates arrive on two watches, and nothing orders one
// against the other: the controller can name a candidate in a Lease before
// this watch has seen the candidate join. A Lease change that names a
// holder or preferredHolder the view has no candidate for is therefore held
// back until that candidate arrives or CandidateWait passes, so that the
// story prints cause first ("candidates +old", then "preferredHolder
// <none> -> old").
type Watcher struct {
	Source Source
	Judge  Judge
	Clock  clock.WithDelayedExecution
	// CandidateWait is how long a Lease change waits for the candidate it
	// names; DefaultCandidateWait when zero.
	CandidateWait time.Duration
	Out           io.Writer
	// Namespace to watch; all when empty.
	Namespace string
	// Name limits the watch to one Lease of Namespace.
	Name string
	// ListedOnly reports only Leases that the Lease watch sees: with a
	// label selector on Leases (Source.LeaseSelector), a Lease that
	// candidates name but the selector does not select is left out, and
	// one that stops being selected is reported as gone.
	ListedOnly bool
	// Format is how changes print: one line each by default, else one
	// object each (a LeaseChange, or the Lease with -o name).
	Format Format

	mu      sync.Mutex
	started bool
	leases  map[types.NamespacedName]*coordinationv1.Lease
	cands   map[types.NamespacedName]map[string]*coordinationv1beta1.LeaseCandidate
	candKey map[types.NamespacedName]types.NamespacedName // candidate -> its Lease
	last    map[types.NamespacedName]watchState
	// held are Lease changes waiting for the candidate they name, with the
	// timer that reports them when it does not come.
	held   map[types.NamespacedName]heldLease
	closed bool
	err    error
}

// DefaultCandidateWait is the Watcher's CandidateWait by default: a
// candidate's watch event trails the Lease write it caused by well under a
// second on a healthy server.
const DefaultCandidateWait = 2 * time.Second

type heldLease struct {
	lease *coordinationv1.Lease
	timer clock.Timer
}

// watchState is what watch reports on, per Lease.
type watchState struct {
	exists     bool
	holder     string
	preferred  string
	term       int32
	candidates []string // "name(emulation E, binary B[, strategy S])", sorted
	state      State
	best       string
}

// Run watches until ctx is done. It prints the current state of every Lease
// under coordinated election first, then the changes.
func (w *Watcher) Run(ctx context.Context) error {
	w.init()
	defer w.close()

	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	inf := w.Source.newInformers(w.Namespace)
	// An error before the first list completes (e.g. Forbidden) ends the
	// watch with it; later ones are logged as client-go does, and the
	// informers retry.
	var synced atomic.Bool
	if err := inf.onError(func(ctx context.Context, r *cache.Reflector, err error) {
		if synced.Load() {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			return
		}
		cancel(listError(err))
	}); err != nil {
		return err
	}
	leaseReg, err := inf.leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onLease(obj, false) },
		UpdateFunc: func(_, obj any) { w.onLease(obj, false) },
		DeleteFunc: func(obj any) { w.onLease(obj, true) },
	})
	if err != nil {
		return fmt.Errorf("watch Leases: %w", err)
	}
	candReg, err := inf.candidates.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onCandidate(obj, false) },
		UpdateFunc: func(_, obj any) { w.onCandidate(obj, false) },
		DeleteFunc: func(obj any) { w.onCandidate(obj, true) },
	})
	if err != nil {
		return fmt.Errorf("watch LeaseCandidates: %w", err)
	}
	wait := inf.run(ctx)
	defer wait()
	defer cancel(nil) // stops the informers before wait
	if !cache.WaitForCacheSync(ctx.Done(), leaseReg.HasSynced, candReg.HasSynced) {
		if parent.Err() != nil {
			return nil
		}
		return fmt.Errorf("list Leases and LeaseCandidates: %w", context.Cause(ctx))
	}
	synced.Store(true)
	w.mu.Lock()
	w.started = true
	keys := slices.Collect(maps.Keys(w.leases))
	keys = append(keys, slices.Collect(maps.Keys(w.cands))...)
	if w.Name != "" {
		// A named Lease is reported even before it or its candidates exist,
		// so that the reader knows the watch is in place.
		keys = append(keys, types.NamespacedName{Namespace: w.Namespace, Name: w.Name})
	}
	slices.SortFunc(keys, compareKeys)
	for _, key := range slices.Compact(keys) {
		w.report(key)
	}
	err = w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	<-ctx.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Watcher) init() {
	w.leases = map[types.NamespacedName]*coordinationv1.Lease{}
	w.cands = map[types.NamespacedName]map[string]*coordinationv1beta1.LeaseCandidate{}
	w.candKey = map[types.NamespacedName]types.NamespacedName{}
	w.last = map[types.NamespacedName]watchState{}
	w.held = map[types.NamespacedName]heldLease{}
}

// close stops the timers of held Lease changes; nothing prints after Run
// returns.
func (w *Watcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for key, h := range w.held {
		h.timer.Stop()
		delete(w.held, key)
	}
}

func compareKeys(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func (w *Watcher) wanted(key types.NamespacedName) bool {
	return w.Name == "" || (key.Name == w.Name && key.Namespace == w.Namespace)
}

func (w *Watcher) onLease(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	if !w.wanted(key) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	h, held := w.held[key]
	if !deleted && w.waitsForCandidate(key, lease) {
		if !held {
			// Some clocks call f with their own lock held, and report
			// reads the clock: release on a goroutine of its own.
			h.timer = w.Clock.AfterFunc(w.candidateWait(), func() { go w.release(key) })
		}
		h.lease = lease
		w.held[key] = h
		return
	}
	if held {
		h.timer.Stop()
		delete(w.held, key)
	}
	if deleted {
		delete(w.leases, key)
	} else {
		w.leases[key] = lease
	}
	w.report(key)
}

// waitsForCandidate reports whether a Lease change names, as its new holder
// or preferredHolder, somebody the view has no candidate for yet.
func (w *Watcher) waitsForCandidate(key types.NamespacedName, lease *coordinationv1.Lease) bool {
	if !w.started {
		return false
	}
	prev := w.last[key]
	unknown := func(name, was string) bool {
		_, known := w.cands[key][name]
		return name != "" && name != was && !known
	}
	return unknown(ptr.Deref(lease.Spec.HolderIdentity, ""), prev.holder) ||
		unknown(ptr.Deref(lease.Spec.PreferredHolder, ""), prev.preferred)
}

func (w *Watcher) candidateWait() time.Duration {
	if w.CandidateWait > 0 {
		return w.CandidateWait
	}
	return DefaultCandidateWait
}

// release reports a held Lease change whose candidate did not come in time.
func (w *Watcher) release(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.held[key]
	if !ok || w.closed {
		return
	}
	delete(w.held, key)
	w.leases[key] = h.lease
	w.report(key)
}

func (w *Watcher) onCandidate(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	id := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Spec.LeaseName}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.candKey[id]; ok && (old != key || deleted) {
		delete(w.cands[old], lc.Name)
		if len(w.cands[old]) == 0 {
			delete(w.cands, old)
		}
		delete(w.candKey, id)
		w.report(old)
	}
	if deleted || !w.wanted(key) {
		return
	}
	if w.cands[key] == nil {
		w.cands[key] = map[string]*coordinationv1beta1.LeaseCandidate{}
	}
	w.cands[key][lc.Name] = lc
	w.candKey[id] = key
	if h, ok := w.held[key]; ok && !w.waitsForCandidate(key, h.lease) {
		// The candidate the held Lease change named has come: both print
		// now, the candidate first.
		h.timer.Stop()
		delete(w.held, key)
		w.leases[key] = h.lease
	}
	w.report(key)
}

// report prints what changed about a Lease since it was last reported.
// Callers hold w.mu.
func (w *Watcher) report(key types.NamespacedName) {
	if !w.started {
		return
	}
	lease := w.leases[key]
	cands := slices.Collect(maps.Values(w.cands[key]))
	prev, seen := w.last[key]
	now := w.Clock.Now()
	if w.ListedOnly && lease == nil {
		if seen {
			delete(w.last, key)
			w.print(key, now, []string{"Lease no longer selected (deleted, or its labels changed)"}, nil)
		}
		return
	}
	if !seen && w.Name == "" && len(cands) == 0 && (lease == nil || lease.Spec.Strategy == nil) {
		return // not under coordinated election, and never was
	}
	s := w.Judge.Summarize(Input{Key: key, Lease: lease, Candidates: cands}, now)
	cur := watchState{exists: lease != nil, holder: s.Holder, preferred: s.PreferredHolder, term: s.Term, state: s.State, best: s.Best}
	for _, lc := range cands {
		cur.candidates = append(cur.candidates, candidateEntry(lc))
	}
	slices.Sort(cur.candidates)
	w.last[key] = cur

	var lines []string
	if !seen && lease == nil && len(cands) == 0 {
		lines = append(lines, "no Lease and no LeaseCandidates yet")
	} else if !seen {
		lines = append(lines, fmt.Sprintf("holder %s (term %d), preferredHolder %s, candidates %s",
			none(cur.holder), cur.term, none(cur.preferred), none(strings.Join(cur.candidates, " "))))
	} else {
		// A candidate that joins is what a held holder or preferredHolder
		// change reported with it waited for, so it comes first.
		if diff := diffSets(prev.candidates, cur.candidates); diff != "" {
			lines = append(lines, "candidates "+diff)
		}
		if prev.holder != cur.holder || prev.exists != cur.exists {
			what := fmt.Sprintf("holder %s -> %s (term %d)", none(prev.holder), none(cur.holder), cur.term)
			if !cur.exists {
				what += " (Lease deleted)"
			}
			lines = append(lines, what)
		}
		if prev.preferred != cur.preferred {
			lines = append(lines, fmt.Sprintf("preferredHolder %s -> %s", none(prev.preferred), none(cur.preferred)))
		}
	}
	w.print(key, now, lines, &s)
}

// print writes what report found changed about a Lease: one line per
// change, or one object for them all. s is the Lease's new summary, nil
// when it is no longer reported on. Callers hold w.mu.
func (w *Watcher) print(key types.NamespacedName, now time.Time, changes []string, s *Summary) {
	if len(changes) == 0 {
		return
	}
	var err error
	if w.Format.Printer == nil {
		stamp := now.Format(TimeFormat) + "  " + key.String() + "  "
		tail := ""
		if s != nil {
			tail = fmt.Sprintf("  [%s, best %s]", s.State, none(s.Best))
		}
		for _, l := range changes {
			if _, err = fmt.Fprintln(w.Out, stamp+l+tail); err != nil {
				break
			}
		}
	} else {
		status := LeaseStatus{TypeMeta: typeMeta(KindLeaseStatus), Namespace: key.Namespace, Name: key.Name, APIMode: w.mode()}
		if s != nil {
			status = Status(s, w.mode())
		}
		if w.Format.Output == OutputName {
			err = w.Format.Printer.PrintObj(LeaseRef(&status), w.Out)
		} else {
			err = w.Format.Printer.PrintObj(&LeaseChange{
				TypeMeta: typeMeta(KindLeaseChange), Time: metav1.NewMicroTime(now), Changes: changes, Lease: status,
			}, w.Out)
		}
	}
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("write: %w", err)
	}
}

func (w *Watcher) mode() access.Mode {
	if w.Source.Access == nil {
		return ""
	}
	return w.Source.Access.Mode()
}

func candidateEntry(lc *coordinationv1beta1.LeaseCandidate) string {
	return fmt.Sprintf("%s(emulation %s, binary %s, %s)", lc.Name, none(lc.Spec.EmulationVersion), none(lc.Spec.BinaryVersion), none(string(lc.Spec.Strategy)))
}

// diffSets lists what left (-) and joined (+) a sorted set.
func diffSets(prev, cur []string) string {
	var parts []string
	for _, p := range prev {
		if _, found := slices.BinarySearch(cur, p); !found {
			parts = append(parts, "-"+p)
		}
	}
	for _, c := range cur {
		if _, found := slices.BinarySearch(prev, c); !found {
			parts = append(parts, "+"+c)
		}
	}
	return strings.Join(parts, " ")
}
