// Package strategy owns the election policy of cle: it ranks the candidates of one Lease under a coordinated
// leader election strategy, and resolves which strategy a Lease follows from what its candidates ask for.
//
// Everything here is a pure function of the LeaseCandidate objects it is given: no API client, no clock, no
// global state. That keeps the policy testable on its own and lets the controller, kubectl-cle and tests share
// exactly one definition of "who should lead". Both API modes use the typed coordination.k8s.io/v1beta1
// LeaseCandidate; the portable mode converts its CRD objects into that type before calling in.
package strategy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Strategy ranks the candidates of one Lease.
//
// Implementations must be safe for concurrent use and must not modify the candidates they are given: these
// come straight from informer caches.
type Strategy interface {
	// Name is the value of spec.strategy (or of the cle.dev/strategy annotation) that selects this strategy.
	Name() coordinationv1.CoordinatedLeaseStrategy
	// Validate reports why a candidate cannot take part under this strategy (nil if it can).
	Validate(c *coordinationv1beta1.LeaseCandidate) error
	// Compare is a total order over valid candidates: <0 if a is better than b (should lead first), >0 if
	// worse, 0 only when a and b are the same candidate (same namespace/name). It is CompareMerit, with ties
	// broken by something that has nothing to do with merit (creation time, name) so that a vacant Lease
	// always gets the same winner.
	Compare(a, b *coordinationv1beta1.LeaseCandidate) int
	// CompareMerit orders by merit alone: <0 if a is a better leader than b, >0 if worse, 0 if neither is
	// (only the tie-break of Compare separates them). A holder is asked to hand over only to a candidate
	// better on merit, so that equal candidates keep whoever holds.
	CompareMerit(a, b *coordinationv1beta1.LeaseCandidate) int
	// Rank returns the valid candidates best first, and the invalid ones with their reasons (sorted by name).
	// It must not modify the input slice or the objects, and skips nil entries.
	Rank(cands []*coordinationv1beta1.LeaseCandidate) (ranked []*coordinationv1beta1.LeaseCandidate, invalid []InvalidCandidate)
}

// InvalidCandidate is a candidate that cannot take part in an election, with the reason, so that the
// controller can tell its owner why (in an Event) instead of silently ignoring it.
type InvalidCandidate struct {
	Candidate *coordinationv1beta1.LeaseCandidate
	Reason    error
}

// Best returns the candidate that s ranks first, or nil when no candidate is valid, together with the invalid
// candidates and their reasons.
func Best(s Strategy, cands []*coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, []InvalidCandidate) {
	ranked, invalid := s.Rank(cands)
	if len(ranked) == 0 {
		return nil, invalid
	}
	return ranked[0], invalid
}

// Preempts reports whether best should take over from holder under s: whether it is better on merit. A
// candidate that wins only the tie-break does not preempt, so leadership does not move (and the leader's
// work is not interrupted) between equals.
func Preempts(s Strategy, best, holder *coordinationv1beta1.LeaseCandidate) bool {
	return s.CompareMerit(best, holder) < 0
}

// Registry maps strategy names to strategies. It is an explicit value rather than a package-level table so
// that a controller, a test or a plugin each decide which strategies they handle: a Lease whose strategy is
// not in the registry belongs to some other controller and must be left alone.
//
// A Registry is immutable after construction and safe for concurrent use.
type Registry struct {
	strategies map[coordinationv1.CoordinatedLeaseStrategy]Strategy
}

// NewRegistry returns a registry of the given strategies. It fails on a nil strategy, on a name that
// ValidateStrategyName rejects (no candidate could ever ask for it), and on two strategies with the same name.
func NewRegistry(strategies ...Strategy) (*Registry, error) {
	r := &Registry{strategies: make(map[coordinationv1.CoordinatedLeaseStrategy]Strategy, len(strategies))}
	for i, s := range strategies {
		if s == nil {
			return nil, fmt.Errorf("strategy #%d is nil", i)
		}
		name := s.Name()
		if err := ValidateStrategyName(name); err != nil {
			return nil, fmt.Errorf("strategy #%d (%T): %w", i, s, err)
		}
		if prev, dup := r.strategies[name]; dup {
			return nil, fmt.Errorf("strategy #%d (%T): name %q is already registered by %T", i, s, name, prev)
		}
		r.strategies[name] = s
	}
	return r, nil
}

// NewDefaultRegistry returns a new registry of the strategies cle ships: OldestEmulationVersion, Priority and
// OldestEmulationVersionByCle.
// Each call returns a fresh registry, so no caller can affect another.
func NewDefaultRegistry() *Registry {
	return &Registry{strategies: map[coordinationv1.CoordinatedLeaseStrategy]Strategy{
		coordinationv1.OldestEmulationVersion: OldestEmulationVersion{},
		PriorityName:                          Priority{},
		OldestEmulationVersionByCleName:       OldestEmulationVersionByCle{},
	}}
}

// Get returns the strategy registered under name, and whether there is one.
func (r *Registry) Get(name coordinationv1.CoordinatedLeaseStrategy) (Strategy, bool) {
	s, ok := r.strategies[name]
	return s, ok
}

// Names returns the registered strategy names, sorted, in a slice the caller owns.
func (r *Registry) Names() []coordinationv1.CoordinatedLeaseStrategy {
	return slices.Sorted(maps.Keys(r.strategies))
}

// ValidateStrategyName reports whether name is a strategy that kube-apiserver accepts in a Lease's or a
// LeaseCandidate's spec.strategy: either the Kubernetes-defined "OldestEmulationVersion", or a qualified name
// with a DNS subdomain prefix such as "cle.dev/Priority" (unprefixed names are reserved for Kubernetes).
func ValidateStrategyName(name coordinationv1.CoordinatedLeaseStrategy) error {
	switch {
	case name == "":
		return errors.New("strategy name is empty")
	case !strings.Contains(string(name), "/"):
		if name == coordinationv1.OldestEmulationVersion {
			return nil
		}
		return fmt.Errorf("strategy %q is not supported: the only unprefixed strategy is %q, others need a domain prefix such as %q",
			name, coordinationv1.OldestEmulationVersion, PriorityName)
	}
	if msgs := content.IsQualifiedName(string(name)); len(msgs) > 0 {
		return fmt.Errorf("strategy %q is not a qualified name: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}
