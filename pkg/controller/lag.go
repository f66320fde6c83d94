package controller

import (
	"slices"
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
	// pending are the writes not seen yet, by Lease, oldest first.
	pending map[types.NamespacedName][]lagProbe
	// last is the estimate made at lastAt: reused for lagReuse, as every
	// step asks and the pending writes may be many.
	last   time.Duration
	lastAt time.Time
	// delays are the longest delivery of a write (sent to seen) in each of
	// the last spreadSeconds seconds, for Spread: a ring indexed by the
	// Unix second.
	delays [spreadSeconds]secondDelay
	// slowAt is when the latest write that took longer than promptDelay
	// to show was seen.
	slowAt time.Time
}

// secondDelay is the longest delivery seen in one second.
type secondDelay struct {
	sec int64
	max time.Duration
}

// spreadSeconds is how long Spread remembers a delivery's delay.
const spreadSeconds = 10

// promptDelay is how soon a write that shows the server keeping up again
// shows: one sent after every slower write was seen, and seen within
// promptDelay, ends Spread's memory of those. What writes took while the
// server was down or behind (a restart, a pause, a burst) then no longer
// delays the expiry of Leases whose holders renew promptly again, while a
// server that stays loaded, whose writes all take longer, is remembered.
const promptDelay = 250 * time.Millisecond

// lagProbe is one write to recognise in the watch, by the renewTime it
// writes: the watch delivers it, or a later version (see unseenAfter). It is
// recorded before the write is sent, since the watch may deliver the write
// before its response comes.
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
	// maxProbes bounds the writes awaited per Lease: a lock renewed every
	// 2 s has 30 outstanding when the watch is maxLag behind. Past it the
	// newest probe takes the newer write's renewTime and keeps its own,
	// earlier, sentAt: the lag is overestimated a little, never missed.
	maxProbes = 64
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
		w.pending = map[types.NamespacedName][]lagProbe{}
	}
	probes := w.pending[key]
	if n := len(probes); n == maxProbes {
		// Merged into the newest probe, which stands for earlier writes
		// too: a failure of this one does not take it back.
		probes[n-1].renewTime = p.renewTime
		return func() {}
	}
	w.pending[key] = append(probes, p)
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pending[key] = slices.DeleteFunc(w.pending[key], func(q lagProbe) bool { return q == p })
		if len(w.pending[key]) == 0 {
			delete(w.pending, key)
		}
	}
}

// observe checks a Lease delivered by the watch at now against the writes
// awaited: every one it shows (its renewTime or an earlier one) has arrived,
// after as long as it took since it was sent (see Spread).
func (w *WatchLag) observe(lease *coordinationv1.Lease, now time.Time) {
	if lease.Spec.RenewTime == nil {
		return
	}
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	renew := lease.Spec.RenewTime.Round(0).Truncate(time.Microsecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	probes, ok := w.pending[key]
	if !ok {
		return
	}
	unseen := unseenAfter(slices.Clone(probes), renew)
	for _, p := range probes {
		if !slices.Contains(unseen, p) {
			w.delivered(now, p.sentAt)
		}
	}
	if len(unseen) == 0 {
		delete(w.pending, key)
		return
	}
	w.pending[key] = unseen
}

// delivered notes a write sent at sentAt and seen at now; w.mu held. A
// prompt one sent once every slower write had been seen clears the memory
// of those (see promptDelay).
func (w *WatchLag) delivered(now, sentAt time.Time) {
	d := min(max(now.Sub(sentAt), 0), maxLag)
	if d > promptDelay {
		if now.After(w.slowAt) {
			w.slowAt = now
		}
	} else if !sentAt.Before(w.slowAt) {
		w.delays = [spreadSeconds]secondDelay{}
	}
	sec := now.Unix()
	b := &w.delays[uint64(sec)%spreadSeconds]
	if b.sec != sec {
		*b = secondDelay{sec: sec}
	}
	b.max = max(b.max, d)
}

// Spread is how far apart the watch may deliver writes made together, as
// known at now: the longest a write took from its sending to its delivery
// in the last spreadSeconds seconds (until a prompt write shows the server
// keeps up again: see promptDelay), or the lag (At), whichever is longer.
// Where At forgets a late write as soon as the watch shows it (a holder's
// expiry must not wait on a lag that is over), writes made together reach
// a loaded server, and its watch, as far apart as its requests take, and
// the watch keeping up says nothing of that.
func (w *WatchLag) Spread(now time.Time) time.Duration {
	spread := w.At(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	sec := now.Unix()
	for _, b := range w.delays {
		if b.sec <= sec && sec-b.sec < spreadSeconds {
			spread = max(spread, b.max)
		}
	}
	return spread
}

// unseenAfter is what is still awaited of probes once the watch showed a
// version with renewTime renew. The writes are this controller's, sent one after the
// other: the one the watch shows, known by its renewTime, follows every
// earlier one, whose renewTimes a wall clock set back meanwhile may have put
// later. A renewTime none of them wrote (another writer's, or one merged
// into the newest probe) shows those it is not before, as renewals move it
// forward while the clock is not set back.
func unseenAfter(probes []lagProbe, renew time.Time) []lagProbe {
	for i := len(probes) - 1; i >= 0; i-- {
		if probes[i].renewTime.Equal(renew) {
			return probes[i+1:]
		}
	}
	return slices.DeleteFunc(probes, func(p lagProbe) bool { return !renew.Before(p.renewTime) })
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
	for key, probes := range w.pending {
		// Writes unseen for maxLag are lost, not late.
		probes = slices.DeleteFunc(probes, func(p lagProbe) bool { return now.Sub(p.sentAt) >= maxLag })
		if len(probes) == 0 {
			delete(w.pending, key)
			continue
		}
		w.pending[key] = probes
		for _, p := range probes {
			lag = max(lag, now.Sub(p.sentAt))
		}
	}
	w.last, w.lastAt = min(lag, maxLag), now
	return w.last
}
