package simworld

import (
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Server is the API server as its clients see it: the Leases and
// LeaseCandidates it stores, with kube-apiserver's rules for a write
// (store.go); how long requests and watch events take (longer while writes
// are frequent); which requests fail and whether a failed write was applied
// nonetheless. Who watches what the simulation says at each write.
type Server struct {
	w *World
	// Home is the namespace whose objects the trace names by name alone.
	Home string
	// CandidateWrites counts the LeaseCandidate writes so far.
	CandidateWrites int

	leases     map[string]*coordinationv1.Lease
	candidates map[string]*coordinationv1beta1.LeaseCandidate
	pods       map[string]*corev1.Pod
	// Faulty: the fault phase, when requests fail at ErrorRate and watches
	// lag by the write rate and in spikes.
	Faulty    bool
	ErrorRate float64
	// LagBase is requests' latency and the watches' lag; WatchLag the
	// watches' lag alone, when longer.
	LagBase, WatchLag time.Duration

	// Capacity is how many requests a second the server applies (0: as
	// many as come, at once). Past it requests queue, first come first
	// served, every client's alike: a server behind on a fleet's renewals
	// holds up the controller's own lock renewals as long (see Apply).
	Capacity float64
	// MaxQueued is the longest a request has waited in that queue.
	MaxQueued time.Duration

	rv int64
	// writeTimes are the recent writes, for the load-dependent lag.
	writeTimes []time.Time
	// busyUntil is when the server is done with the requests queued so
	// far; arrived, while it applies one, when that one reached it.
	busyUntil, arrived time.Time
}

// Apply has the server apply a request that reaches it now: at once when it
// has no Capacity, else once it is done with the requests that came before
// and with this one (1/Capacity each). It returns when the request is
// applied.
func (s *Server) Apply(apply func()) time.Time {
	w := s.w
	if s.Capacity <= 0 {
		apply()
		return w.Now
	}
	start, arrived := w.Now, w.Now
	if s.busyUntil.After(start) {
		start = s.busyUntil
	}
	s.busyUntil = start.Add(time.Duration(float64(time.Second) / s.Capacity))
	s.MaxQueued = max(s.MaxQueued, start.Sub(w.Now))
	w.Late(s.busyUntil)
	w.At(s.busyUntil, func() {
		s.arrived = arrived
		apply()
		s.arrived = time.Time{}
	})
	return s.busyUntil
}

// Arrived is when the request the server is applying reached it (now for one
// that did not queue, or a write that is no client's request).
func (s *Server) Arrived() time.Time {
	if s.arrived.IsZero() {
		return s.w.Now
	}
	return s.arrived
}

// Flood is other clients' requests taking d of the server's time now:
// whatever comes next waits that much longer (with a Capacity).
func (s *Server) Flood(d time.Duration) {
	if s.Capacity <= 0 {
		return
	}
	if s.busyUntil.Before(s.w.Now) {
		s.busyUntil = s.w.Now
	}
	s.busyUntil = s.busyUntil.Add(d)
	s.w.Late(s.busyUntil)
}

// Answered is fn, the arrival of a request's answer, scheduled back after
// the request was sent to the server: it is put off for as long as the
// request queued there (*appliedAt, as Apply returned it; zero for a
// request that never reached the server).
func (s *Server) Answered(appliedAt *time.Time, back time.Duration, fn func()) func() {
	return func() {
		if due := appliedAt.Add(back); !appliedAt.IsZero() && due.After(s.w.Now) {
			s.w.Late(due)
			s.w.At(due, fn)
			return
		}
		fn()
	}
}

// NewServer is the server of w.
func NewServer(w *World, home string) *Server {
	return &Server{w: w, Home: home, leases: map[string]*coordinationv1.Lease{}, candidates: map[string]*coordinationv1beta1.LeaseCandidate{}, pods: map[string]*corev1.Pod{}}
}

// Wrote records a write now, which loads the server.
func (s *Server) Wrote() { s.writeTimes = append(s.writeTimes, s.w.Now) }

// NextRV is the next resource version.
func (s *Server) NextRV() string {
	s.rv++
	return fmt.Sprint(s.rv)
}

// Lag is how late a watcher receives an event written now: a base, a share
// that grows with the recent write rate (a loaded server), and spikes.
func (s *Server) Lag() time.Duration {
	w := s.w
	cut := w.Now.Add(-time.Second)
	i := 0
	for i < len(s.writeTimes) && s.writeTimes[i].Before(cut) {
		i++
	}
	s.writeTimes = s.writeTimes[i:]
	d := w.DurationBetween(0, max(s.LagBase, s.WatchLag)+time.Millisecond)
	if s.Faulty && s.Capacity <= 0 {
		// A server of bounded Capacity lags by its queue instead (see
		// Apply).
		d += time.Duration(len(s.writeTimes)) * w.DurationBetween(0, 200*time.Millisecond)
		if w.Rng.IntN(50) == 0 {
			d += w.DurationBetween(time.Second, 8*time.Second)
		}
	}
	return d
}

// RequestError draws the failure of one request, if any, and whether the
// write was made nonetheless (a timeout after the server applied it).
func (s *Server) RequestError(gr schema.GroupResource, name string) (err error, applied bool) {
	w := s.w
	if !s.Faulty || w.Rng.Float64() >= s.ErrorRate {
		return nil, false
	}
	switch w.Rng.IntN(4) {
	case 0:
		return apierrors.NewTooManyRequests("slow down", 1), false
	case 1:
		return apierrors.NewServiceUnavailable("restarting"), false
	case 2:
		return apierrors.NewTimeoutError("request timed out", 1), true
	default:
		return apierrors.NewInternalError(errors.New("etcd leader changed")), false
	}
}

// OnTheWire strips an instant of its monotonic clock reading, as
// serializing it for the API server does.
func OnTheWire(t *metav1.MicroTime) {
	if t != nil {
		t.Time = t.Round(0)
	}
}

// Frontend is one kube-apiserver of a highly available control plane: its
// watch cache follows etcd, Behind it by a time of its own. Writes and
// reads go to etcd alike whichever replica serves them; what a watch
// delivers, and what a list from the cache returns, is as late as its
// replica's cache.
type Frontend struct {
	// Name is what the trace calls it.
	Name string
	// Behind is how far its watch cache is behind now: an event written
	// now leaves it that much later.
	Behind time.Duration
}

// LagVia is Lag for a watcher of f (nil: a server with one replica, or
// one whose cache keeps up).
func (s *Server) LagVia(f *Frontend) time.Duration {
	d := s.Lag()
	if f != nil {
		d += f.Behind
	}
	return d
}

// Watcher is one watch of one resource: it receives events in order, each
// after the server's lag (and its Frontend's).
type Watcher struct {
	s *Server
	// Frontend is the replica the watch is connected to; nil for a
	// server of one.
	Frontend *Frontend
	// Last is when the last event is delivered: order is kept (turn
	// keeps it among the events due at that instant).
	Last    time.Time
	turn    Turn
	Deliver func(obj runtime.Object, deleted bool)
	// Expired: the watch has ended (410 Gone after a restart of the
	// server, or a watcher resuming past the watch window); what is written
	// meanwhile reaches the watcher only through its relist.
	Expired bool
	// gen counts the watch's ends (Expire): an event sent before one is
	// lost with the watch, not delivered after the relist.
	gen int
	// StalledUntil: the watch delivers nothing before then (its process is
	// partitioned, or its connection stalls); what comes meanwhile arrives
	// then, in order.
	StalledUntil time.Time
}

// Watch is a new watch that delivers to deliver.
func (s *Server) Watch(deliver func(obj runtime.Object, deleted bool)) *Watcher {
	return &Watcher{s: s, Deliver: deliver}
}

// Send sends an event to the watcher: it arrives after the server's lag,
// after the watcher's earlier events, and not before a stall ends.
func (sw *Watcher) Send(obj runtime.Object, deleted bool) {
	if sw.Expired {
		return
	}
	w := sw.s.w
	at := w.Now.Add(sw.s.LagVia(sw.Frontend))
	if at.Before(sw.Last) {
		at = sw.Last
	}
	if at.Before(sw.StalledUntil) {
		at = sw.StalledUntil
	}
	sw.Last = at
	w.Late(at)
	gen := sw.gen
	w.AtAfter(at, func() {
		if sw.gen == gen {
			sw.Deliver(obj, deleted)
		}
	}, &sw.turn)
}

// ListAt schedules fn, the arrival of the lists the watchers' informers
// make, at at: after the events already sent to the watchers that arrive
// at that instant, and before every event sent to them afterwards, which
// arrive no earlier.
func ListAt(w *World, at time.Time, fn func(), watchers ...*Watcher) {
	turns := make([]*Turn, 0, len(watchers))
	for _, sw := range watchers {
		if at.After(sw.Last) {
			sw.Last = at
		}
		turns = append(turns, &sw.turn)
	}
	w.Late(at)
	w.AtAfter(at, fn, turns...)
}

// sendAll sends the written object to every watcher then listed, one copy
// for all of them: the watchers' code, as an informer's handlers, only
// reads what it is given (a deletion sends the stored object itself).
func sendAll(watchers func() []*Watcher, obj runtime.Object) {
	for _, sw := range watchers() {
		sw.Send(obj, false)
	}
}

// Expire ends the watch (410 Gone): what it has not delivered yet is lost
// with it, and nothing written from now on reaches the watcher until it is
// set going again (Expired false) and its watcher relists.
func (sw *Watcher) Expire() {
	sw.Expired = true
	sw.gen++
	sw.Last, sw.turn = time.Time{}, Turn{}
}
