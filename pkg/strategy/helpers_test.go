package strategy

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// epoch is a fixed instant: tests never read the clock.
var epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// candidate builds a LeaseCandidate in namespace "default" created createdSec seconds after epoch.
func candidate(name, emulation, binary string, createdSec int, opts ...func(*coordinationv1beta1.LeaseCandidate)) *coordinationv1beta1.LeaseCandidate {
	c := &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         "default",
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(createdSec) * time.Second)),
		},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "lease",
			EmulationVersion: emulation,
			BinaryVersion:    binary,
			Strategy:         coordinationv1.OldestEmulationVersion,
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withPriority(p string) func(*coordinationv1beta1.LeaseCandidate) {
	return func(c *coordinationv1beta1.LeaseCandidate) {
		c.Annotations = map[string]string{PriorityAnnotation: p}
	}
}

func withStrategy(s coordinationv1.CoordinatedLeaseStrategy) func(*coordinationv1beta1.LeaseCandidate) {
	return func(c *coordinationv1beta1.LeaseCandidate) { c.Spec.Strategy = s }
}

func withNamespace(ns string) func(*coordinationv1beta1.LeaseCandidate) {
	return func(c *coordinationv1beta1.LeaseCandidate) { c.Namespace = ns }
}

// names returns the candidates' names, "<nil>" for a nil entry.
func names(cands []*coordinationv1beta1.LeaseCandidate) []string {
	out := make([]string, len(cands))
	for i, c := range cands {
		if c == nil {
			out[i] = "<nil>"
			continue
		}
		out[i] = c.Name
	}
	return out
}

func invalidNames(invalid []InvalidCandidate) []string {
	out := make([]string, len(invalid))
	for i, ic := range invalid {
		out[i] = ic.Candidate.Name
	}
	return out
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
