package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Event reasons of shard groups, on the group Lease (docs/design.md, "Shard
// groups").
const (
	ReasonShardsAssigned     = "ShardsAssigned"
	ReasonShardsMoving       = "ShardsMoving"
	ReasonShardsFreed        = "ShardsFreed"
	ReasonShardCountConflict = "ShardCountConflict"
	ReasonMemberStandby      = "MemberStandby"
	ReasonInvalidGroup       = "InvalidGroup"
	ReasonMemberLeaseDeleted = "MemberLeaseDeleted"
)

// groupWriteWait bounds how long a group step waits for the cache to show
// the controller's own last write of the group Lease before it decides
// again from what the cache shows.
const groupWriteWait = 10 * time.Second

// memberRecord is what the controller observed of one member Lease, on its
// own clock.
type memberRecord struct {
	uid        types.UID
	rv         string
	holder     string
	epoch      int64
	renewTime  time.Time
	duration   time.Duration
	observedAt time.Time // when the holder record last changed, locally
	firstSeen  time.Time // when this controller first saw the member Lease
	// bornWatched: this controller saw the member Lease take its epoch,
	// after its informer's first list, so no controller that came before
	// it (whose informers and writes end before this one's start) saw that
	// epoch, nor granted it anything.
	bornWatched bool
	// process is the process that made the last renewal, from its stamp
	// (the proof of death), and exited says the kubelet reported it exited:
	// set for a step from the controller's exits.
	process  proof.Process
	exited   bool
	released string
	acting   string
	deleted  bool
}

// expiry is when the member's epoch has run out by the controller's
// observation: a lease duration after its last renewal was seen, plus how
// late writes may show.
func (m *memberRecord) expiry(spread time.Duration) time.Time {
	return m.observedAt.Add(m.duration + spread)
}

// ended says the member's epoch is over at now: its member Lease names no
// holder (released), the process that renewed it last has exited (the proof
// of death), or it has expired by the controller's observation.
func (m *memberRecord) ended(now time.Time, spread time.Duration) bool {
	return m.holder == "" || m.exited || !now.Before(m.expiry(spread))
}

// highest is the highest token the member Lease records (0 when it records
// nothing yet); ok is false when its record cannot be read.
func (m *memberRecord) highest() (token int64, ok bool) {
	if m.acting == "" {
		return 0, true
	}
	a, err := shard.ParseActing(m.acting)
	if err != nil {
		return 0, false
	}
	return a.Highest, true
}

// groupRecord is what the controller keeps of a group between steps.
type groupRecord struct {
	members map[string]*memberRecord
	// last is the group as last read or written, kept across a deletion of
	// the group Lease: its owners may still act.
	last  *shard.Group
	floor int64
	// writing says the controller wrote the group Lease at writtenAt, when
	// the cache showed it at writtenFrom ("" for none): until the cache
	// shows something else, it shows a group older than the controller's.
	writing     bool
	writtenFrom string
	writtenAt   time.Time
	// deleteRefused: the API server refused to let this controller delete
	// a departed member's Lease (no RBAC delete on leases); it does not
	// ask again.
	deleteRefused bool
}

// groups holds the controller's records of shard groups. Handlers and
// workers share it.
type groups struct {
	mu      sync.Mutex
	records map[types.NamespacedName]*groupRecord
}

func newGroups() *groups {
	return &groups{records: map[types.NamespacedName]*groupRecord{}}
}

func (g *groups) recordLocked(key types.NamespacedName) *groupRecord {
	r := g.records[key]
	if r == nil {
		r = &groupRecord{members: map[string]*memberRecord{}}
		g.records[key] = r
	}
	return r
}

// memberOf returns the group key and the replica of a member Lease, if it
// is one.
func memberOf(lease *coordinationv1.Lease) (types.NamespacedName, string, bool) {
	group := lease.Annotations[shard.GroupAnnotation]
	replica, ok := strings.CutPrefix(lease.Name, group+".")
	if group == "" || !ok || replica == "" {
		return types.NamespacedName{}, "", false
	}
	return types.NamespacedName{Namespace: lease.Namespace, Name: group}, replica, true
}

// observeMember records a member Lease seen at now (initial: in the
// informer's first list) and says whether the group needs a step: anything
// but a renewal changed.
func (g *groups) observeMember(lease *coordinationv1.Lease, now time.Time, defaultDuration time.Duration, initial bool) (types.NamespacedName, bool) {
	key, replica, ok := memberOf(lease)
	if !ok {
		return key, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	rec := g.recordLocked(key)
	prev := rec.members[replica]
	next := &memberRecord{
		uid:       lease.UID,
		rv:        lease.ResourceVersion,
		holder:    holderIdentity(lease),
		epoch:     int64(ptr.Deref(lease.Spec.LeaseTransitions, 0)),
		renewTime: leaseRenewTime(lease),
		duration:  time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second,
		released:  lease.Annotations[shard.ReleasedAnnotation],
		acting:    lease.Annotations[shard.ActingAnnotation],
		process:   proof.HolderProcess(lease),
	}
	if next.duration <= 0 {
		next.duration = defaultDuration
	}
	next.observedAt, next.firstSeen = now, now
	next.bornWatched = !initial
	if prev != nil {
		next.firstSeen = prev.firstSeen
		if !prev.deleted && prev.uid == next.uid && prev.epoch == next.epoch {
			next.bornWatched = prev.bornWatched
		}
	}
	if prev != nil && !prev.deleted && prev.uid == next.uid && prev.holder == next.holder && prev.epoch == next.epoch &&
		prev.renewTime.Equal(next.renewTime) {
		next.observedAt = prev.observedAt
	}
	rec.members[replica] = next
	step := prev == nil || prev.deleted || prev.holder != next.holder || prev.epoch != next.epoch ||
		prev.released != next.released || prev.acting != next.acting || prev.duration != next.duration
	return key, step
}

// memberDeleted records that a member Lease is gone: its replica may act
// until its epoch runs out by the last renewal observed.
func (g *groups) memberDeleted(lease *coordinationv1.Lease) (types.NamespacedName, bool) {
	key, replica, ok := memberOf(lease)
	if !ok {
		return key, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.records[key]; r != nil {
		if m := r.members[replica]; m != nil {
			m.deleted = true
		}
	}
	return key, true
}

// groupStrategy says whether the Lease key is a shard group, and under
// which strategy: the one every candidate of the key that asks for a shard
// strategy asks for ("" when they disagree).
func groupStrategy(cands []*coordinationv1beta1.LeaseCandidate) (string, bool) {
	name, group := "", false
	for _, lc := range cands {
		s := string(lc.Spec.Strategy)
		if !shard.IsStrategy(s) {
			continue
		}
		switch {
		case !group:
			name, group = s, true
		case s != name:
			name = ""
		}
	}
	return name, group
}

// reconcileGroup runs one step of a shard group: it reads what the
// controller observed of the group's replicas, applies the rules of
// pkg/shard and writes the group Lease when they change it.
func (c *Controller) reconcileGroup(ctx context.Context, key types.NamespacedName, cands []*coordinationv1beta1.LeaseCandidate, strategyName string) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.opts.Clock.Now()
	spread := c.opts.WatchLag.Spread(now)
	lease := c.leaseOf(key)
	if strategyName == "" {
		c.events.emit(key, lease, corev1.EventTypeWarning, ReasonStrategyConflict, "Wait",
			"The group's candidates ask for different shard strategies; nothing is assigned until they agree")
		return 0, nil
	}

	c.groups.mu.Lock()
	rec := c.groups.recordLocked(key)
	if rec.writing {
		cached := ""
		if lease != nil {
			cached = lease.ResourceVersion
		}
		if cached == rec.writtenFrom && now.Sub(rec.writtenAt) < groupWriteWait {
			c.groups.mu.Unlock()
			return groupWriteWait, nil // the watch will show the write, and queue a step
		}
		rec.writing = false
	}
	members := make(map[string]memberRecord, len(rec.members))
	for name, m := range rec.members {
		copied := *m
		copied.exited = !c.exits.exitedAt(m.process).IsZero() // the proof of death: see exits.go
		members[name] = copied
	}
	var last *shard.Group
	if rec.last != nil {
		copied := *rec.last
		last = &copied
	}
	floor := rec.floor
	c.groups.mu.Unlock()

	// A group Lease that carries no group (created again by hand, or
	// stripped of cle's annotations) is lost as much as a deleted one: it
	// says nothing of who acts on what. It is written back below.
	stored := lease != nil && shard.HasGroup(lease.Annotations)
	var group shard.Group
	switch {
	case stored:
		g, err := shard.ParseGroup(lease.Annotations)
		if err != nil {
			// Never overwrite what cannot be read: owners may act on it.
			c.events.emit(key, lease, corev1.EventTypeWarning, ReasonInvalidGroup, "Wait",
				"The group Lease cannot be read, so nothing is assigned: %v", err)
			logger.Info("Group Lease cannot be read; leaving it as it is", "err", err)
			return 0, nil
		}
		group = g
	case last != nil:
		// Deleted or emptied behind this controller: its owners may still
		// act, by the last group Lease they read.
		group = *last
	default:
		// Nothing is granted from member Leases before each has been watched
		// for its lease duration: a replica's write recording a shard of the
		// lost group Lease may still be on its way, and the replica acts on
		// the shard only once that write has landed, within its renew
		// deadline. An epoch this controller saw begin was granted nothing
		// by anyone (grants name the epoch, and this controller, which
		// started leading before its informers listed, wrote none), so a
		// new group whose replicas joined under this controller starts at
		// once.
		var settled time.Time
		for _, m := range members {
			if !m.ended(now, spread) && !m.bornWatched {
				if at := m.firstSeen.Add(m.duration + spread); at.After(settled) {
					settled = at
				}
			}
		}
		if now.Before(settled) {
			logger.V(2).Info("No group Lease and no memory of one: waiting until every member Lease has been watched for its lease duration", "until", settled)
			return settled.Sub(now) + time.Millisecond, nil
		}
		acting := make(map[shard.Owner]shard.Acting)
		for name, m := range members {
			if m.acting == "" {
				continue
			}
			a, err := shard.ParseActing(m.acting)
			if err != nil {
				logger.Info("Member Lease's record of what it acts on cannot be read; waiting for its epoch to end", "replica", name, "err", err)
				if now.Before(m.expiry(spread)) {
					return m.expiry(spread).Sub(now), nil
				}
				continue
			}
			if m.ended(now, spread) {
				a.Shards = nil // that epoch ended: only its highest token counts
			}
			acting[shard.Owner{Member: name, Epoch: m.epoch}] = a
		}
		// Its floor is the highest token a member Lease records, taken
		// below for every group.
		g, _, err := shard.FromMembers(0, acting)
		if err != nil {
			c.events.emit(key, nil, corev1.EventTypeWarning, ReasonInvalidGroup, "Wait",
				"The group cannot be rebuilt from its member Leases: %v", err)
			return 0, nil
		}
		group = g
	}
	for _, t := range group.Tokens {
		floor = max(floor, t)
	}
	for _, m := range members {
		if h, ok := m.highest(); ok {
			floor = max(floor, h)
		}
	}

	replicas := c.groupReplicas(cands, members, strategyName, group.Count, now, spread)
	d := shard.Plan(shard.Input{Group: group, Replicas: replicas, MinToken: floor})
	c.sayGroup(ctx, key, lease, d)

	next := c.nextGroupStep(members, now, spread)
	c.groups.mu.Lock()
	rec = c.groups.recordLocked(key)
	for name, m := range rec.members {
		if m.deleted && !now.Before(m.expiry(spread)) {
			delete(rec.members, name) // its epoch ended and no grant names it
		}
	}
	if !d.Changed && (stored || d.Group.Count == 0) {
		kept := d.Group
		rec.last, rec.floor = &kept, floor
		refused := rec.deleteRefused
		c.groups.mu.Unlock()
		if lease != nil && !refused && !c.opts.KeepDepartedMembers {
			c.deleteDepartedMembers(ctx, key, lease, cands, members, d.Group, now, spread)
		}
		return next, nil
	}
	c.groups.mu.Unlock()

	if !stored && (lease != nil || last != nil) {
		logger.Info("Writing the shard group back: its Lease is gone or carries none of the group's annotations",
			"generation", d.Group.Generation, "count", d.Group.Count, "fromMemory", last != nil)
	}
	if err := c.writeGroup(ctx, key, lease, d.Group, strategyName); err != nil {
		return next, err
	}
	c.groups.mu.Lock()
	rec = c.groups.recordLocked(key)
	kept := d.Group
	rec.last, rec.floor = &kept, floor
	rec.writing, rec.writtenFrom, rec.writtenAt = true, "", now
	if lease != nil {
		rec.writtenFrom = lease.ResourceVersion
	}
	c.groups.mu.Unlock()
	logger.V(2).Info("Wrote the shard group", "generation", d.Group.Generation, "count", d.Group.Count,
		"grants", len(d.Grants), "moves", len(d.Moves), "freed", len(d.Freed), "unowned", d.Unowned, "spread", d.Spread)
	return next, nil
}

// deleteDepartedMembers deletes the member Leases of replicas that left the
// group for good (docs/design.md, "Shard groups", rule 8): the replica has no
// LeaseCandidate, its epoch has ended by this controller's observation, the
// group Lease as the cache shows it (unchanged by this step) names it for no
// shard, and the highest token its member Lease records is recorded as high
// on the member Lease of a replica that has a LeaseCandidate, which is not
// deleted in the same step. So every shard acted on stays on a member Lease,
// and the highest token of the group on one, for a controller that must
// rebuild the group without its Lease. Each delete is conditional on the
// member Lease's UID and resourceVersion as observed.
func (c *Controller) deleteDepartedMembers(ctx context.Context, key types.NamespacedName, lease *coordinationv1.Lease, cands []*coordinationv1beta1.LeaseCandidate, members map[string]memberRecord, g shard.Group, now time.Time, spread time.Duration) {
	registered := map[string]bool{}
	for _, lc := range cands {
		registered[lc.Name] = true
	}
	named := map[string]bool{}
	for _, o := range g.Owners {
		named[o.Member] = true
	}
	for _, to := range g.Moving {
		named[to] = true
	}
	// The highest token recorded by a replica that stays, and on whose.
	var keptHighest int64 = -1
	keptBy := ""
	for _, name := range slices.Sorted(maps.Keys(members)) {
		m := members[name]
		h, ok := m.highest()
		if !registered[name] || m.deleted || !ok {
			continue
		}
		if h > keptHighest {
			keptHighest, keptBy = h, name
		}
	}
	logger := klog.FromContext(ctx)
	for _, name := range slices.Sorted(maps.Keys(members)) {
		m := members[name]
		if registered[name] || m.deleted || named[name] || !m.ended(now, spread) {
			continue
		}
		highest, ok := m.highest()
		if !ok {
			continue // what it records cannot be read: keep it
		}
		if highest > keptHighest {
			continue // the only record of that token: kept until another replica's is as high
		}
		memberName := shard.MemberLeaseName(key.Name, name)
		err := c.access.Leases(key.Namespace).Delete(ctx, memberName, &metav1.Preconditions{UID: &m.uid, ResourceVersion: &m.rv})
		switch {
		case err == nil || apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			c.groups.mu.Lock()
			c.groups.recordLocked(key).deleteRefused = true
			c.groups.mu.Unlock()
			logger.Info("Not allowed to delete the member Lease of a replica that left the group; member Leases of departed replicas are kept (grant delete on leases, or run with --delete-departed-member-leases=false)",
				"memberLease", klog.KRef(key.Namespace, memberName), "err", err)
			return
		default:
			// Changed since it was observed (a conflict), or the request
			// failed: the next step judges it again.
			logger.V(2).Info("Could not delete the member Lease of a replica that left the group", "memberLease", klog.KRef(key.Namespace, memberName), "err", err)
			continue
		}
		c.groups.mu.Lock()
		if r := c.groups.recordLocked(key).members[name]; r != nil && r.uid == m.uid {
			r.deleted = true
		}
		c.groups.mu.Unlock()
		recorded := "it was granted no shard"
		if highest > 0 {
			recorded = fmt.Sprintf("its highest token, %d, is recorded as high on %s's", highest, keptBy)
		}
		c.events.emit(key, lease, corev1.EventTypeNormal, ReasonMemberLeaseDeleted, "Delete",
			"Deleted the member Lease %s of %s, which left the group (no LeaseCandidate, epoch %d ended, no shard named for it); %s",
			memberName, name, m.epoch, recorded)
		logger.V(2).Info("Deleted the member Lease of a replica that left the group", "memberLease", klog.KRef(key.Namespace, memberName),
			"epoch", m.epoch, "highestToken", highest, "recordedBy", keptBy)
	}
}

// groupReplicas says what the controller observed of each replica of a
// group, for shard.Plan.
func (c *Controller) groupReplicas(cands []*coordinationv1beta1.LeaseCandidate, members map[string]memberRecord, strategyName string, count int, now time.Time, spread time.Duration) []shard.Replica {
	var mine []*coordinationv1beta1.LeaseCandidate
	for _, lc := range cands {
		if string(lc.Spec.Strategy) == strategyName {
			mine = append(mine, lc)
		}
	}
	slices.SortFunc(mine, func(a, b *coordinationv1beta1.LeaseCandidate) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	var out []shard.Replica
	seen := map[string]bool{}
	for rank, lc := range mine {
		seen[lc.Name] = true
		r := shard.Replica{Name: lc.Name, Rank: rank}
		if n, err := shard.ParseDeclared(lc.Annotations[shard.DeclaredAnnotation]); err == nil {
			r.Declared = n
		}
		crec := c.obs.candidate(lc, now)
		state, _ := crec.state(now, c.opts.CandidateFreshness, c.opts.PingTimeout)
		if m, ok := members[lc.Name]; ok {
			r.Epoch, r.Ended = m.epoch, m.ended(now, spread)
			r.Member = state != unresponsive && !r.Ended && !m.deleted && m.holder == lc.Name && m.epoch > 0
			r.Released = releasedOf(m, count)
		}
		out = append(out, r)
	}
	// Who may own: everybody, or the members of the oldest emulation
	// version among the members.
	oldest := ""
	if strategyName == shard.StrategyShardsOldestEmulationVersion {
		for i, lc := range mine {
			if !out[i].Member {
				continue
			}
			if oldest == "" {
				oldest = lc.Spec.EmulationVersion
			} else if n, err := strategy.CompareVersions(lc.Spec.EmulationVersion, oldest); err == nil && n < 0 {
				oldest = lc.Spec.EmulationVersion
			}
		}
	}
	for i, lc := range mine {
		out[i].MayOwn = true
		if oldest != "" {
			n, err := strategy.CompareVersions(lc.Spec.EmulationVersion, oldest)
			out[i].MayOwn = err == nil && n == 0
		}
	}
	// Replicas whose candidate is gone still hold what their member Lease
	// says until their epoch ends.
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if seen[name] {
			continue
		}
		m := members[name]
		out = append(out, shard.Replica{Name: name, Epoch: m.epoch, Ended: m.ended(now, spread), Released: releasedOf(m, count), Rank: len(out)})
	}
	return out
}

func releasedOf(m memberRecord, count int) map[int]int64 {
	if m.released == "" || count == 0 {
		return nil
	}
	released, err := shard.ParseReleased(m.released, count)
	if err != nil {
		return nil
	}
	return released
}

// nextGroupStep is when the group needs a step without any event: when the
// next live member's epoch runs out.
func (c *Controller) nextGroupStep(members map[string]memberRecord, now time.Time, spread time.Duration) time.Duration {
	var next time.Duration
	for _, m := range members {
		if m.holder == "" {
			continue
		}
		if at := m.expiry(spread); at.After(now) && (next == 0 || at.Sub(now) < next) {
			next = at.Sub(now) + time.Millisecond
		}
	}
	return next
}

// writeGroup creates or updates the group Lease; an update is conditional on
// the resourceVersion the decision was made from.
func (c *Controller) writeGroup(ctx context.Context, key types.NamespacedName, lease *coordinationv1.Lease, g shard.Group, strategyName string) error {
	ann, err := g.Annotations()
	if err != nil {
		return fmt.Errorf("write the group %s: %w", key, err)
	}
	name := coordinationv1.CoordinatedLeaseStrategy(strategyName)
	leases := c.access.Leases(key.Namespace)
	if lease == nil {
		_, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Annotations: ann},
			Spec:       coordinationv1.LeaseSpec{Strategy: &name},
		})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create the group Lease %s: it exists and the cache does not show it yet: %w", key, err)
		}
		if err != nil {
			return fmt.Errorf("create the group Lease %s: %w", key, err)
		}
		return nil
	}
	clone := lease.DeepCopy()
	if clone.Annotations == nil {
		clone.Annotations = map[string]string{}
	}
	maps.Copy(clone.Annotations, ann)
	if ann[shard.MovingAnnotation] == "" {
		delete(clone.Annotations, shard.MovingAnnotation)
	}
	clone.Spec.Strategy = &name
	if _, err := leases.Update(ctx, clone); err != nil {
		return fmt.Errorf("update the group Lease %s: %w", key, err)
	}
	return nil
}

// sayGroup reports a group decision in Events and metrics.
func (c *Controller) sayGroup(ctx context.Context, key types.NamespacedName, lease *coordinationv1.Lease, d shard.Decision) {
	logger := klog.FromContext(ctx)
	m := c.opts.Metrics
	group := key.Namespace + "/" + key.Name
	if n := len(d.Grants); n > 0 {
		returned := 0
		for _, g := range d.Grants {
			if g.Returned {
				returned++
			}
		}
		c.events.emit(key, lease, corev1.EventTypeNormal, ReasonShardsAssigned, "Assign",
			"Generation %d: %d shards granted (%d back to a restarted replica): %s", d.Group.Generation, n, returned, d.Group.DescribeOwners())
		logger.V(2).Info("Granting shards", "generation", d.Group.Generation, "grants", n, "returned", returned)
	}
	if n := len(d.Moves); n > 0 {
		c.events.emit(key, lease, corev1.EventTypeNormal, ReasonShardsMoving, "Move",
			"Generation %d: %d shards asked to move: %s", d.Group.Generation, n, describeMoves(d.Moves))
		m.ShardMoves.WithLabelValues(group, "rebalance").Add(float64(n))
	}
	if n := len(d.Freed); n > 0 {
		ended := 0
		for _, f := range d.Freed {
			if !f.Released {
				ended++
			}
		}
		if ended > 0 {
			c.events.emit(key, lease, corev1.EventTypeNormal, ReasonShardsFreed, "Free",
				"Generation %d: %d shards freed because their owner's epoch ended", d.Group.Generation, ended)
			m.ShardMoves.WithLabelValues(group, "owner_ended").Add(float64(ended))
		}
	}
	if d.Conflict {
		c.events.emit(key, lease, corev1.EventTypeWarning, ReasonShardCountConflict, "Wait",
			"The live members do not all declare one shard count; the count in effect (%d) stays", d.Group.Count)
	}
	if len(d.Standby) > 0 {
		c.events.emit(key, lease, corev1.EventTypeNormal, ReasonMemberStandby, "Wait",
			"Members waiting as standbys (a newer emulation version than the oldest member's): %s", strings.Join(d.Standby, ", "))
	}
	owned := d.Group.Count - d.Unowned - len(d.Group.Moving)
	m.Shards.WithLabelValues(group, "owned").Set(float64(owned))
	m.Shards.WithLabelValues(group, "moving").Set(float64(len(d.Group.Moving)))
	m.Shards.WithLabelValues(group, "unowned").Set(float64(d.Unowned))
	m.ShardSpread.WithLabelValues(group).Set(float64(d.Spread))
}

func describeMoves(moves []shard.Move) string {
	var parts []string
	for _, mv := range moves {
		to := mv.To
		if to == "" {
			to = "(nobody yet)"
		}
		parts = append(parts, fmt.Sprintf("%d %s→%s", mv.Shard, mv.From.Member, to))
		if len(parts) == 8 && len(moves) > 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(moves)-8))
			break
		}
	}
	return strings.Join(parts, ", ")
}
