package strategy

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchmarkCandidates builds n candidates as a large fleet mid-upgrade looks: a few minor versions with patch
// releases and the odd release candidate, emulation at the binary's version or one minor behind, creation
// times spread over a day, a priority on a third of them, and about 1% with broken versions.
func benchmarkCandidates(n int) []*coordinationv1beta1.LeaseCandidate {
	rng := rand.New(rand.NewPCG(1, 2))
	cands := make([]*coordinationv1beta1.LeaseCandidate, n)
	for i := range cands {
		minor := 33 + rng.IntN(4)
		binary := fmt.Sprintf("1.%d.%d", minor, rng.IntN(5))
		if rng.IntN(20) == 0 {
			binary = fmt.Sprintf("1.%d.0-rc.%d", minor, rng.IntN(3))
		}
		emulation := binary
		if rng.IntN(3) == 0 {
			emulation = fmt.Sprintf("1.%d.0", minor-1)
		}
		if rng.IntN(100) == 0 {
			binary = "v" + binary
		}
		c := &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{
				Name:              fmt.Sprintf("candidate-%05d", i),
				Namespace:         "kube-system",
				CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(rng.IntN(86400)) * time.Second)),
			},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName:        "lease",
				BinaryVersion:    binary,
				EmulationVersion: emulation,
				Strategy:         PriorityName,
			},
		}
		if rng.IntN(3) == 0 {
			c.Annotations = map[string]string{PriorityAnnotation: strconv.Itoa(rng.IntN(10) - 2)}
		}
		cands[i] = c
	}
	return cands
}

func benchmarkRank(b *testing.B, s Strategy) {
	cands := benchmarkCandidates(10000)
	b.ReportAllocs()
	for b.Loop() {
		ranked, _ := s.Rank(cands)
		if len(ranked) == 0 {
			b.Fatal("nothing ranked")
		}
	}
}

func BenchmarkRank10000(b *testing.B) { benchmarkRank(b, OldestEmulationVersion{}) }

func BenchmarkRank10000Priority(b *testing.B) { benchmarkRank(b, Priority{}) }

func BenchmarkResolveStrategy10000(b *testing.B) {
	cands := benchmarkCandidates(10000)
	b.ReportAllocs()
	for b.Loop() {
		if r := ResolveStrategy(cands); r.Strategy != PriorityName {
			b.Fatalf("ResolveStrategy = %+v", r)
		}
	}
}
