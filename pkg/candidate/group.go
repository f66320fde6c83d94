package candidate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/pkg/shard"
)

// GroupConfig configures a replica of a shard group (docs/design.md, "Shard
// groups"): a component whose work is split into shards that several
// replicas act on at once, each shard by one replica at a time.
type GroupConfig struct {
	// Config is the replica's candidacy, as a Candidate's: LeaseName is the
	// group's name (its group Lease, which cle-controller writes), Identity
	// the replica's (its LeaseCandidate, and its member Lease
	// "<group>.<identity>", which it renews every RetryPeriod). Strategy is
	// shard.StrategyShardsOldestEmulationVersion (the default: during an
	// upgrade only the replicas of the oldest emulation version act) or
	// shard.StrategyShards. Callbacks are not used; ReleaseOnCancel releases
	// the member Lease on shutdown, once every shard has stopped, so that
	// the shards go to the other replicas at once.
	Config
	// Shards is the shard count this replica's code is built for, 1 to
	// shard.MaxShards. It is declared on the LeaseCandidate; the count in
	// effect is the group's (Shard.Count), which changes only once every
	// live replica declares the same new count.
	Shards int
	// OnShardStarted runs, on a goroutine of its own, for each shard this
	// replica is granted. Its context ends when the shard must stop: the
	// shard is moved to another replica, the member Lease was not renewed
	// within the renew deadline, or Run is shutting down. The shard goes to
	// another replica only after OnShardStarted has returned, so it must
	// return promptly once ctx is done. ShardFrom(ctx) is the shard, with
	// its fencing token, and the clients of WrapConfig let writes made on ctx
	// (or a context derived from it) through while the shard is acted on.
	// Returning before ctx ends does not give the shard up. Required.
	OnShardStarted func(ctx context.Context, s Shard)
}

// Shard is a shard a replica acts on.
type Shard struct {
	// Index is the shard, 0 to Count-1.
	Index int
	// Count is the group's shard count in effect when the shard was granted.
	Count int
	// Token is the grant's fencing token: every grant of a shard has a
	// higher one than the shard's earlier grants.
	Token int64
}

// Contains reports whether key belongs to s: ShardOf(key, s.Count) is s.
func (s Shard) Contains(key string) bool { return ShardOf(key, s.Count) == s.Index }

// ShardOf is the shard of n that key belongs to (see shard.Of): every replica
// computes the same one. Use the group's count in effect (Shard.Count, or
// Group.Owns), which may differ from the one this replica declared while the
// replicas change it.
func ShardOf(key string, n int) int { return shard.Of(key, n) }

// Group is a replica of a shard group. Create it with NewGroup and start it
// with Run; its methods are safe for concurrent use.
//
// It acts on a shard only while all of these hold: the last group Lease it
// saw grants the shard to it, in its current epoch, with the shard's token;
// its member Lease records the shard with that token (so that a controller
// that lost the group Lease rebuilds it without granting the shard again);
// it has not let the shard go; and its last renewal of the member Lease is
// within the renew deadline. When any fails the shard's context ends, its
// guarded writes are refused, and only once its work has returned does the
// replica tell the controller that it let the shard go.
type Group struct {
	c         *Candidate
	shards    int
	onStarted func(ctx context.Context, s Shard)
	started   atomic.Bool

	// epoch is the member Lease's epoch this process acts in, nil between
	// epochs; a renewal publishes a copy with a later renewedAt.
	epoch atomic.Pointer[epoch]
	// acting is what the replica acts on, swapped whole by the member loop.
	acting atomic.Pointer[actingSet]
	// wake makes the member loop step at once.
	wake chan struct{}
}

// NewGroup validates cfg, fills in its defaults and returns a Group. Every
// problem with cfg is reported at once, wrapped in ErrInvalidConfig.
func NewGroup(cfg GroupConfig) (*Group, error) {
	metricsOn := cfg.Metrics
	cfg.Metrics = nil // the group registers its own
	var more []error
	if cfg.Shards < 1 || cfg.Shards > shard.MaxShards {
		more = append(more, fmt.Errorf("Shards must be 1 to %d, got %d", shard.MaxShards, cfg.Shards))
	}
	if cfg.OnShardStarted == nil {
		more = append(more, errors.New("OnShardStarted is required"))
	}
	if err := cfg.complete(forGroup, more...); err != nil {
		return nil, err
	}
	if name := shard.MemberLeaseName(cfg.LeaseName, cfg.Identity); len(name) > 253 {
		return nil, fmt.Errorf("%w: the member Lease's name %q (the group's and the Identity) is longer than 253 characters", ErrInvalidConfig, name)
	}
	c, err := newCandidate(cfg.Config, selfRenewal{})
	if err != nil {
		return nil, err
	}
	c.annotations = map[string]string{shard.DeclaredAnnotation: fmt.Sprint(cfg.Shards)}
	g := &Group{c: c, shards: cfg.Shards, onStarted: cfg.OnShardStarted, wake: make(chan struct{}, 1)}
	g.acting.Store(&actingSet{})
	if metricsOn != nil {
		if c.metrics, err = newGroupMetrics(g, metricsOn); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return g, nil
}

// Identity is the name of this replica.
func (g *Group) Identity() string { return g.c.cfg.Identity }

// Run takes part in the group until ctx is done, then stops every shard,
// waits for their work to return, deletes the LeaseCandidate and releases the
// member Lease (as configured) before it returns. It retries API errors for
// as long as ctx lives and returns an error only when it cannot run at all.
func (g *Group) Run(ctx context.Context) error {
	c := g.c
	if !g.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	ctx = c.withLogger(ctx)
	logger := klog.FromContext(ctx)
	acc, writer, err := c.connect(ctx)
	if acc == nil || err != nil {
		return err
	}
	m, reg := newMember(g, acc), newRegistrar(c, acc, writer)
	stopInformers, synced := runInformers(ctx, &m.own, &m.group, &reg.watched)
	defer stopInformers()
	if !synced {
		return nil
	}
	if err := c.start(ctx, acc, reg); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		reg.run(ctx)
	}()
	// The member loop returns once ctx is done and every shard's work has
	// returned.
	m.run(ctx)
	<-done

	ctx = context.WithoutCancel(ctx)
	if boolOr(c.cfg.DeleteCandidateOnExit, true) {
		reg.delete(ctx)
	}
	if boolOr(c.cfg.ReleaseOnCancel, true) {
		m.release(ctx)
	}
	logger.V(2).Info("Group replica stopped")
	return nil
}

// Acting returns the shards this replica acts on now, with their tokens.
func (g *Group) Acting() map[int]Shard {
	out := map[int]Shard{}
	for i, st := range g.acting.Load().shards {
		if g.live(st) {
			out[i] = st.Shard
		}
	}
	return out
}

// Owns reports whether this replica acts now on the shard key belongs to,
// under the group's count in effect, and which shard that is.
func (g *Group) Owns(key string) (Shard, bool) {
	set := g.acting.Load()
	if set.count == 0 {
		return Shard{}, false
	}
	st := set.shards[ShardOf(key, set.count)]
	if st == nil || !g.live(st) {
		return Shard{}, false
	}
	return st.Shard, true
}

// ShardContext returns parent joined to the context of the shard key belongs
// to, when this replica acts on it: the result ends when either does,
// ShardFrom reads the shard from it, and the clients of WrapConfig let its
// writes through while the shard is acted on. Call cancel when done with it.
// ok is false, with parent, when the replica does not act on key's shard.
func (g *Group) ShardContext(parent context.Context, key string) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	set := g.acting.Load()
	var st *shardTerm
	if set.count > 0 {
		st = set.shards[ShardOf(key, set.count)]
	}
	if st == nil || !g.live(st) {
		return parent, func() {}, false
	}
	ctx, cancelCtx := context.WithCancel(context.WithValue(parent, shardKey{}, st))
	stop := context.AfterFunc(st.ctx, cancelCtx)
	return ctx, func() {
		stop()
		cancelCtx()
	}, true
}

// ShardFrom returns the shard that ctx was given for: the context of
// OnShardStarted, or one ShardContext returned, or one derived from either.
// It keeps answering after the shard stopped, so work can stamp its writes
// with its own grant's token. ok is false for any other context.
func ShardFrom(ctx context.Context) (Shard, bool) {
	st, ok := ctx.Value(shardKey{}).(*shardTerm)
	if !ok {
		return Shard{}, false
	}
	return st.Shard, true
}

// WrapConfig returns a copy of cfg whose clients refuse mutating requests
// with ErrNotLeader unless they are made on the context of a shard this
// replica acts on (OnShardStarted's, ShardContext's, or one derived from
// either) while it acts on it. Requests that change nothing pass, as with
// Candidate.WrapConfig, and a write let through is cancelled when the shard
// stops or its renew deadline passes. It returns nil for a nil cfg.
func (g *Group) WrapConfig(cfg *rest.Config) *rest.Config { return wrapConfig(cfg, g) }

func (g *Group) requestContext(parent context.Context) (context.Context, func(), bool) {
	st, ok := parent.Value(shardKey{}).(*shardTerm)
	if !ok || st.group != g {
		return nil, nil, false
	}
	e, ok := g.liveEpoch(st)
	if !ok {
		return nil, nil, false
	}
	ended := fmt.Errorf("%w: %s stopped acting on shard %d while the request was in flight", ErrNotLeader, g.c.cfg.Identity, st.Index)
	ctx, release := g.c.boundedRequest(parent, st.ctx, g.c.cfg.RenewDeadline-g.c.since(e.renewedAt), ended)
	return ctx, release, true
}

func (g *Group) refuse(req *http.Request) error {
	g.c.metrics.refused()
	what := "no shard's context"
	if st, ok := req.Context().Value(shardKey{}).(*shardTerm); ok {
		what = fmt.Sprintf("shard %d, which it does not act on", st.Index)
	}
	return fmt.Errorf("%w: %s refused %s %s made on %s", ErrNotLeader, g.c.cfg.Identity, req.Method, req.URL.Path, what)
}

// live reports whether st may be acted on now: its context has not ended,
// and the epoch it was started in is current and renewed within the renew
// deadline, on the wall and the monotonic clock. Finding the deadline passed
// ends the epoch's context, and with it every shard's, and wakes the member
// loop, as a leader's term is ended by the first reader that finds it
// lapsed.
func (g *Group) live(st *shardTerm) bool {
	_, ok := g.liveEpoch(st)
	return ok
}

// liveEpoch is live, with the epoch st acts in.
func (g *Group) liveEpoch(st *shardTerm) (*epoch, bool) {
	if st == nil || st.ctx.Err() != nil {
		return nil, false
	}
	e := g.epoch.Load()
	if e == nil || e.number != st.epoch {
		return nil, false
	}
	if g.withinDeadline(e) {
		return e, true
	}
	e.end()
	signal(g.wake)
	return nil, false
}

// withinDeadline reports whether e has not ended and its last renewal is
// within the renew deadline.
func (g *Group) withinDeadline(e *epoch) bool {
	return e.ctx.Err() == nil && g.c.since(e.renewedAt) < g.c.cfg.RenewDeadline
}

// epoch is one epoch of the member Lease as the member loop publishes it.
type epoch struct {
	number    int64
	renewedAt time.Time // when its last successful renewal was sent
	// ctx is the parent of every shard's context, ended when the epoch
	// ends.
	ctx context.Context
	end context.CancelFunc
}

// actingSet is what the replica acts on, as the member loop publishes it:
// the group's count in effect and the started shards not told to stop.
type actingSet struct {
	count  int
	shards map[int]*shardTerm
}

// shardTerm is one shard acted on under one grant.
type shardTerm struct {
	Shard
	group *Group
	epoch int64
	ctx   context.Context
	end   context.CancelFunc
	// done is closed when OnShardStarted has returned.
	done chan struct{}
	// Owned by the member loop: stopping is set when the shard was told to
	// stop, release when it must be released once stopped.
	stopping, release bool
}

// shardKey is the context key of a shard's term.
type shardKey struct{}

// publish swaps in what the replica acts on.
func (g *Group) publish(count int, running map[int]*shardTerm) {
	set := &actingSet{count: count, shards: map[int]*shardTerm{}}
	for s, st := range running {
		if !st.stopping {
			set.shards[s] = st
		}
	}
	g.acting.Store(set)
}
