// Package candidate is the library a component imports to take part in
// coordinated leader election (KEP-4355): it registers the process as a
// LeaseCandidate, answers the election controller's pings, leads while the
// Lease names it and it keeps renewing, hands the Lease over when the
// controller prefers another candidate, and releases it on shutdown.
//
// Its central promise is that two processes never act as leader at once:
// IsLeader turns false before anybody else can be elected (the renew deadline
// is shorter than the lease duration others wait for, and it is checked on the
// clock at every call, so a process that wakes from a long pause or a suspend
// is not leader any more), leader work is stopped and waited for before the
// Lease is handed over or released, WrapConfig gives clients that refuse
// writes whenever this process is not leader and cancel those in flight when
// leadership ends, and every term has its own fencing token (Token, TokenFrom)
// for resources that can check it.
//
// The promise rests on two assumptions:
//
//   - Identity is unique among the candidates of a Lease. A second process
//     started with the same Identity is detected when it renews the Lease: a
//     leader that sees its Lease renewed by somebody else steps down and logs
//     an error, and a candidate does not take a Lease renewed under its name
//     until that Lease has stayed unchanged for a lease duration. Either way a
//     duplicated Identity is a misconfiguration to fix, not a supported mode.
//   - Whoever elects the next leader waits for the Lease to expire as this
//     process measures it. cle-controller judges expiry by its own
//     observation of renewals, so clock skew does not matter. The controller
//     built into kube-apiserver instead compares renewTime plus the lease
//     duration with its own clock: with it, a candidate whose clock is behind
//     the API server's by more than LeaseDuration - RenewDeadline (5s with the
//     defaults) may be replaced while IsLeader is still true. Keep clocks
//     synchronised well within that margin, or use cle-controller.
//
// A term's fencing token is the Lease's leaseTransitions as the term's first
// renewal writes it. cle-controller counts a term when it names the holder
// (and the library when it hands over), and the first renewal keeps that
// count when it is above every value this process saw on the Lease before;
// otherwise, as under the controller built into kube-apiserver, which counts
// nothing, the first renewal writes one above all of them. So one term is one
// number from its naming on, and while the Lease exists every term's token
// is above every earlier term's, whoever leads. Across a deletion of the
// Lease, what holds depends on what the election controller remembers:
//
//   - cle-controller carries leaseTransitions forward when it creates a Lease
//     again after a deletion, if the replica that does so saw the old Lease
//     (it remembers a Lease's count while it runs, and for the candidate TTL
//     after the last candidate left). A replica that took over after the
//     deletion starts the count over.
//   - The controller built into kube-apiserver (and any other that creates
//     the Lease with leaseTransitions 0) always starts the count over.
//
// When the count starts over, a process that saw the old Lease still starts
// its next term above it, but one started after the deletion has never seen
// the old count and may lead with a token below a deposed leader's: a
// resource that keeps the highest token it has seen would then refuse the new
// leader and accept the deposed one's late writes. Do not delete a Lease that
// a fenced resource depends on, or reset that resource's fence when you do.
//
// It works with cle-controller and with the controller built into
// kube-apiserver, in every API mode of package access, without knowing which.
package candidate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/internal/stepped"
	"github.com/cle-dev/cle/pkg/access"
)

// ErrAlreadyRunning is returned by Run when it is called a second time: a
// Candidate runs once.
var ErrAlreadyRunning = errors.New("candidate is already running or has run")

// ErrIdentityInUse is returned by Run when the LeaseCandidate its Identity
// names is the candidate of another Lease: a LeaseCandidate belongs to one
// Lease for good (its leaseName cannot change), so two components sharing
// an Identity in one namespace would fight over one object, and one of them
// would never lead. Give each its own Identity (the default, DefaultIdentity,
// includes the Lease's name).
var ErrIdentityInUse = errors.New("the Identity names the LeaseCandidate of another Lease")

// Candidate takes part in the election of one Lease. Create it with New and
// start it with Run; its methods are safe for concurrent use.
type Candidate struct {
	cfg Config
	// mode is who renews the Lease: this library, or an external elector.
	mode    renewalMode
	started atomic.Bool
	// running is true while Run runs.
	running atomic.Bool

	// state is the leadership the elector publishes (term.go); readers load
	// it, only the elector's loop stores it.
	state atomic.Pointer[leadership]
	// stepDownNow wakes the elector when a reader finds the term lapsed.
	stepDownNow chan struct{}
	// holder is the Lease's holder as last observed.
	holder atomic.Pointer[string]
	// held is the highest token a term of this process has had; the
	// registrar records it on the LeaseCandidate (see
	// access.HighestTokenAnnotation).
	held atomic.Int32
	// metrics are nil unless Config.Metrics is set.
	metrics *metrics
	// annotations are more annotations the registrar writes on the
	// LeaseCandidate (a group replica's declared shard count).
	annotations map[string]string
	// process is the process instance the kubelet will report exited, and
	// its Pod, set by start before the loops run (none without a proof of
	// death): the registrar registers it, the elector stamps its renewals
	// with it.
	process proof.Process
}

// New validates cfg, fills in its defaults and returns a Candidate. Every
// problem with cfg is reported at once, wrapped in ErrInvalidConfig.
func New(cfg Config) (*Candidate, error) {
	if err := cfg.complete(forCandidate); err != nil {
		return nil, err
	}
	return newCandidate(cfg, selfRenewal{})
}

func newCandidate(cfg Config, mode renewalMode) (*Candidate, error) {
	c := &Candidate{cfg: cfg, mode: mode, stepDownNow: make(chan struct{}, 1)}
	c.state.Store(&leadership{})
	c.holder.Store(new(string))
	if cfg.Metrics != nil {
		m, err := newMetrics(c, cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.metrics = m
	}
	return c, nil
}

// Identity is the name of this candidate.
func (c *Candidate) Identity() string { return c.cfg.Identity }

// IsLeader reports whether this process may act as leader now: it holds the
// Lease and has renewed it within the renew deadline. It is evaluated on the
// clock at each call, so it turns false at the deadline even if the process
// was paused or the renewal loop is stuck; the call that finds the deadline
// passed also ends the term, cancelling the leader context at once.
func (c *Candidate) IsLeader() bool {
	_, ok := c.liveTerm()
	return ok
}

// Leader is the holder of the Lease as last observed ("" when the Lease has
// no holder or has not been seen yet). It may be another process even while
// this one still finishes its leader work; use IsLeader to decide whether to
// act.
func (c *Candidate) Leader() string { return *c.holder.Load() }

// Token returns the fencing token of the term this process leads: the
// Lease's leaseTransitions as this process's first renewal of the term wrote
// it, above every value this process saw the Lease carry before the term
// (see the package documentation), so each term has its own token whoever
// named the holder, and a resource guarded by the Lease can reject writes
// carrying an older token. Across a deletion of the Lease that does not hold
// in every case (see the package documentation). It
// returns 0, false when this process is not leader. Leader work should prefer
// TokenFrom on its context, which keeps the token of its own term.
func (c *Candidate) Token() (int32, bool) {
	t, ok := c.liveTerm()
	if !ok {
		return 0, false
	}
	return t.token, true
}

// Run takes part in the election until ctx is done, then stops leader work,
// deletes the LeaseCandidate and releases the Lease (as configured) before it
// returns. It retries API errors for as long as ctx lives and returns an
// error only when it cannot run at all (it was already run, or the requested
// API mode is unavailable).
func (c *Candidate) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	c.running.Store(true)
	defer c.running.Store(false)
	defer c.mode.stopped()
	ctx = c.withLogger(ctx)
	logger := klog.FromContext(ctx)

	acc, writer, err := c.connect(ctx)
	if acc == nil || err != nil {
		return err // nil: ctx done before the API could be reached
	}

	el, reg := c.loops(acc, writer)

	// The informers outlive ctx: the shutdown steps read from them.
	stopInformers, synced := runInformers(ctx, &el.watched, &reg.watched)
	defer stopInformers()
	if !synced {
		return nil
	}
	if err := c.start(ctx, acc, reg); err != nil {
		return err
	}

	var loops sync.WaitGroup
	loops.Go(func() { reg.run(ctx) })
	// The elector returns once ctx is done and leader work has stopped.
	el.run(ctx)
	c.mode.stopped()
	loops.Wait()

	c.shutdown(context.WithoutCancel(ctx), el, reg)
	el.notifications.Wait()
	logger.V(2).Info("Candidate stopped")
	return nil
}

// connect reaches the API: it returns the access layer and the user name to
// record on the LeaseCandidate, or a nil layer when ctx ended first.
func (c *Candidate) connect(ctx context.Context) (access.Interface, string, error) {
	acc, clients, err := c.accessLayer(ctx)
	if err != nil || acc == nil {
		return nil, "", err
	}
	writer, ok := c.writer(ctx, clients)
	if !ok {
		return nil, "", nil // ctx done before the server answered
	}
	return acc, writer, nil
}

// runInformers runs the informers of objects until stop is called, which
// waits for them to return; they outlive ctx, so that the shutdown steps read
// from them. synced is false when ctx ended before every handler had seen
// its informer's initial list.
func runInformers(ctx context.Context, objects ...watchedObject) (stop func(), synced bool) {
	informerCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var running sync.WaitGroup
	for _, o := range objects {
		inf, _ := o.parts()
		running.Go(func() { inf.RunWithContext(informerCtx) })
	}
	stop = func() {
		cancel()
		running.Wait()
	}
	for _, o := range objects {
		_, done := o.parts()
		select {
		case <-ctx.Done():
			return stop, false
		case <-done.Done():
		}
	}
	return stop, true
}

// withLogger is ctx with the candidate's logger (Config.Logger, or ctx's),
// naming the Lease and the identity.
func (c *Candidate) withLogger(ctx context.Context) context.Context {
	base := klog.FromContext(ctx)
	if c.cfg.Logger.GetSink() != nil {
		base = c.cfg.Logger
	}
	return klog.NewContext(ctx, klog.LoggerWithValues(base,
		"lease", klog.KRef(c.cfg.Namespace, c.cfg.LeaseName), "identity", c.cfg.Identity))
}

// loops builds the elector and the registrar on acc, with their informers
// not started.
func (c *Candidate) loops(acc access.Interface, writer string) (*elector, *registrar) {
	el, reg := newElector(c, acc), newRegistrar(c, acc, writer)
	reg.seen = &el.seen
	el.termStarted = func() { signal(reg.wake) }
	return el, reg
}

// start is what happens once both informers have synced, before the loops
// run: a LeaseCandidate of this Identity that is another Lease's stops Run.
func (c *Candidate) start(ctx context.Context, acc access.Interface, reg *registrar) error {
	if lc := reg.current(); lc != nil && lc.Spec.LeaseName != c.cfg.LeaseName {
		return identityInUse(lc, &c.cfg)
	}
	c.process = c.writeMarker(ctx)
	klog.FromContext(ctx).V(2).Info("Candidate started", "binaryVersion", c.cfg.BinaryVersion,
		"emulationVersion", c.cfg.EmulationVersion, "strategy", c.cfg.Strategy, "mode", acc.Mode())
	return nil
}

// shutdown is what happens once the loops have stopped, leader work is
// stopped and IsLeader is false. The candidate goes first so that the
// controller cannot elect this process again once the Lease is released.
// Each step has its own timeouts, so a slow delete cannot use up the
// release's time.
func (c *Candidate) shutdown(ctx context.Context, el *elector, reg *registrar) {
	if boolOr(c.cfg.DeleteCandidateOnExit, true) {
		reg.delete(ctx)
	}
	if boolOr(c.cfg.ReleaseOnCancel, true) && el.mayLetGo() {
		el.release(ctx)
	}
}

// withTimeout is context.WithTimeout for requests, with the deadline also
// recorded as an instant of the library's clock, for a simulated server,
// whose time is that clock's (see stepped.WithDeadline): requests made on
// the context share one deadline.
func (c *Candidate) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, d)
	return stepped.WithDeadline(ctx, c.cfg.Clock.Now().Add(d)), cancel
}

// accessLayer returns the injected access layer, or detects one, retrying
// until ctx is done unless the requested mode is unavailable on the server.
// It also returns the clients it detected the layer with (none when the layer
// was injected).
func (c *Candidate) accessLayer(ctx context.Context) (access.Interface, access.Clients, error) {
	if c.cfg.access != nil {
		return c.cfg.access, access.Clients{}, nil
	}
	clients := c.cfg.Clients
	if clients.Kube == nil {
		var err error
		if clients, err = access.NewClients(c.cfg.RestConfig); err != nil {
			return nil, access.Clients{}, err
		}
	}
	var acc access.Interface
	err := c.retryUntil(ctx, func(ctx context.Context) (bool, error) {
		var err error
		acc, err = access.Detect(ctx, clients, c.cfg.APIMode)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, access.ErrNativeUnavailable):
			return false, err
		default:
			klog.FromContext(ctx).Error(err, "Cannot reach the API to pick the API mode; retrying", "apiMode", c.cfg.APIMode)
			return false, nil
		}
	})
	if ctx.Err() != nil {
		return nil, clients, nil
	}
	if err != nil {
		return nil, clients, fmt.Errorf("API mode %q: %w", c.cfg.APIMode, err)
	}
	return acc, clients, nil
}

// retryUntil paces the retries of the requests Run makes before it starts:
// it calls condition at once, then quick at first and a retry period apart,
// as the elector retries once it runs, until condition is done or fails for
// good, or ctx ends. It never gives up on its own (wait.ExponentialBackoff
// would, once its delay reaches the cap): a process that started while the
// API was down (a component restarted during an etcd or kube-apiserver
// outage) reaches the Lease at most a retry period after the API serves
// again; every moment it waits before its first look delays its election
// by as much.
func (c *Candidate) retryUntil(ctx context.Context, condition wait.ConditionWithContextFunc) error {
	backoff := wait.Backoff{Duration: c.cfg.RetryPeriod / 4, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: c.cfg.RetryPeriod}
	return backoff.DelayFunc().Until(ctx, true, true, condition)
}

// writer returns the user name to record on the LeaseCandidate: Writer if
// set, else the one the server reports for this process's credentials, else
// "" (no client to ask, or a server that cannot tell). Transient failures are
// retried; ok is false only when ctx ended first.
func (c *Candidate) writer(ctx context.Context, clients access.Clients) (name string, ok bool) {
	if c.cfg.Writer != "" || clients.Kube == nil {
		return c.cfg.Writer, true
	}
	logger := klog.FromContext(ctx)
	err := c.retryUntil(ctx, func(ctx context.Context) (bool, error) {
		review, err := clients.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		switch {
		case err == nil:
			name = review.Status.UserInfo.Username
			return true, nil
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err):
			// The server has no SelfSubjectReview API (before 1.28) or
			// does not let this user ask: nothing to wait for.
			logger.Info("Cannot learn this process's user name; the LeaseCandidate is not annotated with it, so admission policies cannot tie it to this user (set Config.Writer)", "err", err)
			return true, nil
		default:
			logger.Error(err, "Asking the server for this process's user name failed; retrying")
			return false, nil
		}
	})
	if err != nil {
		return "", false
	}
	logger.V(2).Info("Writing the LeaseCandidate as", "user", name)
	return name, true
}

// tokenKey is the context key of the fencing token in leader work's context.
type tokenKey struct{}

func withToken(ctx context.Context, token int32) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFrom returns the fencing token of the term that OnStartedLeading's
// context belongs to. Unlike Token, it keeps answering after the term has
// ended, so leader work can stamp its writes with its own term's token even
// if it gets to run only after the term lapsed (such writes are then refused
// by a fenced resource, as they should be). It returns 0, false for any other
// context.
func TokenFrom(ctx context.Context) (int32, bool) {
	token, ok := ctx.Value(tokenKey{}).(int32)
	return token, ok
}

// oneObject narrows an informer to the object called name.
func oneObject(name string) func(*metav1.ListOptions) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return func(o *metav1.ListOptions) { o.FieldSelector = selector }
}

// wakeOnChange returns handlers that signal wake on any change, without
// blocking: the loops read the current state from the informer's store.
func wakeOnChange(wake chan struct{}) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal(wake) },
		UpdateFunc: func(any, any) { signal(wake) },
		DeleteFunc: func(any) { signal(wake) },
	}
}

// signal wakes the loop that reads wake, a channel of one, without
// blocking: a wake-up already pending is enough.
func signal(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// isConflictOrGone tells the writes that failed because the object changed
// under them: they are resolved by reading again, not by waiting.
func isConflictOrGone(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err)
}

// identityInUse says which Lease's candidate lc, named by cfg.Identity, is.
func identityInUse(lc *coordinationv1beta1.LeaseCandidate, cfg *Config) error {
	return fmt.Errorf("%w: LeaseCandidate %s/%s is the candidate of Lease %q, not of %q; an Identity must be unique among the LeaseCandidates of the namespace (leave Identity empty for the host name and the Lease's name)",
		ErrIdentityInUse, lc.Namespace, lc.Name, lc.Spec.LeaseName, cfg.LeaseName)
}
