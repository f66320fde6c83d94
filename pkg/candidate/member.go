package candidate

import (
	"context"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
)

// member keeps a group replica's member Lease and starts and stops its
// shards as the group Lease says (docs/design.md, "What a replica does"). Its
// fields belong to the goroutine running run and, once run has returned, to
// release.
type member struct {
	g      *Group
	c      *Candidate
	leases access.LeaseClient
	// name is the member Lease's name.
	name string
	// own is the member Lease, group the group Lease.
	own, group watched[*coordinationv1.Lease]
	wake       chan struct{}

	// last is the last group Lease seen that could be read, kept when the
	// group Lease is deleted (the controller writes another from what the
	// member Leases say); lastRV is its resourceVersion.
	last   shard.Group
	lastRV string
	// number is the current epoch, 0 between epochs; previous is the last
	// one this process had.
	number, previous int64
	// highest is the highest token the replica was granted, carried from
	// the member Lease of earlier processes.
	highest int64
	// running are the shards started and not yet returned, stopping ones
	// included; released are the shards let go, with their grants' tokens,
	// until the group Lease no longer grants them.
	running  map[int]*shardTerm
	released map[int]int64

	// wrote is the member Lease as this process last wrote it: a version it
	// did not write means another writer.
	wrote *coordinationv1.Lease
	// lastAttempt is when the last write was sent, retryAt holds off the
	// next after a failure.
	lastAttempt, retryAt time.Time
	// waitingOn is the resourceVersion of a member Lease that an earlier
	// process of this identity wrote, and waitingSince when it was first
	// seen: it is taken once unchanged for a lease duration.
	waitingOn    string
	waitingSince time.Time
}

func newMember(g *Group, acc access.Interface) *member {
	cfg := &g.c.cfg
	m := &member{
		g:        g,
		c:        g.c,
		leases:   acc.Leases(cfg.Namespace),
		name:     shard.MemberLeaseName(cfg.LeaseName, cfg.Identity),
		wake:     g.wake,
		running:  map[int]*shardTerm{},
		released: map[int]int64{},
	}
	for w, name := range map[*watched[*coordinationv1.Lease]]string{&m.own: m.name, &m.group: cfg.LeaseName} {
		w.informer = acc.NewLeaseInformer(cfg.Namespace, 0, oneObject(name))
		w.key = cfg.Namespace + "/" + name
		// The registration cannot fail on an informer that has not started.
		handle, _ := w.informer.AddEventHandler(wakeOnChange(m.wake))
		w.synced = handle.HasSyncedChecker()
	}
	return m
}

// run steps on every change of the two Leases, every return of a shard's
// work and on time, until ctx is done; it then stops every shard and waits
// for their work to return.
func (m *member) run(ctx context.Context) {
	timer := m.c.cfg.Clock.NewTimer(m.c.cfg.RetryPeriod)
	defer timer.Stop()
	for {
		if ctx.Err() == nil {
			timer.Reset(m.step(ctx))
		}
		select {
		case <-ctx.Done():
			m.endEpoch(ctx, "shutting down")
			for _, st := range m.running {
				<-st.done
			}
			m.reap(ctx)
			return
		case <-m.wake:
		case <-timer.C():
		}
	}
}

// step brings the member Lease and the shards acted on to what the group
// Lease grants, and returns when to look again. It is idempotent.
func (m *member) step(ctx context.Context) time.Duration {
	cfg := &m.c.cfg
	m.readGroup(ctx)
	m.reap(ctx)
	if e := m.g.epoch.Load(); e != nil && !m.g.withinDeadline(e) {
		m.endEpoch(ctx, "the member Lease was not renewed within the renew deadline", "renewDeadline", cfg.RenewDeadline)
	}
	if m.number != 0 {
		m.checkOwn(ctx)
	}
	if m.number == 0 {
		if len(m.running) > 0 {
			return cfg.RetryPeriod // each shard's return wakes the loop
		}
		if wait, joined := m.join(ctx); !joined {
			return wait
		}
	}

	me := shard.Owner{Member: cfg.Identity, Epoch: m.number}
	granted, letGo := shard.Mine(m.last, me)
	for s, st := range m.running {
		switch {
		case st.stopping:
		case letGo[s] && granted[s] == st.Token:
			m.stop(ctx, st, true, "asked to let it go")
		case granted[s] != st.Token:
			m.stop(ctx, st, false, "no longer granted")
		}
	}
	for s, t := range m.released {
		if granted[s] != t {
			delete(m.released, s) // the controller has taken the release in
		}
	}
	pending := map[int]int64{}
	for s, t := range granted {
		m.highest = max(m.highest, t)
		switch {
		case m.running[s] != nil || m.released[s] == t:
		case letGo[s]:
			// Asked back before it started: let go at once, without
			// acting on it, or the move waits for this epoch's end.
			m.released[s] = t
		default:
			pending[s] = t
		}
	}
	m.g.publish(m.last.Count, m.running)

	now := cfg.Clock.Now()
	if now.Before(m.retryAt) {
		return m.next(now, m.retryAt)
	}
	acting, released := m.annotations(pending)
	due := m.lastAttempt.IsZero() || !now.Before(m.lastAttempt.Add(cfg.RetryPeriod))
	if due || m.wrote == nil || m.wrote.Annotations[shard.ActingAnnotation] != acting || m.wrote.Annotations[shard.ReleasedAnnotation] != released {
		sent, ok := m.write(ctx, cfg.Identity, m.number, acting, released)
		// Recorded on the member Lease within the renew deadline: the
		// granted shards may start.
		if ok && m.number != 0 && m.c.since(sent) < cfg.RenewDeadline && len(pending) > 0 {
			started := make([]*shardTerm, 0, len(pending))
			for s, t := range pending {
				started = append(started, m.newShard(ctx, s, t))
			}
			// Published before the work starts, so that the work finds
			// its shard in Acting and Owns.
			m.g.publish(m.last.Count, m.running)
			for _, st := range started {
				m.start(st)
			}
		}
	}
	return m.next(cfg.Clock.Now(), m.lastAttempt.Add(cfg.RetryPeriod), m.retryAt)
}

// next is the wait until the earliest of instants and the epoch's renew
// deadline.
func (m *member) next(now time.Time, instants ...time.Time) time.Duration {
	if e := m.g.epoch.Load(); e != nil {
		instants = append(instants, now.Add(m.c.cfg.RenewDeadline-m.c.since(e.renewedAt)))
	}
	return lead.UntilNext(now, instants...)
}

// readGroup takes in the group Lease if it changed and can be read.
func (m *member) readGroup(ctx context.Context) {
	gl := m.group.current()
	if gl == nil || gl.ResourceVersion == m.lastRV {
		return
	}
	m.lastRV = gl.ResourceVersion
	if !shard.HasGroup(gl.Annotations) {
		// Created again by hand, or stripped: it grants nothing and takes
		// nothing back, as when it is deleted. cle-controller writes the
		// group back.
		klog.FromContext(ctx).Info("The group Lease carries no group; acting on the last one read until the controller writes it back")
		return
	}
	g, err := shard.ParseGroup(gl.Annotations)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot read the group Lease; acting on the last one read until the controller writes another")
		return
	}
	if g.Count != m.last.Count && g.Count != 0 && g.Count != m.g.shards {
		klog.FromContext(ctx).Info("The group's shard count in effect differs from this replica's; acting under the group's until every replica declares the same",
			"inEffect", g.Count, "declared", m.g.shards)
	}
	m.last = g
}

// current is the member Lease as last seen or written. A deletion is
// learned from the next write, which the server refuses: the watch may not
// show this process's own creation yet.
func (m *member) current() *coordinationv1.Lease {
	if cur := m.own.current(); cur != nil {
		return cur
	}
	return m.wrote
}

// checkOwn ends the epoch when somebody else wrote the member Lease: renewed
// in another epoch or by another process. An edit that left this process's
// renewal in place (an annotation added by hand) is taken as the base of the
// next write.
func (m *member) checkOwn(ctx context.Context) {
	cur := m.current()
	switch {
	case m.wrote == nil || cur.ResourceVersion == m.wrote.ResourceVersion:
	case lead.HolderOf(cur) != m.c.cfg.Identity || int64(ptr.Deref(cur.Spec.LeaseTransitions, 0)) != m.number ||
		!lead.RenewTimeOf(cur).Equal(lead.RenewTimeOf(m.wrote)):
		klog.FromContext(ctx).Error(nil, "Another process wrote the member Lease; Identity must be unique among the replicas of a group",
			"holder", lead.HolderOf(cur), "epoch", ptr.Deref(cur.Spec.LeaseTransitions, 0))
		m.endEpoch(ctx, "another process wrote the member Lease")
	default:
		m.wrote = cur
	}
}

// join starts an epoch: it takes the member Lease with an epoch above every
// one it has seen, once no earlier process of this identity can be acting
// on it. joined is false, with when to look again, when it did not.
func (m *member) join(ctx context.Context) (wait time.Duration, joined bool) {
	cfg := &m.c.cfg
	logger := klog.FromContext(ctx)
	now := cfg.Clock.Now()
	cur := m.current()
	mine := m.wrote != nil && cur != nil && cur.ResourceVersion == m.wrote.ResourceVersion
	if cur != nil && lead.HolderOf(cur) != "" && !mine {
		// An earlier process of this identity (or one running beside this
		// one) renewed it: it may still act on shards until it has stayed
		// unchanged for a lease duration.
		if cur.ResourceVersion != m.waitingOn {
			m.waitingOn, m.waitingSince = cur.ResourceVersion, now
			logger.Info("The member Lease was renewed by an earlier process of this replica; waiting for it to stay unchanged for a lease duration",
				"holder", lead.HolderOf(cur), "epoch", ptr.Deref(cur.Spec.LeaseTransitions, 0), "leaseDuration", cfg.LeaseDuration)
		}
		if waited := cfg.Clock.Since(m.waitingSince); waited < cfg.LeaseDuration {
			return cfg.LeaseDuration - waited, false
		}
	}
	number := m.previous
	if cur != nil {
		number = max(number, int64(ptr.Deref(cur.Spec.LeaseTransitions, 0)))
		if a, err := shard.ParseActing(cur.Annotations[shard.ActingAnnotation]); err == nil {
			m.highest = max(m.highest, a.Highest)
		}
	}
	for _, o := range m.last.Owners {
		if o.Member == cfg.Identity {
			number = max(number, o.Epoch)
		}
	}
	number++
	clear(m.released)
	acting, released := m.annotations(nil)
	sent, ok := m.write(ctx, cfg.Identity, number, acting, released)
	if !ok {
		return m.next(now, m.retryAt, now.Add(cfg.RetryPeriod)), false
	}
	if m.c.since(sent) >= cfg.RenewDeadline {
		return time.Millisecond, false // taken too late to act on; the next join starts another epoch at once
	}
	m.number = number
	epochCtx, end := context.WithCancel(context.WithoutCancel(ctx))
	m.g.epoch.Store(&epoch{number: number, renewedAt: sent, ctx: epochCtx, end: end})
	logger.Info("Joined the shard group", "epoch", number, "declaredShards", m.g.shards)
	return 0, true
}

// annotations are the member Lease's acting and released annotations with
// the shards running and pending.
func (m *member) annotations(pending map[int]int64) (acting, released string) {
	shards := maps.Clone(pending)
	for s, st := range m.running {
		shards[s] = st.Token
	}
	if shards == nil {
		shards = map[int]int64{}
	}
	return shard.Acting{Count: m.last.Count, Highest: m.highest, Shards: shards}.Encode(), shard.EncodeReleased(m.released)
}

// write writes the member Lease, creating it if needed, with holder, epoch
// and annotations, conditional on the version last seen. A renewal that
// succeeds extends the epoch; ok is false when the write failed (logged; the
// next attempt waits a retry period unless the Lease changed under it).
func (m *member) write(ctx context.Context, holder string, number int64, acting, released string) (sent time.Time, ok bool) {
	cfg := &m.c.cfg
	logger := klog.FromContext(ctx)
	sent = cfg.Clock.Now()
	m.lastAttempt = sent
	timeout := cfg.RenewDeadline
	if e := m.g.epoch.Load(); e != nil && e.number == number {
		timeout -= m.c.since(e.renewedAt)
	}
	reqCtx, cancel := m.c.withTimeout(ctx, timeout)
	defer cancel()

	base := m.current()
	lease := m.leaseFor(base, holder, number, acting, released, sent)
	before := ""
	if stored, ok := m.own.stored(); ok {
		before = stored.ResourceVersion
	}
	var written *coordinationv1.Lease
	var err error
	if base == nil {
		written, err = m.leases.Create(reqCtx, lease)
	} else {
		written, err = m.leases.Update(reqCtx, lease)
		if apierrors.IsConflict(err) {
			// Retried once on a fresh read if this process's renewal is
			// still the one on it (somebody edited an annotation).
			var fresh *coordinationv1.Lease
			if fresh, err = m.leases.Get(reqCtx, m.name); err == nil {
				m.own.written.Remember(before, fresh)
				if m.wrote != nil && lead.RenewTimeOf(fresh).Equal(lead.RenewTimeOf(m.wrote)) {
					written, err = m.leases.Update(reqCtx, m.leaseFor(fresh, holder, number, acting, released, sent))
				} else {
					return sent, false // the next step finds out who wrote it
				}
			}
		}
	}
	m.c.metrics.observeRenewal(cfg.Clock.Since(sent).Seconds(), err)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		if m.number != 0 {
			m.endEpoch(ctx, "the member Lease was deleted")
		}
		m.wrote = nil
		return sent, false
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
		return sent, false // the watch brings the other version and wakes the loop
	default:
		m.retryAt = cfg.Clock.Now().Add(cfg.RetryPeriod)
		if ctx.Err() == nil {
			logger.Error(err, "Writing the member Lease failed; retrying", "retryPeriod", cfg.RetryPeriod, "epoch", number)
		}
		return sent, false
	}
	m.own.written.Remember(before, written)
	m.wrote, m.retryAt = written, time.Time{}
	if e := m.g.epoch.Load(); e != nil && e.number == number && sent.After(e.renewedAt) && m.c.since(sent) < cfg.RenewDeadline {
		renewed := *e
		renewed.renewedAt = sent
		m.g.epoch.Store(&renewed)
	}
	return sent, true
}

// leaseFor is base (nil: a new member Lease) as a write at now makes it.
func (m *member) leaseFor(base *coordinationv1.Lease, holder string, number int64, acting, released string, now time.Time) *coordinationv1.Lease {
	cfg := &m.c.cfg
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: m.name}}
	if base != nil {
		lease = base.DeepCopy()
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[shard.GroupAnnotation] = cfg.LeaseName
	lease.Annotations[shard.ActingAnnotation] = acting
	if released == "" {
		delete(lease.Annotations, shard.ReleasedAnnotation)
	} else {
		lease.Annotations[shard.ReleasedAnnotation] = released
	}
	renew := metav1.NewMicroTime(lead.RenewTimeFor(now, lead.RenewTimeOf(base)))
	if base == nil || int64(ptr.Deref(base.Spec.LeaseTransitions, 0)) != number || lead.HolderOf(base) != holder {
		lease.Spec.AcquireTime = &renew
	}
	lease.Spec.HolderIdentity = ptr.To(holder)
	if holder == "" {
		lease.Spec.HolderIdentity = nil
	}
	lease.Spec.LeaseTransitions = ptr.To(int32(number))
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(cfg.LeaseDuration / time.Second))
	lease.Spec.RenewTime = &renew
	proof.Stamp(lease, m.c.process)
	return lease
}

// newShard records shard s, granted with token, as running in the current
// epoch; start then runs its work.
func (m *member) newShard(ctx context.Context, s int, token int64) *shardTerm {
	e := m.g.epoch.Load()
	st := &shardTerm{Shard: Shard{Index: s, Count: m.last.Count, Token: token}, group: m.g, epoch: e.number, done: make(chan struct{})}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "shard", s, "token", token)
	st.ctx, st.end = context.WithCancel(klog.NewContext(context.WithValue(e.ctx, shardKey{}, st), logger))
	m.running[s] = st
	logger.V(2).Info("Started acting on a shard", "count", st.Count, "epoch", e.number)
	return st
}

// start runs the work of st; its return wakes the loop.
func (m *member) start(st *shardTerm) {
	go func() {
		defer signal(m.wake)
		defer close(st.done)
		m.g.onStarted(st.ctx, st.Shard)
	}()
}

// stop tells a shard's work to stop; release says whether to release the
// shard once it has returned.
func (m *member) stop(ctx context.Context, st *shardTerm, release bool, why string) {
	st.end()
	st.stopping, st.release = true, release
	klog.FromContext(ctx).V(2).Info("Stopping a shard: "+why, "shard", st.Index, "token", st.Token)
}

// reap forgets the shards whose work has returned after they were told to
// stop, and releases those it was asked to let go of.
func (m *member) reap(ctx context.Context) {
	for s, st := range m.running {
		if !st.stopping {
			continue
		}
		select {
		case <-st.done:
		default:
			continue
		}
		delete(m.running, s)
		if st.release && st.epoch == m.number {
			m.released[s] = st.Token
		}
		klog.FromContext(ctx).V(2).Info("Stopped acting on a shard", "shard", s, "token", st.Token, "released", st.release)
	}
}

// endEpoch stops every shard at once: the epoch's context ends, so that
// guarded writes are refused from now on. The next epoch starts once every
// shard's work has returned.
func (m *member) endEpoch(ctx context.Context, why string, kv ...any) {
	if e := m.g.epoch.Load(); e != nil {
		e.end()
	}
	m.g.epoch.Store(nil)
	for _, st := range m.running {
		if !st.stopping {
			st.end()
			st.stopping, st.release = true, false
		}
	}
	if m.number != 0 {
		klog.FromContext(ctx).Info("Stopped acting on every shard: "+why, append([]any{"epoch", m.number, "shards", len(m.running)}, kv...)...)
		m.previous, m.number = m.number, 0
	}
	m.g.publish(m.last.Count, m.running)
}

// release lets the member Lease go on shutdown, once every shard's work has
// returned, if this process wrote it last: the controller frees its shards at
// once instead of after the member Lease expires.
func (m *member) release(ctx context.Context) {
	cur := m.current()
	if m.wrote == nil || cur == nil || cur.ResourceVersion != m.wrote.ResourceVersion {
		return
	}
	clear(m.released)
	acting, released := m.annotations(nil)
	if _, ok := m.write(ctx, "", m.previous, acting, released); ok {
		klog.FromContext(ctx).Info("Released the member Lease", "epoch", m.previous)
	}
}
