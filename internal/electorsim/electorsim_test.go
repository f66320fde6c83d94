package electorsim_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cle-dev/cle/cmd/cle-controller/app"
	"github.com/cle-dev/cle/internal/stepped"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
	"github.com/cle-dev/cle/pkg/strategy"
)

// TestRealElectorsUnderFaults runs client-go's real LeaderElector over the
// real Lock, the candidate library behind it and replicas of the whole
// cle-controller process (app.RunWithClients: its own lock, its contention
// for kube-apiserver's controller's lock, the election controller), all in
// a synctest bubble whose virtual time every one of them reads, against a
// model API server (electorServer) reached through fake clientsets.
// Nothing of client-go or cle is modelled: the processes are their own
// goroutines, timers and informers.
//
// Each run draws a strategy (OldestEmulationVersion, or in one run in three
// cle.dev/Priority, whose priorities an operator changes during the
// faults), three candidate processes (their versions and how they
// run the elector: ReleaseOnCancel, ElectorContext, how long leader work
// takes to stop) and four minutes of faults: crashes
// and graceful stops (a process restarts 1 to 20 s later under a new
// name, as a Deployment's Pod does), partitions of one process (its
// requests fail and its watches stall), crashes, graceful stops and
// partitions of one of the two cle-controller replicas (a replaced one
// restarts under a new name; a partitioned active one acts on what it knew
// until its own lock lapses by its own rules), bursts of server errors
// (some after the write landed), slow answers, watches the server ends or expires (410, then a
// relist), and an operator deleting the Lease (and maybe applying a vacant
// copy at once). Then three quiet minutes.
//
// It checks what the adoption path promises:
//   - the leader work of two processes never overlaps in time, and each
//     term's leader work holds a higher token than the one before, across
//     the Lease's deletion and the controllers' restarts too;
//   - a fenced witness that leader work writes to never rejects the write
//     of leader work that still runs;
//   - once faults stop, some process leads within 90 s, and for the last
//     minute the same one leads without a break; under
//     OldestEmulationVersion, one as good as the best running process.
//
// Unlike make sim, a run is not replayable bit for bit: the order of
// goroutines woken at one instant and client-go's jitter come from the Go
// runtime; the seed fixes the faults' schedule and each process's options.
// A failure prints the run's seed and its log of what happened;
// -elector-sim.trace adds the processes' and the controllers' own logs.
func TestRealElectorsUnderFaults(t *testing.T) { runElectorSims(t, false) }

// runElectorSims runs the seeds of TestRealElectorsUnderFaults, or with
// group those of TestRealShardGroupsUnderFaults, and logs their figures.
func runElectorSims(t *testing.T, group bool) {
	seeds := *electorSimSeeds
	if testing.Short() {
		seeds = min(seeds, 2)
	}
	// apimachinery's error handlers keep the instant of the last error
	// they saw in a global and sleep for the rest of a millisecond after
	// it: an instant of another bubble (or of the real clock) has a
	// reflector that fails in this one sleep for years. Errors here are
	// the faults' doing, and nothing needs them slowed down.
	handlers := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(context.Context, error, string, ...any) {}}
	t.Cleanup(func() { utilruntime.ErrorHandlers = handlers })
	var total electorTotals
	start := time.Now()
	for i := range seeds {
		seed := *electorSimFirst + uint64(i)
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { total.add(runElectorSim(t, seed, group)) })
		})
	}
	kinds := slices.Sorted(maps.Keys(total.faults))
	mix := make([]string, len(kinds))
	for i, k := range kinds {
		mix[i] = fmt.Sprintf("%s=%d", k, total.faults[k])
	}
	what, terms, led := "elector simulation", "terms of leader work", "a leader"
	if group {
		what, terms, led = "shard group simulation", "shard terms", "every shard acted on"
	}
	t.Logf("%s: %d runs in %s, %s simulated: %d %s, %d witness writes (and %d through the write guard); after faults stopped, %s within %s at most (seed %d); faults: %s",
		what, seeds, time.Since(start).Round(time.Millisecond), time.Duration(seeds)*(simFaultPhase+simQuietPhase), total.terms, terms, total.writes, total.guardedWrites, led, total.toLeader.Round(time.Millisecond), total.toLeaderSeed, strings.Join(mix, " "))
}

// electorTotals add up the runs' figures.
type electorTotals struct {
	// writes counts the fenced witness's writes, guardedWrites those of
	// library candidates through their guarded clients.
	terms, writes, guardedWrites int
	// toLeader is the longest wait for a leader after faults stopped, in
	// the run of seed toLeaderSeed.
	toLeader     time.Duration
	toLeaderSeed uint64
	faults       map[string]int
}

func (a *electorTotals) add(r electorTotals) {
	a.terms += r.terms
	a.writes += r.writes
	a.guardedWrites += r.guardedWrites
	if r.toLeader > a.toLeader {
		a.toLeader, a.toLeaderSeed = r.toLeader, r.toLeaderSeed
	}
	if a.faults == nil {
		a.faults = map[string]int{}
	}
	for k, n := range r.faults {
		a.faults[k] += n
	}
}

var (
	electorSimSeeds = flag.Int("elector-sim.seeds", 20, "TestRealElectorsUnderFaults: runs")
	electorSimFirst = flag.Uint64("elector-sim.first", 1, "TestRealElectorsUnderFaults: first seed")
	electorSimTrace = flag.Bool("elector-sim.trace", false, "TestRealElectorsUnderFaults: log every run's events")
)

const (
	simNS            = "sim"
	simLease         = "lease"
	simLeaseDuration = 15 * time.Second
	simRenewDeadline = 10 * time.Second
	simRetryPeriod   = 2 * time.Second
	simFaultPhase    = 4 * time.Minute
	simQuietPhase    = 3 * time.Minute
	// simLeaderBound: after faults stop, some process leads within it (a
	// restart, a lease duration, a ping timeout and the candidate
	// freshness window, with room to spare).
	simLeaderBound = 90 * time.Second
	// simSteadyWindow: the last stretch of the run, led without a break.
	simSteadyWindow = time.Minute
)

// electorSim is one run: the server, the processes, the controller, and the
// record the invariants are checked on.
type electorSim struct {
	t    *testing.T
	seed uint64
	srv  *electorServer
	// rng draws the run's strategy, versions and faults, on the run's
	// goroutine only.
	rng *rand.Rand
	ctx context.Context

	mu    sync.Mutex
	start time.Time
	log   []string
	fail  []string
	// working is the process whose leader work runs, if any; lastToken
	// the token of the last leader work that started; witness the highest
	// token the fenced witness accepted.
	working   *electorProc
	lastToken int32
	witness   int32
	// workStarts are the instants leader work started, for the checks
	// after faults stop.
	workStarts []time.Time
	// quietAt is when faults stopped; ledAtQuiet, whether leader work ran
	// then.
	quietAt    time.Time
	ledAtQuiet bool
	res        electorTotals
	// strategy is the one every candidate asks for.
	strategy coordinationv1.CoordinatedLeaseStrategy
	// incarnations counts each slot's processes.
	incarnations [3]int
	// works counts the leader work goroutines that have not returned.
	works int

	procs []*electorProc
	// ctrls are the replicas of cle-controller running; ctrlN numbers
	// them as they start.
	ctrls []*electorCtrl
	ctrlN int
	wg    sync.WaitGroup

	// group is a shard group run's record (electorgroup_test.go), nil in a
	// run of one Lease.
	group *simGroup
}

// electorProc is one incarnation of a candidate process.
type electorProc struct {
	sim    *electorSim
	name   string
	slot   int
	emu    string
	cut    *cutoff
	cancel context.CancelFunc
	done   chan struct{}
	lk     *lock.Lock // nil for a library candidate
	// guarded, for a library candidate, writes to the witness's unfenced
	// part through the Candidate's WrapConfig.
	guarded *http.Client
	stopIn  time.Duration // how long leader work takes to return
	// rng draws the process's options and its restart after an exit: a
	// stream of its own, so that every incarnation of a slot is the same
	// in every run of a seed.
	rng  *rand.Rand
	opts string
	// declared is the shard count a group replica is built for.
	declared int
	crashed  bool // under sim.mu
	working  bool // under sim.mu
	token    int32
}

// cutoff is how the server treats one client: dead (every request fails,
// nothing more reaches the server) or partitioned until an instant.
type cutoff struct {
	// who names the client in the log.
	who         string
	mu          sync.Mutex
	dead        bool
	partitioned time.Time
}

func (c *cutoff) state() (dead bool, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead, c.partitioned
}

func runElectorSim(t *testing.T, seed uint64, group bool) electorTotals {
	logger := logr.Discard()
	var s *electorSim
	if *electorSimTrace {
		// The processes' and the controllers' own logs join the run's.
		logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(4), textlogger.Output(logWriter(func(line string) { s.logf("%s", line) }))))
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	s = &electorSim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), ctx: ctx, start: time.Now()}
	s.srv = newElectorServer(s, rand.New(rand.NewPCG(seed, 0x243f6a8885a308d3)))
	// One run in three is in portable mode, drawn from a stream of its
	// own so that the seed's other draws stay as they were.
	s.srv.portable = rand.New(rand.NewPCG(seed, 0x13198a2e03707344)).IntN(3) == 0
	s.logf("portable mode %t", s.srv.portable)

	s.strategy = coordinationv1.OldestEmulationVersion
	if group {
		s.group = newSimGroup(seed)
		s.strategy = s.group.strategy
	} else if s.rng.IntN(3) == 0 {
		// An operator ranks the candidates with priorities, and changes
		// them during the faults.
		s.strategy = strategy.PriorityName
	}
	s.logf("strategy %s", s.strategy)
	versions := []string{"1.34.0", "1.35.0", "1.36.0"}
	for slot := range 3 {
		emu := versions[s.rng.IntN(len(versions))]
		s.startProc(slot, 0, emu)
	}
	// Two replicas of cle-controller, as its Deployment runs them.
	for range 2 {
		s.startController()
	}

	// The fault phase: one fault every 5 to 30 s.
	for now := time.Duration(0); ; {
		d := time.Duration(5+s.rng.IntN(25)) * time.Second
		if now+d >= simFaultPhase {
			time.Sleep(simFaultPhase - now)
			break
		}
		time.Sleep(d)
		now += d
		kinds := []string{"crash", "stop", "partition", "controller-crash", "controller-stop", "controller-partition", "server-errors",
			"slow-server", "watches-closed", "watches-expired", "delete-lease", "recreate-lease"}
		if s.strategy == strategy.PriorityName {
			kinds = append(kinds, "annotate-priority")
		}
		if s.group != nil {
			kinds = append(kinds, "new-count")
		}
		// Every fault draws all it may need, whether or not it happens:
		// the seed fixes the schedule, whatever the processes do.
		kind, slot, span, back, prio := kinds[s.rng.IntN(len(kinds))], s.rng.IntN(3), time.Duration(1+s.rng.IntN(25))*time.Second,
			time.Duration(1+s.rng.IntN(20))*time.Second, strconv.Itoa(s.rng.IntN(10))
		switch kind {
		case "crash", "stop": // a process ends, and comes back
			p := s.current(slot)
			if p == nil {
				continue
			}
			s.fault(kind, "%s", p.name)
			s.endProc(p, kind == "stop")
			s.restart(p, back)
		case "partition": // a process is cut off from the API server
			p := s.current(slot)
			if p == nil {
				continue
			}
			s.fault(kind, "%s for %s", p.name, span)
			s.srv.partition(p.cut, span)
		case "controller-crash", "controller-stop":
			// A replica of cle-controller crashes or is stopped; its
			// Deployment starts another.
			c := s.replica(slot)
			if c == nil {
				continue
			}
			s.fault(kind, "%s", c.name)
			c.stop(kind == "controller-stop")
			s.after(back/4, func() { s.startController() })
		case "controller-partition":
			// A replica is cut off from the API server: the active one
			// acts on what it knew until its own lock lapses, by its own
			// rules, while a standby takes the locks over.
			c := s.replica(slot)
			if c == nil {
				continue
			}
			s.fault(kind, "%s for %s", c.name, span)
			s.srv.partition(c.cut, span)
		case "server-errors": // some after the write
			s.fault(kind, "for %s", span)
			s.srv.setErrors(0.3, span)
		case "slow-server":
			s.fault(kind, "for %s", span)
			s.srv.setSlow(span)
		case "watches-closed": // the server ends every watch
			s.fault(kind, "")
			s.srv.closeWatches(false)
		case "watches-expired": // the server's watch window moves past every watch: 410 Gone
			s.fault(kind, "")
			s.srv.closeWatches(true)
		case "delete-lease", "recreate-lease":
			// An operator deletes the Lease, and maybe applies it again
			// at once, without a holder (a GitOps tool's copy).
			s.fault(kind, "")
			s.srv.deleteLease(kind == "recreate-lease")
		case "annotate-priority": // an operator gives a candidate another priority
			p := s.current(slot)
			if p == nil {
				continue
			}
			s.fault(kind, "%s=%s", p.name, prio)
			s.srv.annotate(p.name, strategy.PriorityAnnotation, prio)
		case "new-count":
			// A release of the group's code built for another shard
			// count: the processes started from now on declare it, and
			// the crashes and stops to come roll it out.
			s.fault(kind, "%d", s.newCount())
		}
	}
	s.mu.Lock()
	s.quietAt, s.ledAtQuiet = time.Now(), s.working != nil
	if s.group != nil {
		s.ledAtQuiet = s.group.owned()
	}
	s.logLocked("faults stop")
	s.mu.Unlock()
	time.Sleep(simLeaderBound)
	if s.group != nil {
		s.checkShardsOwned()
	} else {
		s.checkLeads()
	}
	time.Sleep(simQuietPhase - simLeaderBound)
	if s.group != nil {
		s.checkGroupSteady()
	} else {
		s.checkSteady()
	}

	// The end: every process stops, then the controller's replicas.
	for slot := range 3 {
		if p := s.current(slot); p != nil {
			s.endProc(p, true)
		}
	}
	for c := s.replica(0); c != nil; c = s.replica(0) {
		c.stop(true)
	}
	cancel()
	s.wg.Wait()
	// client-go's Run returns without waiting for leader work.
	for s.workRuns() > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fail) > 0 {
		test := "TestRealElectorsUnderFaults"
		if group {
			test = "TestRealShardGroupsUnderFaults"
		}
		t.Errorf("seed %d: %s\nrerun: go test ./internal/electorsim -run '%s/^%d$' -elector-sim.first=%d -elector-sim.seeds=1\nlog:\n%s", seed, strings.Join(s.fail, "\n"), test, seed, seed, strings.Join(s.log, "\n"))
	} else if *electorSimTrace {
		t.Logf("seed %d: %d terms of leader work, highest token %d\n%s", seed, s.res.terms, s.lastToken, strings.Join(s.log, "\n"))
	}
	return s.res
}

// logWriter sends each line written to it to a function.
type logWriter func(string)

func (f logWriter) Write(b []byte) (int, error) {
	for line := range strings.Lines(string(b)) {
		f(strings.TrimRight(line, "\n"))
	}
	return len(b), nil
}

// workRuns is how many leader work goroutines have not returned.
func (s *electorSim) workRuns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.works
}

// fault counts and logs a fault.
func (s *electorSim) fault(kind, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.res.faults == nil {
		s.res.faults = map[string]int{}
	}
	s.res.faults[kind]++
	s.logLocked("FAULT %s %s", kind, fmt.Sprintf(format, args...))
}

// restart starts p's slot again d from now, under a new name, as p's
// Deployment would.
func (s *electorSim) restart(p *electorProc, d time.Duration) {
	s.mu.Lock()
	s.incarnations[p.slot]++
	n := s.incarnations[p.slot]
	s.mu.Unlock()
	s.after(d, func() { s.startProc(p.slot, n, p.emu) })
}

// processContext is the context a process named name runs with: the
// run's, its logger named after it.
func (s *electorSim) processContext(name string) (context.Context, context.CancelFunc) {
	return context.WithCancel(klog.NewContext(s.ctx, klog.LoggerWithName(klog.FromContext(s.ctx), name)))
}

// after runs fn d from now on a goroutine of the run.
func (s *electorSim) after(d time.Duration, fn func()) {
	s.wg.Go(func() {
		select {
		case <-time.After(d):
			fn()
		case <-s.ctx.Done():
		}
	})
}

func (s *electorSim) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logLocked(format, args...)
}

func (s *electorSim) logLocked(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%8.3fs ", time.Since(s.start).Seconds())+fmt.Sprintf(format, args...))
}

func (s *electorSim) failLocked(format string, args ...any) {
	msg := fmt.Sprintf("at %s: ", time.Since(s.start).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	s.logLocked("VIOLATION %s", msg)
	if len(s.fail) < 5 {
		s.fail = append(s.fail, msg) // the first ones; the log has them all
	}
}

// current is the process that runs in slot, nil while it is down.
func (s *electorSim) current(slot int) *electorProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range slices.Backward(s.procs) {
		if p.slot == slot {
			if p.cancel == nil {
				return nil
			}
			return p
		}
	}
	return nil
}

// startProc starts a candidate process: a client-go LeaderElector over a
// Lock, with leader work that writes to the witness.
func (s *electorSim) startProc(slot, incarnation int, emu string) {
	if s.ctx.Err() != nil {
		return
	}
	name := fmt.Sprintf("%c-%d", 'a'+slot, incarnation)
	p := &electorProc{sim: s, slot: slot, emu: emu, name: name, cut: &cutoff{who: name}, done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(s.seed, uint64(slot)<<32|uint64(incarnation)))}
	s.mu.Lock()
	releaseOnCancel, electorCtx := p.rng.IntN(2) == 0, p.rng.IntN(2) == 0
	p.stopIn = time.Duration(p.rng.IntN(900)) * time.Millisecond
	p.opts = fmt.Sprintf("emulation %s, ReleaseOnCancel %t, ElectorContext %t, work stops in %s", emu, releaseOnCancel, electorCtx, p.stopIn)
	s.mu.Unlock()

	// One process in three is a library candidate (candidate.New and Run):
	// drawn after the elector's options, so that those stay as they were.
	if s.group != nil {
		s.startReplica(p, releaseOnCancel)
		return
	}
	if p.rng.IntN(3) == 0 {
		s.startLibrary(p)
		return
	}
	s.mu.Lock()
	s.logLocked("start %s: %s", p.name, p.opts)
	s.mu.Unlock()

	// client-go's elector releases as its renew loop ends, not once leader
	// work has returned: the Lock learns that from Callbacks, and
	// ReleaseAfterLeaderWork stays off (it is a controller-runtime
	// manager's promise).
	lk, err := lock.New(lock.Config{Candidate: s.candidateConfig(p)})
	if err != nil {
		s.t.Error(err) // not the test's goroutine: no Fatal
		return
	}
	p.lk = lk
	ld, rd, rp := lk.Timings()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lk,
		LeaseDuration:   ld,
		RenewDeadline:   rd,
		RetryPeriod:     rp,
		ReleaseOnCancel: releaseOnCancel,
		Name:            simLease,
		Callbacks: lk.Callbacks(leaderelection.LeaderCallbacks{
			OnStartedLeading: p.work,
			OnStoppedLeading: func() {},
		}),
	})
	if err != nil {
		s.t.Error(err)
		return
	}
	ctx, cancel := s.processContext(p.name)
	if electorCtx {
		ctx = lk.ElectorContext(ctx)
	}
	s.running(p, cancel, func() bool {
		le.Run(ctx)
		// Close waits for the candidate to stop, however long (no
		// goroutine may outlive the run).
		_ = lk.Close(context.Background())
		return true
	})
}

// startLibrary starts p as a library candidate, as docs/library.md tells
// users to write one: Run, and leader work on the context
// OnStartedLeading gives, with the token TokenFrom reads from it, writing
// to the witness's fenced part with the token and to its unfenced part
// through a client of WrapConfig's, which the write guard covers.
func (s *electorSim) startLibrary(p *electorProc) {
	p.opts = fmt.Sprintf("emulation %s, a library candidate, work stops in %s", p.emu, p.stopIn)
	s.mu.Lock()
	s.logLocked("start %s: %s", p.name, p.opts)
	s.mu.Unlock()
	cfg := s.candidateConfig(p)
	cfg.Callbacks = candidate.Callbacks{OnStartedLeading: p.work}
	c, err := candidate.New(cfg)
	if err != nil {
		s.t.Error(err)
		return
	}
	s.runGuarded(p, c.WrapConfig, c.Run)
}

// runGuarded gives p the witness's client that wrap guards (a Candidate's
// or a Group's WrapConfig) and runs run, the library's Run, as p's process.
func (s *electorSim) runGuarded(p *electorProc, wrap func(*rest.Config) *rest.Config, run func(context.Context) error) {
	guarded, err := rest.HTTPClientFor(wrap(&rest.Config{Host: "https://witness.sim", Transport: witnessTransport{p}}))
	if err != nil {
		s.t.Error(err) // not the test's goroutine: no Fatal
		return
	}
	p.guarded = guarded
	ctx, cancel := s.processContext(p.name)
	s.running(p, cancel, func() bool {
		if err := run(ctx); err != nil {
			s.mu.Lock()
			s.failLocked("%s: Run: %v", p.name, err)
			s.mu.Unlock()
		}
		// Run returns on its own only when ctx is done.
		return false
	})
}

// candidateConfig is p's candidate: its name, emulation version and the
// run's strategy, timings and access layer.
func (s *electorSim) candidateConfig(p *electorProc) candidate.Config {
	return stepped.WithAccess(candidate.Config{
		Namespace:        simNS,
		LeaseName:        simLease,
		Identity:         p.name,
		BinaryVersion:    "1.36.0",
		EmulationVersion: p.emu,
		Strategy:         s.strategy,
		LeaseDuration:    simLeaseDuration,
		RenewDeadline:    simRenewDeadline,
		RetryPeriod:      simRetryPeriod,
	}, s.srv.access(p.cut))
}

// running records p as started, with cancel ending it, and runs it on a
// goroutine of the run. A process whose run returns on its own (run says
// so: a client-go elector returns on a lost term) exits, and its
// Deployment starts another.
func (s *electorSim) running(p *electorProc, cancel context.CancelFunc, run func() (canEnd bool)) {
	s.mu.Lock()
	p.cancel = cancel
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.wg.Go(func() {
		defer close(p.done)
		if !run() {
			return
		}
		s.mu.Lock()
		exited := p.cancel != nil
		p.cancel = nil
		s.mu.Unlock()
		if exited {
			cancel()
			s.logf("%s exits: its elector returned", p.name)
			s.restart(p, time.Duration(1+p.rng.IntN(10))*time.Second)
		}
	})
}

// endProc crashes p (it stops at once, and nothing more it sends reaches
// the server) or stops it as its Deployment would (its context ends: the
// elector releases, as configured, and the Lock closes).
func (s *electorSim) endProc(p *electorProc, graceful bool) {
	s.mu.Lock()
	cancel := p.cancel
	p.cancel = nil
	if !graceful {
		p.crashed = true
		if p.working {
			p.working = false
			if s.working == p {
				s.working = nil
			}
			s.logLocked("%s's leader work ends with the process", p.name)
		}
		if s.group != nil {
			s.group.crashed(s, p)
		}
	}
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	if !graceful {
		p.cut.mu.Lock()
		p.cut.dead = true
		p.cut.mu.Unlock()
	}
	cancel()
	if graceful {
		<-p.done
		s.logf("%s stopped", p.name)
	}
}

// work is the leader work: from the token of its term, a write to the
// witness every 0.3 to 2 s until its context ends, then p.stopIn to wind
// down.
func (p *electorProc) work(ctx context.Context) {
	s := p.sim
	var token int32
	ok := true
	if p.lk != nil {
		token, ok = p.lk.Candidate().Token()
	} else if token, ok = candidate.TokenFrom(ctx); !ok {
		panic("OnStartedLeading's context carries no token")
	}
	s.mu.Lock()
	s.works++
	defer func() {
		s.mu.Lock()
		s.works--
		s.mu.Unlock()
	}()
	if p.crashed {
		s.mu.Unlock()
		return
	}
	if !ok {
		// The term ended between the elector's acquisition and this
		// goroutine's start (the controller came to prefer another
		// holder): leader work checks Token, as the Lock's documentation
		// asks, and does nothing.
		s.logLocked("%s's elector leads, but its term already ended: no leader work", p.name)
		s.mu.Unlock()
		return
	}
	switch {
	case s.working != nil:
		s.failLocked("%s's leader work started (token %d) while %s's still runs (token %d)", p.name, token, s.working.name, s.working.token)
	case token <= s.lastToken:
		// cle-controller numbers every term above its fencing token
		// bound, across the Lease's deletion and its own restarts too.
		s.failLocked("%s's leader work started with token %d, not above the last term's %d (%s named it)", p.name, token, s.lastToken, s.srv.lastNamer())
	}
	s.logLocked("%s leads: leader work starts with token %d", p.name, token)
	p.working, p.token, s.working = true, token, p
	s.lastToken = max(s.lastToken, token)
	s.workStarts = append(s.workStarts, time.Now())
	s.res.terms++
	s.mu.Unlock()

	p.writeUntilDone(ctx, func() bool { return p.writeWitness(token) })
	time.Sleep(p.stopIn)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.working {
		p.working = false
		if s.working == p {
			s.working = nil
		}
		s.logLocked("%s's leader work returned", p.name)
	}
}

// writeUntilDone writes to the witness every 0.3 to 2 s until ctx ends or
// a write says to stop: half of the writes of a library process through its
// guarded client, the others with fenced.
func (p *electorProc) writeUntilDone(ctx context.Context, fenced func() bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(300+rand.IntN(1700)) * time.Millisecond):
		}
		if p.guarded != nil && rand.IntN(2) == 0 {
			if !p.guardedWrite(ctx) {
				return
			}
		} else if !fenced() {
			return
		}
	}
}

// guardedWrite is one write of a library candidate's leader work to the
// witness's unfenced part, through the Candidate's guarded client; false
// once leader work should return: the guard refused the write (the term
// ended) or ctx is done. A write the guard cancelled at the renew deadline
// it was sent under, while a renewal since kept the term, is only lost.
func (p *electorProc) guardedWrite(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://witness.sim/apis/example.com/v1/namespaces/"+simNS+"/writes", nil)
	if err != nil {
		panic(err)
	}
	resp, err := p.guarded.Do(req)
	switch {
	case err == nil:
	case errors.Is(err, candidate.ErrNotLeader) || ctx.Err() != nil:
		return false
	default:
		p.sim.logf("%s's guarded write did not arrive: %v", p.name, err)
		return true
	}
	_ = resp.Body.Close()
	return true
}

// witnessTransport carries a library candidate's guarded writes to the
// witness: each arrives after a latency unless its context ends first (the
// guard ends it with the leadership it was sent under), and the witness
// takes it only from the process whose leader work runs: from any other,
// two leaders acted at once.
type witnessTransport struct{ p *electorProc }

func (t witnessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.p
	s := p.sim
	select {
	case <-time.After(s.srv.latency()):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.crashed {
		return nil, errCutOff
	}
	if s.group != nil {
		s.group.guardedWrite(s, p, req.Context())
	} else if s.working != p {
		holder := "nobody"
		if s.working != nil {
			holder = s.working.name
		}
		s.failLocked("the witness received a guarded write of %s while %s leads", p.name, holder)
	}
	s.res.guardedWrites++
	return &http.Response{StatusCode: http.StatusCreated, Status: "201 Created", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// writeWitness is one write of leader work to the fenced witness; false
// once the process has crashed.
func (p *electorProc) writeWitness(token int32) bool {
	s := p.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.crashed {
		return false
	}
	if token < s.witness {
		if p.working {
			s.failLocked("the witness rejected token %d of %s, whose leader work still runs: it accepted %d", token, p.name, s.witness)
		}
		return true
	}
	s.witness = token
	s.res.writes++
	return true
}

// electorCtrl is one replica of cle-controller: the whole process
// (app.RunWithClients), with its own lock, its contention for the lock of
// kube-apiserver's election controller, and the election controller it runs
// while it holds them.
type electorCtrl struct {
	sim    *electorSim
	name   string
	cut    *cutoff
	cancel context.CancelFunc
	done   chan struct{}
}

// startController starts a replica of cle-controller with its defaults
// (16 workers among them) but for what the model server needs: the run's
// API mode, one namespace, its locks in it, no servers.
func (s *electorSim) startController() {
	if s.ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.ctrlN++
	c := &electorCtrl{sim: s, name: fmt.Sprintf("controller-%d", s.ctrlN), done: make(chan struct{})}
	s.mu.Unlock()
	c.cut = &cutoff{who: c.name}
	o := app.NewOptions()
	o.APIMode = string(access.ModeNative)
	if s.srv.portable {
		o.APIMode = string(access.ModePortable)
	}
	o.Namespaces = []string{simNS}
	o.LeaderElectResourceNS = simNS
	o.LeaderElectIdentity = c.name
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0"
	if err := o.Validate(); err != nil {
		s.t.Error(err) // maybe not the test's goroutine: no Fatal
		return
	}
	ctx, cancel := s.processContext(c.name)
	c.cancel = cancel
	s.mu.Lock()
	s.ctrls = append(s.ctrls, c)
	s.logLocked("%s starts", c.name)
	s.mu.Unlock()
	s.wg.Go(func() {
		defer close(c.done)
		clients := s.srv.clients(c.cut)
		// Once stopped, a replica that had not chosen its API mode yet
		// (its requests failing) says so; before, an error is a failure.
		if err := app.RunWithClients(ctx, o, clients, clients.Kube); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.failLocked("%s failed: %v", c.name, err)
			s.mu.Unlock()
		}
	})
}

// replica is the i-th running replica of cle-controller, counted round
// the running ones; nil when none runs.
func (s *electorSim) replica(i int) *electorCtrl {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ctrls) == 0 {
		return nil
	}
	return s.ctrls[i%len(s.ctrls)]
}

// stop crashes the replica (nothing more it sends reaches the server) or
// stops it as SIGTERM does (it releases its locks), and waits for it.
func (c *electorCtrl) stop(graceful bool) {
	s := c.sim
	s.mu.Lock()
	s.ctrls = slices.DeleteFunc(s.ctrls, func(r *electorCtrl) bool { return r == c })
	s.mu.Unlock()
	if !graceful {
		c.cut.mu.Lock()
		c.cut.dead = true
		c.cut.mu.Unlock()
	}
	c.cancel()
	<-c.done
	s.logf("%s stopped", c.name)
}

// checkLeads checks, simLeaderBound after faults stopped, that some
// process leads.
func (s *electorSim) checkLeads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.working == nil {
		s.failLocked("nobody leads %s after faults stopped", simLeaderBound)
		return
	}
	if !s.ledAtQuiet {
		for _, at := range s.workStarts {
			if !at.Before(s.quietAt) {
				s.res.toLeader, s.res.toLeaderSeed = at.Sub(s.quietAt), s.seed
				break
			}
		}
	}
}

// checkSteady checks, at the end, that one process has led for the last
// simSteadyWindow without a break.
//
// Under OldestEmulationVersion it checks too that the leader is as good as
// the best running process: the controller never holds such a candidate
// back (under cle.dev/Priority, --unsteady-window may, for minutes, after
// the best one's terms ended unreleased during the faults).
func (s *electorSim) checkSteady() {
	var names []string
	for slot := range 3 {
		if p := s.current(slot); p != nil {
			names = append(names, p.name)
		}
	}
	registered := s.srv.candidates(names)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.working == nil:
		s.failLocked("nobody leads at the end")
		return
	case time.Since(s.workStarts[len(s.workStarts)-1]) < simSteadyWindow:
		s.failLocked("leader work started %s before the end: the election had not settled", time.Since(s.workStarts[len(s.workStarts)-1]))
	}
	if s.strategy != coordinationv1.OldestEmulationVersion {
		return
	}
	var leader *coordinationv1beta1.LeaseCandidate
	for _, lc := range registered {
		if lc.Name == s.working.name {
			leader = lc
		}
	}
	best, _ := strategy.Best(strategy.OldestEmulationVersion{}, registered)
	switch {
	case len(registered) < len(names):
		s.failLocked("%d of the %d running processes are registered at the end", len(registered), len(names))
	case leader == nil:
		s.failLocked("the leader %s is not registered at the end", s.working.name)
	case strategy.OldestEmulationVersion{}.CompareMerit(leader, best) > 0:
		s.failLocked("%s (emulation %s) leads at the end, while %s (emulation %s) runs", leader.Name, leader.Spec.EmulationVersion, best.Name, best.Spec.EmulationVersion)
	}
}
