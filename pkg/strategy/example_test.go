package strategy_test

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cle-dev/cle/pkg/strategy"
)

// Example shows how an election uses the package: resolve the Lease's strategy, leave it alone if no
// registered strategy handles it, then pick the best candidate and report the invalid ones.
func Example() {
	newCandidate := func(name, emulation, binary string) *coordinationv1beta1.LeaseCandidate {
		return &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName:        "kube-scheduler",
				EmulationVersion: emulation,
				BinaryVersion:    binary,
				Strategy:         coordinationv1.OldestEmulationVersion,
			},
		}
	}
	cands := []*coordinationv1beta1.LeaseCandidate{
		newCandidate("scheduler-new", "1.36.0", "1.36.0"),
		newCandidate("scheduler-old", "1.35.2", "1.35.2"),
		newCandidate("scheduler-upgraded", "1.35.0", "1.36.0"),
		newCandidate("scheduler-broken", "1.36.0", "v1.36.0"),
	}

	res := strategy.ResolveStrategy(cands)
	if res.Conflict {
		fmt.Println("conflict:", res.Conflicting)
		return
	}
	s, ok := strategy.NewDefaultRegistry().Get(res.Strategy)
	if !ok {
		fmt.Println("another controller owns strategy", res.Strategy)
		return
	}
	best, invalid := strategy.Best(s, cands)
	fmt.Printf("strategy %s (decided at %s), best %s\n", res.Strategy, res.BinaryVersion, best.Name)
	for _, ic := range invalid {
		fmt.Printf("skipped %s: %v\n", ic.Candidate.Name, ic.Reason)
	}
	// Output:
	// strategy OldestEmulationVersion (decided at 1.36.0), best scheduler-upgraded
	// skipped scheduler-broken: spec.binaryVersion "v1.36.0" is not a strict semantic version: a leading "v" or surrounding whitespace is not allowed
}
