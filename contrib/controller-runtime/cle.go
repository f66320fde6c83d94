// Package cle gives a controller-runtime manager coordinated leader election
// (KEP-4355) with cle: ManagerOptions fills in the manager's leader-election
// options so that the manager leads only when the election controller
// (cle-controller, or the one built into kube-apiserver) names it holder of
// its Lease, the best-versioned of its replicas leads, and a shutdown hands
// the Lease over at once. NewManager does that and creates the manager, with
// the lock's Events, health check and Close wired in: the one call a
// manager's main changes to adopt cle.
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
//     once (write-guarded clients refuse writes). A manager from NewManager
//     then stops as on a shutdown (below): its leader runnables stop, the
//     Lease goes to the better candidate as soon as they have returned, and
//     Start returns an error wrapping lock.ErrTermEnded ("leader election
//     lost"); the process is expected to exit and be restarted. A manager
//     created from ManagerOptions alone does the same when its Start is
//     given Lock.ElectorContext(ctx); otherwise controller-runtime's elector
//     gives up only after its renewals have failed for RenewDeadline, and
//     the better candidate leads LeaseDuration after the last renewal, as
//     with client-go's own leader election.
//   - Shutdown: with LeaderElectionReleaseOnCancel (on unless
//     Options.ReleaseOnCancel turns it off), the manager stops its
//     leader-election runnables, waits for them (GracefulShutdownTimeout,
//     which ManagerOptions makes "for ever" unless it is set, and logs so:
//     controller-runtime's default of 30s could release the Lease while a
//     runnable still runs), and then
//     releases the Lease through the lock, which deletes the LeaseCandidate
//     and hands the Lease to the next candidate at once. With a finite
//     GracefulShutdownTimeout the manager may release while runnables
//     still run, so the lock leaves the Lease to expire instead.
//   - Fencing: leader runnables get no leader context from controller-runtime;
//     they read the term's token with Lock.Candidate().Token().
package cle

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

// Options are the coordinated election settings of one manager. Where a
// setting is left zero, ManagerOptions takes the manager's own (its
// leader-election options), and otherwise a default; a setting given both
// here and in the manager's options must agree.
type Options struct {
	// Namespace and LeaseName name the Lease the replicas elect a leader
	// on. Default: the manager's LeaderElectionNamespace and
	// LeaderElectionID; the namespace, also the one the pod runs in.
	Namespace string
	LeaseName string
	// Identity names this replica: the LeaseCandidate's name and the
	// Lease's holder. Default: controller-runtime's, the host name and a
	// random UUID ("host_uuid"), made a valid name by candidate.NameFor.
	// Any identity is mapped that way; a stable, unique one (such as the
	// pod name) lets a restarted replica refresh its LeaseCandidate.
	Identity string
	// BinaryVersion and EmulationVersion are this replica's versions
	// (semantic versions such as "1.36.0" or "v1.36.0"; see
	// candidate.Config for what is refused); the replica with the oldest
	// emulation version leads. Emulation defaults to binary.
	BinaryVersion    string
	EmulationVersion string
	// Strategy defaults to OldestEmulationVersion;
	// "cle.dev/OldestEmulationVersion" asks for the same order elected by
	// cle-controller where kube-apiserver elects the default one (see
	// candidate.Config.Strategy).
	Strategy coordinationv1.CoordinatedLeaseStrategy
	// APIMode is "auto" (default), "native" or "portable".
	APIMode string
	// LeaseDuration, RenewDeadline and RetryPeriod default to the
	// manager's, and then to controller-runtime's (15s, 10s, 2s);
	// RenewDeadline + RetryPeriod must be shorter than LeaseDuration. A
	// replica that is preempted keeps running its leader runnables for up
	// to RetryPeriod + RenewDeadline. The manager's own RetryPeriod is the
	// lock's, which may be shorter (lock.Lock.Timings: 1.295s with the
	// defaults), so that it leads at its first try once the Lease names it.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ReleaseOnCancel is the manager's LeaderElectionReleaseOnCancel:
	// whether a shutdown hands the Lease over at once. Default: true.
	ReleaseOnCancel *bool
	// Callbacks of the candidate (optional): OnStartedLeading runs with
	// the term's context, cancelled as soon as the library stops counting
	// this replica leader, which is earlier than the manager notices.
	Callbacks candidate.Callbacks
	// GuardClient makes the manager's own client (GetClient) write-guarded:
	// its writes are refused unless this replica leads, from the moment the
	// library stops counting it leader, before the manager notices. Reads
	// are not affected. Leave it off when runnables that run without
	// leader election (webhooks, certificate rotation) write through the
	// manager's client; give the leader's runnables a client built from
	// Lock.Candidate().WrapConfig instead.
	GuardClient bool
	// Metrics, when set, is where the candidate registers its metrics
	// (cle_candidate_leading, _term, _renewal_duration_seconds,
	// _guard_refusals_total): pass sigs.k8s.io/controller-runtime/pkg/metrics.Registry
	// to serve them with the manager's own.
	Metrics prometheus.Registerer
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
// returned, call the lock's Close: it finishes the hand-over and withdraws
// a replica that did not lead.
//
// Unless opts sets GracefulShutdownTimeout, ManagerOptions sets it to wait
// for the leader runnables without a limit, so that the manager releases the
// Lease only once they have returned and the lock can hand it over at once
// (a runnable that never returns then holds the shutdown until the process
// is killed, and the Lease expires).
//
// NewManager does this and also wires the lock's Events, its health check
// and its Close into the manager.
func ManagerOptions(opts *manager.Options, cfg *rest.Config, o Options) (*lock.Lock, error) {
	return managerOptions(opts, cfg, o, nil)
}

func managerOptions(opts *manager.Options, cfg *rest.Config, o Options, events resourcelock.EventRecorder) (*lock.Lock, error) {
	if opts == nil || cfg == nil {
		return nil, errors.New("cle.ManagerOptions: opts and cfg are required")
	}
	var errs []error
	pick := func(what string, mine *string, manager string) {
		switch {
		case *mine == "":
			*mine = manager
		case manager != "" && manager != *mine:
			errs = append(errs, fmt.Errorf("%s is %q, but the manager's options say %q", what, *mine, manager))
		}
	}
	pick("Namespace", &o.Namespace, opts.LeaderElectionNamespace)
	pick("LeaseName", &o.LeaseName, opts.LeaderElectionID)
	if o.Namespace == "" {
		o.Namespace = inClusterNamespace()
	}
	pickDuration := func(what string, mine *time.Duration, manager *time.Duration, def time.Duration) {
		switch {
		case *mine == 0 && manager != nil:
			*mine = *manager
		case *mine == 0:
			*mine = def
		case manager != nil && *manager != *mine:
			errs = append(errs, fmt.Errorf("%s is %s, but the manager's options say %s", what, *mine, *manager))
		}
	}
	pickDuration("LeaseDuration", &o.LeaseDuration, opts.LeaseDuration, DefaultLeaseDuration)
	pickDuration("RenewDeadline", &o.RenewDeadline, opts.RenewDeadline, DefaultRenewDeadline)
	pickDuration("RetryPeriod", &o.RetryPeriod, opts.RetryPeriod, DefaultRetryPeriod)
	if len(errs) > 0 {
		return nil, fmt.Errorf("cle.ManagerOptions: %w", errors.Join(errs...))
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("cle.ManagerOptions: default Identity: %w", err)
		}
		o.Identity = host + "_" + uuid.NewString()
	}
	// The adapter and the library log to the manager's logger.
	logger := opts.Logger
	if logger.GetSink() == nil {
		logger = ctrllog.Log
	}
	logger = logger.WithName("cle")
	release := o.ReleaseOnCancel == nil || *o.ReleaseOnCancel
	if release && opts.GracefulShutdownTimeout == nil {
		forever := time.Duration(-1)
		opts.GracefulShutdownTimeout = &forever
		logger.Info("GracefulShutdownTimeout is not set: on shutdown the manager waits for its leader runnables without a limit, so that the Lease is handed over as soon as they return; set it to bound the shutdown (the Lease is then left to expire when they outlast it)",
			"lease", o.Namespace+"/"+o.LeaseName)
	}
	l, err := lock.New(lock.Config{
		// The manager releases only after its runnables returned when
		// it waits for them without a limit.
		ReleaseAfterLeaderWork: opts.GracefulShutdownTimeout != nil && *opts.GracefulShutdownTimeout < 0,
		EventRecorder:          events,
		Candidate: candidate.Config{
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
			Logger:           logger,
			Metrics:          o.Metrics,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("cle.ManagerOptions: %w", err)
	}
	if o.GuardClient {
		newClient := opts.NewClient
		if newClient == nil {
			newClient = client.New
		}
		opts.NewClient = func(config *rest.Config, options client.Options) (client.Client, error) {
			// The manager passes the HTTP client its cache shares; the
			// guarded client has one of its own.
			guarded := l.Candidate().WrapConfig(config)
			hc, err := rest.HTTPClientFor(guarded)
			if err != nil {
				return nil, fmt.Errorf("cle: the manager's write-guarded client: %w", err)
			}
			options.HTTPClient = hc
			return newClient(guarded, options)
		}
	}
	opts.LeaderElection = true
	opts.LeaderElectionResourceLockInterface = l
	opts.LeaderElectionReleaseOnCancel = release
	opts.LeaderElectionNamespace = o.Namespace
	opts.LeaderElectionID = o.LeaseName
	// The elector's retry period may be shorter than the candidate's: see
	// lock.Lock.Timings.
	ld, rd, rp := l.Timings()
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &ld, &rd, &rp
	return l, nil
}

// serviceAccountNamespace is where a pod finds its namespace.
var serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// inClusterNamespace is the namespace this pod runs in, or "" outside a
// cluster.
func inClusterNamespace() string {
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
