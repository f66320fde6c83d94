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

	rv int64
	// writeTimes are the recent writes, for the load-dependent lag.
	writeTimes []time.Time
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
	if s.Faulty {
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

// Watcher is one watch of one resource: it receives events in order, each
// after the server's lag.
type Watcher struct {
	s *Server
	// Last is when the last event is delivered: order is kept.
	Last    time.Time
	Deliver func(obj runtime.Object, deleted bool)
	// Expired: the watch has ended (410 Gone after a restart of the
	// server, or a watcher resuming past the watch window); what is written
	// meanwhile reaches the watcher only through its relist.
	Expired bool
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
	at := w.Now.Add(sw.s.Lag())
	if at.Before(sw.Last) {
		at = sw.Last
	}
	if at.Before(sw.StalledUntil) {
		at = sw.StalledUntil
	}
	sw.Last = at
	w.Late(at)
	w.At(at, func() { sw.Deliver(obj, deleted) })
}
