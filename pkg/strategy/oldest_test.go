package strategy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

func TestOldestEmulationVersionRank(t *testing.T) {
	tests := []struct {
		name        string
		cands       []*coordinationv1beta1.LeaseCandidate
		wantRanked  []string
		wantInvalid []string
	}{
		{
			name:       "no candidates",
			wantRanked: []string{},
		},
		{
			name:       "nil entries are skipped",
			cands:      []*coordinationv1beta1.LeaseCandidate{nil, candidate("a", "1.31.0", "1.31.0", 0), nil},
			wantRanked: []string{"a"},
		},
		{
			name: "lowest emulation version first",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("new", "1.31.0", "1.31.0", 0),
				candidate("old", "1.30.0", "1.31.0", 10),
			},
			wantRanked: []string{"old", "new"},
		},
		{
			name: "emulation version decides before binary version",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("b", "1.31.0", "1.31.0", 0),
				candidate("a", "1.30.0", "1.33.0", 0),
			},
			wantRanked: []string{"a", "b"},
		},
		{
			name: "lowest binary version when emulation versions are equal",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.30.0", "1.31.0", 0),
				candidate("b", "1.30.0", "1.30.0", 10),
			},
			wantRanked: []string{"b", "a"},
		},
		{
			name: "pre-releases order before their release",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("ga", "1.31.0", "1.31.0", 0),
				candidate("beta", "1.31.0-beta.0", "1.31.0-beta.0", 0),
				candidate("alpha", "1.31.0-alpha.1", "1.31.0-alpha.1", 0),
			},
			wantRanked: []string{"alpha", "beta", "ga"},
		},
		{
			name: "versions compare numerically, not as text",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("b", "1.19.0", "1.19.0", 0),
				candidate("a", "1.2.0", "1.19.0", 0),
			},
			wantRanked: []string{"a", "b"},
		},
		{
			name: "oldest creation timestamp when versions are equal",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.30.0", "1.31.0", 20),
				candidate("b", "1.30.0", "1.31.0", 10),
				candidate("c", "1.30.0", "1.31.0", 30),
			},
			wantRanked: []string{"b", "a", "c"},
		},
		{
			name: "build metadata is ignored, so the timestamp decides",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.30.0+a", "1.31.0+z", 20),
				candidate("b", "1.30.0+z", "1.31.0+a", 10),
			},
			wantRanked: []string{"b", "a"},
		},
		{
			name: "name when versions and timestamps are equal",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("c", "1.30.0", "1.31.0", 0),
				candidate("a", "1.30.0", "1.31.0", 0),
				candidate("b", "1.30.0", "1.31.0", 0),
			},
			wantRanked: []string{"a", "b", "c"},
		},
		{
			name: "invalid candidates are listed by name, never ranked",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("z-ok", "1.31.0", "1.31.0", 0),
				candidate("no-binary", "1.30.0", "", 0),
				candidate("no-emulation", "", "1.31.0", 0),
				candidate("bad-binary", "1.30.0", "1.31", 0),
				candidate("bad-emulation", "latest", "1.31.0", 0),
				candidate("v-prefix", "v1.30.0", "1.31.0", 0),
				candidate("emulates-newer", "1.32.0", "1.31.0", 0),
				candidate("emulates-newer-pre", "1.31.0", "1.31.0-rc.1", 0),
			},
			wantRanked:  []string{"z-ok"},
			wantInvalid: []string{"bad-binary", "bad-emulation", "emulates-newer", "emulates-newer-pre", "no-binary", "no-emulation", "v-prefix"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ranked, invalid := OldestEmulationVersion{}.Rank(tt.cands)
			if got := names(ranked); !slices.Equal(got, tt.wantRanked) {
				t.Errorf("ranked = %q, want %q", got, tt.wantRanked)
			}
			if got := invalidNames(invalid); !slices.Equal(got, tt.wantInvalid) {
				t.Errorf("invalid = %q, want %q", got, tt.wantInvalid)
			}
			best, _ := Best(OldestEmulationVersion{}, tt.cands)
			switch {
			case len(tt.wantRanked) == 0 && best != nil:
				t.Errorf("Best = %q, want nil", best.Name)
			case len(tt.wantRanked) > 0 && (best == nil || best.Name != tt.wantRanked[0]):
				t.Errorf("Best = %v, want %q", best, tt.wantRanked[0])
			}
		})
	}
}

func TestOldestEmulationVersionValidate(t *testing.T) {
	tests := []struct {
		name string
		c    *coordinationv1beta1.LeaseCandidate
		want []string // substrings of the reason; nil means valid
	}{
		{name: "valid", c: candidate("a", "1.30.0", "1.31.0", 0)},
		{name: "valid pre-release", c: candidate("a", "1.31.0-alpha.1", "1.31.0-alpha.1", 0)},
		{name: "equal versions", c: candidate("a", "1.31.0", "1.31.0", 0)},
		{name: "nil", want: []string{"nil"}},
		{name: "missing binary", c: candidate("a", "1.30.0", "", 0), want: []string{"spec.binaryVersion is missing"}},
		{name: "missing emulation", c: candidate("a", "", "1.31.0", 0), want: []string{"spec.emulationVersion is missing"}},
		{name: "bad binary", c: candidate("a", "1.30.0", "1.31", 0), want: []string{"spec.binaryVersion", `"1.31"`, "not a strict semantic version"}},
		{name: "bad emulation", c: candidate("a", "x.y.z", "1.31.0", 0), want: []string{"spec.emulationVersion", `"x.y.z"`}},
		{name: "v prefix", c: candidate("a", "1.30.0", "v1.31.0", 0), want: []string{"spec.binaryVersion", `"v1.31.0"`, `leading "v"`}},
		{name: "emulation newer than binary", c: candidate("a", "1.32.0", "1.31.0", 0), want: []string{"spec.emulationVersion", `"1.32.0"`, "newer than spec.binaryVersion", `"1.31.0"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := OldestEmulationVersion{}.Validate(tt.c)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestCompareEdgeCases(t *testing.T) {
	a := candidate("a", "1.30.0", "1.31.0", 0)
	b := candidate("b", "1.30.0", "1.31.0", 0)
	sameAsA := a.DeepCopy()
	otherNS := candidate("a", "1.30.0", "1.31.0", 0, withNamespace("other"))
	bad := candidate("0-bad", "", "1.31.0", 0)
	for _, s := range []Strategy{OldestEmulationVersion{}, Priority{}} {
		t.Run(string(s.Name()), func(t *testing.T) {
			checks := []struct {
				name string
				x, y *coordinationv1beta1.LeaseCandidate
				want int
			}{
				{"same object", a, a, 0},
				{"same candidate, another copy", a, sameAsA, 0},
				{"name breaks the tie", a, b, -1},
				{"namespace breaks the tie", a, otherNS, -1},
				{"invalid after valid, whatever the name", a, bad, -1},
				{"nil after valid", a, nil, -1},
				{"nil after invalid", bad, nil, -1},
				{"nil equals nil", nil, nil, 0},
			}
			for _, c := range checks {
				if got := sign(s.Compare(c.x, c.y)); got != c.want {
					t.Errorf("%s: Compare = %d, want %d", c.name, got, c.want)
				}
				if got := sign(s.Compare(c.y, c.x)); got != -c.want {
					t.Errorf("%s (swapped): Compare = %d, want %d", c.name, got, -c.want)
				}
			}
		})
	}
}

func TestRankDoesNotModifyInput(t *testing.T) {
	in := []*coordinationv1beta1.LeaseCandidate{
		candidate("c", "1.31.0", "1.31.0", 0, withPriority("1")),
		nil,
		candidate("b", "1.30.0", "1.31.0", 0, withPriority("x")),
		candidate("a", "1.30.0", "1.31.0", 0),
	}
	before := slices.Clone(in)
	copies := make([]*coordinationv1beta1.LeaseCandidate, len(in))
	for i, c := range in {
		copies[i] = c.DeepCopy()
	}
	for _, s := range []Strategy{OldestEmulationVersion{}, Priority{}} {
		s.Rank(in)
		ResolveStrategy(in)
		for i := range in {
			if in[i] != before[i] {
				t.Fatalf("%s: Rank reordered its input", s.Name())
			}
			if in[i] != nil && !reflect.DeepEqual(in[i], copies[i]) {
				t.Fatalf("%s: Rank modified candidate %q", s.Name(), in[i].Name)
			}
		}
	}
}
