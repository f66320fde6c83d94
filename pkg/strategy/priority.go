package strategy

import (
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

const (
	// PriorityName selects the Priority strategy in spec.strategy (or the cle.dev/strategy annotation).
	PriorityName coordinationv1.CoordinatedLeaseStrategy = "cle.dev/Priority"
	// PriorityAnnotation on a LeaseCandidate holds its priority under the Priority strategy.
	PriorityAnnotation = "cle.dev/priority"
)

// Priority lets operators choose the leader: the candidate with the highest cle.dev/priority annotation
// leads, for example to keep leadership on the replica in the preferred zone. Candidates of equal priority are
// ordered by OldestEmulationVersion, and every candidate must also be valid under it, so that choosing among
// equals stays as version-safe as Kubernetes' strategy.
//
// The annotation is a base-10 integer in the 32-bit range, exactly as strconv.ParseInt(value, 10, 32) accepts
// it: an optional sign ("+5" and "-3" are fine), leading zeros allowed, no spaces. An absent annotation means
// priority 0; a present one that does not parse, including an empty value, makes the candidate invalid rather
// than silently 0, so that a typo cannot quietly demote the candidate its owner meant to lead.
type Priority struct{}

var _ Strategy = Priority{}

// Name returns PriorityName.
func (Priority) Name() coordinationv1.CoordinatedLeaseStrategy { return PriorityName }

// Validate reports why c cannot take part: an unparseable priority, or whatever OldestEmulationVersion rejects.
func (Priority) Validate(c *coordinationv1beta1.LeaseCandidate) error {
	return validateBy(priorityKey, c)
}

// Compare orders by highest priority, then as OldestEmulationVersion does. Invalid candidates order after valid
// ones, and nil after everything.
func (Priority) Compare(a, b *coordinationv1beta1.LeaseCandidate) int {
	return compareBy(priorityKey, a, b)
}

// CompareMerit orders by highest priority, then as OldestEmulationVersion.CompareMerit does: candidates of
// equal priority at the same versions are equal on merit.
func (Priority) CompareMerit(a, b *coordinationv1beta1.LeaseCandidate) int {
	return compareMeritBy(priorityKey, a, b)
}

// Rank returns the valid candidates in Compare order and the invalid ones by name.
func (Priority) Rank(cands []*coordinationv1beta1.LeaseCandidate) ([]*coordinationv1beta1.LeaseCandidate, []InvalidCandidate) {
	return rank(cands, priorityKey)
}

func priorityKey(p versionParser, c *coordinationv1beta1.LeaseCandidate) (sortKey, error) {
	k, err := versionKey(p, c)
	if err != nil {
		return k, err
	}
	if value, ok := c.Annotations[PriorityAnnotation]; ok {
		if k.priority, err = strconv.ParseInt(value, 10, 32); err != nil {
			k.class = classInvalid
			return k, fmt.Errorf("annotation %s=%q is not a base-10 integer in the 32-bit range: %w", PriorityAnnotation, value, err)
		}
	}
	return k, nil
}
