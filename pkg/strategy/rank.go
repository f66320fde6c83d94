package strategy

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

var errNilCandidate = errors.New("candidate is nil")

// class keeps Compare a total order on any input: candidates that cannot take part order after those that
// can, and nil after everything, even though Rank never returns either.
type class uint8

const (
	classValid class = iota
	classInvalid
	classNil
)

// sortKey is everything a strategy orders candidates by, parsed once per candidate so that sorting never
// re-parses versions or annotations. Strategies differ only in how they fill it.
type sortKey struct {
	class     class
	priority  int64 // higher leads first; 0 under OldestEmulationVersion
	emulation semver
	binary    semver
	created   time.Time
	name      string
	namespace string
}

// compare is the strategy's total order: merit first, then the tie-break.
func (a *sortKey) compare(b *sortKey) int {
	if c := a.compareMerit(b); c != 0 {
		return c
	}
	return a.compareTieBreak(b)
}

// compareMerit orders by what makes one candidate a better leader than
// another: validity, priority, then versions.
func (a *sortKey) compareMerit(b *sortKey) int {
	if c := cmp.Compare(a.class, b.class); c != 0 {
		return c
	}
	if c := cmp.Compare(b.priority, a.priority); c != 0 {
		return c
	}
	if c := a.emulation.compare(&b.emulation); c != 0 {
		return c
	}
	return a.binary.compare(&b.binary)
}

// compareTieBreak orders candidates of equal merit, only so that the order is
// total: the older candidate first, then by name and namespace.
func (a *sortKey) compareTieBreak(b *sortKey) int {
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	if c := strings.Compare(a.name, b.name); c != 0 {
		return c
	}
	return strings.Compare(a.namespace, b.namespace)
}

// keyFunc builds a candidate's sort key, and says why the candidate is invalid if it is. The key is
// meaningful (if useless) even then, so that Compare can order any two candidates.
type keyFunc func(versionParser, *coordinationv1beta1.LeaseCandidate) (sortKey, error)

func compareBy(key keyFunc, a, b *coordinationv1beta1.LeaseCandidate) int {
	ka, _ := key(nil, a)
	kb, _ := key(nil, b)
	return ka.compare(&kb)
}

func compareMeritBy(key keyFunc, a, b *coordinationv1beta1.LeaseCandidate) int {
	ka, _ := key(nil, a)
	kb, _ := key(nil, b)
	return ka.compareMerit(&kb)
}

func validateBy(key keyFunc, c *coordinationv1beta1.LeaseCandidate) error {
	_, err := key(nil, c)
	return err
}

type keyedCandidate struct {
	candidate *coordinationv1beta1.LeaseCandidate
	key       sortKey
}

// rank implements Strategy.Rank for any key: one key per candidate, then a sort on keys.
func rank(cands []*coordinationv1beta1.LeaseCandidate, key keyFunc) ([]*coordinationv1beta1.LeaseCandidate, []InvalidCandidate) {
	keyed := make([]keyedCandidate, 0, len(cands))
	var invalid []InvalidCandidate
	parser := versionParser{}
	for _, c := range cands {
		if c == nil {
			continue
		}
		k, err := key(parser, c)
		if err != nil {
			invalid = append(invalid, InvalidCandidate{Candidate: c, Reason: err})
			continue
		}
		keyed = append(keyed, keyedCandidate{candidate: c, key: k})
	}
	// Sorting pointers moves one word per swap instead of a whole key.
	order := make([]*keyedCandidate, len(keyed))
	for i := range keyed {
		order[i] = &keyed[i]
	}
	slices.SortFunc(order, func(a, b *keyedCandidate) int { return a.key.compare(&b.key) })
	ranked := make([]*coordinationv1beta1.LeaseCandidate, len(order))
	for i, kc := range order {
		ranked[i] = kc.candidate
	}
	slices.SortFunc(invalid, func(a, b InvalidCandidate) int {
		return cmp.Or(strings.Compare(a.Candidate.Name, b.Candidate.Name), strings.Compare(a.Candidate.Namespace, b.Candidate.Namespace))
	})
	return ranked, invalid
}
