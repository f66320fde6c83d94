package cle

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cle-dev/cle/pkg/lock"
)

// HealthCheckName names the lock's check among the manager's healthz checks.
const HealthCheckName = "leader-election"

// HealthTolerance is how long past its renew deadline a replica that still
// counts itself leader, or leader work told to stop, is tolerated before the
// health check fails (client-go's healthz adaptor uses 20s as well).
const HealthTolerance = 20 * time.Second

// NewManager is manager.New (ctrl.NewManager) with coordinated election: the
// one call a manager's main changes to adopt cle. It applies ManagerOptions
// to a copy of opts and creates the manager; then
//   - the lock records its Events ("became leader", "stopped leading") on the
//     Lease through the manager's event recorder;
//   - the lock's health check is the manager's healthz check
//     "leader-election", correct from start-up: it passes until the elector
//     runs, and fails when a leader's renewal loop is stuck or leader work
//     does not return after it was told to stop (see
//     candidate.HealthCheck);
//   - the manager's Start runs with the lock's ElectorContext: when the
//     election controller prefers a better replica (or the term is lost
//     otherwise), the manager stops at once as on a shutdown, hands the
//     Lease over once its leader runnables have returned, and Start returns
//     an error wrapping lock.ErrTermEnded ("leader election lost"), so that
//     the process exits and is restarted as a candidate;
//   - the manager's Start closes the lock before it returns, so that a main
//     that exits with os.Exit when Start fails (kubebuilder's scaffold does)
//     still finishes the hand-over and deletes its LeaseCandidate. Close is
//     given a lease duration.
//
// The lock is returned for leader runnables: IsLeader, Token and WrapConfig
// through Lock.Candidate().
func NewManager(cfg *rest.Config, opts manager.Options, o Options) (manager.Manager, *lock.Lock, error) {
	events := &lateRecorder{}
	l, err := managerOptions(&opts, cfg, o, events)
	if err != nil {
		return nil, nil, err
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		return nil, nil, errors.Join(err, l.Close(context.Background()))
	}
	// controller-runtime records its own leader election's events with
	// this recorder too.
	events.set(mgr.GetEventRecorderFor(l.Identity())) //nolint:staticcheck // resourcelock.EventRecorder is the old interface
	check := l.Candidate().HealthCheck(HealthTolerance)
	if err := mgr.AddHealthzCheck(HealthCheckName, check.Check); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("cle.NewManager: %w", err), l.Close(context.Background()))
	}
	leaseDuration, _, _ := l.Timings()
	return &closingManager{Manager: mgr, lock: l, closeWithin: leaseDuration}, l, nil
}

// closingManager is a manager whose Start closes its lock before returning.
type closingManager struct {
	manager.Manager
	lock        *lock.Lock
	closeWithin time.Duration
}

func (m *closingManager) Start(ctx context.Context) error {
	// A term that ends (a preemption, a lost Lease) stops the manager at
	// once, as a shutdown does: leader runnables stop and are waited for,
	// then the elector releases, and the Lease goes to the next holder
	// without waiting out the renew deadline and the lease.
	electorCtx := m.lock.ElectorContext(ctx)
	err := m.Manager.Start(electorCtx)
	if cause := context.Cause(electorCtx); ctx.Err() == nil && errors.Is(cause, lock.ErrTermEnded) {
		err = errors.Join(fmt.Errorf("leader election lost: %w", cause), err)
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.closeWithin)
	defer cancel()
	if cerr := m.lock.Close(closeCtx); cerr != nil {
		err = errors.Join(err, fmt.Errorf("closing the leader-election lock: %w", cerr))
	}
	return err
}

// lateRecorder forwards the lock's events to a recorder known only once the
// manager exists; until then (the elector has not run) there are none.
type lateRecorder struct {
	to atomic.Pointer[resourcelock.EventRecorder]
}

func (r *lateRecorder) set(to resourcelock.EventRecorder) { r.to.Store(&to) }

func (r *lateRecorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	if to := r.to.Load(); to != nil {
		(*to).Eventf(obj, eventType, reason, message, args...)
	}
}
