package strategy

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// semver is a strict semantic version reduced to what gives it precedence; build metadata is dropped because
// semver gives it none. It is parsed before sorting, so that comparisons look only at numbers and strings.
type semver struct {
	core [3]uint64    // major, minor, patch
	pre  []identifier // pre-release identifiers; nil for a release
}

// identifier is one dot-separated pre-release identifier.
type identifier struct {
	text    string
	num     uint64
	numeric bool
}

// versionParser parses versions and remembers each distinct string, because a fleet runs a handful of
// versions: ranking thousands of candidates then parses only a handful of strings. A nil versionParser
// parses without remembering, which suits a single comparison.
type versionParser map[string]parsedVersion

type parsedVersion struct {
	v   semver
	err error
}

func (p versionParser) parse(s string) (semver, error) {
	if r, ok := p[s]; ok {
		return r.v, r.err
	}
	v, err := parseSemver(s)
	if p != nil {
		p[s] = parsedVersion{v: v, err: err}
	}
	return v, err
}

// parseSemver parses s as the API's validation does (blang/semver's strict Parse), using apimachinery's
// ParseSemantic for the grammar and adding the two checks it lacks, so that a candidate kube-apiserver would
// reject is never ranked.
func parseSemver(s string) (semver, error) {
	if sv, ok := parseRelease(s); ok {
		return sv, nil
	}
	return parseSemverGrammar(s)
}

// parseRelease parses s when it is a release and nothing more, MAJOR.MINOR.PATCH without leading zeros, as
// nearly every candidate's version is. It reports false for anything else, which only the full grammar
// (parseSemverGrammar) may accept or reject; for what it parses, both agree.
func parseRelease(s string) (semver, bool) {
	var sv semver
	for i := range sv.core {
		comp := s
		if i < len(sv.core)-1 {
			dot := strings.IndexByte(s, '.')
			if dot < 0 {
				return semver{}, false
			}
			comp, s = s[:dot], s[dot+1:]
		}
		if comp == "" || comp[0] == '0' && len(comp) > 1 {
			return semver{}, false
		}
		for j := range len(comp) {
			if !isDigit(comp[j]) {
				return semver{}, false
			}
		}
		n, err := strconv.ParseUint(comp, 10, 0)
		if err != nil {
			return semver{}, false
		}
		sv.core[i] = uint64(n)
	}
	return sv, true
}

// parseSemverGrammar is parseSemver for any string.
func parseSemverGrammar(s string) (semver, error) {
	v, err := version.ParseSemantic(s)
	if err != nil {
		return semver{}, err
	}
	// ParseSemantic tolerates a leading "v" and surrounding whitespace. A strict version starts with a digit
	// and ends with a digit, letter or hyphen, so looking at both ends rejects exactly that tolerance.
	if !isDigit(s[0]) || !isIdentifierChar(s[len(s)-1]) {
		return semver{}, errors.New(`a leading "v" or surrounding whitespace is not allowed`)
	}
	c := v.Components()
	sv := semver{core: [3]uint64{uint64(c[0]), uint64(c[1]), uint64(c[2])}}
	if pr := v.PreRelease(); pr != "" {
		parts := strings.Split(pr, ".")
		sv.pre = make([]identifier, len(parts))
		for i, p := range parts {
			sv.pre[i].text = p
			n, err := strconv.ParseUint(p, 10, 64)
			switch {
			case err == nil:
				sv.pre[i].num, sv.pre[i].numeric = n, true
			case errors.Is(err, strconv.ErrRange):
				// ParseSemantic accepts numeric identifiers beyond 64 bits (and then orders them as text);
				// the API rejects them.
				return semver{}, fmt.Errorf("numeric pre-release identifier %q: %w", p, err)
			}
		}
	}
	return sv, nil
}

// compare orders versions by semver precedence. It does not use apimachinery's Version comparison, which
// orders a numeric identifier against an alphanumeric one as text: that is not transitive (it gives 9 < 10,
// 10 < 1a and 1a < 9), and a ranking built on it could depend on the order of the list.
func (a *semver) compare(b *semver) int {
	for i := range a.core {
		if c := cmp.Compare(a.core[i], b.core[i]); c != 0 {
			return c
		}
	}
	// A release has higher precedence than any of its pre-releases.
	switch {
	case a.pre == nil && b.pre == nil:
		return 0
	case a.pre == nil:
		return 1
	case b.pre == nil:
		return -1
	}
	for i := range min(len(a.pre), len(b.pre)) {
		if c := a.pre[i].compare(&b.pre[i]); c != 0 {
			return c
		}
	}
	// A larger set of identifiers has higher precedence when all the preceding ones are equal.
	return cmp.Compare(len(a.pre), len(b.pre))
}

// compare orders identifiers as semver requires: numbers numerically, below any alphanumeric identifier, and
// alphanumeric identifiers in ASCII order.
func (a *identifier) compare(b *identifier) int {
	switch {
	case a.numeric && b.numeric:
		return cmp.Compare(a.num, b.num)
	case a.numeric:
		return -1
	case b.numeric:
		return 1
	}
	return strings.Compare(a.text, b.text)
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// isIdentifierChar reports whether b may appear in a pre-release or build identifier.
func isIdentifierChar(b byte) bool {
	return isDigit(b) || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b == '-'
}

// CompareVersions compares two strict semantic versions as the strategies
// order them: negative when a is older than b, 0 when equal, positive when
// newer. It fails when either does not parse.
func CompareVersions(a, b string) (int, error) {
	va, err := parseSemver(a)
	if err != nil {
		return 0, fmt.Errorf("version %q: %w", a, err)
	}
	vb, err := parseSemver(b)
	if err != nil {
		return 0, fmt.Errorf("version %q: %w", b, err)
	}
	return va.compare(&vb), nil
}
