package shard

import (
	"cmp"
	"maps"
	"math"
	"slices"
)

// Replica is what the controller observed of one replica of a group: its
// LeaseCandidate and its member Lease. The controller judges liveness and the
// end of epochs (docs/design.md, "The rules the controller follows"); Plan only
// applies the rules to what it is told.
type Replica struct {
	// Name is the replica's identity, as in its member Lease's holder.
	Name string
	// Epoch is its member Lease's epoch as last observed; 0 if it has none.
	Epoch int64
	// Ended says Epoch has ended: the member Lease expired by the
	// controller's own observation, or the kubelet reported the process that
	// renewed it exited.
	Ended bool
	// Member says it may be granted shards now: a live candidate of the group
	// whose member Lease is live.
	Member bool
	// MayOwn says the group's strategy lets it own shards; a member that may
	// not is a standby.
	MayOwn bool
	// Returning says its last epoch ended with a restart in place, within the
	// return window: its shards wait for its next epoch instead of moving.
	Returning bool
	// Declared is the shard count its code was built for; 0 if it declared
	// none it could be read.
	Declared int
	// Released lists the shards it has stopped acting on, each with the token
	// of the grant it stopped.
	Released map[int]int64
	// Rank breaks ties between replicas: lower first (the controller passes
	// the order of their LeaseCandidates' creation).
	Rank int
}

// Input is one decision's worth of observation.
type Input struct {
	// Group is the group Lease as last observed (Count 0 for a new group).
	Group Group
	// Replicas are the replicas the controller knows of. A shard whose owner
	// is not among them is taken as still acting: the controller keeps a
	// replica here until it has seen its epoch end.
	Replicas []Replica
	// MinToken is a floor for every token granted: the highest token the
	// controller saw for this group, across a deletion of the group Lease.
	MinToken int64
}

// Grant gives a free shard to an owner with the shard's next token.
type Grant struct {
	Shard int
	Owner Owner
	Token int64
	// Returned says the shard went back to the next epoch of the replica that
	// owned it, not to another replica.
	Returned bool
}

// Move asks a live owner to let a shard go, for another replica.
type Move struct {
	Shard int
	From  Owner
	// To is the replica the shard is meant for; "" when nobody is yet (the
	// count is changing, or no member has room).
	To string
}

// Freed is a shard whose owner stopped acting on it: it released the shard,
// or its epoch ended.
type Freed struct {
	Shard    int
	Owner    Owner
	Released bool
}

// Decision is what Plan decided: the group to write and why.
type Decision struct {
	// Group is the group Lease to write. Its Generation is the input's when
	// nothing changed (Changed false), one more otherwise.
	Group   Group
	Changed bool
	// Grants, Moves and Freed are this decision's events, in shard order.
	// Moves lists only moves not already asked for.
	Grants []Grant
	Moves  []Move
	Freed  []Freed
	// Standby names the members that may not own shards under the group's
	// strategy.
	Standby []string
	// Conflict says the live members do not all declare the count in
	// effect, nor all one other count: the count in effect stays.
	Conflict bool
	// Changing is the count the members agree on while the group lets go of
	// the old one; 0 otherwise.
	Changing int
	// Unowned counts the shards nobody owns after this decision, moving ones
	// excluded; Spread is the largest minus the smallest number of shards a
	// member that may own holds.
	Unowned int
	Spread  int
}

// shardState is what a shard's recorded owner is doing.
type shardState int

const (
	stateFree   shardState = iota // no owner, or its epoch ended, or it released the shard
	stateActing                   // its owner may be acting on it
	stateHeld                     // its owner's epoch ended in a restart: it waits for the next epoch
)

// Plan applies the rules of docs/design.md ("The rules the controller
// follows") to one observation. A shard is granted only when it is free; a
// grant's token is above every token the shard had and above MinToken; a
// shard stays with its owner while the owner may own it and is within its
// quota; quotas differ by at most one. Plan is deterministic: the same input
// gives the same decision.
func Plan(in Input) Decision {
	// A name given twice is taken once, as first given.
	unique := make([]Replica, 0, len(in.Replicas))
	replicas := make(map[string]*Replica, len(in.Replicas))
	for _, r := range in.Replicas {
		if _, dup := replicas[r.Name]; !dup && r.Name != "" {
			unique = append(unique, r)
			replicas[r.Name] = &unique[len(unique)-1]
		}
	}
	in.Replicas = unique
	var d Decision
	for _, r := range in.Replicas {
		if r.Member && !r.MayOwn {
			d.Standby = append(d.Standby, r.Name)
		}
	}
	slices.Sort(d.Standby)

	before := cloneGroup(in.Group)
	g := cloneGroup(in.Group)
	count, conflict := countInEffect(g.Count, in.Replicas)
	d.Conflict = conflict

	states := make([]shardState, g.Count)
	for s, o := range g.Owners {
		states[s] = stateOf(o, g.Tokens[s], s, replicas)
	}

	if count != g.Count {
		// Every owner lets go of every shard before the new count is written:
		// shard i of one count is not shard i of another.
		moving := make(map[int]string)
		for s, st := range states {
			if st == stateActing {
				moving[s] = ""
			}
		}
		if len(moving) > 0 {
			d.Moves = newMoves(g, moving, before.Moving)
			for s, o := range g.Owners {
				if states[s] != stateActing && o.Member != "" {
					d.Freed = append(d.Freed, Freed{Shard: s, Owner: o, Released: releasedBy(o, g.Tokens[s], s, replicas)})
					g.Owners[s] = Owner{}
				}
			}
			g.Moving = moving
			d.Changing = count
			return finish(before, g, d, replicas)
		}
		floor := in.MinToken
		for _, t := range g.Tokens {
			floor = max(floor, t)
		}
		for s, o := range g.Owners {
			if o.Member != "" {
				d.Freed = append(d.Freed, Freed{Shard: s, Owner: o, Released: releasedBy(o, g.Tokens[s], s, replicas)})
			}
		}
		g.Count = count
		g.Owners = make([]Owner, count)
		g.Tokens = make([]int64, count)
		for s := range g.Tokens {
			g.Tokens[s] = floor
		}
		g.Moving = nil
		states = make([]shardState, count)
	}
	if g.Count == 0 {
		return finish(before, g, d, replicas)
	}

	// The members that count for quotas: those that may own now, and those
	// whose shards wait for their next epoch.
	var eligible []*Replica
	isEligible := make(map[*Replica]bool)
	for i := range in.Replicas {
		r := &in.Replicas[i]
		if canOwnNow(r) || (r.Returning && r.MayOwn) {
			eligible = append(eligible, r)
			isEligible[r] = true
		}
	}
	kept := make(map[string][]int, len(eligible))
	for s, o := range g.Owners {
		r := replicas[o.Member]
		if r == nil || !isEligible[r] {
			continue
		}
		if (states[s] == stateActing && canOwnNow(r) && o.Epoch == r.Epoch) || states[s] == stateHeld {
			kept[r.Name] = append(kept[r.Name], s)
		}
	}
	quota := quotas(g.Count, eligible, kept)

	// Shards that leave their owner: over quota (highest-numbered first), or
	// owned by a replica that may not own them any more.
	leaving := make(map[int]bool)
	stays := make([]bool, g.Count)
	for _, r := range eligible {
		mine := kept[r.Name]
		for len(mine) > quota[r.Name] {
			leaving[mine[len(mine)-1]] = true
			mine = mine[:len(mine)-1]
		}
		kept[r.Name] = mine
		for _, s := range mine {
			stays[s] = true
		}
	}
	for s, o := range g.Owners {
		if states[s] == stateFree || leaving[s] {
			continue
		}
		r := replicas[o.Member]
		if r != nil && r.Epoch < o.Epoch {
			// The controller has not seen the epoch the grant names yet: it
			// cannot judge this owner, so it leaves the shard alone.
			continue
		}
		if !stays[s] && len(eligible) > 0 {
			leaving[s] = true
		}
	}

	// Free shards: released ones, those of ended epochs, held ones that must
	// leave, and unowned ones.
	var free []int
	for s, o := range g.Owners {
		switch {
		case states[s] == stateFree:
		case states[s] == stateHeld && leaving[s]:
			delete(leaving, s)
		default:
			continue
		}
		if o.Member != "" {
			d.Freed = append(d.Freed, Freed{Shard: s, Owner: o, Released: releasedBy(o, g.Tokens[s], s, replicas)})
		}
		free = append(free, s)
	}

	have := make(map[string]int, len(eligible))
	for name, mine := range kept {
		have[name] = len(mine)
	}
	grant := func(s int, r *Replica, returned bool) bool {
		if max(g.Tokens[s], in.MinToken) == math.MaxInt64 {
			return false // no token left above the last: the shard stays free
		}
		t := max(g.Tokens[s], in.MinToken) + 1
		g.Tokens[s] = t
		g.Owners[s] = Owner{Member: r.Name, Epoch: r.Epoch}
		have[r.Name]++
		d.Grants = append(d.Grants, Grant{Shard: s, Owner: g.Owners[s], Token: t, Returned: returned})
		return true
	}

	// A free shard goes back to the next epoch of the replica that owned it
	// when that replica has room: a restart moves nothing.
	var rest []int
	for _, s := range free {
		if g.Count != before.Count {
			rest = append(rest, s)
			continue
		}
		if last := before.Owners[s]; last.Member != "" {
			if r := replicas[last.Member]; r != nil && canOwnNow(r) && r.Epoch > last.Epoch &&
				isEligible[r] && have[r.Name] < quota[r.Name] && grant(s, r, true) {
				continue
			}
		}
		g.Owners[s] = Owner{}
		rest = append(rest, s)
	}

	// The others go to the members furthest below their quotas, each taking
	// its share as one run of shards.
	receivers := receiversByNeed(eligible, quota, have)
	for _, r := range receivers {
		for need := quota[r.Name] - have[r.Name]; need > 0 && len(rest) > 0; rest = rest[1:] {
			if grant(rest[0], r, false) {
				need--
			}
		}
	}

	// What stays moving is meant for whoever still has room.
	moving := make(map[int]string)
	leavingShards := slices.Sorted(maps.Keys(leaving))
	receivers = receiversByNeed(eligible, quota, have)
	next := 0
	for _, s := range leavingShards {
		to := ""
		for next < len(receivers) && have[receivers[next].Name] >= quota[receivers[next].Name] {
			next++
		}
		if next < len(receivers) {
			to = receivers[next].Name
			have[to]++
		}
		moving[s] = to
	}
	d.Moves = newMoves(g, moving, before.Moving)
	if len(moving) > 0 {
		g.Moving = moving
	} else {
		g.Moving = nil
	}
	return finish(before, g, d, replicas)
}

// countInEffect says which count the group should have: the one in effect
// unless every live member declares another one, and whether the members
// disagree.
func countInEffect(current int, replicas []Replica) (count int, conflict bool) {
	agreed, members := 0, 0
	for _, r := range replicas {
		if !r.Member {
			continue
		}
		if r.Declared <= 0 || r.Declared > MaxShards || (members > 0 && r.Declared != agreed) {
			// A member whose count could not be read disagrees with all.
			conflict = true
		}
		members++
		agreed = r.Declared
	}
	if members == 0 || conflict {
		return current, conflict
	}
	return agreed, false
}

func stateOf(o Owner, token int64, s int, replicas map[string]*Replica) shardState {
	if o.Member == "" {
		return stateFree
	}
	r := replicas[o.Member]
	switch {
	case r == nil, r.Epoch < o.Epoch:
		// Not seen, or seen only in an earlier epoch than the grant names:
		// the owner may be acting for all the controller knows.
		return stateActing
	case r.Epoch > o.Epoch:
		return stateFree
	case r.Ended && r.Returning:
		return stateHeld
	case r.Ended:
		return stateFree
	case releasedBy(o, token, s, replicas):
		return stateFree
	}
	return stateActing
}

// releasedBy says o's replica, in o's epoch, released shard s's grant whose
// token is token.
func releasedBy(o Owner, token int64, s int, replicas map[string]*Replica) bool {
	r := replicas[o.Member]
	if r == nil || r.Epoch != o.Epoch {
		return false
	}
	t, ok := r.Released[s]
	return ok && t == token
}

func canOwnNow(r *Replica) bool {
	return r.Member && r.MayOwn && !r.Ended && r.Epoch > 0
}

// quotas gives each eligible member ⌊n/E⌋ or ⌈n/E⌉ shards; the larger quotas
// go to the members that keep the most already (then lower rank, then name),
// so that balancing moves as little as it can. A member waiting to return
// from a restart cannot be granted anything until it does: its quota is what
// it holds, at most its share, and the rest is shared among the others, so
// that nothing stays unowned for the return window.
func quotas(n int, eligible []*Replica, kept map[string][]int) map[string]int {
	q := make(map[string]int, len(eligible))
	if len(eligible) == 0 {
		return q
	}
	share(n, eligible, kept, q)
	var waiting, able []*Replica
	left := n
	for _, r := range eligible {
		if canOwnNow(r) {
			able = append(able, r)
			continue
		}
		waiting = append(waiting, r)
		q[r.Name] = min(q[r.Name], len(kept[r.Name]))
		left -= q[r.Name]
	}
	if len(waiting) > 0 && len(able) > 0 {
		share(left, able, kept, q)
	}
	return q
}

// share sets the quotas of members so that they add up to n.
func share(n int, members []*Replica, kept map[string][]int, q map[string]int) {
	order := slices.Clone(members)
	slices.SortFunc(order, func(a, b *Replica) int {
		return cmp.Or(cmp.Compare(len(kept[b.Name]), len(kept[a.Name])), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Name, b.Name))
	})
	base, extra := n/len(order), n%len(order)
	for i, r := range order {
		q[r.Name] = base
		if i < extra {
			q[r.Name]++
		}
	}
}

// receiversByNeed lists the members that may be granted shards now and have
// room, furthest below their quota first (then fewer shards, then name).
func receiversByNeed(eligible []*Replica, quota, have map[string]int) []*Replica {
	var out []*Replica
	for _, r := range eligible {
		if canOwnNow(r) && have[r.Name] < quota[r.Name] {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *Replica) int {
		return cmp.Or(
			cmp.Compare(quota[b.Name]-have[b.Name], quota[a.Name]-have[a.Name]),
			cmp.Compare(have[a.Name], have[b.Name]),
			cmp.Compare(a.Name, b.Name))
	})
	return out
}

// newMoves lists the moves in moving that were not asked for before, or are
// now meant for another replica.
func newMoves(g Group, moving, before map[int]string) []Move {
	var out []Move
	for _, s := range slices.Sorted(maps.Keys(moving)) {
		if to, asked := before[s]; asked && to == moving[s] {
			continue
		}
		out = append(out, Move{Shard: s, From: g.Owners[s], To: moving[s]})
	}
	return out
}

// finish fills in what the decision says of the result and bumps the
// generation when the group changed.
func finish(before, g Group, d Decision, replicas map[string]*Replica) Decision {
	slices.SortFunc(d.Freed, func(a, b Freed) int { return cmp.Compare(a.Shard, b.Shard) })
	if !sameGroup(before, g) {
		g.Generation = before.Generation + 1
		d.Changed = true
	}
	d.Unowned = g.Unowned()
	held := g.OwnerCounts()
	first := true
	lo, hi := 0, 0
	for _, r := range replicas {
		if !canOwnNow(r) {
			continue
		}
		n := held[r.Name]
		if first {
			lo, hi, first = n, n, false
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	d.Spread = hi - lo
	d.Group = g
	return d
}

func cloneGroup(g Group) Group {
	out := g
	out.Owners = slices.Clone(g.Owners)
	out.Tokens = slices.Clone(g.Tokens)
	out.Moving = maps.Clone(g.Moving)
	// A group whose slices do not match its count (ParseGroup never returns
	// one) is read as far as it goes.
	out.Count = max(0, min(g.Count, MaxShards))
	out.Owners = resize(out.Owners, out.Count)
	out.Tokens = resize(out.Tokens, out.Count)
	for s := range out.Moving {
		if s < 0 || s >= out.Count {
			delete(out.Moving, s)
		}
	}
	return out
}

func sameGroup(a, b Group) bool {
	return a.Count == b.Count && slices.Equal(a.Owners, b.Owners) && slices.Equal(a.Tokens, b.Tokens) &&
		maps.Equal(a.Moving, b.Moving)
}

func resize[T any](xs []T, n int) []T {
	if len(xs) >= n {
		return xs[:n]
	}
	return append(xs, make([]T, n-len(xs))...)
}
