package strategy

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// FuzzParseVersion feeds arbitrary strings as a candidate's versions and priority, checks parseSemver against
// the definition of strictness it implements, and checks that nothing panics and every result is consistent.
func FuzzParseVersion(f *testing.F) {
	f.Add("1.31.0", "1.30.0", "10")
	f.Add("1.31.0-alpha.1", "1.31.0-alpha.1", "")
	f.Add("v1.31.0", " 1.31.0", "+5")
	f.Add("1.31.0-18446744073709551616", "1.31.0-01", "2147483648")
	f.Add("1.31.0+build.1", "1.31.0-rc.1+b", "-0")
	f.Fuzz(func(t *testing.T, binary, emulation, priority string) {
		for _, s := range []string{binary, emulation} {
			checkStrictness(t, s)
		}
		c := candidate("fuzz", emulation, binary, 0, withPriority(priority))
		errVersions := OldestEmulationVersion{}.Validate(c)
		errPriority := Priority{}.Validate(c)
		_, errInt := strconv.ParseInt(priority, 10, 32)
		if want := errVersions == nil && errInt == nil; (errPriority == nil) != want {
			t.Fatalf("Priority.Validate = %v, but OldestEmulationVersion.Validate = %v and ParseInt = %v", errPriority, errVersions, errInt)
		}
		cands := []*coordinationv1beta1.LeaseCandidate{
			candidate("old", "1.30.0", "1.30.0", 0),
			c,
			nil,
			candidate("new", "1.31.0", "1.31.0", 0, withStrategy(PriorityName), withPriority("1")),
		}
		fail := func(format string, args ...any) { t.Helper(); t.Fatalf(format, args...) }
		for _, s := range []Strategy{OldestEmulationVersion{}, Priority{}} {
			ranked, invalid := s.Rank(cands)
			checkRankResult(s, cands, ranked, invalid, fail)
			checkTotalOrder(s, cands, fail)
		}
		if res := ResolveStrategy(cands); res.BinaryVersion == "" || res.Conflict != (len(res.Conflicting) > 0) {
			t.Fatalf("ResolveStrategy = %+v", res)
		}
	})
}

// checkStrictness checks parseSemver against an independent statement of what it accepts: what ParseSemantic
// accepts and prints back unchanged (so no "v" and no whitespace), without numeric identifiers beyond 64 bits.
func checkStrictness(t *testing.T, s string) {
	t.Helper()
	v, err := parseSemver(s)
	apiv, apiErr := version.ParseSemantic(s)
	switch {
	case err == nil && (apiErr != nil || apiv.String() != s):
		t.Fatalf("parseSemver(%q) accepted a version that is not strict (ParseSemantic: %v, %v)", s, apiv, apiErr)
	case err == nil && v.compare(&v) != 0:
		t.Fatalf("parseSemver(%q) is not equal to itself", s)
	case err != nil && apiErr == nil && apiv.String() == s && !errors.Is(err, strconv.ErrRange):
		t.Fatalf("parseSemver(%q) rejected a strict version: %v", s, err)
	}
	if fast, ok := parseRelease(s); ok {
		if full, err := parseSemverGrammar(s); err != nil || !reflect.DeepEqual(fast, full) {
			t.Fatalf("parseRelease(%q) = %+v, but the full grammar gives %+v, %v", s, fast, full, err)
		}
	}
}

// FuzzRank builds up to eight candidates from fuzz bytes, drawing versions from a pool that includes two
// arbitrary strings, and checks every invariant of Rank, Compare and ResolveStrategy, including independence
// from the order of the input.
func FuzzRank(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 1, 1, 1, 2, 3, 0, 5}, "1.31.0", "1.30.0")
	f.Add([]byte{7, 7, 0, 0, 8, 8, 0, 0, 9, 9, 0, 0}, "1.31.0-9", "1.31.0-1a")
	f.Add([]byte{10, 3, 2, 1, 0xff, 0, 0, 0, 11, 11, 1, 9}, "", "v1.2.3")
	f.Fuzz(func(t *testing.T, data []byte, v1, v2 string) {
		for _, s := range []string{v1, v2} {
			checkStrictness(t, s)
		}
		pool := append(slices.Clone(propertyVersions), v1, v2)
		var cands []*coordinationv1beta1.LeaseCandidate
		for i := 0; i+4 <= len(data) && len(cands) < 8; i += 4 {
			cands = append(cands, fuzzCandidate(i/4, data[i:i+4], pool))
		}
		fail := func(format string, args ...any) { t.Helper(); t.Fatalf(format, args...) }
		reversed := slices.Clone(cands)
		slices.Reverse(reversed)
		for _, s := range []Strategy{OldestEmulationVersion{}, Priority{}} {
			ranked, invalid := s.Rank(cands)
			checkRankResult(s, cands, ranked, invalid, fail)
			checkTotalOrder(s, cands, fail)
			if got, want := rankSignature(s.Rank(reversed)), rankSignature(ranked, invalid); got != want {
				t.Fatalf("%s: Rank of the reversed input = %q, want %q", s.Name(), got, want)
			}
		}
		res := ResolveStrategy(cands)
		if got := ResolveStrategy(reversed); !reflect.DeepEqual(got, res) {
			t.Fatalf("ResolveStrategy of the reversed input = %+v, want %+v", got, res)
		}
		if res.Conflict != (len(res.Conflicting) > 0) || (res.Conflict && res.Strategy != "") {
			t.Fatalf("ResolveStrategy = %+v", res)
		}
		if _, err := parseSemver(res.BinaryVersion); res.BinaryVersion != "" && err != nil {
			t.Fatalf("ResolveStrategy chose binary version %q: %v", res.BinaryVersion, err)
		}
	})
}

// fuzzCandidate decodes four bytes into candidate number i: binary version, emulation version, creation time
// and namespace (or nil), strategy and priority.
func fuzzCandidate(i int, b []byte, pool []string) *coordinationv1beta1.LeaseCandidate {
	if b[2] == 0xff {
		return nil
	}
	strategies := []coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion, PriorityName, "", "example.com/Other"}
	c := &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("c%d", i),
			Namespace:         []string{"default", "other"}[b[2]>>7],
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(b[2]&3) * time.Minute)),
		},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "lease",
			BinaryVersion:    pool[int(b[0])%len(pool)],
			EmulationVersion: pool[int(b[1])%len(pool)],
			Strategy:         strategies[b[3]&3],
		},
	}
	if k := int(b[3]>>2) % (len(propertyPriorities) + 1); k < len(propertyPriorities) {
		c.Annotations = map[string]string{PriorityAnnotation: propertyPriorities[k]}
	}
	return c
}
