// Command candidate is a small component that takes part in coordinated
// leader election with pkg/candidate. While it leads it does "leader work":
// optionally, it writes a ConfigMap every --write-interval through a
// write-guarded client, so that one can watch (and tests can prove) that only
// the leader's writes land.
//
// Besides its logs (stderr), it prints one line per event to stdout, for
// scripts and tests to follow:
//
//	started-leading identity=<id> token=<n>
//	stopped-leading identity=<id>
//	new-leader identity=<id> leader=<holder>
//	write identity=<id> token=<n> seq=<n> sent=<unix nanoseconds> result=ok|refused|fenced|error
//	witness identity=<id> token=<n> seq=<n> result=ok|refused|fenced|error
//
// With --shards it is a replica of the shard group --lease instead, and
// prints, per shard it is granted:
//
//	started-shard identity=<id> shard=<i> token=<n>
//	stopped-shard identity=<id> shard=<i> token=<n>
//
// With --witness-url the leader also reports to a witness, an HTTP service
// that stands for a resource guarded by the Lease: every --witness-interval
// it POSTs a JSON witness.Write (identity, fencing token, sequence number, its
// own clock's time) through a write-guarded HTTP client, stamped with the
// moment it got past the guard (header Cle-Guard-Passed). The witness answers
// 409 Conflict to a token older than one it has accepted ("fenced").
//
// --clock-offset runs the library on a clock that is that far ahead (or,
// negative, behind) of the machine's, to show that elections do not depend on
// the candidates' clocks agreeing.
//
// A write is "refused" by the write-guarded client when this process is not
// leader, and "fenced" when the ConfigMap already carries a newer term's
// token: the writes are conditional on a version whose token was checked, so
// a deposed leader's write that got past the guard still cannot overwrite a
// successor's.
//
// --signal-faults is for fault-injection tests: while leading, SIGUSR1 makes
// leader work panic and SIGUSR2 makes it allocate memory until the kernel
// kills the process.
//
// SIGINT or SIGTERM stops leader work, deletes the LeaseCandidate and
// releases the Lease before it exits; a second one exits at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/faults"
	"github.com/cle-dev/cle/internal/witness"
	"github.com/cle-dev/cle/pkg/candidate"
)

type options struct {
	kubeconfig       string
	namespace        string
	lease            string
	identity         string
	binaryVersion    string
	emulationVersion string
	strategy         string
	apiMode          string
	leaseDuration    time.Duration
	renewDeadline    time.Duration
	retryPeriod      time.Duration
	candidateRenew   time.Duration
	writeConfigMap   string
	writeInterval    time.Duration
	stopDelay        time.Duration
	healthAddr       string
	witnessURL       string
	witnessInterval  time.Duration
	clockOffset      time.Duration
	signalFaults     bool
	shards           int
	terminationLog   string
	pod              string
	container        string
}

func main() {
	var o options
	fs := pflag.NewFlagSet("candidate", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (default $KUBECONFIG, else in-cluster)")
	fs.StringVar(&o.namespace, "namespace", "default", "namespace of the Lease and the LeaseCandidate")
	fs.StringVar(&o.lease, "lease", "example", "name of the Lease to lead")
	fs.StringVar(&o.identity, "identity", "", "name of this candidate, unique among the candidates of the Lease (default: the host name and a random suffix)")
	fs.StringVar(&o.binaryVersion, "binary-version", "1.36.0", "binary version of this candidate")
	fs.StringVar(&o.emulationVersion, "emulation-version", "", "emulation version (default: the binary version)")
	fs.StringVar(&o.strategy, "strategy", "OldestEmulationVersion", "election strategy this candidate asks for")
	fs.StringVar(&o.apiMode, "api-mode", candidate.DefaultAPIMode, "API mode: auto, native or portable")
	fs.DurationVar(&o.leaseDuration, "lease-duration", candidate.DefaultLeaseDuration, "lease duration (whole seconds)")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", candidate.DefaultRenewDeadline, "how long the leader acts without a successful renewal")
	fs.DurationVar(&o.retryPeriod, "retry-period", candidate.DefaultRetryPeriod, "interval between renewals")
	fs.DurationVar(&o.candidateRenew, "candidate-renew-interval", candidate.DefaultCandidateRenewInterval, fmt.Sprintf("interval between renewals of the LeaseCandidate when nobody pings it (pings are answered at once); at most %s", candidate.MaxCandidateRenewInterval))
	fs.StringVar(&o.writeConfigMap, "write-configmap", "", "if set, the leader writes this ConfigMap every --write-interval through a write-guarded client")
	fs.DurationVar(&o.writeInterval, "write-interval", 100*time.Millisecond, "interval of the leader's ConfigMap writes")
	fs.DurationVar(&o.stopDelay, "stop-delay", 0, "how long leader work keeps going (and writing) after it was told to stop, as slow or careless work does; the guarded client must refuse those writes")
	fs.StringVar(&o.healthAddr, "health-addr", "", "if set, serve the leader-election health check at http://<addr>/healthz")
	fs.StringVar(&o.witnessURL, "witness-url", "", "if set, the leader POSTs a fenced write (identity, token, time) to this URL every --witness-interval through a write-guarded HTTP client")
	fs.DurationVar(&o.witnessInterval, "witness-interval", 100*time.Millisecond, "interval of the leader's writes to --witness-url")
	fs.StringVar(&o.terminationLog, "termination-message-path", "", "the termination message file the kubelet reports when this process's container exits (default: found in a Pod's mounts); with cle-controller's --proof-of-death the next leader is elected as soon as the kubelet reports this process exited")
	fs.StringVar(&o.pod, "pod", "", "namespace/name of the Pod this process runs in (required with --termination-message-path): its exit counts only as that Pod's kubelet reports it")
	fs.StringVar(&o.container, "container", "", "name of this process's container in the Pod (default: the container whose termination message file the kubelet mounted at --termination-message-path): its exit counts only as reported for that container")
	fs.BoolVar(&o.signalFaults, "signal-faults", false, "for fault-injection tests: while leading, SIGUSR1 makes leader work panic and SIGUSR2 makes it allocate memory until the kernel kills the process (out of memory); not leading, they are ignored")
	fs.DurationVar(&o.clockOffset, "clock-offset", 0, "run the election on a clock this far ahead of the machine's (negative: behind), as a machine with a skewed clock")
	fs.IntVar(&o.shards, "shards", 0, "if set, join the shard group named by --lease as a replica, for this many shards (the group's strategy is --strategy, default cle.dev/ShardsOldestEmulationVersion), instead of running for its Lease; each shard's owner reports to --witness-url with the shard's token")
	klogFlags := goflagSet()
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if o.shards > 0 {
		if !fs.Changed("strategy") {
			o.strategy = ""
		}
		if o.writeConfigMap != "" || o.healthAddr != "" || o.signalFaults {
			fmt.Fprintln(os.Stderr, "candidate: --shards does not go with --write-configmap, --health-addr or --signal-faults")
			os.Exit(2)
		}
	}
	if o.identity == "" {
		host, err := os.Hostname()
		if err != nil {
			fmt.Fprintf(os.Stderr, "candidate: --identity not set and no host name: %v\n", err)
			os.Exit(2)
		}
		// Two instances on one host must not share an identity; the suffix
		// keeps them apart (a Kubernetes name allows no "_").
		o.identity = strings.ToLower(host) + "-" + utilrand.String(5)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the default handling comes back, so a
		// second one ends the process at once, even if shutdown hangs.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "candidate failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, o options) error {
	logger := klog.LoggerWithValues(klog.Background(), "identity", o.identity)
	ctx = klog.NewContext(ctx, logger)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	restConfig.UserAgent = "cle-example-candidate/" + o.identity

	out := &printer{identity: o.identity}
	var fail faults.Signals
	if o.signalFaults {
		fail = faults.Notify()
	}
	var witnessClient *http.Client    // set before Run, used only while leading
	var proof *candidate.ProofOfDeath // found in a Pod's mounts
	if o.terminationLog != "" {
		proof = &candidate.ProofOfDeath{TerminationMessagePath: o.terminationLog, Pod: o.pod, Container: o.container}
	}
	cfg := candidate.Config{
		RestConfig:             restConfig,
		APIMode:                o.apiMode,
		Namespace:              o.namespace,
		LeaseName:              o.lease,
		Identity:               o.identity,
		BinaryVersion:          o.binaryVersion,
		EmulationVersion:       o.emulationVersion,
		Strategy:               coordinationStrategy(o.strategy),
		LeaseDuration:          o.leaseDuration,
		RenewDeadline:          o.renewDeadline,
		RetryPeriod:            o.retryPeriod,
		CandidateRenewInterval: o.candidateRenew,
		Clock:                  witness.OffsetClock{Offset: o.clockOffset},
		ProofOfDeath:           proof,
	}
	if o.shards > 0 {
		return runGroup(ctx, o, cfg, out)
	}
	var c *candidate.Candidate
	cfg.Callbacks = candidate.Callbacks{
		OnStartedLeading: func(ctx context.Context) {
			token, _ := candidate.TokenFrom(ctx)
			out.print("started-leading token=%d", token)
			logger.Info("Leading", "token", token)
			var wg sync.WaitGroup
			if o.witnessURL != "" {
				wg.Go(func() {
					witness.Report(ctx, witnessClient, o.witnessURL, witness.Write{Identity: o.identity, Token: int64(token)}, o.witnessInterval, witness.OffsetClock{Offset: o.clockOffset},
						func(seq int, err error) {
							if err != nil {
								logger.V(2).Info("Witness write failed", "err", err)
							}
							out.print("witness token=%d seq=%d result=%s", token, seq, writeResult(err))
						})
				})
			}
			if o.writeConfigMap != "" {
				lead(ctx, token, o, out)
			}
			fail.FailOnSignal(ctx)
			wg.Wait()
		},
		OnStoppedLeading: func() {
			out.print("stopped-leading")
			logger.Info("Not leading any more")
		},
		OnNewLeader: func(leader string) {
			out.print("new-leader leader=%s", leader)
			logger.Info("Leader observed", "leader", leader)
		},
	}
	c, err = candidate.New(cfg)
	if err != nil {
		return err
	}
	if o.writeConfigMap != "" {
		guarded, err := kubernetes.NewForConfig(c.WrapConfig(restConfig))
		if err != nil {
			return err
		}
		writer = guarded
	}
	if o.witnessURL != "" {
		// The guard refuses a write while this process is not leader and
		// cancels one in flight when the term ends; the witness's token check
		// is what stops a write that got past it before that.
		witnessClient, err = witness.Client(o.witnessURL, witness.OffsetClock{Offset: o.clockOffset}, c.WrapConfig)
		if err != nil {
			return fmt.Errorf("witness client: %w", err)
		}
	}
	if o.healthAddr != "" {
		if err := serveHealth(ctx, o.healthAddr, c.HealthCheck(20*time.Second)); err != nil {
			return err
		}
	}
	return c.Run(ctx)
}

// serveHealth serves check at /healthz on addr until ctx is done.
func serveHealth(ctx context.Context, addr string, check *candidate.HealthCheck) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := check.Check(r); err != nil {
			http.Error(w, check.Name()+" failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	klog.FromContext(ctx).Info("Serving the health check", "address", ln.Addr().String())
	return nil
}

// writer is the write-guarded client of the leader work.
var writer kubernetes.Interface

// lead writes the ConfigMap, stamped with the term's fencing token, every
// interval until ctx is done and --stop-delay has passed. Writes after ctx is
// done are on purpose: the guard, not the loop, is what keeps a deposed
// leader from writing.
func lead(ctx context.Context, token int32, o options, out *printer) {
	ticker := time.NewTicker(o.writeInterval)
	defer ticker.Stop()
	done := ctx.Done()
	var stopAt <-chan time.Time // set once ctx is done
	w := &fencedWriter{o: o, token: token}
	for seq := 1; ; seq++ {
		// When it was sent (Unix nanoseconds), so that a reader can tell a
		// write sent before a pause and answered after it from one sent
		// after.
		sent := time.Now()
		err := w.write(context.WithoutCancel(ctx), seq)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Write failed", "err", err)
		}
		result := writeResult(err)
		out.print("write token=%d seq=%d sent=%d result=%s", token, seq, sent.UnixNano(), result)
		for ticked := false; !ticked; {
			select {
			case <-done:
				if o.stopDelay <= 0 {
					return
				}
				done, stopAt = nil, time.After(o.stopDelay)
			case <-stopAt:
				return
			case <-ticker.C:
				ticked = true
			}
		}
	}
}

// errFenced is the error of a write fenced off because a newer term has
// written: the ConfigMap carries its token, or the witness accepted it.
var errFenced = witness.ErrFenced

// fencedWriter writes the ConfigMap as the leader of one term. Its writes are
// fenced: each is an update conditional on a version of the ConfigMap known
// to carry no newer term's token (one this term wrote, or read and checked),
// so a write of an older term can never land after one of a newer term, even
// if it got past the guarded client. The write goes first, the read only
// after a conflict, so while not leader it is the guard that refuses.
type fencedWriter struct {
	o     options
	token int32
	// known is the resourceVersion of the version known to be safe to
	// overwrite ("" until read).
	known string
}

func (w *fencedWriter) write(ctx context.Context, seq int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cms := writer.CoreV1().ConfigMaps(w.o.namespace)
	if w.known == "" {
		cm, err := cms.Get(ctx, w.o.writeConfigMap, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := cms.Create(ctx, w.configMap("", seq), metav1.CreateOptions{})
			if err == nil {
				w.known = created.ResourceVersion
			}
			return err
		case err != nil:
			return err
		}
		if theirs, err := strconv.Atoi(cm.Data["token"]); err == nil && theirs > int(w.token) {
			return fmt.Errorf("%w: %d, ours is %d", errFenced, theirs, w.token)
		}
		w.known = cm.ResourceVersion
	}
	updated, err := cms.Update(ctx, w.configMap(w.known, seq), metav1.UpdateOptions{})
	switch {
	case err == nil:
		w.known = updated.ResourceVersion
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		w.known = "" // somebody else wrote: read and check again next time
	}
	return err
}

func (w *fencedWriter) configMap(resourceVersion string, seq int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.o.namespace, Name: w.o.writeConfigMap, ResourceVersion: resourceVersion},
		Data: map[string]string{
			"writer": w.o.identity,
			"token":  strconv.Itoa(int(w.token)),
			"seq":    strconv.Itoa(seq),
		},
	}
}

// printer writes the event lines on stdout, one at a time.
type printer struct {
	mu       sync.Mutex
	identity string
}

func (p *printer) print(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	// The event name comes first, then the identity, then the details.
	name, rest, _ := strings.Cut(line, " ")
	fmt.Println(strings.TrimSpace(name + " identity=" + p.identity + " " + rest))
}

// writeResult is how a fenced write's outcome is printed: ok, refused (this
// process no longer leads), fenced (the target saw a newer token) or error.
func writeResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, candidate.ErrNotLeader):
		return "refused"
	case errors.Is(err, errFenced):
		return "fenced"
	default:
		return "error"
	}
}
