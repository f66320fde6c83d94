package strategy

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
)

func TestPriorityValidate(t *testing.T) {
	tests := []struct {
		name     string
		c        *coordinationv1beta1.LeaseCandidate
		wantErr  error // matched with errors.Is; nil means valid
		wantText string
	}{
		{name: "absent", c: candidate("a", "1.31.0", "1.31.0", 0)},
		{name: "zero", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("0"))},
		{name: "positive", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("10"))},
		{name: "negative", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("-3"))},
		{name: "explicit plus sign", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("+5"))},
		{name: "leading zeros", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("007"))},
		{name: "max int32", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("2147483647"))},
		{name: "min int32", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("-2147483648"))},
		{name: "not a number", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("abc")), wantErr: strconv.ErrSyntax, wantText: `cle.dev/priority="abc"`},
		{name: "fraction", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("1.5")), wantErr: strconv.ErrSyntax, wantText: `"1.5"`},
		{name: "empty", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("")), wantErr: strconv.ErrSyntax, wantText: `cle.dev/priority=""`},
		{name: "spaces", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority(" 1")), wantErr: strconv.ErrSyntax},
		{name: "hex", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("0x10")), wantErr: strconv.ErrSyntax},
		{name: "underscores", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("1_000")), wantErr: strconv.ErrSyntax},
		{name: "above int32", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("2147483648")), wantErr: strconv.ErrRange},
		{name: "below int32", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("-2147483649")), wantErr: strconv.ErrRange},
		{name: "huge", c: candidate("a", "1.31.0", "1.31.0", 0, withPriority("99999999999999999999999")), wantErr: strconv.ErrRange},
		{name: "valid priority, invalid versions", c: candidate("a", "", "1.31.0", 0, withPriority("100")), wantText: "spec.emulationVersion is missing"},
		{name: "valid priority, emulation newer than binary", c: candidate("a", "1.32.0", "1.31.0", 0, withPriority("100")), wantText: "newer than spec.binaryVersion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Priority{}.Validate(tt.c)
			if tt.wantErr == nil && tt.wantText == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Validate = %v, want it to wrap %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Validate = %q, want it to contain %q", err, tt.wantText)
			}
		})
	}
}

func TestPriorityRank(t *testing.T) {
	tests := []struct {
		name        string
		cands       []*coordinationv1beta1.LeaseCandidate
		wantRanked  []string
		wantInvalid []string
	}{
		{
			name: "highest priority first, absent is zero",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("absent", "1.30.0", "1.30.0", 0),
				candidate("ten", "1.31.0", "1.31.0", 0, withPriority("10")),
				candidate("minus-three", "1.29.0", "1.29.0", 0, withPriority("-3")),
				candidate("one", "1.31.0", "1.31.0", 0, withPriority("+1")),
			},
			wantRanked: []string{"ten", "one", "absent", "minus-three"},
		},
		{
			name: "equal priorities fall back to OldestEmulationVersion",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("newer-emulation", "1.31.0", "1.31.0", 0, withPriority("5")),
				candidate("older-emulation", "1.30.0", "1.31.0", 50, withPriority("5")),
				candidate("older-binary", "1.30.0", "1.30.0", 60, withPriority("05")),
				candidate("oldest-object", "1.30.0", "1.30.0", 10, withPriority("5")),
				candidate("low", "1.29.0", "1.29.0", 0, withPriority("4")),
			},
			wantRanked: []string{"oldest-object", "older-binary", "older-emulation", "newer-emulation", "low"},
		},
		{
			name: "zero and absent tie, then the name decides",
			cands: []*coordinationv1beta1.LeaseCandidate{
				candidate("b", "1.30.0", "1.30.0", 0, withPriority("0")),
				candidate("a", "1.30.0", "1.30.0", 0),
				candidate("c", "1.30.0", "1.30.0", 0, withPriority("-0")),
			},
			wantRanked: []string{"a", "b", "c"},
		},
		{
			name: "invalid priority or versions exclude the candidate",
			cands: []*coordinationv1beta1.LeaseCandidate{
				nil,
				candidate("ok", "1.30.0", "1.30.0", 0),
				candidate("abc", "1.30.0", "1.30.0", 0, withPriority("abc")),
				candidate("big", "1.30.0", "1.30.0", 0, withPriority("4294967296")),
				candidate("no-version", "1.30.0", "", 0, withPriority("1000")),
			},
			wantRanked:  []string{"ok"},
			wantInvalid: []string{"abc", "big", "no-version"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ranked, invalid := Priority{}.Rank(tt.cands)
			if got := names(ranked); !slices.Equal(got, tt.wantRanked) {
				t.Errorf("ranked = %q, want %q", got, tt.wantRanked)
			}
			if got := invalidNames(invalid); !slices.Equal(got, tt.wantInvalid) {
				t.Errorf("invalid = %q, want %q", got, tt.wantInvalid)
			}
		})
	}
}
