// Command cand is the candidate program of the side-by-side benchmarks
// (test/bench): one process of a component that takes part in a leader
// election, in one of these kinds:
//
//	cle    the candidate library (pkg/candidate), elected by cle-controller
//	peer   client-go's LeaseCandidate (leaderelection.NewCandidate) and its
//	       LeaderElector with Coordinated set, elected by the controller
//	       built into kube-apiserver, as kube-scheduler and
//	       kube-controller-manager do with the feature gate on
//	lock   client-go's LeaderElector on pkg/lock (cle's adoption path)
//	plain  client-go's LeaderElector on a LeaseLock: no coordination
//
// Its leader work does nothing but wait for its context, and it prints one
// line to stdout at the moment that work starts and the moment it returns:
//
//	started-leading identity=<id>
//	stopped-leading identity=<id>
//
// With --shards=N (kind cle) it is a replica of a shard group of N shards
// named by --lease (candidate.NewGroup; --strategy a group strategy), and it
// prints a line when a shard's work starts and when it returns, with the
// wall-clock time it printed it (Unix nanoseconds: every process of a run is
// on one machine, so the lines of all replicas order on one clock):
//
//	started-shard identity=<id> shard=<i> token=<t> at=<ns>
//	stopped-shard identity=<id> shard=<i> token=<t> at=<ns>
//
// --signal-faults makes leader work fail on a signal, for the node tests'
// crash failover: SIGUSR1 panics, SIGUSR2 exhausts memory (package
// internal/faults).
//
// SIGTERM or SIGINT stops it gracefully: leader work stops and the Lease is
// released (every kind releases on cancel).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/faults"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

type options struct {
	kind, kubeconfig, namespace, lease, identity string
	binaryVersion, emulationVersion, apiMode     string
	strategy                                     string
	leaseDuration, renewDeadline, retryPeriod    time.Duration
	signalFaults, processIdentity                bool
	shards                                       int
}

func main() {
	var o options
	fs := flag.NewFlagSet("cand", flag.ContinueOnError)
	fs.StringVar(&o.kind, "kind", "cle", "cle, peer, lock or plain")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: in-cluster, or $KUBECONFIG)")
	fs.StringVar(&o.apiMode, "api-mode", "native", "API mode of the cle kinds: native or portable")
	fs.StringVar(&o.namespace, "namespace", "default", "namespace of the Lease")
	fs.StringVar(&o.lease, "lease", "", "name of the Lease (required)")
	fs.StringVar(&o.identity, "identity", "", "this process's identity (required)")
	fs.StringVar(&o.binaryVersion, "binary-version", "1.36.0", "binary version")
	fs.StringVar(&o.emulationVersion, "emulation-version", "", "emulation version (default: the binary version)")
	fs.StringVar(&o.strategy, "strategy", string(coordinationv1.OldestEmulationVersion), "election strategy the candidate asks for (kinds cle, lock and peer)")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "lease duration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "renew deadline")
	fs.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "retry period")
	fs.BoolVar(&o.processIdentity, "process-identity", false, "append a random suffix to --identity, new in each process, as kube-scheduler and kube-controller-manager make theirs (host name and a UUID): a restarted process is another candidate")
	fs.IntVar(&o.shards, "shards", 0, "join the shard group --lease with this many shards (kind cle) instead of electing one leader")
	fs.BoolVar(&o.signalFaults, "signal-faults", false, "while leading, SIGUSR1 makes leader work panic and SIGUSR2 makes it exhaust memory")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if o.lease == "" || o.identity == "" {
		fmt.Fprintln(os.Stderr, "cand: --lease and --identity are required")
		os.Exit(2)
	}
	if o.emulationVersion == "" {
		o.emulationVersion = o.binaryVersion
	}
	if o.processIdentity {
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.identity += "-" + hex.EncodeToString(b[:])
	}
	if o.signalFaults {
		fail = faults.Notify()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, o)
	running.Wait()
	if err != nil {
		klog.Background().Error(err, "cand failed", "identity", o.identity)
		os.Exit(1)
	}
}

// out serializes the event lines.
var out sync.Mutex

func say(event, id string) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf("%s identity=%s\n", event, id)
}

// running counts the leader work that has not returned: client-go's
// elector does not wait for it, so the process does before it exits, and
// the line that says it returned is printed.
var running sync.WaitGroup

// fail makes leader work fail on a signal (--signal-faults).
var fail faults.Signals

// work is the leader work of every kind: it runs until its context ends.
func work(id string) func(ctx context.Context) {
	return func(ctx context.Context) {
		running.Add(1)
		defer running.Done()
		say("started-leading", id)
		defer say("stopped-leading", id)
		fail.FailOnSignal(ctx)
	}
}

// shardWork is the work of every shard a group replica is granted: it runs
// until the shard's context ends.
func shardWork(id string) func(ctx context.Context, s candidate.Shard) {
	return func(ctx context.Context, s candidate.Shard) {
		running.Add(1)
		defer running.Done()
		sayShard := func(event string) {
			out.Lock()
			defer out.Unlock()
			fmt.Printf("%s identity=%s shard=%d token=%d at=%d\n", event, id, s.Index, s.Token, time.Now().UnixNano())
		}
		sayShard("started-shard")
		defer sayShard("stopped-shard")
		<-ctx.Done()
	}
}

func run(ctx context.Context, o options) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "cle-bench-" + o.kind + "/" + o.identity
	ccfg := candidate.Config{
		RestConfig: cfg, APIMode: o.apiMode, Namespace: o.namespace, LeaseName: o.lease, Identity: o.identity,
		BinaryVersion: o.binaryVersion, EmulationVersion: o.emulationVersion,
		Strategy:      coordinationv1.CoordinatedLeaseStrategy(o.strategy),
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
	}
	switch {
	case o.kind == "cle" && o.shards > 0:
		g, err := candidate.NewGroup(candidate.GroupConfig{Config: ccfg, Shards: o.shards, OnShardStarted: shardWork(o.identity)})
		if err != nil {
			return err
		}
		return g.Run(ctx)
	case o.shards > 0:
		return fmt.Errorf("--shards needs --kind=cle, not %q", o.kind)
	}
	switch o.kind {
	case "cle":
		ccfg.Callbacks = candidate.Callbacks{OnStartedLeading: work(o.identity)}
		c, err := candidate.New(ccfg)
		if err != nil {
			return err
		}
		return c.Run(ctx)
	case "lock":
		lk, err := lock.New(lock.Config{Candidate: ccfg})
		if err != nil {
			return err
		}
		ld, rd, rp := lk.Timings()
		// The elector stops as soon as its term ends, as adopters are
		// told to run it (Lock.ElectorContext).
		err = elect(lk.ElectorContext(ctx), lk, o.identity, ld, rd, rp, false, lk.Callbacks)
		// Closed whether the term was lost or the process stops, as
		// examples/lock-elector does: Close finishes a hand-over and
		// withdraws the LeaseCandidate.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ld)
		defer cancel()
		return errors.Join(err, lk.Close(closeCtx))
	case "peer", "plain":
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		coordinated := o.kind == "peer"
		if coordinated {
			lc, _, err := leaderelection.NewCandidate(client, o.namespace, o.identity, o.lease, o.binaryVersion, o.emulationVersion, coordinationv1.CoordinatedLeaseStrategy(o.strategy))
			if err != nil {
				return fmt.Errorf("LeaseCandidate: %w", err)
			}
			go lc.Run(ctx)
		}
		lk := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.lease},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
		}
		return elect(ctx, lk, o.identity, o.leaseDuration, o.renewDeadline, o.retryPeriod, coordinated, nil)
	default:
		return fmt.Errorf("unknown --kind %q", o.kind)
	}
}

// elect runs client-go's LeaderElector until ctx is done. A lost term ends
// it with an error, as client-go components exit then.
func elect(ctx context.Context, lk resourcelock.Interface, id string, ld, rd, rp time.Duration, coordinated bool,
	wrap func(leaderelection.LeaderCallbacks) leaderelection.LeaderCallbacks) error {
	callbacks := leaderelection.LeaderCallbacks{OnStartedLeading: work(id), OnStoppedLeading: func() {}}
	if wrap != nil {
		callbacks = wrap(callbacks)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lk, LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
		ReleaseOnCancel: true, Coordinated: coordinated, Name: id, Callbacks: callbacks,
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	if ctx.Err() == nil || errors.Is(context.Cause(ctx), lock.ErrTermEnded) {
		return errors.New("leader election lost")
	}
	return nil
}
