package strategy

import (
	"cmp"
	"strings"
	"testing"
)

func TestParseSemver(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string // substring; "" means valid
	}{
		{in: "1.31.0"},
		{in: "0.0.0"},
		{in: "1.31.0-alpha.1"},
		{in: "1.31.0-rc.1+build.5"},
		{in: "1.31.0+build-7"},
		{in: "1.31.0-a-b.0"},
		{in: "1.31.0-0a"},
		{in: "1.31.0-18446744073709551615"},
		{in: "18446744073709551615.0.10"},
		{in: "", wantErr: "could not parse"},
		{in: "abc", wantErr: "could not parse"},
		{in: "1.31", wantErr: "illegal version string"},
		{in: "1.31.0.1", wantErr: "illegal version string"},
		{in: "01.31.0", wantErr: "zero-prefixed"},
		{in: "1.031.0", wantErr: "zero-prefixed"},
		{in: "1.31.0-01", wantErr: "zero-prefixed"},
		{in: "1.31.0-", wantErr: "pre-release/metadata"},
		{in: "1.31.0+", wantErr: "pre-release/metadata"},
		{in: "1.31.0-alpha..1", wantErr: "pre-release/metadata"},
		{in: "1.31.0-alpha_1", wantErr: "pre-release/metadata"},
		{in: "1.31.0-18446744073709551616", wantErr: "out of range"},
		{in: "99999999999999999999.0.0", wantErr: "non-numeric"},
		{in: "v1.31.0", wantErr: `leading "v"`},
		{in: " 1.31.0", wantErr: "whitespace"},
		{in: "1.31.0 ", wantErr: "whitespace"},
		{in: "1.31.0\t", wantErr: "whitespace"},
		{in: "\n1.31.0", wantErr: "whitespace"},
		{in: "1.31.0-rc.1 \t", wantErr: "whitespace"},
		{in: "1.31.0\n", wantErr: "could not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			checkStrictness(t, tt.in) // and that a release's fast path agrees with the grammar
			_, err := parseSemver(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("parseSemver(%q) = %v, want no error", tt.in, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("parseSemver(%q) succeeded, want an error containing %q", tt.in, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("parseSemver(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

// TestSemverPrecedence checks chains of strictly increasing versions, every pair of them in both directions.
func TestSemverPrecedence(t *testing.T) {
	chains := map[string][]string{
		"semver.org example":      {"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"},
		"kubernetes pre-releases": {"1.31.0-alpha.0", "1.31.0-alpha.1", "1.31.0-alpha.3", "1.31.0-beta.0", "1.31.0-rc.0", "1.31.0-rc.1", "1.31.0", "1.31.1-alpha.0", "1.31.1"},
		"numeric components":      {"0.9.9", "1.2.0", "1.9.0", "1.19.0", "1.19.1", "1.19.10", "2.0.0", "10.0.0"},
		// apimachinery's Version orders this chain as a cycle (9 < 10 < 1a < 9); semver does not.
		"numeric below alphanumeric": {"1.31.0-9", "1.31.0-10", "1.31.0-1a", "1.31.0-9a", "1.31.0-a"},
		"hyphens are alphanumeric":   {"1.31.0-0", "1.31.0--", "1.31.0--a", "1.31.0-a-b", "1.31.0-ab"},
	}
	for name, chain := range chains {
		t.Run(name, func(t *testing.T) {
			vs := make([]semver, len(chain))
			for i, s := range chain {
				v, err := parseSemver(s)
				if err != nil {
					t.Fatalf("parseSemver(%q): %v", s, err)
				}
				vs[i] = v
			}
			for i := range vs {
				for j := range vs {
					if got, want := sign(vs[i].compare(&vs[j])), sign(i-j); got != want {
						t.Errorf("compare(%q, %q) = %d, want %d", chain[i], chain[j], got, want)
					}
				}
			}
		})
	}
}

func TestSemverBuildMetadataHasNoPrecedence(t *testing.T) {
	for _, pair := range [][2]string{
		{"1.31.0", "1.31.0+build.1"},
		{"1.31.0+a", "1.31.0+b"},
		{"1.31.0-rc.1+a", "1.31.0-rc.1+b.2"},
	} {
		a, errA := parseSemver(pair[0])
		b, errB := parseSemver(pair[1])
		if errA != nil || errB != nil {
			t.Fatalf("parseSemver: %v, %v", errA, errB)
		}
		if c := a.compare(&b); c != 0 {
			t.Errorf("compare(%q, %q) = %d, want 0", pair[0], pair[1], c)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.35.0", "1.36.0", -1},
		{"1.36.0", "1.35.0", 1},
		{"1.36.0", "1.36.0", 0},
		{"1.36.0-alpha.1", "1.36.0", -1},
	} {
		got, err := CompareVersions(tc.a, tc.b)
		if err != nil || cmp.Compare(got, 0) != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want sign %d", tc.a, tc.b, got, err, tc.want)
		}
	}
	if _, err := CompareVersions("v1.36.0", "1.36.0"); err == nil {
		t.Error("a leading v: no error, want one")
	}
}
