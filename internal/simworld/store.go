package simworld

import (
	"errors"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The resources the server stores.
var (
	LeasesGR     = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	CandidatesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leasecandidates"}
)

// Key is an object's key: namespace/name.
func Key(ns, name string) string { return ns + "/" + name }

// Shown is how the trace names an object: by name in the namespace home,
// else by key.
func Shown(home, ns, name string) string {
	if ns == home {
		return name
	}
	return Key(ns, name)
}

// Lease is the stored Lease of key (namespace/name), nil if there is none.
// It is the server's own: callers copy it before they change it.
func (s *Server) Lease(key string) *coordinationv1.Lease { return s.leases[key] }

// Candidate is the stored LeaseCandidate of key, nil if there is none; the
// server's own, as Lease's.
func (s *Server) Candidate(key string) *coordinationv1beta1.LeaseCandidate { return s.candidates[key] }

// CandidateKeys are the keys of the stored LeaseCandidates, in order.
func (s *Server) CandidateKeys() []string {
	keys := make([]string, 0, len(s.candidates))
	for k := range s.candidates {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// WriteLease stores lease as the Lease ns/name (nil deletes it) if rv is
// the stored one's resourceVersion ("" creates), as kube-apiserver does, and
// sends the event to the watchers then listed.
func (s *Server) WriteLease(ns, name string, lease *coordinationv1.Lease, rv, by string, watchers func() []*Watcher) (*coordinationv1.Lease, error) {
	key := Key(ns, name)
	cur := s.leases[key]
	if err := precondition(LeasesGR, name, cur, rv); err != nil {
		return nil, err
	}
	s.Wrote()
	if lease == nil {
		delete(s.leases, key)
		s.w.Tracef("%s deleted by %s", Shown(s.Home, ns, name), by)
		for _, sw := range watchers() {
			sw.Send(cur, true)
		}
		return nil, nil
	}
	stored := lease.DeepCopy()
	stored.Namespace, stored.Name = ns, name
	for _, t := range []*metav1.MicroTime{stored.Spec.AcquireTime, stored.Spec.RenewTime} {
		OnTheWire(t)
	}
	stored.ResourceVersion = s.NextRV()
	if rv == "" {
		stored.UID = types.UID(name + "-" + stored.ResourceVersion)
	} else {
		stored.UID = cur.UID
	}
	s.leases[key] = stored
	s.w.Tracef("%s by %s: holder=%q preferred=%q transitions=%d renew=%s rv=%s", Shown(s.Home, ns, name), by, ptr.Deref(stored.Spec.HolderIdentity, ""),
		ptr.Deref(stored.Spec.PreferredHolder, ""), ptr.Deref(stored.Spec.LeaseTransitions, 0), TimeOf(stored.Spec.RenewTime), stored.ResourceVersion)
	sendAll(watchers, stored.DeepCopy())
	return stored.DeepCopy(), nil
}

// WriteCandidate is WriteLease for a LeaseCandidate. Like kube-apiserver, it
// refuses a write that moves one to another Lease (spec.leaseName is
// immutable); only a process with another Lease's candidate's Identity
// would try, and the simulation counts that a violation.
func (s *Server) WriteCandidate(ns, name string, lc *coordinationv1beta1.LeaseCandidate, rv, by string, watchers func() []*Watcher) (*coordinationv1beta1.LeaseCandidate, error) {
	key, shown := Key(ns, name), Shown(s.Home, ns, name)
	cur := s.candidates[key]
	if err := precondition(CandidatesGR, name, cur, rv); err != nil {
		return nil, err
	}
	if lc != nil && cur != nil && lc.Spec.LeaseName != cur.Spec.LeaseName {
		s.w.Fail("%s rewrites LeaseCandidate %s of Lease %s for Lease %s", by, shown, cur.Spec.LeaseName, lc.Spec.LeaseName)
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: CandidatesGR.Group, Kind: "LeaseCandidate"}, name, nil)
	}
	s.Wrote()
	s.CandidateWrites++
	if lc == nil {
		delete(s.candidates, key)
		s.w.Tracef("candidate %s deleted by %s", shown, by)
		for _, sw := range watchers() {
			sw.Send(cur, true)
		}
		return nil, nil
	}
	stored := lc.DeepCopy()
	stored.Namespace, stored.Name = ns, name
	for _, t := range []*metav1.MicroTime{stored.Spec.RenewTime, stored.Spec.PingTime} {
		OnTheWire(t)
	}
	stored.ResourceVersion = s.NextRV()
	if rv == "" {
		stored.UID = types.UID(name + "-" + stored.ResourceVersion)
		stored.CreationTimestamp = metav1.NewTime(s.w.Now.Truncate(time.Second))
	} else {
		stored.UID, stored.CreationTimestamp = cur.UID, cur.CreationTimestamp
	}
	s.candidates[key] = stored
	s.w.Tracef("candidate %s by %s: renew=%s ping=%s rv=%s", shown, by, TimeOf(stored.Spec.RenewTime), TimeOf(stored.Spec.PingTime), stored.ResourceVersion)
	sendAll(watchers, stored.DeepCopy())
	return stored.DeepCopy(), nil
}

// precondition is kube-apiserver's answer to a write of name, conditional on
// resourceVersion rv ("": a create), when cur is stored (nil: none).
func precondition[T interface {
	comparable
	GetResourceVersion() string
}](gr schema.GroupResource, name string, cur T, rv string) error {
	var none T
	switch {
	case rv == "" && cur != none:
		return apierrors.NewAlreadyExists(gr, name)
	case rv != "" && cur == none:
		return apierrors.NewNotFound(gr, name)
	case rv != "" && cur.GetResourceVersion() != rv:
		return apierrors.NewConflict(gr, name, errors.New("stale resourceVersion"))
	}
	return nil
}

// TimeOf is how the trace shows an instant of an object.
func TimeOf(t *metav1.MicroTime) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}
