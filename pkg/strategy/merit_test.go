package strategy

import (
	"testing"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

// TestMeritIgnoresTieBreak pins what may preempt a holder: a better version (or priority) does; an earlier
// creation time or a name that sorts first does not, although Compare still orders by them.
func TestMeritIgnoresTieBreak(t *testing.T) {
	cases := []struct {
		name         string
		s            Strategy
		best, holder *coordinationv1beta1.LeaseCandidate
		wantPreempt  bool
	}{
		{"older emulation preempts", OldestEmulationVersion{},
			candidate("new", "1.35.0", "1.36.0", 10), candidate("old", "1.36.0", "1.36.0", 0), true},
		{"older binary at the same emulation preempts", OldestEmulationVersion{},
			candidate("b", "1.35.0", "1.35.0", 10), candidate("a", "1.35.0", "1.36.0", 0), true},
		{"older candidate at the same versions does not", OldestEmulationVersion{},
			candidate("b", "1.36.0", "1.36.0", 0), candidate("c", "1.36.0", "1.36.0", 10), false},
		{"same second, name sorts first, does not", OldestEmulationVersion{},
			candidate("a", "1.36.0", "1.36.0", 0), candidate("b", "1.36.0", "1.36.0", 0), false},
		{"build metadata alone does not", OldestEmulationVersion{},
			candidate("a", "1.36.0", "1.36.0+a", 0), candidate("b", "1.36.0", "1.36.0+b", 0), false},
		{"higher priority preempts a better version", Priority{},
			candidate("p", "1.36.0", "1.36.0", 10, withPriority("5")), candidate("q", "1.35.0", "1.35.0", 0), true},
		{"equal priority falls back to versions", Priority{},
			candidate("p", "1.35.0", "1.35.0", 10, withPriority("1")), candidate("q", "1.36.0", "1.36.0", 0, withPriority("1")), true},
		{"equal priority and versions does not", Priority{},
			candidate("a", "1.36.0", "1.36.0", 0, withPriority("1")), candidate("b", "1.36.0", "1.36.0", 5, withPriority("+1")), false},
		{"a valid candidate preempts an invalid holder", OldestEmulationVersion{},
			candidate("v", "1.36.0", "1.36.0", 10), candidate("bad", "x", "1.36.0", 0), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Preempts(tc.s, tc.best, tc.holder); got != tc.wantPreempt {
				t.Errorf("Preempts(%s, %s) = %v, want %v", tc.best.Name, tc.holder.Name, got, tc.wantPreempt)
			}
			if Preempts(tc.s, tc.holder, tc.best) {
				t.Errorf("Preempts(%s, %s) = true the other way round too", tc.holder.Name, tc.best.Name)
			}
			if !tc.wantPreempt {
				if c := tc.s.Compare(tc.best, tc.holder); c == 0 {
					t.Errorf("Compare(%s, %s) = 0: the tie-break must still order them", tc.best.Name, tc.holder.Name)
				}
			}
		})
	}
}
