package shard

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
)

// TestOfIsPinned pins shards of a few keys: replicas built from different
// releases must agree on every key's shard, so the hash never changes. The
// figures agree with an independent implementation of FNV-1a and the jump
// consistent hash.
func TestOfIsPinned(t *testing.T) {
	for _, c := range []struct {
		key        string
		n32, n7, k int
	}{
		{"default/web", 25, 3, 996},
		{"kube-system/coredns", 26, 6, 143},
		{"a", 31, 2, 163},
		{"", 17, 1, 266},
	} {
		if got := [3]int{Of(c.key, 32), Of(c.key, 7), Of(c.key, 1000)}; got != [3]int{c.n32, c.n7, c.k} {
			t.Errorf("Of(%q) for 32, 7, 1000 shards = %v, want %v", c.key, got, [3]int{c.n32, c.n7, c.k})
		}
	}
	if Of("x", 0) != 0 || Of("x", 1) != 0 || Of("x", -5) != 0 {
		t.Errorf("a count below 2 must map every key to shard 0")
	}
	for _, n := range []int{math.MaxInt32, math.MaxInt32 + 1, math.MaxInt} {
		if s := Of("default/web", n); s < 0 || s >= math.MaxInt32 {
			t.Errorf("Of(default/web, %d) = %d, outside the shards", n, s)
		}
	}
}

// TestOfSpreadsAndMovesLittle checks the two properties a shard function
// needs: keys spread evenly, and growing the count moves only the keys the
// new shards take.
func TestOfSpreadsAndMovesLittle(t *testing.T) {
	const keys = 64000
	for _, c := range []struct{ from, to int }{{32, 33}, {3, 5}, {5, 3}, {32, 64}} {
		counts := make([]int, c.to)
		moved := 0
		for i := range keys {
			key := fmt.Sprintf("ns-%d/object-%d", i%17, i)
			a, b := Of(key, c.from), Of(key, c.to)
			counts[b]++
			if a != b {
				moved++
				if c.to > c.from && b < c.from {
					t.Fatalf("%s moved from shard %d to old shard %d when growing %d to %d", key, a, b, c.from, c.to)
				}
			}
		}
		mean := float64(keys) / float64(c.to)
		for s, n := range counts {
			if float64(n) < 0.9*mean || float64(n) > 1.1*mean {
				t.Errorf("%d to %d: shard %d has %d keys, mean %.0f", c.from, c.to, s, n, mean)
			}
		}
		want := float64(keys) * float64(abs(c.to-c.from)) / float64(max(c.to, c.from))
		if float64(moved) > 1.1*want || float64(moved) < 0.9*want {
			t.Errorf("%d to %d: %d keys moved, want about %.0f", c.from, c.to, moved, want)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestGroupAnnotationsRoundTrip(t *testing.T) {
	g := Group{
		Generation: 17,
		Count:      6,
		Owners:     []Owner{{"a", 3}, {"a", 3}, {}, {"b-1.x", 1}, {"b-1.x", 1}, {"a", 3}},
		Tokens:     []int64{4, 4, 9, 5, 5, 6},
		Moving:     map[int]string{1: "b-1.x", 5: ""},
	}
	ann, err := g.Annotations()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		CountAnnotation:      "6",
		AssignmentAnnotation: "g=17;m=a@3,b-1.x@1;0-1=0;3-4=1;5=0",
		TokensAnnotation:     "0-1=4;2=9;3-4=5;5=6",
		MovingAnnotation:     "m=b-1.x;1=0;5=",
	}
	if !maps.Equal(ann, want) {
		t.Fatalf("annotations %v, want %v", ann, want)
	}
	back, err := ParseGroup(ann)
	if err != nil {
		t.Fatal(err)
	}
	if !sameGroup(g, back) || back.Generation != g.Generation {
		t.Errorf("round trip gave %+v, want %+v", back, g)
	}

	none, err := ParseGroup(map[string]string{"other": "x"})
	if err != nil || none.Count != 0 {
		t.Errorf("a Lease with no count: %+v, %v; want an empty group", none, err)
	}

	released := map[int]int64{3: 12, 5: 14, 6: 14}
	text := EncodeReleased(released)
	if text != "3=12;5-6=14" {
		t.Errorf("released %q", text)
	}
	if back, err := ParseReleased(text, 7); err != nil || !maps.Equal(back, released) {
		t.Errorf("ParseReleased = %v, %v", back, err)
	}
}

func TestParseGroupRefusesWhatItCannotRead(t *testing.T) {
	base := map[string]string{CountAnnotation: "4", AssignmentAnnotation: "g=2;m=a@1;0-1=0", TokensAnnotation: "0-3=1"}
	for name, change := range map[string][2]string{
		"count":             {CountAnnotation, "many"},
		"count too large":   {CountAnnotation, "4097"},
		"no generation":     {AssignmentAnnotation, "m=a@1;0-1=0"},
		"bad generation":    {AssignmentAnnotation, "g=x;m=a@1;0-1=0"},
		"no table":          {AssignmentAnnotation, "g=2;0-1=a@1"},
		"no epoch":          {AssignmentAnnotation, "g=2;m=a;0-1=0"},
		"bad epoch":         {AssignmentAnnotation, "g=2;m=a@-1;0-1=0"},
		"empty owner":       {AssignmentAnnotation, "g=2;m=@1;0-1=0"},
		"index past table":  {AssignmentAnnotation, "g=2;m=a@1;0-1=1"},
		"no owner index":    {AssignmentAnnotation, "g=2;m=a@1;0-1="},
		"beyond count":      {AssignmentAnnotation, "g=2;m=a@1;0-4=0"},
		"reversed range":    {AssignmentAnnotation, "g=2;m=a@1;3-1=0"},
		"named twice":       {AssignmentAnnotation, "g=2;m=a@1,b@1;0-1=0;1=1"},
		"no equals":         {AssignmentAnnotation, "g=2;m=a@1;0-1"},
		"owned, no token":   {TokensAnnotation, "2-3=1"},
		"negative token":    {TokensAnnotation, "0-3=-1"},
		"moving to a space": {MovingAnnotation, "m=a b;1=0"},
		"moving not shard":  {MovingAnnotation, "m=a;x=0"},
		"moving no table":   {MovingAnnotation, "1=a"},
	} {
		t.Run(name, func(t *testing.T) {
			ann := maps.Clone(base)
			ann[change[0]] = change[1]
			if g, err := ParseGroup(ann); err == nil {
				t.Errorf("%s=%q parsed as %+v", change[0], change[1], g)
			}
		})
	}
	if _, err := ParseGroup(base); err != nil {
		t.Errorf("the base case: %v", err)
	}
	for _, k := range []string{AssignmentAnnotation, TokensAnnotation, MovingAnnotation} {
		if g, err := ParseGroup(map[string]string{k: base[k]}); err == nil {
			t.Errorf("a group Lease with %s and no count parsed as %+v", k, g)
		}
	}
	for _, text := range []string{"0", "-2", "x", "4097"} {
		if _, err := ParseDeclared(text); err == nil {
			t.Errorf("ParseDeclared(%q) accepted", text)
		}
	}
	if n, err := ParseDeclared("32"); n != 32 || err != nil {
		t.Errorf("ParseDeclared(32) = %d, %v", n, err)
	}
	if _, err := (Group{Count: 1, Owners: []Owner{{"a;b", 1}}, Tokens: []int64{1}}).Annotations(); err == nil {
		t.Errorf("a name with ';' was written")
	}
}

// FuzzParseGroup: whatever a Lease carries, ParseGroup returns an error or a
// group that writes back to the same meaning, and Plan takes it without a
// panic.
func FuzzParseGroup(f *testing.F) {
	f.Add("4", "g=2;m=a@1,b@2;0-1=0;3=1", "0-3=1", "m=a;3=0")
	f.Add("0", "g=0", "", "")
	f.Add("3", "g=1;m=a@@1;0-2=0", "0-2=1;1=2", "0-2=")
	f.Fuzz(func(t *testing.T, count, assignment, tokens, moving string) {
		ann := map[string]string{CountAnnotation: count, AssignmentAnnotation: assignment, TokensAnnotation: tokens, MovingAnnotation: moving}
		g, err := ParseGroup(ann)
		if err != nil {
			return
		}
		out, err := g.Annotations()
		if err != nil {
			t.Fatalf("parsed %+v cannot be written: %v", g, err)
		}
		again, err := ParseGroup(out)
		if err != nil || !sameGroup(g, again) || again.Generation != g.Generation {
			t.Fatalf("%v read back as %+v (%v), want %+v", out, again, err, g)
		}
		replicas := []Replica{member("a", g.Count), member("b", g.Count)}
		if strings.Contains(assignment, "b@2") {
			replicas[1].Epoch = 2
		}
		d := Plan(Input{Group: g, Replicas: replicas})
		if _, err := d.Group.Annotations(); err != nil {
			t.Fatalf("decision cannot be written: %v", err)
		}
	})
}

func TestActingRoundTripAndRebuild(t *testing.T) {
	a := Acting{Count: 8, Highest: 9, Shards: map[int]int64{0: 4, 1: 4, 5: 9}}
	text := a.Encode()
	if text != "n=8;h=9;0-1=4;5=9" {
		t.Fatalf("acting %q", text)
	}
	back, err := ParseActing(text)
	if err != nil || back.Count != 8 || back.Highest != 9 || !maps.Equal(back.Shards, a.Shards) {
		t.Fatalf("ParseActing = %+v, %v", back, err)
	}
	for _, bad := range []string{"", "0-1=4", "n=8", "n=8;0-1=4", "n=8;h=3;0-1=4", "n=8;h=9;8=4", "n=x;h=1"} {
		if got, err := ParseActing(bad); err == nil {
			t.Errorf("ParseActing(%q) = %+v", bad, got)
		}
	}
	if got, err := ParseActing("n=0;h=12"); err != nil || got.Highest != 12 || len(got.Shards) != 0 {
		t.Errorf("a replica acting on nothing: %+v, %v", got, err)
	}

	g, floor, err := FromMembers(0, map[Owner]Acting{
		{"a", 2}: {Count: 8, Highest: 9, Shards: map[int]int64{0: 4, 5: 9}},
		{"b", 1}: {Count: 8, Highest: 7, Shards: map[int]int64{1: 7}},
		{"c", 3}: {Count: 0, Highest: 21}, // left long ago, its Lease kept for its token
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := owners(g), "0=a@2;1=b@1;5=a@2"; got != want || floor != 21 || g.Count != 8 {
		t.Errorf("rebuilt %s (count %d) with floor %d, want %s (8) and 21", got, g.Count, floor, want)
	}
	d := Plan(Input{Group: g, Replicas: []Replica{member("a", 8), member("b", 8)}, MinToken: floor})
	for _, gr := range d.Grants {
		if gr.Shard == 0 || gr.Shard == 1 || gr.Shard == 5 || gr.Token != 22 {
			t.Errorf("grant %+v over a shard in use, or with a token not above the floor", gr)
		}
	}
	if _, _, err := FromMembers(0, map[Owner]Acting{
		{"a", 1}: {Count: 8, Shards: map[int]int64{0: 1}},
		{"b", 1}: {Count: 4, Shards: map[int]int64{0: 1}},
	}); err == nil {
		t.Errorf("members acting under two counts were rebuilt into one group")
	}

	// Nobody acts on a shard: the count the members act under stays in
	// effect, unless they differ.
	for _, tc := range []struct {
		counts []int
		want   int
	}{{[]int{8, 0, 8}, 8}, {[]int{8, 4}, 0}, {[]int{0}, 0}} {
		acting := map[Owner]Acting{}
		for i, n := range tc.counts {
			acting[Owner{string(rune('a' + i)), 1}] = Acting{Count: n, Highest: 3}
		}
		g, floor, err := FromMembers(0, acting)
		if err != nil || g.Count != tc.want || floor != 3 || len(g.Owners) != tc.want {
			t.Errorf("members acting on nothing under counts %v: count %d, floor %d, %v; want count %d, floor 3", tc.counts, g.Count, floor, err, tc.want)
		}
	}
}

func TestMine(t *testing.T) {
	g := Group{Count: 4, Owners: []Owner{{"a", 2}, {"a", 1}, {"b", 1}, {"a", 2}}, Tokens: []int64{3, 2, 2, 5}, Moving: map[int]string{3: "b"}}
	granted, letGo := Mine(g, Owner{"a", 2})
	if !maps.Equal(granted, map[int]int64{0: 3, 3: 5}) || !maps.Equal(letGo, map[int]bool{3: true}) {
		t.Errorf("Mine = %v, %v", granted, letGo)
	}
	if granted, _ := Mine(g, Owner{}); len(granted) != 0 {
		t.Errorf("the zero owner was granted %v", granted)
	}
}

// TestLargestGroupFits: the most spread assignment of the largest group, with
// a hundred replicas of the longest names and every shard moving, fits in a
// Lease's annotations.
func TestLargestGroupFits(t *testing.T) {
	g := Group{Generation: 1 << 40, Count: MaxShards, Owners: make([]Owner, MaxShards), Tokens: make([]int64, MaxShards), Moving: map[int]string{}}
	name := func(i int) string { return fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 249)) }
	for s := range MaxShards {
		g.Owners[s] = Owner{Member: name(s % 100), Epoch: 1 << 30}
		g.Tokens[s] = 1<<40 + int64(s)
		g.Moving[s] = name((s + 1) % 100)
	}
	ann, err := g.Annotations()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseGroup(ann)
	if err != nil || !sameGroup(g, back) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := (Group{Count: 1, Owners: []Owner{{strings.Repeat("y", 300*1024), 1}}, Tokens: []int64{1}}).Annotations(); err == nil {
		t.Errorf("a group too large for a Lease was written")
	}
}

func TestHasGroup(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        bool
	}{
		{nil, false},
		{map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}, false},
		{map[string]string{CountAnnotation: "0"}, true},
		{map[string]string{AssignmentAnnotation: "g=1"}, true},
		{map[string]string{TokensAnnotation: ""}, true},
		{map[string]string{MovingAnnotation: ""}, true},
	} {
		if got := HasGroup(tc.annotations); got != tc.want {
			t.Errorf("HasGroup(%v) = %t, want %t", tc.annotations, got, tc.want)
		}
	}
}
