package controller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"regexp"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/internal/simworld"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/strategy"
)

// The deterministic simulation: the controller's real code (event handlers,
// records, decide, apply) runs for one or more replicas, pkg/candidate
// itself for each library candidate, and the library's real rules
// (internal/lead) for each adopter's process, against a model API server,
// all driven by one seed. Real code that makes requests runs on goroutines
// (coroutines, simThread) that take turns with the simulation, so that requests are in
// flight while events arrive and a run stays deterministic. The model server does
// compare-and-swap on resourceVersion and delivers each watcher's events
// late (later still while writes are frequent, as a loaded server does) and
// in order per resource, but in no order across resources. Requests take
// time and fail (409 from races, 429, 503, timeouts after the write was
// made); Leases and LeaseCandidates are deleted; candidates pause
// (SIGSTOP), crash, restart and stop gracefully; the active controller
// fails over to a replica that remembers nothing, or pauses and comes back
// after a standby took over, acting on what it knew until it notices; every
// process has its own clock, with an offset and a bounded drift.
// Invariants are checked on true time at every event. A failing seed prints
// its trace and replays exactly with -sim.seed.
//
//	go test ./pkg/controller -run TestSimulation -sim.seeds=2000
//	go test ./pkg/controller -run TestSimulation -sim.seed=1234 -v   # replay, with the trace

var (
	simSeeds   = flag.Int("sim.seeds", 0, "simulation: number of seeds to run (0: as many as -sim.budget allows)")
	simBudget  = flag.Duration("sim.budget", 5*time.Second, "simulation: wall-clock budget when -sim.seeds is 0")
	simFirst   = flag.Uint64("sim.first", 1, "simulation: first seed")
	simSeed    = flag.Uint64("sim.seed", 0, "simulation: replay this one seed and print its trace")
	simWorkers = flag.Int("sim.workers", goruntime.GOMAXPROCS(0), "simulation: seeds run at once")
)

// Protocol timings, as client-go's and the library's defaults.
const (
	simLeaseDuration = 15 * time.Second
	simRenewDeadline = 10 * time.Second
	simRetryPeriod   = 2 * time.Second
	simCandRenew     = 5 * time.Minute
	simNS            = "sim"
	simLease         = "lease"
	simFaultPhase    = 6 * time.Minute
	simQuietPhase    = 4 * time.Minute
	// One run in simLongEvery has a quiet phase of simLongQuiet to
	// simLongQuiet*3 instead: long enough for the candidate TTL (30m), the
	// garbage collection of a candidate that left (10m) and a deleted
	// Lease's record (30m) to run out, with every process renewing on its
	// own schedule meanwhile.
	simLongEvery = 20
	simLongQuiet = 45 * time.Minute
	// simMaxDrift bounds how fast or slow any process's clock runs.
	simMaxDrift = 0.005
	// The controller's own leader election: a standby takes over a lease
	// duration after the active replica last renewed; a replica notices
	// that it lost within a retry period of running again.
	simControllerLease         = 15 * time.Second
	simControllerRenewDeadline = 10 * time.Second
	simControllerRetryPeriod   = 2 * time.Second
)

// The liveness bounds the simulation checks once faults stop: some
// candidate leads within simLeaderBound, and the best live candidate within
// simBestBound of becoming the best. The leader's bound is a lease duration
// (the last holder's term running out) and a ping timeout: the best
// candidate may be down with its LeaseCandidate left behind (a crash, or a
// graceful stop whose delete failed), and only a ping that goes unanswered
// tells the controller to elect the next (seed 20817).
const (
	simLeaderBound = simLeaseDuration + DefaultPingTimeout + time.Second
	simBestBound   = simLeaderBound + 2*time.Second
	// simDeadDeciderDelay is what a dead candidate asking for another
	// strategy (addDeadCandidate) adds to both: a replica that does not
	// know it yet asks it, and elects once its ping has timed out.
	simDeadDeciderDelay = DefaultPingTimeout
)

// simGCPercent is the garbage collector's target during a simulation's
// seeds (see debug.SetGCPercent): 300 seeds took 21.3 CPU-seconds at the
// default 100 and 14.0 at 400 (52 and 67 MB of memory at most); 1,000 saved
// nothing more.
const simGCPercent = 400

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		r := runSim(*simSeed, true)
		t.Logf("seed %d: %s\n%s", *simSeed, r.summary(), strings.Join(r.trace, "\n"))
		if r.violation != "" {
			t.Fatalf("seed %d: %s", *simSeed, r.violation)
		}
		return
	}
	if *simFirst == 0 {
		t.Fatal("-sim.first: seeds start at 1 (0 stands for no failing seed)")
	}
	// The runs allocate much and keep little: with the collector's default
	// target a third of their CPU went to collecting. Four times the live
	// heap costs some tens of megabytes.
	defer debug.SetGCPercent(debug.SetGCPercent(simGCPercent))
	report := os.Getenv("SIM_REPORT") != ""
	// A run with a checkpoint goes on where its last sitting ended, and
	// -sim.seeds counts the seeds of all its sittings.
	run := simRun{First: *simFirst, Next: *simFirst}
	n := *simSeeds
	if *simCheckpoint != "" {
		var err error
		if run, err = loadSimRun(*simCheckpoint, *simFirst); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if n -= run.seeds(); n <= 0 {
				msg := fmt.Sprintf("%s; the run's %d seeds are done (%s)", run.summary(), *simSeeds, *simCheckpoint)
				t.Log(msg)
				if report {
					fmt.Println(msg)
				}
				return
			}
		}
	}
	var sitting simResult
	start := time.Now()
	var progress func(next uint64, passed *simResult)
	if report || *simCheckpoint != "" {
		// A long run says how far it has come once a minute, and keeps
		// its checkpoint as often.
		last := start
		progress = func(next uint64, passed *simResult) {
			now := time.Now()
			if now.Sub(last) < simProgressEvery {
				return
			}
			last = now
			if report {
				fmt.Printf("simulation: %s so far: seeds %d to %d passed, %d elections (%.0f/s)\n", now.Sub(start).Round(time.Second), run.Next, next-1,
					passed.elections, float64(passed.elections)/now.Sub(start).Seconds())
			}
			if *simCheckpoint != "" {
				if err := run.after(*passed, next, now.Sub(start)).save(*simCheckpoint); err != nil {
					t.Error(err)
				}
			}
		}
	}
	// -sim.seeds and -sim.budget given together: whichever ends first.
	budget := *simBudget
	if n > 0 && !simFlagSet("sim.budget") {
		budget = 0
	}
	seeds, failed := runSeeds(run.Next, n, budget, *simWorkers, &sitting, progress)
	elapsed := time.Since(start)
	if *simCheckpoint != "" {
		// The seeds below a failing one passed: the checkpoint keeps them.
		next := run.Next + uint64(seeds)
		if failed != 0 {
			next = failed
		}
		run = run.after(sitting, next, elapsed)
		run.Sittings++
		if err := run.save(*simCheckpoint); err != nil {
			t.Error(err)
		}
	}
	if failed != 0 {
		r := runSim(failed, true)
		t.Fatalf("seed %d: %s\nreplay: go test ./pkg/controller -run TestSimulation -sim.seed=%d -v\n%s", failed, r.violation, failed, strings.Join(tail(r.trace, 200), "\n"))
	}
	msg := fmt.Sprintf("simulation: %d seeds in %s (%.0f schedules/s, %.0f elections/s), %s", seeds, elapsed.Round(time.Millisecond),
		float64(seeds)/elapsed.Seconds(), float64(sitting.elections)/elapsed.Seconds(), sitting.summary())
	if *simCheckpoint != "" {
		msg += "\n" + run.summary()
	}
	t.Log(msg)
	if report {
		fmt.Println(msg)
	}
	if report && seeds > 0 {
		// Runs of one seed range can be continued where this one ended.
		switch {
		case *simCheckpoint != "" && *simSeeds > 0 && run.seeds() >= *simSeeds:
			fmt.Printf("simulation: seeds %d to %d this sitting; the run's %d seeds are done (%s)\n", run.Next-uint64(seeds), run.Next-1, *simSeeds, *simCheckpoint)
		case *simCheckpoint != "":
			fmt.Printf("simulation: seeds %d to %d this sitting; the next sitting goes on from seed %d with the same CHECKPOINT\n", run.Next-uint64(seeds), run.Next-1, run.Next)
		default:
			fmt.Printf("simulation: seeds %d to %d; the next run goes on from -sim.first=%d (make sim FIRST=%d)\n", *simFirst, *simFirst+uint64(seeds)-1,
				*simFirst+uint64(seeds), *simFirst+uint64(seeds))
		}
	}
}

// simProgressEvery is how often a reported run prints its progress.
const simProgressEvery = time.Minute

// simFlagSet says whether the command line set flag name.
func simFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runSeeds runs seeds from first on, n of them (if n > 0) and as many as
// start within budget (if budget > 0), on workers goroutines; each seed's
// run is the same on any of them. It adds the figures of the seeds that
// passed to total in seed order, calls progress (if not nil) after each
// run with the lowest seed not yet added and total, and returns how many
// seeds ran and the lowest one that found a violation (0: none). Seeds
// are started in order, so every seed below the failing one has run, and
// total holds exactly the seeds below it.
func runSeeds(first uint64, n int, budget time.Duration, workers int, total *simResult, progress func(next uint64, total *simResult)) (ran int, failed uint64) {
	start := time.Now()
	var mu sync.Mutex
	next, added := first, first
	// finished holds the runs that ended before a lower seed's.
	finished := map[uint64]simResult{}
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if failed != 0 || n > 0 && ran >= n || budget > 0 && time.Since(start) > budget {
			return 0, false
		}
		seed := next
		next++
		ran++
		return seed, true
	}
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				seed, ok := take()
				if !ok {
					return
				}
				r := runSim(seed, false)
				mu.Lock()
				if r.violation != "" {
					if failed == 0 || seed < failed {
						failed = seed
					}
				} else {
					finished[seed] = r
				}
				for r, ok := finished[added]; ok && (failed == 0 || added < failed); r, ok = finished[added] {
					total.add(r)
					delete(finished, added)
					added++
				}
				if progress != nil {
					progress(added, total)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ran, failed
}

func tail(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// simResult is what one or more runs did.
type simResult struct {
	elections, terms, handovers, controllerWrites, pings int
	// witnessWrites are leader work's writes that reached the witness's
	// fenced part; fenced, those it rejected for an older token;
	// guardedWrites, those the write guard let through to its unfenced
	// part.
	witnessWrites, fenced, guardedWrites int
	// collected counts candidates the garbage collector deleted;
	// identityInUse, library processes that found their Identity taken by
	// another Lease's candidate when they started.
	collected, identityInUse int
	// holderExits counts the terms the controllers ended on the kubelet's
	// report that the holder's process exited.
	holderExits int
	// fleets counts the runs with a fleet (see addFleet), firstHolders
	// the first holders checked in them, and maxQueued is the longest a
	// request waited in their servers' queues.
	fleets, firstHolders int
	maxQueued            time.Duration
	// simulated is the simulated time the runs covered.
	simulated time.Duration
	// toLeader and toBest are the longest waits, once faults stopped, for
	// some candidate and for the best one to lead.
	toLeader, toBest time.Duration
	// spacedRuns counts the spaced runs, rounds the faults they judged
	// one by one, and toFailover is the longest wait for another
	// candidate to lead while a fault that struck one lasted.
	spacedRuns, rounds int
	toFailover         time.Duration
	// swarms counts the swarm runs (see simSwarm), nudges the nudged runs
	// and nudged the branches their Hooks took, by point (see simNudges).
	swarms, nudges int
	nudged         map[string]int
	// haRuns counts the runs with several kube-apiservers (see simHA).
	haRuns int
	// recreated counts the Leases a controller created again, naming a
	// holder, after terms were led; boundRaises, the writes that raised the
	// controllers' fencing token bound.
	recreated, boundRaises int
	faults                 map[string]int
	// adopters counts what the processes over pkg/lock did: their terms,
	// renewals not counted for being slow, and what their releases did.
	adopters  map[string]int
	violation string
	trace     []string
}

func (r *simResult) add(o simResult) {
	r.elections += o.elections
	r.terms += o.terms
	r.handovers += o.handovers
	r.controllerWrites += o.controllerWrites
	r.pings += o.pings
	r.witnessWrites += o.witnessWrites
	r.guardedWrites += o.guardedWrites
	r.fenced += o.fenced
	r.collected += o.collected
	r.identityInUse += o.identityInUse
	r.holderExits += o.holderExits
	r.fleets += o.fleets
	r.firstHolders += o.firstHolders
	r.maxQueued = max(r.maxQueued, o.maxQueued)
	r.simulated += o.simulated
	r.toLeader, r.toBest = max(r.toLeader, o.toLeader), max(r.toBest, o.toBest)
	r.spacedRuns += o.spacedRuns
	r.swarms += o.swarms
	r.nudges += o.nudges
	r.haRuns += o.haRuns
	r.recreated += o.recreated
	r.boundRaises += o.boundRaises
	r.rounds += o.rounds
	r.toFailover = max(r.toFailover, o.toFailover)
	if r.faults == nil {
		r.faults = map[string]int{}
	}
	for k, v := range o.faults {
		r.faults[k] += v
	}
	if r.adopters == nil {
		r.adopters = map[string]int{}
	}
	for k, v := range o.adopters {
		r.adopters[k] += v
	}
	if r.nudged == nil {
		r.nudged = map[string]int{}
	}
	for k, v := range o.nudged {
		r.nudged[k] += v
	}
}

func (r *simResult) summary() string {
	counts := func(m map[string]int) string {
		var out []string
		for _, k := range slices.Sorted(mapKeys(m)) {
			out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
		}
		return strings.Join(out, " ")
	}
	return fmt.Sprintf("%s simulated, %d elections, %d terms, %d handovers, %d controller writes, %d pings, %d leader writes to the witness with a token (%d fenced) and %d through the write guard, %d candidates collected, %d starts refused for a taken Identity, %d terms ended on proof of death; %d runs with a fleet on a server of bounded capacity (%d first holders checked, requests queued up to %s); %d runs with faults one at a time (%d faults judged each on its own; while one that struck a candidate lasted, another led within %s at most); %d swarm runs; %d nudged runs (branches taken: %s); %d runs with HA kube-apiservers; %d Leases created again after terms (%d raises of the token bound); after faults stopped, a leader within %s and the best within %s at most; faults: %s; adopters: %s; violations: %d",
		r.simulated.Round(time.Second), r.elections, r.terms, r.handovers, r.controllerWrites, r.pings, r.witnessWrites, r.fenced, r.guardedWrites, r.collected, r.identityInUse, r.holderExits, r.fleets, r.firstHolders, r.maxQueued.Round(time.Millisecond), r.spacedRuns, r.rounds, r.toFailover.Round(time.Millisecond), r.swarms, r.nudges, counts(r.nudged), r.haRuns, r.recreated, r.boundRaises, r.toLeader.Round(time.Millisecond), r.toBest.Round(time.Millisecond),
		counts(r.faults), counts(r.adopters), btoi(r.violation != ""))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ---- the world ----

// simWorld is a run: the world (simworld) and what lives in it.
type simWorld struct {
	*simworld.World
	*simworld.Server
	// troubledAt is when a fault last struck the world at large (see
	// Fault; faultOn is one process's).
	troubledAt time.Time
	// witnessRng draws what leader work's writes to the witness do, and
	// adoptRng whether an adopter runs its elector with
	// Lock.ElectorContext: streams of their own, so that neither moves
	// the world's other draws.
	witnessRng, adoptRng *rand.Rand
	// clockFaults: library processes' clocks are stepped and suspended
	// (see sim_clock_test.go).
	clockFaults bool
	// relists: candidate processes' watches expire, and their informers
	// relist (see sim_relist_test.go).
	relists bool
	res     simResult

	// elections are the Leases of the run, each with its candidates; the
	// first is simLease.
	elections []*simElection
	lock      *coordinationv1.Lease // the controllers' own, as last renewed
	// tokenBound is the controllers' fencing token bound (Options.TokenBound),
	// nil until a replica first raises it.
	tokenBound *coordinationv1.Lease
	// libs are every library process of the run, ended with it.
	libs []*simLib
	// strategy is the strategy the candidates ask for; annotated is when
	// each candidate's priority last changed (see rerank).
	strategy  coordinationv1.CoordinatedLeaseStrategy
	annotated map[string]time.Time
	// rollingOut: a rollout of another strategy is under way (see
	// rollout), and w.strategy is not yet every candidate's.
	rollingOut bool
	// namespaces is how many namespaces the run's Leases are in.
	namespaces int
	// fleet: the run has a fleet of Leases and a server of bounded
	// Capacity (see addFleet).
	fleet bool
	// spaced: faults strike one at a time, each judged on its own (see
	// sim_spaced_test.go).
	spaced bool
	// swarm is a swarm run's mix of faults; nil in other runs.
	swarm *simSwarm
	// nudges steer the processes' code in a nudged run; nil in others.
	nudges *simNudges
	// ha is an HA run's kube-apiservers; nil in a run with one.
	ha *simHA

	// ctrl is the active controller replica; ctrls are all replicas that
	// run, among them a deposed one that has not noticed yet.
	ctrl     *simController
	ctrls    []*simController
	replicas int
	cands    []*simCandidate

	quietAt time.Time // when faults stopped and what they delayed had arrived
	// steadyLag: the watches' lag in the steady state is scheduled.
	steadyLag bool
	// builtin is kube-apiserver's election controller, in the runs that
	// have it (see simBuiltin).
	builtin *simBuiltin
	// deadDecider: a dead candidate asks for another strategy (see
	// simDeadDeciderDelay).
	deadDecider bool

	// proof: the run has the proof of death (see sim_kubelet_test.go),
	// drawn from podRng, with the processes' termination message files in
	// podDir. metrics are the controller replicas', shared as
	// cle-controller's terms share them.
	proof  bool
	podRng *rand.Rand
	podDir string
	// podFiles counts the termination message files made in podDir.
	podFiles int
	metrics  *Metrics
	// ending: the run is over; processes killed now exit unobserved.
	ending bool
}

// simElection is one Lease of the run: the object the model server stores,
// its candidates, and what the checks follow of it.
type simElection struct {
	srv      *simworld.Server
	ns, name string
	k        string // its key
	cands    []*simCandidate
	// history of terms: the highest token any term of the Lease had.
	maxToken    int32
	anyTerm     bool
	historyLost bool // the next term may restart the tokens
	// witness is the highest token the fenced part of the Lease's witness
	// accepted, and witnessBy the process it came from; lastWriter is the
	// term that last wrote to its unfenced part, pastWriters the terms that
	// wrote to it before (see simWitnessTransport).
	witness     int32
	witnessBy   *simProcess
	lastWriter  simWriter
	pastWriters map[simWriter]bool
	// exitedAt is when one of its adopters' processes last exited on its
	// own (after losing its term).
	exitedAt time.Time
	// fleet: one of the Leases of a fleet (see addFleet); firstNamed: the
	// controller has named its first holder.
	fleet, firstNamed bool
	// openedRV is the resourceVersion of the fleet Lease's first creation.
	openedRV uint64
	// sharedIdentity: one of its candidates has the Identity of another
	// Lease's; unhandled: its candidates ask for a strategy nobody handles
	// (see addElections).
	sharedIdentity, unhandled bool
	best                      *simCandidate // the best running candidate, since bestFrom
	bestFrom                  time.Time
	// heldBack is the last instant the active replica's unsteady rule held
	// e.best back (see unsteadyUntil): the rule ends when the holder
	// changes to one that emulates a newer version than e.best.
	heldBack time.Time
	// termHolder is who the Lease named since termFrom, in the term
	// numbered termNumber; termStruck: a fault struck that term as it
	// began (see noteTermEnds).
	termHolder  string
	termNumber  int32
	termFrom    time.Time
	termStruck  bool
	quietLeader time.Time // when some candidate first led after faults stopped
	noneRan     time.Time // the last instant after faults stopped at which no candidate process ran
	quietBest   time.Time // when the best candidate first led after faults stopped
	steadyFrom  time.Time // from then on, no controller write is expected
	// In a spaced run, a fault that struck the process struckProc of one
	// of its candidates (struck) at duringFrom and lasts until duringUntil
	// (see checkDuring).
	duringFrom, duringUntil time.Time
	struck                  *simCandidate
	struckProc              *simProcess
	lastDown                time.Time // when some candidate last was down or unregistered
	// rank caches bestLeads.
	rank struct {
		key       simRankKey
		valid     bool
		best      *simCandidate
		bestLeads bool
	}
}

func (e *simElection) key() string { return e.k }

// lease is the Lease as the server stores it, nil if there is none.
func (e *simElection) lease() *coordinationv1.Lease { return e.srv.Lease(e.k) }

// newElection adds a Lease of the run.
func (w *simWorld) newElection(ns, name string) *simElection {
	e := &simElection{srv: w.Server, ns: ns, name: name, k: simKey(ns, name)}
	w.elections = append(w.elections, e)
	return e
}

// shown is how the trace names the Lease (see simShown).
func (e *simElection) shown() string { return simShown(e.ns, e.name) }

// electionOf is the election of the Lease ns/name, nil if the run has none.
func (w *simWorld) electionOf(ns, name string) *simElection {
	for _, e := range w.elections {
		if e.ns == ns && e.name == name {
			return e
		}
	}
	return nil
}

// simKey is an object's key in its store: namespace/name.
func simKey(ns, name string) string { return simworld.Key(ns, name) }

// simShown is how the trace names an object: by name in the run's first
// namespace, else by key.
func simShown(ns, name string) string { return simworld.Shown(simNS, ns, name) }

// ---- the model API server: what it stores, and who watches what ----

// leaseWatchers are the watchers of e's Lease: every controller's, and its
// own candidates' processes'.
func (w *simWorld) leaseWatchers(e *simElection) []*simworld.Watcher {
	var out []*simworld.Watcher
	if w.builtin != nil {
		out = append(out, w.builtin.leaseWatch)
	}
	for _, sc := range w.ctrls {
		out = append(out, sc.leaseWatch)
	}
	for _, c := range e.cands {
		if c.proc != nil {
			out = append(out, c.proc.leaseWatch)
		}
	}
	return out
}

func (w *simWorld) candidateWatchers(ns, name string) []*simworld.Watcher {
	var out []*simworld.Watcher
	if w.builtin != nil {
		out = append(out, w.builtin.candWatch)
	}
	for _, sc := range w.ctrls {
		out = append(out, sc.candWatch)
	}
	for _, c := range w.cands {
		if c.e.ns == ns && c.name == name && c.proc != nil {
			out = append(out, c.proc.candWatch)
		}
	}
	return out
}

// writeLease stores e's Lease (nil: deletes it) if rv matches the stored
// one ("" creates), and sends the event to every watcher of it.
func (w *simWorld) writeLease(e *simElection, lease *coordinationv1.Lease, rv string, by string) (*coordinationv1.Lease, error) {
	written, err := w.WriteLease(e.ns, e.name, lease, rv, by, func() []*simworld.Watcher { return w.leaseWatchers(e) })
	if err == nil {
		if rv == "" && written != nil {
			w.noteOpened(e, written)
		}
		w.react(e, written, rv, by)
		w.holdRenewalAnswer(e, written, by)
	}
	return written, err
}

// writeCandidate is writeLease for a LeaseCandidate.
func (w *simWorld) writeCandidate(ns, name string, lc *coordinationv1beta1.LeaseCandidate, rv string, by string) (*coordinationv1beta1.LeaseCandidate, error) {
	cur := w.Candidate(simKey(ns, name))
	written, err := w.WriteCandidate(ns, name, lc, rv, by, func() []*simworld.Watcher { return w.candidateWatchers(ns, name) })
	if err == nil && lc != nil && cur == nil && w.fleet {
		w.noteRegistered(ns, name, written)
	}
	if err == nil && lc == nil && cur != nil && cur.Annotations[strategy.PriorityAnnotation] != "" {
		// Created again, it carries no priority: its merit changes as
		// if an operator had changed it (see annotate), and a controller
		// that has not seen the deletion yet judges the old one.
		w.rerank(ns, name)
	}
	return written, err
}

// ---- the controller: real code behind a model client ----

// simController is the active controller replica: a Controller with its own
// informer stores, fed by the model server's watches, and its own clock.
type simController struct {
	w     *simWorld
	id    int
	c     *Controller
	clock *testingclock.FakeClock
	// clk is the replica's clock (see simworld.Clock); clock is the
	// controller's, set from it before the replica's code runs.
	clk        *simworld.Clock
	leaseWatch *simworld.Watcher
	candWatch  *simworld.Watcher
	// podWatch and pinf: the Pods', in a run with the proof of death.
	podWatch *simworld.Watcher
	// linf and cinf are the replica's informers, fed by its watches; the
	// controller registered its handlers on them.
	linf, cinf, pinf *simInformer
	ctx              context.Context
	// The replica's two workers run its real processNext and processNextGC
	// on goroutines of their own (simThread), taking turns with the
	// simulation: watch events reach the replica's informers while a
	// request is in flight. Each takes items from its simQueue (the
	// controller's queue and gcQueue); cur is the one running, whose
	// requests the model clients take; kicked: a worker's look at its
	// queue is scheduled.
	worker, gcWorker simWorker
	cur              *simThread
	// lockSent is when (on its clock) the last successful renewal of the
	// controller's own lock was sent: the replica writes no Lease once it
	// is older than the renew deadline (Options.Holding).
	lockSent time.Time
	// sharedLost: kube-apiserver's election controller holds the lock this
	// replica contends for beside its own (Options.ElectsBuiltin).
	sharedLost bool
	dead       bool
	// paused: the process is stopped (SIGSTOP); held is what arrived
	// meanwhile, run on resume.
	paused bool
	held   []func()
}

// act runs fn as the replica, unless it is gone or paused (then on
// resume).
func (sc *simController) act(fn func()) {
	switch {
	case sc.dead:
	case sc.paused:
		sc.held = append(sc.held, fn)
	default:
		fn()
	}
}

func (sc *simController) sync() { sc.clock.SetTime(sc.clk.Now()) }

func (w *simWorld) startController() {
	w.replicas++
	sc := &simController{w: w, id: w.replicas}
	offset := w.DurationBetween(-10*time.Minute, 10*time.Minute)
	sc.clk = w.NewClock(offset, (w.Rng.Float64()*2-1)*simMaxDrift, w.Start)
	sc.clk.Monotonic = w.clockFaults
	sc.clk.Alive = func() bool { return !sc.dead }
	sc.clk.Hold = func(fn func()) { sc.held = append(sc.held, fn) }
	logger := logr.Discard()
	if w.Tracing {
		logger = funcr.New(func(prefix, args string) { w.Tracef("controller %d: %s", sc.id, args) }, funcr.Options{Verbosity: 4})
	}
	sc.ctx = klog.NewContext(context.Background(), logger)
	sc.clock = testingclock.NewFakeClock(sc.clk.Now())
	acc := &simAccess{
		leasesIn:     func(ns string) access.LeaseClient { return simLeaseClient{sc, ns} },
		candidatesIn: func(ns string) access.CandidateClient { return simCandidateClient{sc, ns} },
	}
	sc.linf, sc.cinf = newSimInformer(cache.MetaNamespaceKeyFunc), newSimInformer(cache.MetaNamespaceKeyFunc)
	watched := []string{simNS}
	if w.namespaces > 1 {
		watched = []string{""} // one informer of each kind for all namespaces
	}
	inf := Informers{Leases: []cache.SharedIndexInformer{sc.linf}, Candidates: []cache.SharedIndexInformer{sc.cinf}, Namespaces: watched}
	if w.proof {
		sc.pinf = newSimInformer(cache.MetaNamespaceKeyFunc)
		inf.Pods = []PodSource{sc.pinf}
	}
	holding := func() bool {
		// cle-controller's heldLock.holding
		return !sc.lockSent.IsZero() && lead.Elapsed(sc.clk.Now(), sc.lockSent) < simControllerRenewDeadline
	}
	sc.sharedLost = w.builtin != nil && w.builtin.holds
	c, err := New(acc, inf, Options{Clock: sc.clock, Holding: holding, Metrics: w.metrics, ElectsBuiltin: func() bool { return !sc.sharedLost },
		TokenBound: types.NamespacedName{Namespace: simNS, Name: DefaultTokenBoundName}, nudge: w.nudges.hook(w, sc.stopHere)})
	if err != nil {
		panic(err)
	}
	sc.c = c
	sc.worker = simWorker{sc: sc, process: c.processNext}
	sc.gcWorker = simWorker{sc: sc, process: c.processNextGC}
	c.queue.ShutDown() // client-go's queues give way to the simulation's
	c.gcQueue.ShutDown()
	sc.worker.queue, sc.gcWorker.queue = newSimQueue(sc, electionRetries(), sc.worker.kick), newSimQueue(sc, gcRetries(), sc.gcWorker.kick)
	c.queue, c.gcQueue = sc.worker.queue, sc.gcWorker.queue
	for _, wk := range []*simWorker{&sc.worker, &sc.gcWorker} {
		wk.th.send = func(r *simRequest) { sc.send(&wk.th, r) }
		wk.th.end = func(simTurn) { wk.kick() }
	}
	sc.leaseWatch = w.Watch(func(obj runtime.Object, deleted bool) { sc.deliver(sc.linf, obj, deleted) })
	sc.candWatch = w.Watch(func(obj runtime.Object, deleted bool) { sc.deliver(sc.cinf, obj, deleted) })
	if sc.pinf != nil {
		sc.podWatch = w.Watch(func(obj runtime.Object, deleted bool) { sc.deliver(sc.pinf, obj, deleted) })
	}
	w.connect(sc.watches()...)
	w.ctrl = sc
	w.ctrls = append(w.ctrls, sc)
	sc.renewLock()
	w.Tracef("controller %d starts (clock offset %s, drift %+.4f)", sc.id, sc.clk.Offset, sc.clk.Drift)
	sc.listAfterLag(sc.list) // the initial list
}

// listAfterLag lists the server's objects now and hands them to deliver
// (list or relist) after a lag; the watches deliver what is written from
// now on after it.
func (sc *simController) listAfterLag(deliver func(cands, leases, pods []runtime.Object)) {
	w := sc.w
	listAt := w.Now.Add(w.LagVia(sc.leaseWatch.Frontend))
	var cands, leases, pods []runtime.Object
	if sc.pinf != nil {
		for _, pod := range w.podObjects() {
			pods = append(pods, pod)
		}
	}
	for _, key := range w.CandidateKeys() {
		cands = append(cands, w.Candidate(key).DeepCopy())
	}
	if w.lock != nil {
		leases = append(leases, w.lock.DeepCopy())
	}
	for _, e := range w.elections {
		if l := e.lease(); l != nil {
			leases = append(leases, l.DeepCopy())
		}
	}
	simworld.ListAt(w.World, listAt, func() { sc.act(func() { deliver(cands, leases, pods) }) }, sc.watches()...)
}

// watches are the replica's watches.
func (sc *simController) watches() []*simworld.Watcher {
	if sc.podWatch != nil {
		return []*simworld.Watcher{sc.leaseWatch, sc.candWatch, sc.podWatch}
	}
	return []*simworld.Watcher{sc.leaseWatch, sc.candWatch}
}

// list is the informers' initial list: candidates first, Pods last.
func (sc *simController) list(cands, leases, pods []runtime.Object) {
	sc.sync()
	sc.cinf.list(cands...)
	sc.linf.list(leases...)
	if sc.pinf != nil {
		sc.pinf.list(pods...)
	}
}

// simLock is the name of the controllers' own lock, a Lease in the
// namespace the controllers watch: cle-controller measures its watch's lag
// with it.
const simLock = "cle-controller"

// renewLock renews the controller's lock every retry period while this
// replica is the active one, awaiting each renewal on its watch (WatchLag),
// as cle-controller's lock does.
func (sc *simController) renewLock() {
	w := sc.w
	if sc.dead || w.ctrl != sc {
		return
	}
	sc.act(func() {
		renew, sent := sc.clk.Wall().Truncate(time.Microsecond), sc.clk.Now()
		failed := sc.c.opts.WatchLag.ExpectRenewal(simNS, simLock, renew, sent)
		w.After(w.DurationBetween(time.Millisecond, 20*time.Millisecond+w.LagBase), func() {
			w.Apply(func() {
				err, applied := w.RequestError(simworld.LeasesGR, simLock)
				if (err != nil && !applied) || w.ctrl != sc {
					// Failed, or a standby holds the lock now: a deposed
					// replica's renewal conflicts.
					sc.act(failed)
					return
				}
				if err == nil {
					sc.lockSent = sent
				}
				lock := &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: simLock, ResourceVersion: w.NextRV()},
					Spec: coordinationv1.LeaseSpec{
						HolderIdentity: ptr.To(fmt.Sprintf("controller-%d", sc.id)),
						RenewTime:      ptr.To(metav1.NewMicroTime(renew)),
					},
				}
				w.lock = lock
				w.Wrote()
				for _, other := range w.ctrls {
					other.leaseWatch.Send(lock.DeepCopy(), false)
				}
			})
		})
	})
	w.After(time.Duration(float64(simControllerRetryPeriod)/(1+sc.clk.Drift)), sc.renewLock)
}

// resume ends a pause. A replica that is still the active one goes on. One
// that a standby replaced while it was stopped acts on until its own leader
// election notices, up to the renew deadline of the controller's lock as
// client-go's elector allows: it takes the steps due, before or after its
// informers deliver what they held (the order of goroutines after a SIGCONT
// is anyone's), then stops.
// pause stops the active replica (SIGSTOP, or a suspend): a standby takes
// over once its lock has lapsed.
func (sc *simController) pause() {
	w := sc.w
	sc.paused = true
	w.After(simControllerLease, func() {
		if sc.paused && w.ctrl == sc {
			w.Tracef("controller %d's lock lapsed; a standby takes over", sc.id)
			w.ctrl = nil
			w.startController()
		}
	})
}

// stopHere stops the replica for d where its code is now (a pause, as
// SIGSTOP), from the thread that runs: the thread goes on once the replica
// runs again, perhaps after its lock lapsed and a standby took over.
func (sc *simController) stopHere(d time.Duration) {
	w := sc.w
	if sc.dead || sc.paused || sc.cur == nil {
		return
	}
	w.Fault("controller-stopped-before-naming")
	w.Tracef("controller %d stops before naming a holder, for %s", sc.id, d)
	sc.pause()
	w.After(d, sc.resume)
	_, _ = sc.cur.request(&simRequest{stopped: true})
}

func (sc *simController) resume() {
	w := sc.w
	if !sc.paused || sc.dead {
		return
	}
	sc.paused = false
	sc.clk.Resume()
	held := sc.held
	sc.held = nil
	deposed := w.ctrl != sc
	w.Tracef("controller %d resumes (deposed: %v)", sc.id, deposed)
	if deposed && w.Rng.IntN(2) == 0 {
		sc.worker.run() // on what it knew before the pause
	}
	for _, fn := range held {
		sc.act(fn)
	}
	if deposed {
		w.Fault("controller-overlap")
		w.Late(w.Now.Add(simControllerRenewDeadline))
		w.After(w.DurationBetween(0, simControllerRenewDeadline), func() {
			w.Tracef("controller %d notices it lost the controller lock", sc.id)
			sc.stop()
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// expireWatches ends the replica's watches for d: nothing written
// meanwhile reaches it, and then its informers relist (see relist).
func (sc *simController) expireWatches(d time.Duration) {
	w := sc.w
	for _, sw := range sc.watches() {
		sw.Expire()
	}
	w.Tracef("controller %d's watches expire for %s", sc.id, d)
	w.Late(w.Now.Add(d))
	w.After(d, func() {
		if sc.dead {
			return
		}
		for _, sw := range sc.watches() {
			sw.Expired = false
		}
		w.connect(sc.watches()...)
		sc.listAfterLag(sc.relist)
	})
}

// relist is the informers' relist after their watches expired (see
// simInformer.relist): candidates first, then the Leases.
func (sc *simController) relist(cands, leases, pods []runtime.Object) {
	sc.sync()
	sc.w.Tracef("controller %d relists", sc.id)
	sc.cinf.relist(cands)
	sc.linf.relist(leases)
	if sc.pinf != nil {
		sc.pinf.relist(pods)
	}
}

// loseSharedLock: kube-apiserver's controller holds its lock from now on;
// a replica that is paused, or whose steps are in flight, finds out by its
// clock as heldLock.holding does, which the simulation takes as at once.
func (sc *simController) loseSharedLock() {
	sc.sharedLost = true
	sc.w.Tracef("controller %d: kube-apiserver holds its controller's lock; electing cle's strategies only", sc.id)
}

// takeSharedLock: the replica holds kube-apiserver's controller's lock
// again, and looks at every Lease.
func (sc *simController) takeSharedLock() {
	sc.act(func() {
		if sc.dead || !sc.sharedLost || (sc.w.builtin != nil && sc.w.builtin.holds) {
			return // a paused replica resumes after kube-apiserver took the lock again
		}
		sc.sync()
		sc.sharedLost = false
		sc.w.Tracef("controller %d holds kube-apiserver's controller's lock: electing every Lease", sc.id)
		sc.c.Reconsider()
	})
}

func (sc *simController) stop() {
	for _, wk := range []*simWorker{&sc.worker, &sc.gcWorker} {
		sc.cur = &wk.th // its requests, failing at once, until it ends
		wk.th.abandon()
	}
	sc.cur = nil
	sc.dead = true
	sc.w.ctrls = slices.DeleteFunc(sc.w.ctrls, func(o *simController) bool { return o == sc })
	sc.c.queue.ShutDown()
	sc.c.gcQueue.ShutDown()
}

// deliver is one watch event reaching one of the replica's informers, which
// calls the controller's handlers.
func (sc *simController) deliver(inf *simInformer, obj runtime.Object, deleted bool) {
	sc.act(func() {
		sc.sync()
		inf.deliver(obj, deleted)
	})
}

// simWorker is one of the replica's workers: a goroutine running process
// (processNext or processNextGC) for each item of its queue, one at a time.
type simWorker struct {
	sc      *simController
	queue   *simQueue
	process func(context.Context) bool
	th      simThread
	kicked  bool
}

// kick has the worker look at its queue now, unless it is busy: it looks
// again when it is done.
func (wk *simWorker) kick() {
	if wk.kicked {
		return
	}
	wk.kicked = true
	sc := wk.sc
	sc.w.At(sc.w.Now, func() {
		wk.kicked = false
		sc.act(wk.run)
	})
}

// run takes the next item, if there is one and the worker is idle.
func (wk *simWorker) run() {
	sc := wk.sc
	if sc.dead || wk.th.busy() {
		return
	}
	if wk.queue.Len() == 0 || wk.queue.ShuttingDown() {
		return
	}
	sc.turn(&wk.th, func() { wk.th.run(func() simTurn { wk.process(sc.ctx); return simTurn{} }) })
}

// turn lets th run until it yields, on the replica's clock as it is now.
func (sc *simController) turn(th *simThread, run func()) {
	sc.sync()
	sc.cur = th
	run()
	sc.cur = nil
}

// TestSimulationReplaysExactly: a seed's run, trace included, is the same
// every time, which is what makes a failing seed worth its number. Seeds
// with several Leases, shared identities and kube-apiserver's controller
// are among them.
func TestSimulationReplaysExactly(t *testing.T) {
	type run struct {
		seed    uint64
		figures bool
	}
	runs, replayed := map[run]simResult{}, map[run]bool{}
	result := func(r run) simResult {
		if _, ok := runs[r]; !ok {
			// A fleet's run traced takes seconds: its figures, compared
			// whole, tell a divergence too.
			runs[r] = runSim(r.seed, !r.figures)
		}
		return runs[r]
	}
	for _, k := range simReplayKinds {
		if k.figures && raceEnabled {
			// A fleet's run takes 25 s under the race detector; make sim
			// replays it without (hack/sim.sh).
			continue
		}
		// A change to the world may change what a seed makes: the kind's
		// seed is the first from its listed one that makes it.
		r := run{k.seed, k.figures}
		for ; r.seed < k.seed+simReplaySearch && !k.has(result(r)); r.seed++ {
		}
		if !k.has(result(r)) {
			t.Errorf("no seed from %d to %d makes a run with %s", k.seed, r.seed, k.name)
			continue
		}
		if r.seed != k.seed {
			t.Logf("seed %d no longer makes a run with %s; %d does (simReplayKinds may say so)", k.seed, k.name, r.seed)
		}
		if !replayed[r] {
			replayed[r] = true
			if diff := cmp.Diff(result(r), runSim(r.seed, !r.figures), cmp.AllowUnexported(simResult{})); diff != "" {
				t.Fatalf("seed %d, a run with %s, ran differently the second time (-first +second):\n%s", r.seed, k.name, diff)
			}
		}
	}
}

// simReplaySearch is how many seeds from its listed one the replay test
// tries for a kind of run.
const simReplaySearch = 20

// simReplayKinds are the kinds of run the replay test covers, each with a
// seed that makes one.
var simReplayKinds = []struct {
	name    string
	seed    uint64
	has     func(r simResult) bool
	figures bool // compare the runs' figures, not their traces
}{
	{"clock faults", 2, func(r simResult) bool {
		return r.faults["suspend"]+r.faults["clock-step"]+r.faults["controller-suspend"]+r.faults["controller-clock-step"] > 0
	}, false},
	{"a fleet on a loaded server", 211, func(r simResult) bool { return r.fleets > 0 }, true},
	{"faults one at a time", 235, func(r simResult) bool { return r.spacedRuns > 0 && r.rounds > 0 }, false},
	{"adopters", 1, func(r simResult) bool { return r.adopters["client-go-terms"]+r.adopters["manager-terms"] > 0 }, false},
	{"terms ended on proof of death", 16, func(r simResult) bool { return r.holderExits > 0 }, false},
	{"kube-apiserver's controller", 3, func(r simResult) bool { return r.faults["builtin-acts"] > 0 }, false},
	{"an operator's priorities", 26, func(r simResult) bool { return r.faults["annotate-priority"] > 0 }, false},
	{"a strategy rollout", 1, func(r simResult) bool { return r.faults["strategy-rollout"] > 0 }, false},
	{"a shared Identity", 4, func(r simResult) bool { return r.identityInUse > 0 }, false},
	{"a Lease created again after terms", 206, func(r simResult) bool { return r.recreated > 0 }, false},
	{"writes through the write guard", 3, func(r simResult) bool { return r.guardedWrites > 0 }, false},
	{"a swarm of faults", 1, func(r simResult) bool { return r.swarms > 0 }, false},
	{"candidates' relists", 2, func(r simResult) bool { return r.faults["candidate-watch-expired"] > 0 }, false},
	{"nudges taken", 4, func(r simResult) bool { return len(r.nudged) > 0 }, false},
	{"a replica's watch cache behind", 7, func(r simResult) bool { return r.faults["apiserver-behind"] > 0 }, false},
}

// TestSimulationAdoptersRunTheLibrary: an adopter's elector acquires the
// Lease only through a term of pkg/candidate's own External, which logs it
// as the library does, in the same process, before the elector hears of it.
func TestSimulationAdoptersRunTheLibrary(t *testing.T) {
	started := regexp.MustCompile(`^ *[0-9.]+s (\S+): .*"msg"="Started leading"`)
	acquired := regexp.MustCompile(`^ *[0-9.]+s (\S+) elector acquired the Lease$`)
	terms := 0
	for seed := uint64(50); seed < 60; seed++ {
		led := map[string]bool{}
		for _, line := range runSim(seed, true).trace {
			if m := started.FindStringSubmatch(line); m != nil {
				led[m[1]] = true
			}
			if m := acquired.FindStringSubmatch(line); m != nil {
				if !led[m[1]] {
					t.Fatalf("seed %d: %s's elector acquired the Lease, but its library never started leading:\n%s", seed, m[1], line)
				}
				terms++
			}
		}
	}
	if terms == 0 {
		t.Fatal("no adopter's elector acquired a Lease in seeds 50 to 59")
	}
}

// TestSimulationEndsItsGoroutines: a run ends every goroutine it started
// (the threads of the real code, leader work, client-go's queues the
// simulation replaces), so that thousands of seeds in one process do not
// pile them up.
func TestSimulationEndsItsGoroutines(t *testing.T) {
	// Other tests of the package may leave goroutines of their own, so
	// what is counted is the simulation's: its threads and leader work, and
	// client-go's queues beyond those there were before.
	count := func() (sim, queues int) {
		buf := make([]byte, 1<<22)
		for _, g := range strings.Split(string(buf[:goruntime.Stack(buf, true)]), "\n\n") {
			switch {
			case strings.Contains(g, "controller.(*simThread)"), strings.Contains(g, "controller.(*simProcess).startLibrary"):
				sim++
			case strings.Contains(g, "k8s.io/client-go/util/workqueue."):
				queues++
			}
		}
		return sim, queues
	}
	_, queuesBefore := count()
	for seed := uint64(1); seed <= 40; seed++ {
		runSim(seed, false)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sim, queues := count()
		if sim == 0 && queues <= queuesBefore {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 40 runs: %d goroutines of the simulation, %d of client-go's queues (%d before)", sim, queues, queuesBefore)
		}
		goruntime.Gosched()
	}
}

// simTurn is what a step's goroutine hands the simulation: a request to
// make, or (req nil) its end.
type simTurn struct {
	req     *simRequest
	requeue time.Duration
	// callEnded, set when an External's call ends, hands its result to
	// the caller.
	callEnded func()
}

// simRequest is a request of a simThread: do is what the server does when
// it arrives (simThread.answer hands the thread its answer). deadline
// (zero: none) is the library's for the request, an instant of its
// process's clock; sleep makes it no request at all, but a wait the world
// draws.
type simRequest struct {
	do       func() (runtime.Object, error)
	deadline time.Time
	sleep    bool
	// stopped: no request; the thread waits until its replica, stopped
	// at a point of the code (see simController.stopHere), runs again.
	stopped bool
}

// simThread is one goroutine of a process's real code, taking turns with
// the simulation: the simulation hands it work and waits until it makes a
// request (send takes it) or ends (end takes its result); the answer,
// delivered later in simulated time, hands it the turn again. Only one of
// the two runs at a time, so a run stays deterministic. The goroutine is a
// coroutine (iter.Pull): a turn passes from one to the other without the
// scheduler, and the goroutine is kept for the thread's next work (its
// stack stays grown) until abandon.
type simThread struct {
	next    func() (simTurn, bool) // resumes the goroutine; nil until the first work, and after abandon
	stop    func()
	yield   func(simTurn) bool // used on the goroutine: hands a turn back
	job     func() simTurn     // the work next starts
	reply   simReply           // the answer a resumed request takes
	running bool
	pending *simRequest // the request whose answer it awaits
	send    func(*simRequest)
	end     func(simTurn)
	// cancel, when set, ends the pending request early (its caller's
	// context ended).
	cancel func()
}

func (th *simThread) busy() bool { return th.running }

// run hands fn to the goroutine and lets it run until it yields.
func (th *simThread) run(fn func() simTurn) {
	if th.next == nil {
		th.next, th.stop = iter.Pull(th.work)
	}
	th.running = true
	th.job = fn
	th.await()
}

// work is the goroutine: it runs each job it is given and hands back its
// end; it returns once abandoned.
func (th *simThread) work(yield func(simTurn) bool) {
	th.yield = yield
	for {
		fn := th.job
		th.job = nil
		if !yield(fn()) {
			return
		}
	}
}

// await lets the goroutine run until it yields a request or the end of
// its work.
func (th *simThread) await() {
	t, _ := th.next()
	if t.req != nil {
		th.pending = t.req
		th.send(t.req)
		return
	}
	th.running = false
	th.end(t)
}

// request is made on the thread's goroutine: it hands r to the simulation
// and waits for the answer. Once the thread is abandoned, it fails at once.
func (th *simThread) request(r *simRequest) (runtime.Object, error) {
	if !th.yield(simTurn{req: r}) {
		return nil, context.Canceled
	}
	a := th.reply
	th.reply = simReply{}
	return a.obj, a.err
}

// answer hands r's answer to the thread, which runs until it yields again;
// an answer to a request it no longer awaits is dropped.
func (th *simThread) answer(r *simRequest, obj runtime.Object, err error) {
	if th.pending != r || !th.running {
		return
	}
	th.pending = nil
	th.reply = simReply{obj: obj, err: err}
	th.await()
}

// abandon ends the work of a process that is gone: the request it awaits
// and any it makes after fail at once, and nothing more reaches the
// server; it returns once the work has ended, and so has the goroutine.
func (th *simThread) abandon() {
	if th.next != nil {
		th.stop()
		th.next, th.stop, th.yield = nil, nil, nil
	}
	th.pending, th.running, th.cancel = nil, false, nil
}

type simReply struct {
	obj runtime.Object
	err error
}

// request is made by the running worker's goroutine: it hands the
// request to the simulation and waits for the answer.
func (sc *simController) request(do func() (runtime.Object, error)) (runtime.Object, error) {
	return sc.cur.request(&simRequest{do: do})
}

// send makes a request of the step: it reaches the server after one
// latency, and its answer the replica after another, both longer on a
// loaded server; the replica gets it when it runs (not while paused).
func (sc *simController) send(th *simThread, r *simRequest) {
	w := sc.w
	if r.stopped {
		w.After(0, func() {
			sc.act(func() { sc.turn(th, func() { th.answer(r, nil, nil) }) })
		})
		return
	}
	sent := w.DurationBetween(time.Millisecond, 20*time.Millisecond+w.LagBase)
	back := w.DurationBetween(time.Millisecond, 20*time.Millisecond+w.LagBase)
	w.Late(w.Now.Add(sent + back))
	var obj runtime.Object
	var err error
	var appliedAt time.Time
	w.After(sent, func() {
		if sc.dead && !w.landsAfterDeath() {
			return // lost with the replica's connection
		}
		appliedAt = w.Apply(func() { obj, err = r.do() })
	})
	w.After(sent+back, w.Answered(&appliedAt, back, func() {
		sc.act(func() {
			sc.turn(th, func() { th.answer(r, obj, err) }) // dropped when abandoned
		})
	}))
}

// simAccess is an access layer on the model server: its clients, and the
// informers the process's watches feed (nil: the process builds none). A
// library candidate's clients are bound to its namespace; a controller
// replica's are made per namespace (leasesIn, candidatesIn).
type simAccess struct {
	leases            access.LeaseClient
	candidates        access.CandidateClient
	leasesIn          func(ns string) access.LeaseClient
	candidatesIn      func(ns string) access.CandidateClient
	leaseInf, candInf *simInformer
}

func (a *simAccess) Mode() access.Mode          { return access.ModeNative }
func (a *simAccess) ControllerLockName() string { return access.NativeControllerLock }
func (a *simAccess) LeaseCandidates(ns string) access.CandidateClient {
	if a.candidatesIn != nil {
		return a.candidatesIn(ns)
	}
	return a.candidates
}
func (a *simAccess) CandidateReference(lc *coordinationv1beta1.LeaseCandidate) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "LeaseCandidate", Namespace: lc.Namespace, Name: lc.Name}
}
func (a *simAccess) Leases(ns string) access.LeaseClient {
	if a.leasesIn != nil {
		return a.leasesIn(ns)
	}
	return a.leases
}
func (a *simAccess) NewCandidateInformer(string, time.Duration, func(*metav1.ListOptions)) cache.SharedIndexInformer {
	if a.candInf == nil {
		panic("not used")
	}
	return a.candInf
}
func (a *simAccess) NewLeaseInformer(string, time.Duration, func(*metav1.ListOptions)) cache.SharedIndexInformer {
	if a.leaseInf == nil {
		panic("not used")
	}
	return a.leaseInf
}

type simLeaseClient struct {
	sc *simController
	ns string
}

// The clients' requests are made by the step's goroutine (see
// simController.request); what the server does runs in the simulation when
// the request arrives.

func (c simLeaseClient) Get(_ context.Context, name string) (*coordinationv1.Lease, error) {
	w := c.sc.w
	obj, err := c.sc.request(func() (runtime.Object, error) {
		if err, _ := w.RequestError(simworld.LeasesGR, name); err != nil {
			return nil, err
		}
		l := w.Lease(simKey(c.ns, name))
		if c.ns == simNS && name == DefaultTokenBoundName {
			l = w.tokenBound
		}
		if l == nil {
			return nil, apierrors.NewNotFound(simworld.LeasesGR, name)
		}
		return l.DeepCopy(), nil
	})
	l, _ := obj.(*coordinationv1.Lease)
	return l, err
}

func (c simLeaseClient) write(lease *coordinationv1.Lease, rv string) (*coordinationv1.Lease, error) {
	if c.sc.w.builtinActs() && strategy.Builtin(ptr.Deref(lease.Spec.Strategy, "")) {
		// One electing controller per Lease: kube-apiserver's holds its
		// lock, so the Leases of its strategies are its own.
		c.sc.w.Fail("controller %d writes %s, of %s, while kube-apiserver's election controller elects it",
			c.sc.id, simKey(c.ns, lease.Name), ptr.Deref(lease.Spec.Strategy, ""))
	}
	obj, err := c.sc.request(func() (runtime.Object, error) {
		if c.ns == simNS && lease.Name == DefaultTokenBoundName {
			return c.serveTokenBound(lease, rv)
		}
		written, err := c.serve(lease, rv)
		if written == nil {
			return nil, err
		}
		return written, err
	})
	l, _ := obj.(*coordinationv1.Lease)
	return l, err
}

// serveTokenBound is the server's side of a write of the fencing token
// bound: a create (rv "") or an update conditional on rv. The bound must
// never go down.
func (c simLeaseClient) serveTokenBound(lease *coordinationv1.Lease, rv string) (runtime.Object, error) {
	w := c.sc.w
	err, applied := w.RequestError(simworld.LeasesGR, lease.Name)
	if err != nil && !applied {
		return nil, err
	}
	cur := w.tokenBound
	switch {
	case rv == "" && cur != nil:
		return nil, apierrors.NewAlreadyExists(simworld.LeasesGR, lease.Name)
	case rv != "" && cur == nil:
		return nil, apierrors.NewNotFound(simworld.LeasesGR, lease.Name)
	case rv != "" && rv != cur.ResourceVersion:
		return nil, apierrors.NewConflict(simworld.LeasesGR, lease.Name, errors.New("the object has been modified"))
	}
	bound := ptr.Deref(lease.Spec.LeaseTransitions, 0)
	if cur != nil && bound < ptr.Deref(cur.Spec.LeaseTransitions, 0) {
		w.Fail("controller %d lowers the fencing token bound from %d to %d", c.sc.id, ptr.Deref(cur.Spec.LeaseTransitions, 0), bound)
	}
	written := lease.DeepCopy()
	written.ResourceVersion = w.NextRV()
	w.tokenBound = written
	w.res.boundRaises++
	w.Tracef("controller %d raises the fencing token bound to %d", c.sc.id, bound)
	w.Wrote()
	return written.DeepCopy(), err
}

// serve is the server's side of a Lease write of the controller.
func (c simLeaseClient) serve(lease *coordinationv1.Lease, rv string) (*coordinationv1.Lease, error) {
	w := c.sc.w
	if lease.Namespace != c.ns {
		panic("the controller writes a Lease of " + lease.Namespace + " through the client of " + c.ns)
	}
	e := w.electionOf(c.ns, lease.Name)
	if e == nil {
		panic("the controller writes a Lease the run does not have: " + simKey(c.ns, lease.Name))
	}
	err, applied := w.RequestError(simworld.LeasesGR, e.name)
	if err != nil && !applied {
		return nil, err
	}
	before := e.lease()
	written, werr := w.writeLease(e, lease, rv, fmt.Sprintf("controller %d", c.sc.id))
	if werr != nil {
		return nil, werr
	}
	w.controllerWrote(e, "lease")
	if e.unhandled && holderIdentity(written) != "" {
		w.Fail("controller %d named %s the holder of %s, whose candidates ask for %s, which it does not handle", c.sc.id, holderIdentity(written), e.shown(), simUnhandledStrategy)
	}
	if e.anyTerm && !e.historyLost && holderIdentity(written) != "" && ptr.Deref(written.Spec.LeaseTransitions, 0) <= e.maxToken &&
		(before == nil || ptr.Deref(before.Spec.LeaseTransitions, 0) != ptr.Deref(written.Spec.LeaseTransitions, 0)) {
		// A term numbered at or below one already led: whatever this
		// replica remembers, and whoever deleted the Lease, the fencing
		// token bound it read before numbering any term is above every
		// token handed out before it started (docs/library.md).
		w.Fail("controller %d numbers a term of %s %d, not above the %d an earlier term led with", c.sc.id, e.shown(),
			ptr.Deref(written.Spec.LeaseTransitions, 0), e.maxToken)
	}
	if e.anyTerm && before == nil && holderIdentity(written) != "" {
		w.res.recreated++
	}
	w.checkPreference(before, written)
	if holderIdentity(written) != "" && (before == nil || holderIdentity(before) != holderIdentity(written)) {
		w.res.elections++
	}
	if e.fleet && !e.firstNamed && holderIdentity(written) != "" {
		e.firstNamed = true
		w.checkFirstHolder(e, holderIdentity(written))
	}
	return written, err
}

func (c simLeaseClient) Create(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.write(lease, "")
}

func (c simLeaseClient) Update(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.write(lease, lease.ResourceVersion)
}

func (c simLeaseClient) Delete(context.Context, string, *metav1.Preconditions) error {
	panic("the controller does not delete Leases")
}

type simCandidateClient struct {
	sc *simController
	ns string
}

func (c simCandidateClient) Get(_ context.Context, name string) (*coordinationv1beta1.LeaseCandidate, error) {
	w := c.sc.w
	obj, err := c.sc.request(func() (runtime.Object, error) {
		if err, _ := w.RequestError(simworld.CandidatesGR, name); err != nil {
			return nil, err
		}
		lc := w.Candidate(simKey(c.ns, name))
		if lc == nil {
			return nil, apierrors.NewNotFound(simworld.CandidatesGR, name)
		}
		return lc.DeepCopy(), nil
	})
	lc, _ := obj.(*coordinationv1beta1.LeaseCandidate)
	return lc, err
}

func (c simCandidateClient) Create(context.Context, *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	panic("the controller does not create candidates")
}

func (c simCandidateClient) Update(_ context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	w := c.sc.w
	obj, err := c.sc.request(func() (runtime.Object, error) {
		err, applied := w.RequestError(simworld.CandidatesGR, lc.Name)
		if err != nil && !applied {
			return nil, err
		}
		if lc.Namespace != c.ns {
			panic("the controller writes a LeaseCandidate of " + lc.Namespace + " through the client of " + c.ns)
		}
		written, werr := w.writeCandidate(c.ns, lc.Name, lc, lc.ResourceVersion, fmt.Sprintf("controller %d", c.sc.id))
		if werr != nil {
			return nil, werr
		}
		w.controllerWrote(w.electionOf(c.ns, lc.Spec.LeaseName), "ping")
		w.res.pings++
		return written, err
	})
	written, _ := obj.(*coordinationv1beta1.LeaseCandidate)
	return written, err
}

// Delete is the garbage collector's: conditional on the UID and
// resourceVersion it judged.
func (c simCandidateClient) Delete(_ context.Context, name string, pre *metav1.Preconditions) error {
	w := c.sc.w
	_, err := c.sc.request(func() (runtime.Object, error) {
		err, applied := w.RequestError(simworld.CandidatesGR, name)
		if err != nil && !applied {
			return nil, err
		}
		cur := w.Candidate(simKey(c.ns, name))
		switch {
		case cur == nil:
			return nil, apierrors.NewNotFound(simworld.CandidatesGR, name)
		case pre == nil || pre.UID == nil || pre.ResourceVersion == nil:
			panic("the garbage collector deletes a candidate only as judged")
		case *pre.UID != cur.UID || *pre.ResourceVersion != cur.ResourceVersion:
			return nil, apierrors.NewConflict(simworld.CandidatesGR, name, errors.New("precondition failed"))
		}
		w.collected(c.ns, name)
		_, werr := w.writeCandidate(c.ns, name, nil, cur.ResourceVersion, fmt.Sprintf("controller %d (garbage collection)", c.sc.id))
		if werr != nil {
			return nil, werr
		}
		return nil, err
	})
	return err
}

// collected checks a garbage collection: never of the candidate of a
// process that runs and can reach the server, which renews it well within
// the TTL.
func (w *simWorld) collected(ns, name string) {
	w.res.collected++
	for _, c := range w.cands {
		if c.e.ns == ns && c.name == name && c.proc != nil && !c.proc.dead && !c.proc.paused && !w.Faulty {
			w.Fail("the garbage collector deleted the candidate of %s/%d, which runs", c.shown(), c.proc.id)
		}
	}
}

func (w *simWorld) controllerWrote(e *simElection, what string) {
	w.res.controllerWrites++
	if e != nil && !e.steadyFrom.IsZero() && !w.Now.Before(e.steadyFrom) {
		w.Fail("controller wrote (%s) in steady state", what)
	}
}

// checkPreference checks that preferredHolder, when the controller sets it,
// names a candidate better on merit than the holder.
func (w *simWorld) checkPreference(before, after *coordinationv1.Lease) {
	pref := ptr.Deref(after.Spec.PreferredHolder, "")
	if pref == "" || (before != nil && ptr.Deref(before.Spec.PreferredHolder, "") == pref) {
		return
	}
	holder, preferred := w.Candidate(simKey(after.Namespace, holderIdentity(after))), w.Candidate(simKey(after.Namespace, pref))
	if holder == nil || preferred == nil {
		return
	}
	if w.rollingOut || w.reranked(after.Namespace, holder.Name) || w.reranked(after.Namespace, pref) {
		return // the controller may have judged their merit before an operator changed it
	}
	if e := w.electionOf(after.Namespace, after.Name); e != nil {
		if e.sharedIdentity {
			// Checked for safety only: the LeaseCandidate named alike
			// changes Lease and merit as the two processes delete and
			// create it, faster than the controller's view follows.
			return
		}
		for _, c := range e.cands {
			if lc := w.Candidate(c.key()); lc != nil && lc.Spec.Strategy != w.strategy {
				// A LeaseCandidate the rollout left behind (its process
				// stopped, and its delete failed) still asks for the old
				// strategy: the controller resolves the strategy from
				// what the candidates ask for, until it is collected.
				return
			}
		}
	}
	if !strategy.Preempts(w.ranking(), preferred, holder) {
		w.Fail("preferredHolder %s set over holder %s, which it does not beat on merit", pref, holderIdentity(after))
	}
}
