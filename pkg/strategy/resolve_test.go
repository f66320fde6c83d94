package strategy

import (
	"reflect"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

func TestResolveStrategy(t *testing.T) {
	const oev = coordinationv1.OldestEmulationVersion
	tests := []struct {
		name  string
		cands []*coordinationv1beta1.LeaseCandidate
		want  Resolution
	}{
		{name: "no candidates", want: Resolution{}},
		{name: "only nil", cands: []*coordinationv1beta1.LeaseCandidate{nil, nil}, want: Resolution{}},
		{
			name: "no parseable binary version",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.31.0", "", 0),
				candidate("b", "1.31.0", "v1.31.0", 0, withStrategy(PriorityName)),
			},
			want: Resolution{},
		},
		{
			name: "single candidate",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.30.0", "1.31.0", 0),
			},
			want: Resolution{Strategy: oev, BinaryVersion: "1.31.0"},
		},
		{
			name: "agreement at the highest binary version",
			cands: []*coordinationv1beta1.LeaseCandidate{
				nil,
				candidate("a", "1.30.0", "1.31.0", 0, withStrategy(PriorityName)),
				candidate("b", "1.31.0", "1.31.0", 0, withStrategy(PriorityName)),
			},
			want: Resolution{Strategy: PriorityName, BinaryVersion: "1.31.0"},
		},
		{
			name: "lower binary versions do not matter",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("old-1", "1.30.0", "1.30.0", 0),
				candidate("new", "1.30.0", "1.31.0", 0, withStrategy(PriorityName)),
				candidate("old-2", "1.29.0", "1.30.0", 0, withStrategy("")),
				candidate("pre", "1.31.0-rc.1", "1.31.0-rc.1", 0),
			},
			want: Resolution{Strategy: PriorityName, BinaryVersion: "1.31.0"},
		},
		{
			name: "unparseable binary versions do not take part",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("ok", "1.30.0", "1.30.0", 0),
				candidate("v-prefixed", "1.30.0", "v1.99.0", 0, withStrategy(PriorityName)),
				candidate("garbage", "1.30.0", "latest", 0, withStrategy("example.com/X")),
			},
			want: Resolution{Strategy: oev, BinaryVersion: "1.30.0"},
		},
		{
			name: "invalid emulation version does not matter here",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "", "1.31.0", 0, withStrategy(PriorityName)),
			},
			want: Resolution{Strategy: PriorityName, BinaryVersion: "1.31.0"},
		},
		{
			name: "disagreement is a conflict listing everyone at the highest version",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("d", "1.31.0", "1.31.0", 0),
				candidate("old", "1.30.0", "1.30.0", 0, withStrategy("example.com/Old")),
				candidate("b", "1.31.0", "1.31.0", 0, withStrategy(PriorityName)),
				candidate("a", "1.31.0", "1.31.0", 0, withNamespace("z")),
				candidate("a", "1.31.0", "1.31.0", 0, withNamespace("y"), withStrategy("")),
			},
			want: Resolution{
				BinaryVersion: "1.31.0",
				Conflict:      true,
				Conflicting: []CandidateStrategy{
					{Name: "a", Namespace: "y", Strategy: ""},
					{Name: "a", Namespace: "z", Strategy: oev},
					{Name: "b", Namespace: "default", Strategy: PriorityName},
					{Name: "d", Namespace: "default", Strategy: oev},
				},
			},
		},
		{
			name: "empty strategies agree with each other",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.31.0", "1.31.0", 0, withStrategy("")),
				candidate("b", "1.31.0", "1.31.0", 0, withStrategy("")),
			},
			want: Resolution{Strategy: "", BinaryVersion: "1.31.0"},
		},
		{
			name: "build metadata does not separate binary versions",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.31.0", "1.31.0+build.2", 0),
				candidate("b", "1.31.0", "1.31.0+build.1", 0),
				candidate("c", "1.31.0", "1.31.0", 0, withStrategy(PriorityName)),
			},
			want: Resolution{
				BinaryVersion: "1.31.0",
				Conflict:      true,
				Conflicting: []CandidateStrategy{
					{Name: "a", Namespace: "default", Strategy: oev},
					{Name: "b", Namespace: "default", Strategy: oev},
					{Name: "c", Namespace: "default", Strategy: PriorityName},
				},
			},
		},
		{
			name: "a release beats its pre-releases",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("rc", "1.31.0-rc.1", "1.31.0-rc.1", 0, withStrategy(PriorityName)),
				candidate("ga", "1.31.0", "1.31.0", 0),
			},
			want: Resolution{Strategy: oev, BinaryVersion: "1.31.0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ResolveStrategy(tt.cands); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ResolveStrategy =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}
