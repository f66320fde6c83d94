// Package cle gives a controller-runtime manager coordinated leader election
// (KEP-4355) with cle: ManagerOptions fills in the manager's leader-election
// options so that the manager leads only when the election controller
// (cle-controller, or the one built into kube-apiserver) names it holder of
// its Lease, the best-versioned of its replicas leads, and a shutdown hands
// the Lease over at once.
//
// Import it as cle "github.com/cle-dev/cle/contrib/controller-runtime". It
// lives in a module of its own so that the core module does not depend on
// controller-runtime.
//
// What controller-runtime does with it, compared with the candidate library
// used directly:
//
//   - Preemption: when the controller prefers a better candidate, the
//     lock's renewals fail at once and the library's IsLeader turns false at
//     once (write-guarded clients refuse writes), but controller-runtime's
//     elector gives up only after its renewals have failed for
//     RenewDeadline, and then stops the manager: Start returns an error
//     ("leader election lost"), and the process is expected to exit and be
//     restarted. The better candidate leads LeaseDuration after the last
//     renewal, as with client-go's own leader election.
//   - Shutdown: with LeaderElectionReleaseOnCancel (set here), the manager
//     stops its leader-election runnables first and then releases the Lease
//     through the lock, which deletes the LeaseCandidate and hands the Lease
//     to the next candidate at once.
//   - Fencing: leader runnables get no leader context from controller-runtime;
//     they read the term's token with Lock.Candidate().Token().
package cle

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

// Options are the coordinated election settings of one manager.
type Options struct {
	// Namespace and LeaseName name the Lease the replicas elect a leader
	// on (controller-runtime's LeaderElectionNamespace and
	// LeaderElectionID). Required.
	Namespace string
	LeaseName string
	// Identity names this replica: the LeaseCandidate's name and the
	// Lease's holder. Default: controller-runtime's, the host name and a
	// random UUID ("host_uuid"), made a valid name by lock.IdentityFor.
	// Any identity is mapped that way; a stable, unique one (such as the
	// pod name) lets a restarted replica refresh its LeaseCandidate.
	Identity string
	// BinaryVersion and EmulationVersion are this replica's versions
	// (strict semantic versions such as "1.36.0"); the replica with the
	// oldest emulation version leads. Emulation defaults to binary.
	BinaryVersion    string
	EmulationVersion string
	// Strategy defaults to OldestEmulationVersion.
	Strategy coordinationv1.CoordinatedLeaseStrategy
	// APIMode is "auto" (default), "native" or "portable".
	APIMode string
	// LeaseDuration, RenewDeadline and RetryPeriod default to
	// controller-runtime's (15s, 10s, 2s); RenewDeadline + RetryPeriod must
	// be shorter than LeaseDuration. A replica that is preempted keeps
	// running its leader runnables for up to RetryPeriod + RenewDeadline.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Callbacks of the candidate (optional): OnStartedLeading runs with
	// the term's context, cancelled as soon as the library stops counting
	// this replica leader, which is earlier than the manager notices.
	Callbacks candidate.Callbacks
}

// Defaults of Options, controller-runtime's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ManagerOptions sets the leader-election fields of opts for coordinated
// election on the Lease of o, with clients from cfg, and returns the lock
// behind them. Pass opts to manager.New. The lock's Candidate gives leader
// runnables IsLeader, Token and WrapConfig. Once the manager's Start has
// returned, call the lock's Close: it withdraws a replica that did not lead
// (the leader's release already did).
func ManagerOptions(opts *manager.Options, cfg *rest.Config, o Options) (*lock.Lock, error) {
	if opts == nil || cfg == nil {
		return nil, errors.New("cle.ManagerOptions: opts and cfg are required")
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("cle.ManagerOptions: default Identity: %w", err)
		}
		o.Identity = host + "_" + uuid.NewString()
	}
	setDefault(&o.LeaseDuration, DefaultLeaseDuration)
	setDefault(&o.RenewDeadline, DefaultRenewDeadline)
	setDefault(&o.RetryPeriod, DefaultRetryPeriod)
	l, err := lock.New(lock.Config{Candidate: candidate.Config{
		RestConfig:       rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"),
		APIMode:          o.APIMode,
		Namespace:        o.Namespace,
		LeaseName:        o.LeaseName,
		Identity:         o.Identity,
		BinaryVersion:    o.BinaryVersion,
		EmulationVersion: o.EmulationVersion,
		Strategy:         o.Strategy,
		LeaseDuration:    o.LeaseDuration,
		RenewDeadline:    o.RenewDeadline,
		RetryPeriod:      o.RetryPeriod,
		Callbacks:        o.Callbacks,
	}})
	if err != nil {
		return nil, fmt.Errorf("cle.ManagerOptions: %w", err)
	}
	opts.LeaderElection = true
	opts.LeaderElectionResourceLockInterface = l
	opts.LeaderElectionReleaseOnCancel = true
	opts.LeaderElectionNamespace = o.Namespace
	opts.LeaderElectionID = o.LeaseName
	opts.LeaseDuration = &o.LeaseDuration
	opts.RenewDeadline = &o.RenewDeadline
	opts.RetryPeriod = &o.RetryPeriod
	return l, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
