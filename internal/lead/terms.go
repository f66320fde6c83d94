package lead

import (
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// SeenTerms keeps the highest leaseTransitions seen on any version of the
// Lease, and the highest seen on the versions other than the one that
// carried it: the first renewal of a term compares a naming's count with
// what came before that naming (see TermToken). It is kept across the
// Lease's deletion, so that a re-created Lease's terms are counted above
// the old one's. The zero value is ready; it is safe for concurrent use.
type SeenTerms struct {
	mu sync.Mutex
	// highest was first seen on the version fingerprinted highestBy; below
	// is the highest on any other version.
	highest   int32
	highestBy Version
	below     int32
}

// See records one version of the Lease; nil (no Lease) changes nothing.
func (s *SeenTerms) See(lease *coordinationv1.Lease) {
	if lease == nil {
		return
	}
	n, fp := ptr.Deref(lease.Spec.LeaseTransitions, 0), Fingerprint(lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case fp == s.highestBy:
	case n > s.highest:
		s.below, s.highest, s.highestBy = s.highest, n, fp
	default:
		s.below = max(s.below, n)
	}
}

// Before is the highest leaseTransitions seen on a version other than
// lease's own.
func (s *SeenTerms) Before(lease *coordinationv1.Lease) int32 {
	fp := Fingerprint(lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	if fp == s.highestBy {
		return s.below
	}
	return s.highest
}

// Max is the highest leaseTransitions seen on any version.
func (s *SeenTerms) Max() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}
