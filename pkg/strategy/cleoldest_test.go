package strategy

import (
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

// cle's OldestEmulationVersion ranks, validates and compares exactly as
// Kubernetes' does, under its own name.
func TestOldestEmulationVersionByCle(t *testing.T) {
	cands := []*coordinationv1beta1.LeaseCandidate{
		candidate("new", "1.31.0", "1.31.0", 1),
		candidate("old-young", "1.30.0", "1.31.0", 3),
		candidate("old", "1.30.0", "1.31.0", 2),
		candidate("older-binary", "1.30.0", "1.30.0", 5),
		candidate("bad", "1.32.0", "1.31.0", 0), // emulates past its binary
		candidate("unparsed", "v1.30", "1.31.0", 0),
		nil,
	}
	k, c := OldestEmulationVersion{}, OldestEmulationVersionByCle{}
	if c.Name() != OldestEmulationVersionByCleName || ValidateStrategyName(c.Name()) != nil {
		t.Fatalf("Name() = %q", c.Name())
	}
	kr, ki := k.Rank(cands)
	cr, ci := c.Rank(cands)
	if !slices.Equal(names(cr), names(kr)) || !slices.Equal(invalidNames(ci), invalidNames(ki)) {
		t.Errorf("Rank = %v, invalid %v; OldestEmulationVersion ranks %v, invalid %v", names(cr), invalidNames(ci), names(kr), invalidNames(ki))
	}
	if want := []string{"older-binary", "old", "old-young", "new"}; !slices.Equal(names(cr), want) {
		t.Errorf("Rank = %v, want %v", names(cr), want)
	}
	for _, a := range cands {
		for _, b := range cands {
			if a == nil || b == nil {
				continue
			}
			if c.Compare(a, b) != k.Compare(a, b) || c.CompareMerit(a, b) != k.CompareMerit(a, b) {
				t.Errorf("%s vs %s: Compare %d, CompareMerit %d; OldestEmulationVersion %d, %d", a.Name, b.Name,
					c.Compare(a, b), c.CompareMerit(a, b), k.Compare(a, b), k.CompareMerit(a, b))
			}
		}
		if a != nil && (c.Validate(a) == nil) != (k.Validate(a) == nil) {
			t.Errorf("Validate(%s) = %v, OldestEmulationVersion's %v", a.Name, c.Validate(a), k.Validate(a))
		}
	}
}

func TestBuiltinAndVersionOrdered(t *testing.T) {
	for _, tc := range []struct {
		name                    coordinationv1.CoordinatedLeaseStrategy
		builtin, versionOrdered bool
	}{
		{coordinationv1.OldestEmulationVersion, true, true},
		{OldestEmulationVersionByCleName, false, true},
		{PriorityName, false, false},
		{"example.com/Future", false, false},
		{"", false, false},
	} {
		if got := Builtin(tc.name); got != tc.builtin {
			t.Errorf("Builtin(%q) = %t, want %t", tc.name, got, tc.builtin)
		}
		if got := VersionOrdered(tc.name); got != tc.versionOrdered {
			t.Errorf("VersionOrdered(%q) = %t, want %t", tc.name, got, tc.versionOrdered)
		}
	}
}
