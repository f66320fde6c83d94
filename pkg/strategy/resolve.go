package strategy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

// Resolution is the strategy a Lease follows, as its candidates decide it.
type Resolution struct {
	// Strategy is the agreed strategy; "" when Conflict or when no candidate has a parseable binaryVersion.
	Strategy coordinationv1.CoordinatedLeaseStrategy
	// BinaryVersion is the highest binary version, as written by the candidates at it (the lexically first
	// spelling when they differ only in build metadata); "" when no candidate has a parseable binaryVersion.
	BinaryVersion string
	// Conflict is true when the candidates at the highest binary version ask for different strategies.
	Conflict bool
	// Conflicting lists, when Conflict, every candidate at the highest binary version with the strategy it
	// asks for, sorted by name then namespace.
	Conflicting []CandidateStrategy
}

// CandidateStrategy is the strategy one candidate asks for.
type CandidateStrategy struct {
	Name, Namespace string
	Strategy        coordinationv1.CoordinatedLeaseStrategy
}

// DescribeConflict names each conflicting candidate with the strategy it asks
// for, as Events, logs and kubectl cle say it: `a: "X", b: "Y"`.
func DescribeConflict(cs []CandidateStrategy) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s: %q", c.Name, c.Strategy))
	}
	return strings.Join(parts, ", ")
}

// ResolveStrategy decides the strategy of a Lease from its candidates: the newest binaries decide, because
// during an upgrade a strategy may be introduced or changed, and the old binaries, about to go away, cannot
// know about it. Candidates whose binaryVersion is not a strict semantic version do not take part. When the
// candidates at the highest binary version disagree there is no safe answer, so the result is a conflict
// (kube-apiserver's controller picks one depending on list order). The result never depends on the order of
// cands; nil entries are skipped, and an empty strategy is just one more value.
func ResolveStrategy(cands []*coordinationv1beta1.LeaseCandidate) Resolution {
	var (
		highest semver
		top     []*coordinationv1beta1.LeaseCandidate // the candidates at the highest binary version
		parser  = versionParser{}
	)
	for _, c := range cands {
		if c == nil {
			continue
		}
		v, err := parser.parse(c.Spec.BinaryVersion)
		if err != nil {
			continue
		}
		switch order := v.compare(&highest); {
		case len(top) == 0 || order > 0:
			highest, top = v, top[:0]
		case order < 0:
			continue
		}
		top = append(top, c)
	}
	if len(top) == 0 {
		return Resolution{}
	}
	res := Resolution{BinaryVersion: top[0].Spec.BinaryVersion, Strategy: top[0].Spec.Strategy}
	for _, c := range top[1:] {
		res.BinaryVersion = min(res.BinaryVersion, c.Spec.BinaryVersion)
		if c.Spec.Strategy != res.Strategy {
			res.Conflict = true
		}
	}
	if !res.Conflict {
		return res
	}
	res.Strategy = ""
	res.Conflicting = make([]CandidateStrategy, len(top))
	for i, c := range top {
		res.Conflicting[i] = CandidateStrategy{Name: c.Name, Namespace: c.Namespace, Strategy: c.Spec.Strategy}
	}
	slices.SortFunc(res.Conflicting, func(a, b CandidateStrategy) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Namespace, b.Namespace), strings.Compare(string(a.Strategy), string(b.Strategy)))
	})
	return res
}
