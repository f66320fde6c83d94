package controller

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// WatchLag measures how far behind the Lease watch is, from writes whose
// sending the controller saw: its own Lease writes, and the renewals of its
// own lock (ExpectRenewal). A write the watch has not delivered yet shows
// that the watch lags at least as long as that write has been outstanding;
// once the watch delivers it (or a later version: a watch that restarts
// delivers only the newest), nothing is known to be missing. So the lag is
// known while it lasts, a watch that stalls included, and is forgotten as
// soon as the watch catches up, however late that write was.
//
// The controller judges a holder's Lease expired a lease duration after it
// last saw a renewal, plus the lag: a watch that delivers late on a loaded
// server would otherwise make live holders look expired, and the elections
// and pings that follow load the server further. One WatchLag serves the
// controllers of successive leadership terms (Options.WatchLag); it is safe
// for concurrent use.
type WatchLag struct {
	mu sync.Mutex
	// pending are the writes not seen yet, by Lease.
	pending map[types.NamespacedName]lagProbe
	// last is the estimate made at lastAt: reused for lagReuse, as every
	// step asks and the pending writes may be many.
	last   time.Duration
	lastAt time.Time
}

// lagProbe is one write to recognise in the watch, by the renewTime it
// writes: the watch delivers it, or a later version, with that renewTime or
// a later one (renewals never move it back). It is recorded before the write
// is sent, since the watch may deliver the write before its response comes.
type lagProbe struct {
	renewTime time.Time
	sentAt    time.Time
}

const (
	// maxLag bounds the allowance: past it a write not seen is taken as
	// lost rather than late, and a holder's Lease expires even if the
	// watch still lags.
	maxLag = time.Minute
	// lagReuse is how long an estimate is reused.
	lagReuse = 100 * time.Millisecond
)

// ExpectRenewal records a write of the Lease namespace/name that sets
// renewTime, about to be sent at sentAt, and returns the function to call if
// the write fails. The controller's own lock is the one to feed it: its
// renewals, every retry period, show the watch's lag when no election writes
// anything. The lock's namespace must be one the controller watches.
func (w *WatchLag) ExpectRenewal(namespace, name string, renewTime, sentAt time.Time) (failed func()) {
	return w.expect(types.NamespacedName{Namespace: namespace, Name: name}, renewTime, sentAt)
}

func (w *WatchLag) expect(key types.NamespacedName, renewTime, sentAt time.Time) (failed func()) {
	p := lagProbe{renewTime: renewTime.Round(0).Truncate(time.Microsecond), sentAt: sentAt}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		w.pending = map[types.NamespacedName]lagProbe{}
	}
	if old, ok := w.pending[key]; ok && old.sentAt.Before(p.sentAt) {
		// The earlier write is still unseen: keep its age as the bound
		// until either arrives (a later write supersedes it in the watch).
		p.sentAt = old.sentAt
	}
	w.pending[key] = p
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if cur, ok := w.pending[key]; ok && cur.renewTime.Equal(p.renewTime) {
			delete(w.pending, key)
		}
	}
}

// observe checks a Lease delivered by the watch against the write awaited.
func (w *WatchLag) observe(lease *coordinationv1.Lease) {
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pending[key]; ok && lease.Spec.RenewTime != nil &&
		!lease.Spec.RenewTime.Round(0).Truncate(time.Microsecond).Before(p.renewTime) {
		delete(w.pending, key)
	}
}

// forget drops what is awaited of a Lease that is gone.
func (w *WatchLag) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, key)
}

// At is the lag as known at now: the age of the oldest write the watch has
// not delivered yet, at most a minute.
func (w *WatchLag) At(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lastAt.IsZero() && now.Sub(w.lastAt) >= 0 && now.Sub(w.lastAt) < lagReuse {
		return w.last
	}
	var lag time.Duration
	for key, p := range w.pending {
		age := now.Sub(p.sentAt)
		if age >= maxLag {
			delete(w.pending, key) // lost, not late
			continue
		}
		lag = max(lag, age)
	}
	w.last, w.lastAt = min(lag, maxLag), now
	return w.last
}
