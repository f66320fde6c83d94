package strategy

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

// OldestEmulationVersion is Kubernetes' own strategy: the candidate that emulates the oldest version leads,
// so that during an upgrade (or a rollback) the leader never uses features or storage formats that some other
// candidate cannot handle yet. Among equal versions the oldest candidate leads, which keeps the leader stable
// while candidates churn; the name only breaks exact ties, so that the order is total and the winner never
// depends on the order of the list (kube-apiserver's controller has no such final tie-break).
//
// A candidate whose spec.binaryVersion or spec.emulationVersion is missing or not a strict semantic version,
// or that emulates a version newer than its binary, is invalid: the API rejects such objects in native mode,
// and ranking one by guesswork could elect a leader that is not version-safe.
type OldestEmulationVersion struct{}

var _ Strategy = OldestEmulationVersion{}

// Name returns coordinationv1.OldestEmulationVersion.
func (OldestEmulationVersion) Name() coordinationv1.CoordinatedLeaseStrategy {
	return coordinationv1.OldestEmulationVersion
}

// Validate reports why c cannot take part, naming the offending field and value.
func (OldestEmulationVersion) Validate(c *coordinationv1beta1.LeaseCandidate) error {
	return validateBy(versionKey, c)
}

// Compare orders by lowest emulationVersion, then lowest binaryVersion, then oldest creationTimestamp, then
// name and namespace. Invalid candidates order after valid ones, and nil after everything.
func (OldestEmulationVersion) Compare(a, b *coordinationv1beta1.LeaseCandidate) int {
	return compareBy(versionKey, a, b)
}

// CompareMerit orders by lowest emulationVersion, then lowest binaryVersion: candidates at the same versions
// are equal on merit, whatever their age or name.
func (OldestEmulationVersion) CompareMerit(a, b *coordinationv1beta1.LeaseCandidate) int {
	return compareMeritBy(versionKey, a, b)
}

// Rank returns the valid candidates in Compare order and the invalid ones by name.
func (OldestEmulationVersion) Rank(cands []*coordinationv1beta1.LeaseCandidate) ([]*coordinationv1beta1.LeaseCandidate, []InvalidCandidate) {
	return rank(cands, versionKey)
}

// versionKey is the OldestEmulationVersion key; other strategies build on it so that they are version-safe
// among candidates they consider equal.
func versionKey(p versionParser, c *coordinationv1beta1.LeaseCandidate) (sortKey, error) {
	if c == nil {
		return sortKey{class: classNil}, errNilCandidate
	}
	k := sortKey{created: c.CreationTimestamp.Time, name: c.Name, namespace: c.Namespace}
	var err error
	if k.binary, err = parseVersionField(p, "spec.binaryVersion", c.Spec.BinaryVersion); err != nil {
		k.class = classInvalid
		return k, err
	}
	if k.emulation, err = parseVersionField(p, "spec.emulationVersion", c.Spec.EmulationVersion); err != nil {
		k.class = classInvalid
		return k, err
	}
	if k.emulation.compare(&k.binary) > 0 {
		k.class = classInvalid
		return k, fmt.Errorf("spec.emulationVersion %q is newer than spec.binaryVersion %q: a binary cannot emulate a later version",
			c.Spec.EmulationVersion, c.Spec.BinaryVersion)
	}
	return k, nil
}

func parseVersionField(p versionParser, field, value string) (semver, error) {
	if value == "" {
		return semver{}, fmt.Errorf("%s is missing", field)
	}
	v, err := p.parse(value)
	if err != nil {
		return semver{}, fmt.Errorf("%s %q is not a strict semantic version: %w", field, value, err)
	}
	return v, nil
}
