package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Timings of the candidates. The SIGSTOP of a leader and the freeze of
// kube-apiserver are sized from them.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
	leaseName     = "chaos"
	// Timings of the cle-controller replicas' own election: a standby
	// takes over from a frozen or killed active replica well within the
	// candidates' recovery bound.
	ctrlLeaseDuration = 2 * time.Second
	ctrlRenewDeadline = 1500 * time.Millisecond
	ctrlRetryPeriod   = 250 * time.Millisecond
	ctrlLeaseName     = "cle-controller"
	// stuckAfter ends the run: the election has not recovered from a fault
	// at all.
	stuckAfter = 60 * time.Second
)

// The kinds of candidate program: the candidate library
// (examples/candidate), client-go's LeaderElector on pkg/lock
// (examples/lock-elector), and a controller-runtime manager with cle's
// option (contrib/controller-runtime/example).
const (
	kindLibrary           = "library"
	kindLock              = "client-go lock"
	kindControllerRuntime = "controller-runtime"
)

// candidateSpec is one candidate process. They are listed best first (oldest
// emulation version; the upgrade fault makes the leader the newest), and
// their clocks disagree with the machine's, and with each other, by seconds
// to minutes (the clock-skew fault changes them). controller-runtime's
// manager runs on the machine's clock: its option has no clock to offset.
type candidateSpec struct {
	identity, kind, emulation string
	clockOffset               time.Duration
}

var candidateSpecs = []candidateSpec{
	{"cand-a", kindLibrary, "1.34.0", 10 * time.Minute},
	{"lock-d", kindLock, "1.34.1", -10 * time.Second},
	{"cand-b", kindLibrary, "1.34.2", -10 * time.Second},
	{"manager-e", kindControllerRuntime, "1.34.3", 0},
	{"cand-c", kindLibrary, "1.34.4", -10 * time.Minute},
}

// candidateBinaryVersion is every candidate's binary version; emulation
// versions are 1.34.<n>, ranked by n.
const candidateBinaryVersion = "1.36.0"

// clockOffsets are the offsets the clock-skew fault gives a candidate.
var clockOffsets = []time.Duration{10 * time.Second, 0, -10 * time.Second, 10 * time.Minute, -10 * time.Minute}

// controllerReplicas is how many cle-controller processes run: one active,
// the others standing by.
const controllerReplicas = 2

// violations collects invariant violations from every goroutine; each one
// fails the test.
type violations struct {
	mu     sync.Mutex
	list   []string
	start  time.Time
	logf   func(string, ...any)
	closed bool
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	msg := fmt.Sprintf("+%s ", time.Since(v.start).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	v.list = append(v.list, msg)
	if !v.closed {
		v.logf("VIOLATION %s", msg)
	}
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	return append([]string(nil), v.list...)
}

// env is one chaos run.
type env struct {
	t       *testing.T
	ctx     context.Context
	rng     *rand.Rand
	v       *violations
	rec     *recorder
	witness *witness
	ns      string
	// lockNS holds the controller replicas' locks: ns, beside the idled
	// built-in controller; kube-system, beside the running one.
	lockNS string
	ctrls  []*proc
	cands  []*proc
	// group are the shard group's replicas.
	group []*proc
	slack time.Duration
	// electorRetryPeriod is the RetryPeriod of the adopters' electors
	// (Lock.Timings at the candidates' timings).
	electorRetryPeriod time.Duration

	mu         sync.Mutex
	faults     map[string]int
	recoveries []recovery
	// groupRecoveries are how long the group took to act on every shard,
	// spread evenly, after each fault.
	groupRecoveries []recovery
	// ctrlStats are each controller replica's figures: its first in steady
	// state, and its latest.
	ctrlStats map[*proc]*ctrlFigures
	// windows are the faults injected, from start to recovery.
	windows []window
	// faultBegan is when the fault being injected began.
	faultBegan time.Time
	// offsetsUsed are the clock offsets candidates have run with.
	offsetsUsed map[time.Duration]bool
	// offsetOf is each candidate's current clock offset.
	offsetOf map[string]time.Duration
}

// ctrlFigures are a controller replica's figures by role (active: true).
type ctrlFigures struct{ baseline, last map[bool]procStats }

type window struct {
	fault      string
	start, end time.Time
}

// recovery is how long the election took to be healthy after one fault.
type recovery struct {
	fault, phase, leader string
	took, bound          time.Duration
}

func TestChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
	}
	var duration time.Duration
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		var err error
		if duration, err = time.ParseDuration(s); err != nil {
			t.Fatalf("CHAOS_DURATION=%q: %v", s, err)
		}
	}
	slack := time.Second
	if s := os.Getenv("CHAOS_SLACK"); s != "" {
		var err error
		if slack, err = time.ParseDuration(s); err != nil {
			t.Fatalf("CHAOS_SLACK=%q: %v", s, err)
		}
	}
	// Printed on stderr too, so that a run cut short still tells its seed.
	fmt.Fprintf(os.Stderr, "chaos: seed %d (replay with CHAOS_SEED=%d)\n", seed, seed)
	outcome.add("seed %d (replay with CHAOS_SEED=%d), beside kube-apiserver's controller: %v", seed, seed, besideBuiltin)
	t.Logf("seed %d (replay with CHAOS_SEED=%d), duration %v, recovery bound %v (and an elector's poll for the adopters)", seed, seed, duration, leaseDuration+slack)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var logMu sync.Mutex
	logDone := false
	t.Cleanup(func() { logMu.Lock(); logDone = true; logMu.Unlock() })
	v := &violations{start: time.Now(), logf: func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		if !logDone {
			t.Logf(format, args...)
		}
	}}
	e := &env{
		t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), v: v, slack: slack,
		faults: map[string]int{}, ctrlStats: map[*proc]*ctrlFigures{}, offsetsUsed: map[time.Duration]bool{}, offsetOf: map[string]time.Duration{},
	}
	e.setUp()
	e.electorRetryPeriod = electorRetryPeriod(t)

	// Wait for the first election (the best candidate leads and acts) and
	// the group's first assignment.
	started := time.Now()
	e.waitHealthy("start", "first election", started, 30*time.Second)
	e.waitGroupHealthy("start", "the first assignment", started, 30*time.Second)

	begin := time.Now()
	order := e.rng.Perm(len(faultKinds))
	for i := 0; ; i++ {
		var f fault
		switch {
		case i < len(order):
			f = faultKinds[order[i]]
		case time.Since(begin) < duration:
			f = faultKinds[e.rng.IntN(len(faultKinds))]
		default:
			f = fault{}
		}
		if f.name == "" || t.Failed() && duration == 0 {
			break
		}
		e.mu.Lock()
		e.faults[f.name]++
		e.mu.Unlock()
		t.Logf("+%s fault %d: %s", time.Since(begin).Round(time.Millisecond), i+1, f.name)
		w := window{fault: f.name, start: time.Now()}
		e.mu.Lock()
		e.faultBegan = w.start
		e.mu.Unlock()
		if err := f.inject(e); err != nil {
			outcome.add("stopped: fault %s: %v", f.name, err)
			t.Fatalf("fault %s: %v", f.name, err)
		}
		w.end = time.Now()
		// Every fault strikes the group too: once the election is healthy
		// again, so must the group be.
		e.waitGroupHealthy(f.name, "the end of the fault", w.end, stuckAfter)
		e.mu.Lock()
		e.windows = append(e.windows, w)
		e.mu.Unlock()
		// A quiet spell between faults, of random length.
		e.pause(time.Duration(500+e.rng.IntN(1500)) * time.Millisecond)
	}
	e.finish(time.Since(begin), duration)
}

// setUp starts the witness, the recorder, the controller replicas and the
// candidates, each candidate behind its own proxy to kube-apiserver.
func (e *env) setUp() {
	t := e.t
	ns := server.CreateNamespace(t)
	e.ns, e.lockNS = ns, ns
	if besideBuiltin {
		e.lockNS = metav1.NamespaceSystem
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	bins, err := buildBinaries(filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	ctrlBin := bins.controller

	e.rec = newRecorder(e.v, leaseName, groupName)
	if err := e.rec.start(e.ctx, server.Client(), ns); err != nil {
		t.Fatal(err)
	}
	e.witness = newWitness(e.rec, leaseName, e.v, e.clockOffset)
	t.Cleanup(e.witness.Close)

	var procs []*proc
	for i := range controllerReplicas {
		name := fmt.Sprintf("cle-controller-%d", i)
		e.ctrls = append(e.ctrls, &proc{name: name, bin: ctrlBin, logPath: filepath.Join(dir, name+".log"), v: e.v, args: []string{
			"--kubeconfig=" + kubeconfig, "--api-mode=native", "--namespaces=" + ns,
			// Their locks live in the test namespace, as the built-in
			// controller's is held by the framework's idler; in kube-system
			// beside the running built-in controller.
			"--leader-elect-resource-namespace=" + e.lockNS, "--leader-elect-resource-name=" + ctrlLeaseName,
			"--leader-elect-identity=" + name,
			"--leader-elect-lease-duration=" + ctrlLeaseDuration.String(),
			"--leader-elect-renew-deadline=" + ctrlRenewDeadline.String(),
			"--leader-elect-retry-period=" + ctrlRetryPeriod.String(),
			// A frozen or killed best candidate costs one ping timeout per
			// election, and one that was just restarted must not pass for
			// alive on its creation alone once it is gone again.
			"--ping-timeout=300ms", "--candidate-freshness=2s",
			// The candidates of the library and on pkg/lock run "in Pods"
			// whose status the test writes as their kubelet would (see
			// killReported).
			"--proof-of-death",
			"--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:0", "-v=2",
		}})
	}
	procs = append(procs, e.ctrls...)
	for _, c := range candidateSpecs {
		px, err := newProxy(strings.TrimPrefix(server.URL(), "https://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(px.Close)
		candKubeconfig := filepath.Join(dir, c.identity+".kubeconfig")
		if err := writeProxiedKubeconfig(kubeconfig, candKubeconfig, "https://"+px.Addr()); err != nil {
			t.Fatal(err)
		}
		e.setClockOffset(c.identity, c.clockOffset)
		args := []string{
			"--kubeconfig=" + candKubeconfig, "--api-mode=native", "--namespace=" + ns, "--lease=" + leaseName,
			"--identity=" + c.identity, "--binary-version=" + candidateBinaryVersion, "--emulation-version=" + c.emulation,
			"--lease-duration=" + leaseDuration.String(), "--renew-deadline=" + renewDeadline.String(),
			"--retry-period=" + retryPeriod.String(), "--witness-url=" + e.witness.URL(), "-v=2",
		}
		if besideBuiltin {
			args = append(args, "--strategy="+string(strategy.OldestEmulationVersionByCleName))
		}
		p := &proc{name: c.identity, kind: c.kind, emulation: c.emulation, bin: bins.byKind[c.kind],
			logPath: filepath.Join(dir, c.identity+".log"), v: e.v, proxy: px}
		if c.kind != kindControllerRuntime {
			args = append(args, "--clock-offset="+c.clockOffset.String(), "--pod="+ns+"/"+c.identity, "--container=candidate")
			p.messageDir = filepath.Join(dir, "termination-messages")
			if err := os.MkdirAll(p.messageDir, 0o700); err != nil {
				t.Fatal(err)
			}
			e.createPod(c.identity)
		}
		p.args = args
		e.cands = append(e.cands, p)
	}
	procs = append(procs, e.cands...)
	e.setUpGroup(dir, kubeconfig, bins.byKind[kindLibrary])
	procs = append(procs, e.group...)
	t.Cleanup(func() {
		for _, p := range procs {
			if err := p.stop(); err != nil {
				t.Errorf("stop %s: %v", p.name, err)
			}
		}
		if t.Failed() {
			for _, p := range procs {
				all, _ := p.logs()
				if len(all) > 200_000 {
					all = "...\n" + all[len(all)-200_000:]
				}
				t.Logf("---- %s log ----\n%s", p.name, all)
			}
		}
	})
	for _, p := range procs {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range e.ctrls {
		go e.watchController(c)
	}
}

// setClockOffset records that identity runs with its clock offset off.
func (e *env) setClockOffset(identity string, offset time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.offsetsUsed[offset] = true
	e.offsetOf[identity] = offset
}

// clockOffset is how far identity's clock is off the machine's.
func (e *env) clockOffset(identity string) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.offsetOf[identity]
}

// writeProxiedKubeconfig writes a copy of the kubeconfig at from to to, with
// every cluster's server replaced by server.
func writeProxiedKubeconfig(from, to, server string) error {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*cfg, to)
}

// watchController scrapes a controller replica's /metrics every second. Its
// first figures in steady state (five seconds into its first run), once as
// the active replica and once as a standby, are the baselines; every later
// run's figures in the same role must stay within bounds of them: a restart
// starts from scratch, so the figures do not depend on how long the run has
// lasted, unless something leaks.
func (e *env) watchController(ctrl *proc) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-ticker.C:
		}
		ctrl.mu.Lock()
		since := time.Since(ctrl.started)
		ctrl.mu.Unlock()
		addr := ctrl.metricsAddr()
		if addr == "" || since < 5*time.Second || !ctrl.live() {
			continue
		}
		s, err := scrape(e.ctx, addr)
		if err != nil {
			continue // killed or frozen meanwhile; the next tick tells
		}
		e.mu.Lock()
		f := e.ctrlStats[ctrl]
		if f == nil {
			f = &ctrlFigures{baseline: map[bool]procStats{}, last: map[bool]procStats{}}
			e.ctrlStats[ctrl] = f
		}
		base, ok := f.baseline[s.leading]
		if !ok {
			base = s
			f.baseline[s.leading] = s
		}
		f.last[s.leading] = s
		e.mu.Unlock()
		if s.goroutines > 2*base.goroutines+50 {
			e.v.add("%s (%s) goroutines grew from %.0f to %.0f", ctrl.name, role(s.leading), base.goroutines, s.goroutines)
		}
		if s.rss > 2*base.rss+64<<20 {
			e.v.add("%s (%s) resident memory grew from %.0f MiB to %.0f MiB", ctrl.name, role(s.leading), base.rss/(1<<20), s.rss/(1<<20))
		}
	}
}

func role(leading bool) string {
	if leading {
		return "active"
	}
	return "standby"
}

// setEmulation gives p another emulation version from its next start on,
// and ranks the candidates again.
func (e *env) setEmulation(p *proc, version string) {
	p.setArg("emulation-version", version)
	p.emulation = version
	slices.SortStableFunc(e.cands, func(a, b *proc) int { return cmp.Compare(emulationRank(a.emulation), emulationRank(b.emulation)) })
}

// emulationRank is n of the emulation version 1.34.<n>.
func emulationRank(version string) int {
	n, err := strconv.Atoi(version[strings.LastIndex(version, ".")+1:])
	if err != nil {
		panic(fmt.Sprintf("emulation version %q is not 1.34.<n>", version))
	}
	return n
}

// recoveryBound is how soon p must lead and act after a fault: the lease
// duration and the slack, and for an adopter the poll of its elector, which
// tries to acquire every RetryPeriod to 2.2 times it (Lock.Timings).
func (e *env) recoveryBound(p *proc) time.Duration {
	bound := leaseDuration + e.slack
	if p != nil && p.kind != kindLibrary {
		bound += time.Duration(2.2 * float64(e.electorRetryPeriod))
	}
	return bound
}

// bestLive is the best-ranked candidate that is running and not frozen.
func (e *env) bestLive() *proc {
	for _, p := range e.cands {
		if p.live() {
			return p
		}
	}
	return nil
}

// leader is the candidate the Lease names, if it is one of ours.
func (e *env) leader() *proc {
	l, _ := e.rec.current(leaseName)
	for _, p := range e.cands {
		if p.name == l.holder {
			return p
		}
	}
	return nil
}

// waitHealthy waits until the best live candidate holds the Lease and has
// written to the witness after from, and records how long that took. Longer
// than the lease duration and the slack is a violation; longer than
// stuckAfter ends the test.
func (e *env) waitHealthy(fault, phase string, from time.Time, limit time.Duration) {
	e.t.Helper()
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		if best := e.bestLive(); best != nil {
			if l, _ := e.rec.current(leaseName); l.holder == best.name {
				if w, ok := e.witness.acceptedAfter(leaseFence, best.name, 0, from); ok {
					// An adopter that lost its term during the fault
					// exited and was started again: from then on it is a
					// candidate joining, and its bound counts from its
					// start, as for any candidate that joins.
					//
					// One restarted during the fault, while the API
					// could not serve it, retries its start a retry
					// period apart (and 10% jitter): it may look at the
					// Lease first that much after the API serves again,
					// and a Lease its predecessor renewed it must then
					// watch stay unchanged for a lease duration.
					start, after := from, phase
					bound := e.recoveryBound(best)
					e.mu.Lock()
					faultBegan := e.faultBegan
					e.mu.Unlock()
					best.mu.Lock()
					switch {
					case best.rejoined.After(from):
						start = best.rejoined
						after = fmt.Sprintf("its restart after a lost term (%s after %s)", start.Sub(from).Round(time.Millisecond), phase)
					case best.rejoined.After(faultBegan):
						bound += retryPeriod + retryPeriod/10
						after = fmt.Sprintf("%s (it restarted %s before, after a lost term: the bound adds its start-up retry)", phase, from.Sub(best.rejoined).Round(time.Millisecond))
					}
					best.mu.Unlock()
					took := w.received.Sub(start)
					e.mu.Lock()
					e.recoveries = append(e.recoveries, recovery{fault: fault, phase: after, leader: best.name, took: took, bound: bound})
					e.mu.Unlock()
					e.t.Logf("    %s: %s leads and acts (token %d) %s after %s", fault, best.name, w.Token, took.Round(time.Millisecond), after)
					if fault != "start" && took > bound {
						e.v.add("%s: %s took %s to lead and act after %s (bound %s)", fault, best.name, took.Round(time.Millisecond), after, bound)
					}
					return
				}
			}
		}
		e.nextPoll(ticker, from, limit, func() string {
			l, _ := e.rec.current(leaseName)
			return fmt.Sprintf("%s: no healthy election %s after %s: the Lease names %q (preferred %q, term %d), best live candidate %v",
				fault, limit, phase, l.holder, l.preferred, l.transitions, e.bestLive())
		})
	}
}

// nextPoll waits for ticker's next tick, unless limit has passed since from:
// then the run stops, saying failure.
func (e *env) nextPoll(ticker *time.Ticker, from time.Time, limit time.Duration, failure func() string) {
	e.t.Helper()
	if time.Since(from) > limit {
		msg := failure()
		outcome.add("stopped: %s", msg)
		e.t.Fatal(msg)
	}
	select {
	case <-e.ctx.Done():
		e.t.Fatal("cancelled")
	case <-ticker.C:
	}
}

// pause lets d pass: the length of a fault or of a quiet spell, not a wait
// for some state.
func (e *env) pause(d time.Duration) {
	select {
	case <-e.ctx.Done():
	case <-time.After(d):
	}
}

// finish checks what is checked at the end, and prints the summary.
func (e *env) finish(ran, duration time.Duration) {
	t := e.t
	for _, p := range slices.Concat(e.ctrls, e.cands, e.group) {
		for _, line := range p.panics() {
			e.v.add("%s panicked: %s", p.name, line)
		}
	}
	ws := e.witness.stats(leaseFence)
	versions, changes, candEvents := e.rec.counts(leaseName)
	e.mu.Lock()
	var kinds []string
	for k, n := range e.faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	var maxRec recovery
	for _, r := range e.recoveries {
		if r.fault != "start" && r.took > maxRec.took {
			maxRec = r
		}
	}
	var ctrlLines []string
	for _, c := range e.ctrls {
		c.mu.Lock()
		runs := c.starts
		c.mu.Unlock()
		f := e.ctrlStats[c]
		if f == nil {
			e.v.add("%s's /metrics was never read", c.name)
			continue
		}
		var roles []string
		for _, leading := range []bool{true, false} {
			if b, ok := f.baseline[leading]; ok {
				l := f.last[leading]
				roles = append(roles, fmt.Sprintf("%s: goroutines %.0f at first, %.0f at last, resident memory %.0f MiB at first, %.0f MiB at last",
					role(leading), b.goroutines, l.goroutines, b.rss/(1<<20), l.rss/(1<<20)))
			}
		}
		ctrlLines = append(ctrlLines, fmt.Sprintf("%s (%d runs): %s", c.name, runs, strings.Join(roles, "; ")))
	}
	var offsets []string
	for _, o := range clockOffsets {
		if e.offsetsUsed[o] {
			offsets = append(offsets, fmt.Sprintf("%+v", o))
		}
	}
	gapDuring := "no fault"
	for _, w := range e.windows {
		if !ws.maxGapAt.Before(w.start) && ws.maxGapAt.Before(w.end) {
			gapDuring = w.fault
		}
	}
	e.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary (%s of faults)\n", ran.Round(time.Second))
	fmt.Fprintf(&b, "  faults injected: %s\n", strings.Join(kinds, " "))
	fmt.Fprintf(&b, "  leadership changes: %d (Lease versions %d, LeaseCandidate events %d, terms at the witness %d)\n", changes, versions, candEvents, ws.terms)
	fmt.Fprintf(&b, "  witness writes: %d, refused (stale token) %d, of which delivered late (past the guard before a newer term's first write) %d\n", ws.writes, ws.refused, ws.late)
	fmt.Fprintf(&b, "  max recovery after a fault: %s (%s, %s, %s; bound %s)\n", maxRec.took.Round(time.Millisecond), maxRec.fault, maxRec.phase, maxRec.leader, maxRec.bound)
	fmt.Fprintf(&b, "  max leaderless gap at the witness: %s (began at +%s, during %s)\n", ws.maxGap.Round(time.Millisecond), ws.maxGapAt.Sub(e.v.start).Round(time.Second), gapDuring)
	for _, l := range ctrlLines {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	byIdentity := e.witness.byIdentity(leaseFence)
	for _, p := range e.cands {
		p.mu.Lock()
		starts, lost := p.starts, p.lostTerms
		p.mu.Unlock()
		w := byIdentity[p.name]
		fmt.Fprintf(&b, "  %s (%s, emulation %s at the end): %d runs, %d exits after a lost term, %d terms and %d writes accepted at the witness\n",
			p.name, p.kind, p.emulation, starts, lost, w.terms, w.writes)
		if w.terms == 0 && duration > 0 {
			e.v.add("%s (%s) never led", p.name, p.kind)
		}
	}
	fmt.Fprintf(&b, "  candidate clock offsets: %s\n", strings.Join(offsets, " "))
	e.summarizeGroup(&b, duration)
	// Taken last: the figures above add the violations they find.
	bad := e.v.all()
	fmt.Fprintf(&b, "  violations: %d\n", len(bad))
	t.Log(b.String())
	fmt.Fprintln(os.Stderr, b.String())
	outcome.add("%s", b.String())
	for _, msg := range bad {
		outcome.add("violation: %s", msg)
		t.Errorf("violation: %s", msg)
	}
}

// electorRetryPeriod is the RetryPeriod Lock.Timings gives an elector at the
// candidates' timings.
func electorRetryPeriod(t *testing.T) time.Duration {
	l, err := lock.New(lock.Config{Candidate: candidate.Config{
		Clients: access.Clients{Kube: fake.NewClientset()}, Namespace: "chaos", LeaseName: leaseName, Identity: "probe",
		BinaryVersion: candidateBinaryVersion, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, rp := l.Timings()
	return rp
}
