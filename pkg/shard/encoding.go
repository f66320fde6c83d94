package shard

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Annotations that carry a group. The group Lease (named after the group,
// written by cle-controller only) carries the count, the assignment, the
// tokens and the moves; each replica's member Lease carries what it released;
// each replica's LeaseCandidate carries the count its code was built for.
const (
	// CountAnnotation is the shard count in effect, on the group Lease.
	CountAnnotation = "cle.dev/shard-count"
	// AssignmentAnnotation is the generation and each owned shard's owner and
	// epoch, on the group Lease: the generation, a table of owners, then runs
	// of shards and the index of their owner in the table:
	// "g=17;m=a@3,b@1,c@2;0-10=0;11-21=1;22-31=2". Names are written once, so
	// that a group of MaxShards shards fits in a Lease however its shards are
	// spread.
	AssignmentAnnotation = "cle.dev/assignment"
	// TokensAnnotation is the last token granted for each shard, on the group
	// Lease: "0-10=4;11-31=5".
	TokensAnnotation = "cle.dev/shard-tokens"
	// MovingAnnotation lists the shards whose owner is asked to let go, and
	// the replica each is meant for, as a table and runs of indexes into it
	// (empty while nobody is): "m=b,c;3=0;5-6=1;7=".
	MovingAnnotation = "cle.dev/moving"
	// ReleasedAnnotation is written by a replica on its member Lease: the
	// shards it has stopped acting on, each with the token of the grant it
	// stopped: "3=12;5-6=14".
	ReleasedAnnotation = "cle.dev/released"
	// DeclaredAnnotation is the shard count a replica's code was built for,
	// on its LeaseCandidate.
	DeclaredAnnotation = "cle.dev/shards"
)

// Owner is a replica in one epoch: the epoch is its member Lease's
// leaseTransitions, one per process, so a restarted replica is a new owner.
type Owner struct {
	Member string
	Epoch  int64
}

// Group is what the group Lease says.
type Group struct {
	// Generation rises with every change the controller writes.
	Generation int64
	// Count is the shard count in effect; 0 before the group has one.
	Count int
	// Owners has Count entries; a zero Owner means the shard is unowned.
	Owners []Owner
	// Tokens has Count entries: the last token granted for each shard. A
	// shard's owner fences with Tokens[shard].
	Tokens []int64
	// Moving maps a shard whose owner must let it go to the replica it is
	// meant for ("" while nobody is).
	Moving map[int]string
}

// OwnerCounts is how many shards each owner holds, by replica name.
func (g Group) OwnerCounts() map[string]int {
	counts := make(map[string]int)
	for _, o := range g.Owners {
		if o.Member != "" {
			counts[o.Member]++
		}
	}
	return counts
}

// DescribeOwners says how many shards each owner holds, by name:
// "a 11, b 11, c 10" ("" when nobody owns any).
func (g Group) DescribeOwners() string {
	counts := g.OwnerCounts()
	parts := make([]string, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, name+" "+strconv.Itoa(counts[name]))
	}
	return strings.Join(parts, ", ")
}

// Unowned counts the shards nobody owns and nobody is asked to let go of.
func (g Group) Unowned() int {
	n := 0
	for s, o := range g.Owners {
		if _, moving := g.Moving[s]; o.Member == "" && !moving {
			n++
		}
	}
	return n
}

// Annotations returns g as the group Lease's annotations. It fails on a group
// whose slices do not match its count or whose names cannot be written.
func (g Group) Annotations() (map[string]string, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	owners := make(map[int]string)
	tokens := make(map[int]string)
	for s := 0; s < g.Count; s++ {
		if o := g.Owners[s]; o.Member != "" {
			owners[s] = o.Member + "@" + strconv.FormatInt(o.Epoch, 10)
		}
		tokens[s] = strconv.FormatInt(g.Tokens[s], 10)
	}
	assignment := "g=" + strconv.FormatInt(g.Generation, 10)
	if runs := encodeIndexed(owners); runs != "" {
		assignment += ";" + runs
	}
	ann := map[string]string{
		CountAnnotation:      strconv.Itoa(g.Count),
		AssignmentAnnotation: assignment,
		TokensAnnotation:     encodeRuns(tokens),
		MovingAnnotation:     encodeIndexed(g.Moving),
	}
	size := 0
	for k, v := range ann {
		size += len(k) + len(v)
	}
	if size > maxAnnotationBytes {
		return nil, fmt.Errorf("the group takes %d bytes of annotations, more than the %d a Lease can carry beside its others", size, maxAnnotationBytes)
	}
	return ann, nil
}

// maxAnnotationBytes is what a group may take of a Lease's 256 KiB of
// annotations. A group of MaxShards shards with rising tokens on every shard
// and a hundred replicas of 253-character names takes about 180 KB.
const maxAnnotationBytes = 224 << 10

// encodeIndexed writes shard values as a table of the distinct non-empty
// values, in order of first appearance, and runs of their indexes; an empty
// value stays empty: "m=a@3,b@1;0-10=0;11=1;12=".
func encodeIndexed(values map[int]string) string {
	if len(values) == 0 {
		return ""
	}
	index := map[string]string{}
	var table []string
	indexed := make(map[int]string, len(values))
	for _, s := range slices.Sorted(maps.Keys(values)) {
		v := values[s]
		if v == "" {
			indexed[s] = ""
			continue
		}
		i, ok := index[v]
		if !ok {
			i = strconv.Itoa(len(table))
			index[v] = i
			table = append(table, v)
		}
		indexed[s] = i
	}
	return "m=" + strings.Join(table, ",") + ";" + encodeRuns(indexed)
}

// parseIndexed reads what encodeIndexed writes, for shards below count.
func parseIndexed(text string, count int) (map[int]string, error) {
	if text == "" {
		return map[int]string{}, nil
	}
	head, rest, _ := strings.Cut(text, ";")
	tableText, ok := strings.CutPrefix(head, "m=")
	if !ok {
		return nil, fmt.Errorf("%q does not start with its table of names (m=)", text)
	}
	table := strings.Split(tableText, ",")
	runs, err := parseRuns(rest, count)
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(runs))
	for s, v := range runs {
		if v == "" {
			out[s] = ""
			continue
		}
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 || i >= len(table) {
			return nil, fmt.Errorf("shard %d: %q is not an index into the table of %d names", s, v, len(table))
		}
		out[s] = table[i]
	}
	return out, nil
}

func (g Group) validate() error {
	if g.Count < 0 || g.Count > MaxShards {
		return fmt.Errorf("shard count %d is outside 0 to %d", g.Count, MaxShards)
	}
	if len(g.Owners) != g.Count || len(g.Tokens) != g.Count {
		return fmt.Errorf("a group of %d shards has %d owners and %d tokens", g.Count, len(g.Owners), len(g.Tokens))
	}
	for s, o := range g.Owners {
		if o.Member == "" {
			continue
		}
		if err := validName(o.Member); err != nil {
			return fmt.Errorf("owner of shard %d: %w", s, err)
		}
		if o.Epoch < 0 {
			return fmt.Errorf("owner of shard %d: negative epoch %d", s, o.Epoch)
		}
	}
	for s, t := range g.Tokens {
		if t < 0 {
			return fmt.Errorf("shard %d: negative token %d", s, t)
		}
	}
	for s, to := range g.Moving {
		if s < 0 || s >= g.Count {
			return fmt.Errorf("moving shard %d of a group of %d", s, g.Count)
		}
		if to != "" {
			if err := validName(to); err != nil {
				return fmt.Errorf("moving shard %d: %w", s, err)
			}
		}
	}
	return nil
}

// validName refuses the characters the encodings use as separators; every
// Kubernetes object name passes.
func validName(name string) error {
	if name == "" {
		return fmt.Errorf("empty replica name")
	}
	if strings.ContainsAny(name, ";=@, \t\n") {
		return fmt.Errorf("replica name %q has one of ';', '=', '@', ',' or a space", name)
	}
	return nil
}

// HasGroup reports whether annotations carry a group, as those of a group
// Lease cle-controller wrote do: any of the group Lease's annotations. A
// group Lease without them (created again by hand, or stripped) says nothing
// of the group, not that it has no shards: the controller takes the group
// as lost and the replicas go by the last group they read.
func HasGroup(annotations map[string]string) bool {
	for _, k := range append([]string{CountAnnotation}, besideCount...) {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// besideCount are the group Lease's annotations other than the count, which
// none of them is read without.
var besideCount = []string{AssignmentAnnotation, TokensAnnotation, MovingAnnotation}

// ParseGroup reads a group Lease's annotations. A Lease without a count is a
// group with none yet (Count 0); anything malformed is an error, never a
// guess.
func ParseGroup(annotations map[string]string) (Group, error) {
	var g Group
	countText, ok := annotations[CountAnnotation]
	if !ok {
		for _, k := range besideCount {
			if _, has := annotations[k]; has {
				return Group{}, fmt.Errorf("%s is missing beside %s: a group's count is never guessed", CountAnnotation, k)
			}
		}
		return g, nil
	}
	n, err := strconv.Atoi(countText)
	if err != nil || n < 0 || n > MaxShards {
		return Group{}, fmt.Errorf("%s: %q is not a shard count from 0 to %d", CountAnnotation, countText, MaxShards)
	}
	g.Count = n
	g.Owners = make([]Owner, n)
	g.Tokens = make([]int64, n)

	assignment := annotations[AssignmentAnnotation]
	head, rest, _ := strings.Cut(assignment, ";")
	genText, ok := strings.CutPrefix(head, "g=")
	if !ok {
		return Group{}, fmt.Errorf("%s: %q does not start with its generation (g=)", AssignmentAnnotation, assignment)
	}
	if g.Generation, err = strconv.ParseInt(genText, 10, 64); err != nil || g.Generation < 0 {
		return Group{}, fmt.Errorf("%s: generation %q is not a number from 0", AssignmentAnnotation, genText)
	}
	owners, err := parseIndexed(rest, n)
	if err != nil {
		return Group{}, fmt.Errorf("%s: %w", AssignmentAnnotation, err)
	}
	for s, v := range owners {
		at := strings.LastIndexByte(v, '@')
		if at < 0 {
			return Group{}, fmt.Errorf("%s: owner %q of shard %d has no epoch (name@epoch)", AssignmentAnnotation, v, s)
		}
		o := Owner{Member: v[:at]}
		if err := validName(o.Member); err != nil {
			return Group{}, fmt.Errorf("%s: shard %d: %w", AssignmentAnnotation, s, err)
		}
		if o.Epoch, err = strconv.ParseInt(v[at+1:], 10, 64); err != nil || o.Epoch < 0 {
			return Group{}, fmt.Errorf("%s: epoch of shard %d's owner %q is not a number from 0", AssignmentAnnotation, s, v)
		}
		g.Owners[s] = o
	}

	tokens, err := parseInts(annotations[TokensAnnotation], n)
	if err != nil {
		return Group{}, fmt.Errorf("%s: %w", TokensAnnotation, err)
	}
	for s, t := range tokens {
		g.Tokens[s] = t
	}
	for s, o := range g.Owners {
		if o.Member != "" && g.Tokens[s] == 0 {
			return Group{}, fmt.Errorf("%s: owned shard %d has no token", TokensAnnotation, s)
		}
	}

	moving, err := parseIndexed(annotations[MovingAnnotation], n)
	if err != nil {
		return Group{}, fmt.Errorf("%s: %w", MovingAnnotation, err)
	}
	for s, to := range moving {
		if to != "" {
			if err := validName(to); err != nil {
				return Group{}, fmt.Errorf("%s: shard %d: %w", MovingAnnotation, s, err)
			}
		}
	}
	if len(moving) > 0 {
		g.Moving = moving
	}
	return g, nil
}

// EncodeReleased writes the shards a replica has stopped, each with the token
// of the grant it stopped, for its member Lease's ReleasedAnnotation.
func EncodeReleased(released map[int]int64) string {
	values := make(map[int]string, len(released))
	for s, t := range released {
		values[s] = strconv.FormatInt(t, 10)
	}
	return encodeRuns(values)
}

// ParseReleased reads a member Lease's ReleasedAnnotation for a group of
// count shards. Shards at or above count are left out: they were released
// under a larger count, whose tokens every grant of this one is above.
func ParseReleased(text string, count int) (map[int]int64, error) {
	released, err := parseInts(text, MaxShards)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ReleasedAnnotation, err)
	}
	for s := range released {
		if s >= count {
			delete(released, s)
		}
	}
	return released, nil
}

// ParseDeclared reads a LeaseCandidate's DeclaredAnnotation: the shard count
// its replica's code was built for.
func ParseDeclared(text string) (int, error) {
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 || n > MaxShards {
		return 0, fmt.Errorf("%s: %q is not a shard count from 1 to %d", DeclaredAnnotation, text, MaxShards)
	}
	return n, nil
}

func parseInts(text string, count int) (map[int]int64, error) {
	runs, err := parseRuns(text, count)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(runs))
	for s, v := range runs {
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil || t < 0 {
			return nil, fmt.Errorf("shard %d: %q is not a number from 0", s, v)
		}
		out[s] = t
	}
	return out, nil
}

// encodeRuns writes shard values as runs of consecutive shards with equal
// values, in shard order: "0-10=a;11=b;14-15=a".
func encodeRuns(values map[int]string) string {
	shards := make([]int, 0, len(values))
	for s := range values {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	var b strings.Builder
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 && values[shards[j+1]] == values[shards[i]] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(strconv.Itoa(shards[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(shards[j]))
		}
		b.WriteByte('=')
		b.WriteString(values[shards[i]])
		i = j + 1
	}
	return b.String()
}

// parseRuns reads what encodeRuns writes, for shards below count; a shard
// named twice is an error.
func parseRuns(text string, count int) (map[int]string, error) {
	out := make(map[int]string)
	if text == "" {
		return out, nil
	}
	for _, run := range strings.Split(text, ";") {
		span, value, ok := strings.Cut(run, "=")
		if !ok {
			return nil, fmt.Errorf("run %q has no '='", run)
		}
		fromText, toText, isRange := strings.Cut(span, "-")
		from, err := strconv.Atoi(fromText)
		if err != nil {
			return nil, fmt.Errorf("run %q: %q is not a shard", run, fromText)
		}
		to := from
		if isRange {
			if to, err = strconv.Atoi(toText); err != nil {
				return nil, fmt.Errorf("run %q: %q is not a shard", run, toText)
			}
		}
		if from < 0 || to < from || to >= count {
			return nil, fmt.Errorf("run %q is outside shards 0 to %d", run, count-1)
		}
		for s := from; s <= to; s++ {
			if _, dup := out[s]; dup {
				return nil, fmt.Errorf("shard %d is named twice", s)
			}
			out[s] = value
		}
	}
	return out, nil
}
