package app

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/internal/version"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
)

// Main parses args, runs the controller until SIGINT or SIGTERM, and returns
// the exit code: 0 on a clean stop, 1 on a runtime error, 2 on invalid flags.
func Main(args []string, stdout, stderr io.Writer) int {
	o := NewOptions()
	fs := pflag.NewFlagSet("cle-controller", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "cle-controller: %v\n", err)
		return 2
	}
	if o.Version {
		fmt.Fprintf(stdout, "cle-controller %s\n", version.Get())
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cle-controller: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := errors.Join(o.Validate(), logsapi.ValidateAndApply(o.Logs, nil)); err != nil {
		fmt.Fprintf(stderr, "cle-controller: invalid flags: %v\n", err)
		return 2
	}
	defer logs.FlushLogs()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)

	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		logger.Info("Shutting down", "gracePeriod", o.ShutdownGracePeriod)
		select {
		case err = <-done:
		case <-time.After(o.ShutdownGracePeriod):
			err = fmt.Errorf("shutdown took longer than %s", o.ShutdownGracePeriod)
		}
	}
	if err != nil {
		logger.Error(err, "cle-controller failed")
		return 1
	}
	logger.Info("Stopped")
	return 0
}

// Run runs the controller until ctx is done, with clients built from
// o.Kubeconfig.
func Run(ctx context.Context, o *Options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.UserAgent = "cle-controller/" + version.Get().Version
	cfg.WarningHandlerWithContext = &onceWarnings{}
	clients, err := access.NewClients(cfg)
	if err != nil {
		return err
	}
	// Events go through a client of their own, so that their rate limit is
	// their own: a burst of elections and their Events never makes an
	// election wait behind an Event.
	eventClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create the Events client: %w", err)
	}
	return RunWithClients(ctx, o, clients, eventClient)
}

// RunWithClients is Run with the clients given: clients for everything but
// Events, which go through eventClient. o.Kubeconfig and the client flags
// (--kube-api-qps, --kube-api-burst) are not read. The elector simulation
// (internal/electorsim) runs replicas of the whole process through it, over
// a model API server and in virtual time: the controller's own lock, its
// contention for kube-apiserver's controller's lock and what it elects.
func RunWithClients(ctx context.Context, o *Options, clients access.Clients, eventClient kubernetes.Interface) error {
	logger := klog.FromContext(ctx)
	clientMetrics := clientGo()
	client := clients.Kube

	// The probes answer from the start: live while the API mode cannot be
	// chosen yet (a missing CRD, a server being upgraded), not ready until
	// the controller runs.
	s := &state{}
	health := leaderelection.NewLeaderHealthzAdaptor(o.LeaderElectRenewDeadline)
	var servers sync.WaitGroup
	defer servers.Wait()
	// Returning stops the servers and watches first: an error must end the
	// process, not leave it serving probes that say it is fine.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := serve(ctx, &servers, o.HealthProbeBindAddress, map[string]http.Handler{
		"/healthz": check(func(r *http.Request) error { return health.Check(r) }),
		"/readyz":  check(func(*http.Request) error { return s.ready() }),
	}); err != nil {
		return err
	}

	acc, err := detectMode(ctx, clients, o.APIMode, time.Minute)
	if err != nil {
		return err
	}
	s.mode.Store(true)
	logger.Info("API mode chosen", "requested", o.APIMode, "mode", acc.Mode())

	registry := prometheus.NewRegistry()
	metrics := controller.NewMetrics()
	// The watch's lag outlives a leadership term: the next term starts with
	// what this one measured.
	lag := &controller.WatchLag{}
	lockName, sharedName := o.lockName(), o.sharedLockName(acc.Mode())
	var acting *actingWatch
	if sharedName == "" {
		acting = newActingWatch(client, acc.Mode(), o.LeaderElectResourceNS, lockName)
	} else {
		// Only cle-controller takes its own Lease, and kube-apiserver's
		// controller acts while it holds the shared one.
		acting = newActingWatch(client, access.ModePortable, o.LeaderElectResourceNS, lockName)
		acting.shared = newActingWatch(client, access.ModeNative, o.LeaderElectResourceNS, sharedName)
	}
	// Without its own leader election this replica elects whoever holds the
	// lock.
	acting.alwaysCle = !o.LeaderElect
	cs := append(processCollectors(acc.Mode(), lag, acting),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	errs := []error{metrics.Register(registry)}
	for _, c := range cs {
		errs = append(errs, registry.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if o.LeaderElect {
		clientMetrics.leader.WithLabelValues(leaderElectionName).Set(0) // a standby reports 0 from the start
	}
	servers.Go(func() { acting.run(ctx) })
	if acting.shared != nil {
		servers.Go(func() { acting.shared.run(ctx) })
	}

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: eventClient.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("start event recording: %w", err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "cle-controller")

	metricsHandlers := map[string]http.Handler{"/metrics": promhttp.HandlerFor(registry, promhttp.HandlerOpts{})}
	if o.Profiling {
		maps.Copy(metricsHandlers, profilingHandlers())
	}
	var metricsTLS *tls.Config
	if o.MetricsSecure && serving(o.MetricsBindAddress) {
		if metricsTLS, err = serverTLS(ctx, o.TLSCertFile, o.TLSPrivateKeyFile); err != nil {
			return err
		}
		auth, err := newMetricsAuth(client, reviewRetry())
		if err != nil {
			return err
		}
		for path, h := range metricsHandlers {
			metricsHandlers[path] = auth.wrap(h)
		}
	}
	if err := serveTLS(ctx, &servers, o.MetricsBindAddress, metricsTLS, metricsHandlers); err != nil {
		return err
	}

	// holding tells the controller whether this replica's own lock is
	// still held by its own clock (nil without leader election); shared,
	// in native mode, contends for kube-apiserver's controller's lock while
	// this replica holds its own.
	var (
		holding func() bool
		shared  *sharedLock
	)
	// term runs the election controller for one leadership term. It fails
	// only when the controller cannot be built, which ends the process: a
	// replica that holds the lock must elect, not just renew.
	term := func(ctx context.Context) error {
		informers := controller.NewInformersExcept(acc, o.ExcludeNamespaces, 0)
		if len(o.Namespaces) > 0 {
			informers = controller.NewInformers(acc, o.Namespaces, 0)
		}
		if err := trimCaches(informers); err != nil {
			return err
		}
		if o.ProofOfDeath {
			for _, ns := range o.podNamespaces() {
				informers.Pods = append(informers.Pods, controller.NewPodWatch(client, ns, o.PodLabelSelector))
			}
		}
		copts := o.controllerOptions()
		copts.Recorder, copts.Metrics, copts.WatchLag = recorder, metrics, lag
		copts.Holding = holding
		if shared != nil {
			copts.ElectsBuiltin = shared.held.holding
		}
		c, err := controller.New(acc, informers, copts)
		if err != nil {
			return fmt.Errorf("build the election controller: %w", err)
		}
		s.current.Store(c)
		defer s.current.Store(nil)
		waitInformers := informers.Start(ctx)
		if shared != nil {
			// The term's end lets kube-apiserver's lock go with it.
			defer shared.release()
		}
		c.Run(ctx, o.Workers)
		waitInformers()
		return nil
	}

	if !o.LeaderElect {
		s.leading.Store(true)
		return term(ctx)
	}
	id := o.LeaderElectIdentity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("leader election identity: %w", err)
		}
		id = host + "_" + string(uuid.NewUUID())
	}
	leaseLock := newLeaseLock(client, o.LeaderElectResourceNS, lockName, id)
	var lock resourcelock.Interface = leaseLock
	if o.watches(o.LeaderElectResourceNS) {
		// Its renewals, every retry period, measure the watch's lag when
		// no election writes anything.
		lock = lagLock{Interface: leaseLock, lag: lag, meta: leaseLock.LeaseMeta}
	}
	held := &heldLock{Interface: lock, renewDeadline: o.LeaderElectRenewDeadline, now: time.Now}
	lock = held
	holding = held.holding
	if sharedName != "" {
		shared = newSharedLock(client, o, sharedName, id, held.holding, acting.shared.holderIsCle)
		// Every replica follows kube-apiserver's lock from the start, and
		// takes it only while it holds its own: a standby that takes over
		// from a replica that died holding both has seen the shared lock
		// unrenewed since, and takes it at once.
		servers.Go(func() {
			shared.run(ctx, func() {
				if c := s.current.Load(); c != nil {
					c.Reconsider()
				}
			})
		})
		// While another cle-controller holds the shared lock (a replica of
		// an older release during an upgrade, which elects every Lease under
		// it), this one writes nothing.
		holding = func() bool {
			a := acting.shared.current()
			return held.holding() && (a.Controller != access.ActingCle || a.Holder == id)
		}
	}
	// Leadership is lost, not fatal: stop the controller cleanly and rejoin
	// the election.
	for ctx.Err() == nil {
		var (
			termDone chan struct{}
			termErr  error
		)
		electionCtx, stopElection := context.WithCancel(ctx)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   o.LeaderElectLeaseDuration,
			RenewDeadline:   o.LeaderElectRenewDeadline,
			RetryPeriod:     o.LeaderElectRetryPeriod,
			ReleaseOnCancel: true,
			Name:            leaderElectionName,
			WatchDog:        health,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					termDone = make(chan struct{})
					defer close(termDone)
					s.leading.Store(true)
					defer s.leading.Store(false)
					logger.Info("Leading: starting the election controller", "identity", id, "lock", klog.KRef(leaseLock.LeaseMeta.Namespace, leaseLock.LeaseMeta.Name))
					if termErr = term(ctx); termErr != nil {
						stopElection() // release the lock and return
					}
				},
				OnStoppedLeading: func() { logger.Info("Not leading", "identity", id) },
				OnNewLeader:      func(holder string) { logger.V(2).Info("Controller leader observed", "holder", holder) },
			},
		})
		if err != nil {
			stopElection()
			return fmt.Errorf("leader election: %w", err)
		}
		health.SetLeaderElection(le)
		le.Run(electionCtx)
		stopElection()
		if termDone != nil {
			<-termDone // the callback runs on its own goroutine
		}
		if termErr != nil {
			return termErr
		}
	}
	return nil
}

// detectMode chooses the API mode. While it cannot (the CRD is not installed
// yet, the server does not serve what an explicit mode needs, the server is
// unreachable), it says why and tries again with a growing pause up to
// maxRetry, rather than exit and be restarted in a loop; only an invalid mode
// or the end of ctx ends it.
func detectMode(ctx context.Context, clients access.Clients, mode string, maxRetry time.Duration) (access.Interface, error) {
	logger := klog.FromContext(ctx)
	if mode != access.ModeAuto {
		if _, err := access.ParseMode(mode); err != nil {
			return nil, err
		}
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: maxRetry}
	for {
		acc, err := access.Detect(ctx, clients, mode)
		if err == nil {
			return acc, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("choose API mode %q: %w", mode, err)
		}
		pause := backoff.Step()
		logger.Error(err, "Cannot choose the API mode yet; retrying", "requested", mode, "retryIn", pause.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("choose API mode %q: %w", mode, err)
		case <-time.After(pause):
		}
	}
}

// state is what the probes report.
type state struct {
	mode    atomic.Bool // the API mode is chosen
	leading atomic.Bool
	current atomic.Pointer[controller.Controller]
}

// ready: not before the API mode is chosen; then a standby replica is ready,
// and the active one once its caches synced.
func (s *state) ready() error {
	if !s.mode.Load() {
		return errors.New("the API mode is not chosen yet")
	}
	if !s.leading.Load() {
		return nil
	}
	if c := s.current.Load(); c == nil || !c.HasSynced() {
		return errors.New("caches not synced")
	}
	return nil
}

func check(f func(*http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

// processCollectors are the metrics of the process beside the election
// controller's own (controller.Metrics) and Go's and the process's: what it
// is, which controller acts, how late its watch and writes are, and
// client-go's.
func processCollectors(mode access.Mode, lag *controller.WatchLag, acting *actingWatch) []prometheus.Collector {
	watchLag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cle_watch_lag_seconds",
		Help: "How far behind the Lease watch is: how long the oldest of the controller's own Lease writes and lock renewals not delivered yet has been outstanding."},
		func() float64 { return lag.At(time.Now()).Seconds() })
	writeDelay := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cle_write_delay_seconds",
		Help: "How late a write made now may show: the longest the controller's own Lease writes and lock renewals took from sending to delivery in its watch in the last 10s (forgotten once a later write shows within 250ms), or cle_watch_lag_seconds if longer. A holder's Lease expires this much later, a first election gathers this much longer, and above 1s pings are paced (cle_ping_budget)."},
		func() float64 { return lag.Spread(time.Now()).Seconds() })
	modeInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cle_api_mode_info", Help: "1, labelled with the API mode in use: native or portable.",
		ConstLabels: prometheus.Labels{"mode": string(mode)}})
	modeInfo.Set(1)
	build := version.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cle_build_info", Help: "1, labelled with the version, source revision and Go version of this binary.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "go_version": build.GoVersion}})
	buildInfo.Set(1)
	return append([]prometheus.Collector{modeInfo, buildInfo, watchLag, writeDelay, acting.collector()}, clientGo().collectors()...)
}

// leaderElectionName names the controller's own leader election in
// leader_election_master_status.
const leaderElectionName = "cle-controller"

// serving tells whether a bind-address flag asks for a server: "0" or ""
// disables it.
func serving(addr string) bool { return addr != "" && addr != "0" }

// serve serves handlers on addr until ctx is done (unless !serving(addr)).
func serve(ctx context.Context, wg *sync.WaitGroup, addr string, handlers map[string]http.Handler) error {
	return serveTLS(ctx, wg, addr, nil, handlers)
}

// serveTLS is serve over TLS when tlsConfig is not nil.
func serveTLS(ctx context.Context, wg *sync.WaitGroup, addr string, tlsConfig *tls.Config, handlers map[string]http.Handler) error {
	if !serving(addr) {
		return nil
	}
	mux := http.NewServeMux()
	paths := make([]string, 0, len(handlers))
	for path, h := range handlers {
		mux.Handle(path, h)
		paths = append(paths, path)
	}
	slices.Sort(paths)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	scheme := "http"
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
		scheme = "https"
	}
	klog.FromContext(ctx).Info("Serving", "address", l.Addr().String(), "paths", paths, "scheme", scheme)
	wg.Go(func() { _ = srv.Serve(l) })
	wg.Go(func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})
	return nil
}

// heldLock is the controller's own lock, noting when this replica's last
// successful acquisition or renewal of it was sent. client-go's elector
// stops leading once it has not renewed for the renew deadline, but a
// replica that resumes from a pause (or is cut off) can run election steps
// before its elector notices; holding tells the controller not to write
// then (controller.Options.Holding), by the same rule.
type heldLock struct {
	resourcelock.Interface
	renewDeadline time.Duration
	now           func() time.Time
	sent          atomic.Pointer[time.Time]
	// regained, if set, is called after each write that makes this
	// replica hold the lock when it did not: an acquisition, and a renewal
	// that lands after holding lapsed while client-go's elector still led
	// (it gives up up to a retry period later than holding ends).
	regained func()
}

func (l *heldLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.now()
	err := l.Interface.Create(ctx, ler)
	l.note(ler, sent, err)
	return err
}

func (l *heldLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.now()
	err := l.Interface.Update(ctx, ler)
	l.note(ler, sent, err)
	return err
}

// note records a write that named this replica holder and succeeded; a
// release (no holder) ends the holding at once.
func (l *heldLock) note(ler resourcelock.LeaderElectionRecord, sent time.Time, err error) {
	switch {
	case err != nil:
	case ler.HolderIdentity == l.Identity():
		was := l.holding()
		l.sent.Store(&sent)
		if !was && l.regained != nil && l.holding() {
			l.regained()
		}
	default:
		l.sent.Store(nil) // released
	}
}

// holding reports whether the last successful renewal was sent within the
// renew deadline, counted as the candidates count theirs (lead.Elapsed): a
// replica that wakes from a suspend sees the whole gap, and a wall clock set
// back gives it no more time.
func (l *heldLock) holding() bool {
	sent := l.sent.Load()
	return sent != nil && lead.Elapsed(l.now(), *sent) < l.renewDeadline
}

// lagLock is the controller's own lock, whose successful renewals it tells
// the watch-lag meter about.
type lagLock struct {
	resourcelock.Interface
	lag  *controller.WatchLag
	meta metav1.ObjectMeta
}

func (l lagLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	failed := l.lag.ExpectRenewal(l.meta.Namespace, l.meta.Name, ler.RenewTime.Time, time.Now())
	err := l.Interface.Update(ctx, ler)
	if err != nil {
		failed()
	}
	return err
}

// newLeaseLock is a lock of this replica's, id, on the Lease ns/name,
// labelled as cle's: the label tells this controller's holders from
// kube-apiserver's on the lock they share in native mode.
func newLeaseLock(client kubernetes.Interface, ns, name, id string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		Labels:     map[string]string{access.ControllerHolderLabel: access.ControllerHolderHash(id)},
	}
}

// sharedLock is, in native mode, the replica's contention for the lock of
// the election controller built into kube-apiserver. It runs for the life of
// the process, but takes or renews the lock only while the replica holds its
// own (see deferringLock); while it holds this one too, the replica elects
// the Leases of OldestEmulationVersion as well as those of cle's strategies.
type sharedLock struct {
	ref                                 klog.ObjectRef
	held                                *heldLock
	leaseDuration, renewDeadline, retry time.Duration

	mu          sync.Mutex
	cancelRound context.CancelFunc
}

// newSharedLock is the contention of replica id for the lock name in the
// namespace of its own: it takes the lock only while ownHeld, and defers to
// kube-apiserver's electors unless cleHolder says the lock's holder is a
// cle-controller.
func newSharedLock(client kubernetes.Interface, o *Options, name, id string, ownHeld func() bool, cleHolder func(string) bool) *sharedLock {
	lock := newLeaseLock(client, o.LeaderElectResourceNS, name, id)
	deferring := &deferringLock{Interface: lock, extra: o.LeaderElectLeaseDuration, now: time.Now, ownHeld: ownHeld, cleHolder: cleHolder}
	return &sharedLock{
		ref:           klog.KRef(o.LeaderElectResourceNS, name),
		held:          &heldLock{Interface: deferring, renewDeadline: o.LeaderElectRenewDeadline, now: time.Now},
		leaseDuration: o.LeaderElectLeaseDuration, renewDeadline: o.LeaderElectRenewDeadline, retry: o.LeaderElectRetryPeriod,
	}
}

// run contends for the lock until ctx is done, in rounds that release ends
// (releasing the lock if held). Each time the replica holds the lock again
// (l.held.holding turns true: an acquisition, or a renewal after holding
// lapsed while the elector still led) it calls heldAgain: the Leases of
// OldestEmulationVersion left alone meanwhile are its to elect again.
func (l *sharedLock) run(ctx context.Context, heldAgain func()) {
	logger := klog.FromContext(ctx)
	l.held.regained = heldAgain
	for ctx.Err() == nil {
		round, cancel := context.WithCancel(ctx)
		l.mu.Lock()
		l.cancelRound = cancel
		l.mu.Unlock()
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            l.held,
			LeaseDuration:   l.leaseDuration,
			RenewDeadline:   l.renewDeadline,
			RetryPeriod:     l.retry,
			ReleaseOnCancel: true,
			Name:            sharedElectionName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					logger.Info("Holding the lock of kube-apiserver's election controller: electing the Leases of OldestEmulationVersion too", "lock", l.ref)
					<-ctx.Done()
				},
				OnStoppedLeading: func() {
					logger.Info("Not holding the lock of kube-apiserver's election controller: electing only the Leases of cle's strategies", "lock", l.ref)
				},
				OnNewLeader: func(holder string) {
					logger.V(2).Info("Holder of kube-apiserver's election controller's lock observed", "lock", l.ref, "holder", holder)
				},
			},
		})
		if err != nil { // the timings were validated with the own lock's
			cancel()
			logger.Error(err, "Cannot contend for the lock of kube-apiserver's election controller", "lock", l.ref)
			return
		}
		le.Run(round)
		cancel()
	}
}

// release ends the current round: the lock is released if held, and the
// next round contends again.
func (l *sharedLock) release() {
	l.mu.Lock()
	cancel := l.cancelRound
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// sharedElectionName names the contention for kube-apiserver's election
// controller's lock in leader_election_master_status.
const sharedElectionName = "leader-election-controller"

// deferringLock is the shared lock as cle-controller contends for it: it
// takes or renews it only while the replica holds its own lock, and it takes
// it from another holder, unless a cle-controller replica, only once that
// holder's record has not changed for the record's lease duration and extra
// more, while client-go's
// elector would take it after its own lease duration. kube-apiserver's
// electors, which retry every couple of seconds, so get it back first after
// a kube-apiserver restart, and cle-controller elects the Leases of
// OldestEmulationVersion only when no kube-apiserver renews the lock. A
// lock released by its holder counts as that holder's: kube-apiserver
// releases it when it shuts down, and its next process, which retries every
// couple of seconds, takes it back first; so a released lock is taken at
// once only when the holder this replica last saw in it was a cle-controller
// replica, and otherwise, also when this replica never saw a holder, after
// the same wait from the release. No lock at all is created at once. The
// wait counts only time over which the lock could be read.
type deferringLock struct {
	resourcelock.Interface
	extra time.Duration
	now   func() time.Time
	// ownHeld: the replica holds its own lock; it takes or renews this one
	// only then. cleHolder: the holder named is a cle-controller replica,
	// which it need not defer to.
	ownHeld   func() bool
	cleHolder func(holder string) bool

	mu      sync.Mutex
	raw     []byte
	record  resourcelock.LeaderElectionRecord
	changed time.Time // when raw was first read
	// lastHolder is the last holder read in the lock, kept over its
	// release; lastCle: it was this replica or another cle-controller's.
	lastHolder string
	lastCle    bool
}

func (l *deferringLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	var holder string
	var cle bool
	if err == nil && rec.HolderIdentity != "" {
		holder = rec.HolderIdentity
		cle = holder == l.Identity() || l.cleHolder(holder)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		// Unchanged is counted only over reads: once the lock can be read
		// again (the API server back from a restart), its holder has the
		// whole wait to renew it.
		l.raw = nil
	case !bytes.Equal(raw, l.raw):
		l.raw, l.record, l.changed = raw, *rec, l.now()
	}
	if holder != "" {
		l.lastHolder, l.lastCle = holder, cle
	}
	return rec, raw, err
}

func (l *deferringLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == l.Identity() && !l.ownHeld() {
		return errNotActive
	}
	return l.Interface.Create(ctx, ler)
}

func (l *deferringLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == l.Identity() && !l.ownHeld() {
		return errNotActive
	}
	if held, wait := l.deferFor(ler); wait > 0 {
		return fmt.Errorf("lock %s until lately: leaving it to kube-apiserver's electors for %s more", held, wait.Round(time.Millisecond))
	}
	return l.Interface.Update(ctx, ler)
}

// errNotActive refuses to take or renew kube-apiserver's controller's lock
// while the replica does not hold its own.
var errNotActive = errors.New("this replica does not hold its own lock: not taking kube-apiserver's election controller's lock")

// deferFor is how much longer a write of ler that takes the lock from
// another holder, or after another holder released it, waits, and says
// which holder (as "held by X" or "released by X").
func (l *deferringLock) deferFor(ler resourcelock.LeaderElectionRecord) (string, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Get read the record with its holder, if any, as lastHolder and judged
	// whether that holder is cle-controller's: held or released, the lock
	// counts as that holder's.
	if ler.HolderIdentity != l.Identity() || l.lastCle {
		return "", 0
	}
	held := "held by " + l.lastHolder
	if l.record.HolderIdentity == "" {
		held = "released by " + cmp.Or(l.lastHolder, "a holder not seen")
	}
	hold := time.Duration(l.record.LeaseDurationSeconds)*time.Second + l.extra
	return held, hold - lead.Elapsed(l.now(), l.changed)
}
