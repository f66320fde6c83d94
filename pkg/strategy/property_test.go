package strategy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Small pools, so that equal versions, timestamps and priorities are common and every tie-break is exercised.
var (
	propertyVersions = []string{
		"1.2.0", "1.19.0", "1.29.0", "1.30.0", "1.30.1", "1.31.0-alpha.1", "1.31.0-beta.0", "1.31.0", "1.31.0+build.1",
		"1.31.0-9", "1.31.0-10", "1.31.0-1a", // a cycle under apimachinery's own comparison
		"", "v1.31.0", "1.31", "garbage", " 1.30.0",
	}
	propertyStrategies = []coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion, PriorityName, "", "example.com/Other"}
	propertyPriorities = []string{"0", "1", "-1", "+1", "abc", "99999999999"}
	propertyNames      = []string{"a", "b", "c", "d", "e", "f", "g", "h"}
)

// randomCandidates draws a set of 1 to 6 entries with unique names; one may be nil.
func randomCandidates(rng *rand.Rand) []*coordinationv1beta1.LeaseCandidate {
	n := 1 + rng.IntN(6)
	pool := slices.Clone(propertyNames)
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	cands := make([]*coordinationv1beta1.LeaseCandidate, n)
	for i := range cands {
		if rng.IntN(12) == 0 {
			continue // nil entry
		}
		binary := propertyVersions[rng.IntN(len(propertyVersions))]
		emulation := binary
		if rng.IntN(2) == 0 {
			emulation = propertyVersions[rng.IntN(len(propertyVersions))]
		}
		c := &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{
				Name:              pool[i],
				Namespace:         []string{"default", "other"}[rng.IntN(2)],
				CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(rng.IntN(3)) * time.Minute)),
			},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName:        "lease",
				BinaryVersion:    binary,
				EmulationVersion: emulation,
				Strategy:         propertyStrategies[rng.IntN(len(propertyStrategies))],
			},
		}
		if k := rng.IntN(len(propertyPriorities) + 2); k < len(propertyPriorities) {
			c.Annotations = map[string]string{PriorityAnnotation: propertyPriorities[k]}
		}
		cands[i] = c
	}
	return cands
}

// permutations returns every ordering of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := slices.Insert(slices.Clone(p), i, n-1)
			out = append(out, q)
		}
	}
	return out
}

// rankSignature renders a Rank result so that two results can be compared as strings.
func rankSignature(ranked []*coordinationv1beta1.LeaseCandidate, invalid []InvalidCandidate) string {
	var b strings.Builder
	for _, c := range ranked {
		fmt.Fprintf(&b, "%s/%s ", c.Namespace, c.Name)
	}
	b.WriteString("| ")
	for _, ic := range invalid {
		fmt.Fprintf(&b, "%s/%s: %v; ", ic.Candidate.Namespace, ic.Candidate.Name, ic.Reason)
	}
	return b.String()
}

// TestPropertyOrderIndependence checks on random candidate sets that Rank, Best and ResolveStrategy give the
// same answer for every permutation of the input, and that Compare is a total order.
func TestPropertyOrderIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(4355, 20240614)) // fixed: the test is deterministic
	perms := make([][][]int, 7)
	for n := range perms {
		perms[n] = permutations(n)
	}
	const sets = 200
	for set := range sets {
		cands := randomCandidates(rng)
		snapshot := make([]*coordinationv1beta1.LeaseCandidate, len(cands))
		for i, c := range cands {
			snapshot[i] = c.DeepCopy()
		}
		for _, s := range []Strategy{OldestEmulationVersion{}, Priority{}} {
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("set %d %q, %s: %s", set, describe(cands), s.Name(), fmt.Sprintf(format, args...))
			}
			ranked, invalid := s.Rank(cands)
			want := rankSignature(ranked, invalid)
			wantBest, _ := Best(s, cands)
			wantResolution := ResolveStrategy(cands)
			checkRankResult(s, cands, ranked, invalid, fail)
			checkTotalOrder(s, cands, fail)
			checkMeritRefinedByCompare(s, cands, fail)

			buf := make([]*coordinationv1beta1.LeaseCandidate, len(cands))
			for _, p := range perms[len(cands)] {
				for i, j := range p {
					buf[i] = cands[j]
				}
				before := slices.Clone(buf)
				if got := rankSignature(s.Rank(buf)); got != want {
					fail("Rank of permutation %v = %q, want %q", p, got, want)
				}
				if got, _ := Best(s, buf); got != wantBest {
					fail("Best of permutation %v = %v, want %v", p, got, wantBest)
				}
				if got := ResolveStrategy(buf); !reflect.DeepEqual(got, wantResolution) {
					fail("ResolveStrategy of permutation %v = %+v, want %+v", p, got, wantResolution)
				}
				if !slices.Equal(buf, before) {
					fail("the input slice was modified")
				}
			}
		}
		if !reflect.DeepEqual(cands, snapshot) {
			t.Fatalf("set %d: candidates were modified", set)
		}
	}
}

// checkRankResult checks a Rank result against Validate and Compare.
func checkRankResult(s Strategy, cands, ranked []*coordinationv1beta1.LeaseCandidate, invalid []InvalidCandidate, fail func(string, ...any)) {
	nonNil := 0
	for _, c := range cands {
		if c != nil {
			nonNil++
		}
	}
	if len(ranked)+len(invalid) != nonNil {
		fail("%d ranked + %d invalid != %d candidates", len(ranked), len(invalid), nonNil)
	}
	for i, c := range ranked {
		if err := s.Validate(c); err != nil {
			fail("ranked %q is invalid: %v", c.Name, err)
		}
		if i > 0 && s.Compare(ranked[i-1], c) >= 0 {
			fail("ranked out of order: %q before %q", ranked[i-1].Name, c.Name)
		}
	}
	for i, ic := range invalid {
		if err := s.Validate(ic.Candidate); err == nil || ic.Reason == nil || err.Error() != ic.Reason.Error() {
			fail("invalid %q: reason %v, Validate %v", ic.Candidate.Name, ic.Reason, err)
		}
		if i > 0 && invalid[i-1].Candidate.Name >= ic.Candidate.Name {
			fail("invalid not sorted by name: %q before %q", invalid[i-1].Candidate.Name, ic.Candidate.Name)
		}
	}
}

// checkTotalOrder checks that Compare is antisymmetric, zero only for the same candidate, and transitive, over
// every pair and triple of cands, invalid and nil entries included.
func checkTotalOrder(s Strategy, cands []*coordinationv1beta1.LeaseCandidate, fail func(string, ...any)) {
	for _, a := range cands {
		for _, b := range cands {
			ab := sign(s.Compare(a, b))
			if ba := sign(s.Compare(b, a)); ab != -ba {
				fail("Compare(%s, %s) = %d but Compare(%s, %s) = %d", name(a), name(b), ab, name(b), name(a), ba)
			}
			if (ab == 0) != (a == b) {
				fail("Compare(%s, %s) = %d", name(a), name(b), ab)
			}
			for _, c := range cands {
				if ab < 0 && sign(s.Compare(b, c)) < 0 && sign(s.Compare(a, c)) >= 0 {
					fail("not transitive: %s < %s < %s but not %s < %s", name(a), name(b), name(c), name(a), name(c))
				}
			}
		}
	}
}

// checkMeritRefinedByCompare checks that CompareMerit is a preorder that Compare refines: antisymmetric and
// transitive, never contradicted by Compare, and zero for the same candidate.
func checkMeritRefinedByCompare(s Strategy, cands []*coordinationv1beta1.LeaseCandidate, fail func(string, ...any)) {
	for _, a := range cands {
		for _, b := range cands {
			ab := sign(s.CompareMerit(a, b))
			if ba := sign(s.CompareMerit(b, a)); ab != -ba {
				fail("CompareMerit(%s, %s) = %d but CompareMerit(%s, %s) = %d", name(a), name(b), ab, name(b), name(a), ba)
			}
			if a == b && ab != 0 {
				fail("CompareMerit(%s, %s) = %d, want 0", name(a), name(b), ab)
			}
			if ab != 0 && sign(s.Compare(a, b)) != ab {
				fail("CompareMerit(%s, %s) = %d but Compare = %d", name(a), name(b), ab, sign(s.Compare(a, b)))
			}
			if Preempts(s, a, b) != (ab < 0) {
				fail("Preempts(%s, %s) = %v with CompareMerit %d", name(a), name(b), Preempts(s, a, b), ab)
			}
			for _, c := range cands {
				if ab <= 0 && sign(s.CompareMerit(b, c)) <= 0 && sign(s.CompareMerit(a, c)) > 0 {
					fail("merit not transitive: %s <= %s <= %s but %s > %s", name(a), name(b), name(c), name(a), name(c))
				}
			}
		}
	}
}

func name(c *coordinationv1beta1.LeaseCandidate) string {
	if c == nil {
		return "<nil>"
	}
	return c.Name
}

func describe(cands []*coordinationv1beta1.LeaseCandidate) []string {
	out := make([]string, len(cands))
	for i, c := range cands {
		if c == nil {
			out[i] = "<nil>"
			continue
		}
		out[i] = fmt.Sprintf("%s/%s e=%q b=%q t=%s s=%q p=%v", c.Namespace, c.Name, c.Spec.EmulationVersion,
			c.Spec.BinaryVersion, c.CreationTimestamp.Format(time.TimeOnly), c.Spec.Strategy, c.Annotations)
	}
	return out
}
