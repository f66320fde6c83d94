package controller

import (
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// WatchLag measures how late the Lease watch delivers changes, from writes
// whose sending the controller saw: its own Lease writes, and the renewals
// of its own lock (ExpectRenewal). One WatchLag serves the controllers of
// successive leadership terms (Options.WatchLag); it is safe for concurrent
// use. A write seen through the watch is a
// sample (from when it was sent to when it arrived); a write not seen yet
// shows that the watch lags at least as long as it has been outstanding, so
// a watch that stalls is known to lag while it stalls, not only once it
// delivers again.
//
// The controller judges a holder's Lease expired a lease duration after it
// last saw a renewal, plus the lag: a watch that delivers late on a loaded
// server would otherwise make live holders look expired, and the elections
// and pings that follow load the server further.
type WatchLag struct {
	mu sync.Mutex
	// pending are the writes not seen yet, by Lease.
	pending map[types.NamespacedName]lagProbe
	// samples are the lags measured within the window, oldest first.
	samples []lagSample
	// last is the estimate made at lastAt: reused for lagReuse, as every
	// step asks and the pending writes may be many.
	last   time.Duration
	lastAt time.Time
}

// lagProbe is one write to recognise in the watch: by resourceVersion (the
// controller's own writes) or by renewTime (the lock's renewals, written by
// client-go, which does not return the resourceVersion).
type lagProbe struct {
	resourceVersion string
	renewTime       time.Time
	sentAt          time.Time
}

type lagSample struct {
	at  time.Time
	lag time.Duration
}

const (
	// lagWindow is how long a measured lag counts.
	lagWindow = 2 * time.Minute
	// maxLag bounds the allowance: past it a write not seen is taken as
	// lost rather than late (a watch restart can drop it from view), and a
	// holder's Lease expires even if the watch still lags.
	maxLag = time.Minute
	// maxLagSamples bounds the memory of samples.
	maxLagSamples = 256
	// lagReuse is how long an estimate is reused.
	lagReuse = 100 * time.Millisecond
)

// expectWrite records the controller's own write of a Lease, sent at sentAt
// and stored at resourceVersion.
func (w *WatchLag) expectWrite(key types.NamespacedName, resourceVersion string, sentAt time.Time) {
	w.expect(key, lagProbe{resourceVersion: resourceVersion, sentAt: sentAt})
}

// ExpectRenewal records a successful renewal of the Lease namespace/name
// that wrote renewTime and was sent at sentAt: the controller's own lock, whose
// renewals, every few seconds, measure the watch's lag when no election
// writes anything. The lock's namespace must be one the controller watches.
func (w *WatchLag) ExpectRenewal(namespace, name string, renewTime, sentAt time.Time) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	w.expect(key, lagProbe{renewTime: renewTime.Round(0).Truncate(time.Microsecond), sentAt: sentAt})
}

func (w *WatchLag) expect(key types.NamespacedName, p lagProbe) {
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
}

// observe checks a Lease delivered by the watch at now against the writes
// awaited.
func (w *WatchLag) observe(lease *coordinationv1.Lease, now time.Time) {
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pending[key]
	if !ok {
		return
	}
	if !p.seenIn(lease) {
		return
	}
	delete(w.pending, key)
	if len(w.samples) == maxLagSamples {
		w.samples = w.samples[1:]
	}
	w.samples = append(w.samples, lagSample{at: now, lag: max(0, now.Sub(p.sentAt))})
}

// forget drops what is awaited of a Lease that is gone.
func (w *WatchLag) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, key)
}

// At is the lag as known at now: the longest measured within the last two
// minutes, or the age of the oldest write still unseen if longer; at most a
// minute.
func (w *WatchLag) At(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lastAt.IsZero() && now.Sub(w.lastAt) >= 0 && now.Sub(w.lastAt) < lagReuse {
		return w.last
	}
	var lag time.Duration
	kept := w.samples[:0]
	for _, s := range w.samples {
		if now.Sub(s.at) < lagWindow {
			kept = append(kept, s)
			lag = max(lag, s.lag)
		}
	}
	w.samples = kept
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

// seenIn reports whether lease, as delivered, shows the probed write or a
// later one: a watch that restarts delivers only the newest version.
// resourceVersions are compared as numbers where they are (etcd's revisions,
// as every kube-apiserver stores them), and must match otherwise; renewTimes
// come from one writer, whose renewals never move it back.
func (p lagProbe) seenIn(lease *coordinationv1.Lease) bool {
	if p.resourceVersion != "" {
		if lease.ResourceVersion == p.resourceVersion {
			return true
		}
		want, err1 := strconv.ParseUint(p.resourceVersion, 10, 64)
		got, err2 := strconv.ParseUint(lease.ResourceVersion, 10, 64)
		return err1 == nil && err2 == nil && got > want
	}
	return lease.Spec.RenewTime != nil && !lease.Spec.RenewTime.Round(0).Truncate(time.Microsecond).Before(p.renewTime)
}
