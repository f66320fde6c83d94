package controller

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Options configure a Controller. Zero values take the defaults below.
type Options struct {
	// Strategies are the strategies this controller elects for. A Lease whose
	// candidates ask for any other strategy is left alone: no pings, no
	// writes. Default: strategy.NewDefaultRegistry().
	Strategies *strategy.Registry
	// PingTimeout is how long a pinged candidate has to answer before it is
	// excluded as unresponsive (until it writes again). Default 5s.
	PingTimeout time.Duration
	// CandidateFreshness is how long after the controller saw a candidate
	// created or renewed it counts as alive without a ping. Default 15s.
	CandidateFreshness time.Duration
	// CandidateTTL is how long a candidate may go without renewing before it
	// is ignored and garbage-collected. Default 30m.
	CandidateTTL time.Duration
	// UnresponsiveCandidateTTL is how long a candidate that did not answer a
	// ping may go without renewing before it is deleted, so that a
	// LeaseCandidate left behind by a process that is gone costs no later
	// election a ping (see gc.go). Default 10m, twice the candidates' renew
	// interval; no effect above CandidateTTL.
	UnresponsiveCandidateTTL time.Duration
	// LeaseDuration is the leaseDurationSeconds of Leases the controller
	// creates, and the duration assumed for a Lease that has none. Default
	// 15s, client-go's default.
	LeaseDuration time.Duration
	// ElectionGather is the gathering window before the first election of a
	// Lease that has never had a holder: measured from the first candidate
	// seen, and closed early once no candidate has joined for a fifth of it;
	// both are longer by how late the controller's own writes of the last
	// seconds showed in its watch (WatchLag.Spread), since a loaded server
	// delivers registrations made together that far apart. Candidates that
	// start together then elect the best of them first, instead of the
	// first to register leading until it is preempted; the
	// price is that much delay on a Lease's very first election only.
	// Elections of vacant or expired Leases with a history are never
	// delayed. Default 1s; NoElectionGather turns it off.
	ElectionGather time.Duration
	// KeepDepartedMembers keeps the member Leases of replicas that left a
	// shard group. By default the controller deletes one once its replica
	// has no LeaseCandidate, its epoch has ended, the group names it for no
	// shard and another replica's member Lease records as high a token
	// (docs/design.md, "Shard groups", rule 8), which needs delete on
	// leases; without it, a group whose replicas get new names (a
	// Deployment's Pods) collects a member Lease per replica ever started.
	KeepDepartedMembers bool
	// UnseenHolderWait is how long after it first saw them the controller
	// waits before it creates a Lease whose candidates were there when it
	// started: a holder of that Lease, deleted just before this controller
	// started (during a failover, say), acts on until its renewals fail, and
	// no one else may be named before then. Leases the controller saw, and
	// Leases whose candidates all came later, do not wait. Default: the
	// LeaseDuration; NoUnseenHolderWait turns it off.
	UnseenHolderWait time.Duration
	// UnsteadyWindow answers stale priorities: a candidate that lost
	// unsteadyLosses terms within it without releasing them (its Lease
	// expired, or its process exited) is not preferred over a live holder
	// until the older of those losses leaves the window, so that a candidate
	// ranked first that keeps failing (crash-looping, cut off now and then)
	// does not take the Lease from a sound holder again and again. It is
	// still elected when there is no live holder, and it is never kept from
	// a holder that emulates a newer version than it does: the rule only
	// ever holds back a preference (a priority), never the version order.
	// Nor is a candidate ranked below it preferred over the live holder
	// meanwhile when it runs newer versions than the unsteady one (which
	// would take the Lease from it at once), unless the unsteady one is
	// unresponsive.
	// The losses are this controller's memory: a replica that takes over
	// starts without them. Default 5m; NoUnsteadyWindow turns it off.
	UnsteadyWindow time.Duration
	// PingRate bounds the pings sent per second, across all Leases, and
	// PingBurst how many may go at once (see pingBudget). Defaults 100 and
	// 200: below the default client rate of cle-controller (300 requests/s),
	// so that Lease writes always have room.
	PingRate  float64
	PingBurst int
	// Holding reports whether this replica may still act as the active one
	// by its own leader election: the last successful renewal of its own
	// lock was sent within that election's renew deadline. A replica that
	// was paused past its lock, or cut off from the API, may run steps
	// before its elector notices and stops it; with Holding, such a step
	// makes no Lease write (creates carry no precondition, and a standby may
	// have elected meanwhile) and looks again shortly. Nil: always.
	Holding func() bool
	// ElectsBuiltin reports whether this controller elects the Leases whose
	// strategy kube-apiserver's election controller elects too
	// (strategy.Builtin: OldestEmulationVersion). In native mode, beside
	// that controller, it is true only while this replica holds the lock
	// they share (kube-system/leader-election-controller) by the same rule
	// as Holding; while it is false such Leases are left alone as another
	// controller's, unpinged and unwritten, and this controller elects only
	// the Leases of cle's own strategies. Call Controller.Reconsider when it
	// turns true. Nil: always true.
	ElectsBuiltin func() bool
	// TokenBound names a Lease, in the namespace of the controller's own
	// lock, whose leaseTransitions no fencing token this controller (or any
	// before it with the same TokenBound) handed out goes above: read before
	// the first term is numbered, every term numbered above it, and raised
	// before a token above it is handed out. With it a Lease deleted and
	// created again continues its tokens above every earlier one, whatever
	// the replica that elects next remembers (see tokenBound). Empty: off,
	// tokens then rise across a deletion only as far as this controller and
	// the candidates remember.
	TokenBound types.NamespacedName
	// Clock is the only time source of the controller. Default: real time.
	Clock clock.WithTicker
	// Recorder emits Events on Leases. Default: none.
	Recorder events.EventRecorder
	// Metrics receives the controller's metrics. Default: a new, unregistered
	// set.
	Metrics *Metrics
	// nudge steers the places where timing decides (package nudge); the
	// simulation sets it. Nil: never.
	nudge nudge.Hook
	// WatchLag measures how late the Lease watch delivers changes; a
	// holder's Lease expires only that much later (see WatchLag). Pass the
	// same one to the controllers of successive leadership terms, and feed
	// it the renewals of the controller's own lock. Default: a new one, fed
	// by the controller's own writes only.
	WatchLag *WatchLag
}

const (
	DefaultPingTimeout        = 5 * time.Second
	DefaultCandidateFreshness = 15 * time.Second
	DefaultCandidateTTL       = 30 * time.Minute
	// DefaultUnresponsiveCandidateTTL is how long a candidate that did not
	// answer a ping may go without renewing (see gc.go).
	DefaultUnresponsiveCandidateTTL = 10 * time.Minute
	DefaultLeaseDuration            = 15 * time.Second
	DefaultElectionGather           = time.Second
	DefaultPingRate                 = 100
	DefaultPingBurst                = 200

	// NoElectionGather as Options.ElectionGather elects a new Lease as soon
	// as its first candidate is known to be the best alive.
	NoElectionGather time.Duration = -1
	// DefaultUnsteadyWindow is Options.UnsteadyWindow's default.
	DefaultUnsteadyWindow = 5 * time.Minute
	// NoUnsteadyWindow as Options.UnsteadyWindow prefers the best candidate
	// over a live holder however often its terms ended unreleased.
	NoUnsteadyWindow time.Duration = -1
	// NoUnseenHolderWait as Options.UnseenHolderWait creates a Lease whose
	// candidates were there when the controller started as soon as the best
	// of them is known.
	NoUnseenHolderWait time.Duration = -1
)

// Validate reports every problem with the options, as New would.
func (o Options) Validate() error {
	return o.complete()
}

func (o *Options) complete() error {
	if o.Strategies == nil {
		o.Strategies = strategy.NewDefaultRegistry()
	}
	setDefault(&o.PingTimeout, DefaultPingTimeout)
	setDefault(&o.CandidateFreshness, DefaultCandidateFreshness)
	setDefault(&o.CandidateTTL, DefaultCandidateTTL)
	setDefault(&o.UnresponsiveCandidateTTL, DefaultUnresponsiveCandidateTTL)
	setDefault(&o.LeaseDuration, DefaultLeaseDuration)
	setDefault(&o.ElectionGather, DefaultElectionGather)
	setDefault(&o.UnsteadyWindow, DefaultUnsteadyWindow)
	if o.UnseenHolderWait == 0 && o.LeaseDuration > 0 {
		o.UnseenHolderWait = o.LeaseDuration
	}
	if o.PingRate == 0 {
		o.PingRate = DefaultPingRate
	}
	if o.PingBurst == 0 {
		o.PingBurst = DefaultPingBurst
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Recorder == nil {
		o.Recorder = &events.FakeRecorder{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.WatchLag == nil {
		o.WatchLag = &WatchLag{}
	}
	var errs []error
	for name, d := range map[string]time.Duration{
		"ping timeout": o.PingTimeout, "candidate freshness": o.CandidateFreshness,
		"candidate TTL": o.CandidateTTL, "lease duration": o.LeaseDuration,
		"unresponsive candidate TTL": o.UnresponsiveCandidateTTL,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (zero takes the default), got %s", name, d))
		}
	}
	if o.PingRate < 0 || o.PingBurst < 0 {
		errs = append(errs, fmt.Errorf("ping rate and burst must not be negative (zero takes the default), got %v and %d", o.PingRate, o.PingBurst))
	}
	if o.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease duration must be a whole number of seconds, got %s", o.LeaseDuration))
	}
	if o.ElectionGather < 0 && o.ElectionGather != NoElectionGather {
		errs = append(errs, fmt.Errorf("election gather must not be negative (zero takes the default, NoElectionGather turns it off), got %s", o.ElectionGather))
	}
	if o.UnsteadyWindow < 0 && o.UnsteadyWindow != NoUnsteadyWindow {
		errs = append(errs, fmt.Errorf("unsteady window must not be negative (zero takes the default, NoUnsteadyWindow turns it off), got %s", o.UnsteadyWindow))
	}
	if o.UnseenHolderWait < 0 && o.UnseenHolderWait != NoUnseenHolderWait {
		errs = append(errs, fmt.Errorf("unseen holder wait must not be negative (zero takes the default, NoUnseenHolderWait turns it off), got %s", o.UnseenHolderWait))
	}
	if o.CandidateTTL <= o.CandidateFreshness {
		errs = append(errs, fmt.Errorf("candidate TTL (%s) must be longer than candidate freshness (%s)", o.CandidateTTL, o.CandidateFreshness))
	}
	return errors.Join(errs...)
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
