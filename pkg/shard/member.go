package shard

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The strategies of a group, in its candidates' spec.strategy (or the
// cle.dev/strategy annotation in portable mode). kube-apiserver's own
// election controller elects only OldestEmulationVersion, so it leaves group
// Leases alone.
const (
	// StrategyShards lets every member own shards.
	StrategyShards = "cle.dev/Shards"
	// StrategyShardsOldestEmulationVersion lets only the members of the
	// oldest emulation version among the members own shards; the others
	// wait as standbys.
	StrategyShardsOldestEmulationVersion = "cle.dev/ShardsOldestEmulationVersion"
)

// IsStrategy says whether name is one of a group's strategies.
func IsStrategy(name string) bool {
	return name == StrategyShards || name == StrategyShardsOldestEmulationVersion
}

// GroupAnnotation names, on a member Lease, the group it belongs to.
const GroupAnnotation = "cle.dev/group"

// ActingAnnotation is written by a replica on its member Lease before it
// starts acting on a shard, and rewritten once it stops: the shards it acts
// on, with the count it acts under and each shard's token
// ("n=32;h=9;0-10=4;12=6"). A shard acted on is
// always recorded on a member Lease, so that a controller that lost the group
// Lease (deleted, and the controller restarted) rebuilds who acts from the
// member Leases (FromMembers) instead of granting those shards again, and
// numbers its next grants above every token in use.
const ActingAnnotation = "cle.dev/acting"

// MemberLeaseName is the name of replica's member Lease in group.
func MemberLeaseName(group, replica string) string {
	return group + "." + replica
}

// Mine is what the group grants to owner: the shards granted to it in its
// epoch with their tokens, and which of them it is asked to let go of. A
// replica acts on a granted shard until it is asked to let go and has
// stopped; it starts none it is only asked to let go of.
func Mine(g Group, owner Owner) (granted map[int]int64, letGo map[int]bool) {
	granted = make(map[int]int64)
	letGo = make(map[int]bool)
	for s, o := range g.Owners {
		if o != owner || o.Member == "" || s >= len(g.Tokens) {
			continue
		}
		granted[s] = g.Tokens[s]
		if _, moving := g.Moving[s]; moving {
			letGo[s] = true
		}
	}
	return granted, letGo
}

// Acting is what a member Lease's ActingAnnotation says: the shard count the
// replica acts under, the highest token it was ever granted in the group, and
// the shards it acts on, each with its grant's token.
type Acting struct {
	Count   int
	Highest int64
	Shards  map[int]int64
}

// Encode writes a for a member Lease's ActingAnnotation:
// "n=32;h=9;0-10=4;12=6".
func (a Acting) Encode() string {
	text := "n=" + strconv.Itoa(a.Count) + ";h=" + strconv.FormatInt(a.Highest, 10)
	if runs := EncodeReleased(a.Shards); runs != "" {
		text += ";" + runs
	}
	return text
}

// ParseActing reads a member Lease's ActingAnnotation.
func ParseActing(text string) (Acting, error) {
	head, rest, _ := strings.Cut(text, ";")
	countText, ok := strings.CutPrefix(head, "n=")
	n, err := strconv.Atoi(countText)
	if !ok || err != nil || n < 0 || n > MaxShards {
		return Acting{}, fmt.Errorf("%s: %q does not start with a shard count (n=0 to n=%d)", ActingAnnotation, text, MaxShards)
	}
	head, rest, _ = strings.Cut(rest, ";")
	highText, ok := strings.CutPrefix(head, "h=")
	high, err := strconv.ParseInt(highText, 10, 64)
	if !ok || err != nil || high < 0 {
		return Acting{}, fmt.Errorf("%s: %q has no highest token (h=) after its count", ActingAnnotation, text)
	}
	shards, err := parseInts(rest, n)
	if err != nil {
		return Acting{}, fmt.Errorf("%s: %w", ActingAnnotation, err)
	}
	for s, t := range shards {
		if t > high {
			return Acting{}, fmt.Errorf("%s: shard %d's token %d is above the highest, %d", ActingAnnotation, s, t, high)
		}
	}
	return Acting{Count: n, Highest: high, Shards: shards}, nil
}

// FromMembers rebuilds a group, at generation, from what the member Leases
// say: each shard is owned by the member that acts on it with the highest
// token, and floor, for the next tokens, is the highest token any member
// Lease recorded (pass every member Lease, of ended epochs too; only those of
// epochs not ended should list shards). The controller uses it when it has
// neither a group Lease nor a memory of one, before it grants anything. With
// nobody acting on a shard, the count is the one every member Lease that
// records one acts under, so that a count in effect stays in effect (rule
// 1), and none when they differ (the declared one is then taken once the
// members agree); members acting on shards under different counts are an
// error, which the rules never let happen (a count changes only once every
// shard of the old one is free).
func FromMembers(generation int64, acting map[Owner]Acting) (g Group, floor int64, err error) {
	owners := slices.SortedFunc(maps.Keys(acting), func(a, b Owner) int {
		return cmp.Or(cmp.Compare(a.Member, b.Member), cmp.Compare(a.Epoch, b.Epoch))
	})
	count := 0
	for _, o := range owners {
		a := acting[o]
		if len(a.Shards) == 0 {
			continue
		}
		if a.Count < 1 || a.Count > MaxShards {
			return Group{}, 0, fmt.Errorf("%s@%d acts on shards under a count of %d", o.Member, o.Epoch, a.Count)
		}
		if count != 0 && a.Count != count {
			return Group{}, 0, fmt.Errorf("members act under different shard counts: %d and %d (%s@%d)", count, a.Count, o.Member, o.Epoch)
		}
		count = a.Count
	}
	if count == 0 {
		for _, o := range owners {
			switch n := acting[o].Count; {
			case n < 1 || n > MaxShards:
			case count == 0:
				count = n
			case n != count:
				count = -1 // they differ: none
			}
		}
		count = max(count, 0)
	}
	g = Group{Generation: generation, Count: count, Owners: make([]Owner, count), Tokens: make([]int64, count)}
	for _, o := range owners {
		floor = max(floor, acting[o].Highest)
		for s, t := range acting[o].Shards {
			floor = max(floor, t)
			if s >= 0 && s < count && t > g.Tokens[s] {
				g.Owners[s], g.Tokens[s] = o, t
			}
		}
	}
	return g, floor, nil
}
