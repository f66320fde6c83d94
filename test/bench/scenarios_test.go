package bench

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// A scenario runs once on one side and returns its measures.
type scenario struct {
	name, title string
	run         func(r *run, st starter, lease string) []measure
	// system: the scenario's Lease is kube-system's, of a fixed name.
	system bool
}

// measure is one figure of one repetition: a duration in seconds, or a
// count (summed over the repetitions, as a correctness count).
type measure struct {
	metric, unit string
	value        float64
	sum          bool
}

func (m measure) String() string {
	if m.unit == "s" {
		return fmt.Sprintf("%s %.2fs", m.metric, m.value)
	}
	return fmt.Sprintf("%s %g", m.metric, m.value)
}

func seconds(metric string, d time.Duration) measure {
	return measure{metric: metric, unit: "s", value: d.Seconds()}
}

func count(metric string, n int) measure {
	return measure{metric: metric, unit: "", value: float64(n), sum: true}
}

var allScenarios = []scenario{
	{name: "cold", title: "1. cold start (3 candidates: emulation 1.35, 1.36, 1.36)", run: coldStart},
	{name: "handover", title: "2. graceful handover (the leader stops, releasing)", run: gracefulHandover},
	{name: "preemption", title: "3. preemption (a better candidate joins a settled election)", run: preemption},
	{name: "failover", title: "4. crash failover (the leader is SIGKILLed)", run: crashFailover},
	{name: "upgrade", title: "5. rolling upgrade (3 replicas 1.35 → 1.36, one by one, the leader first)", run: rollingUpgrade},
	{name: "writes", title: "6. write cost in the steady state (3 candidates)", run: writeCost},
	{name: "restart", title: "7. equal restart (3 equal candidates, one restarts)", run: equalRestart},
	{name: "adopt-handover", title: "8a. adoption: graceful handover (a client-go elector and a controller-runtime manager)", run: adoptHandover},
	{name: "adopt-preemption", title: "8b. adoption: preemption (a better elector or manager joins)", run: adoptPreemption},
	{name: "adopt-failover", title: "8c. adoption: crash failover (the leading elector or manager is SIGKILLed)", run: adoptFailover},
	{name: "scheduler", title: "9. kube-scheduler ×3 (emulation 1.35, 1.36, 1.36)", run: kubeSchedulers, system: true},
}

// Time limits: an election that has not happened by then is recorded as
// such, and the repetition moves on.
const (
	electionLimit = 90 * time.Second
	settle        = 3 * time.Second
)

// group starts candidates and stops all of them at the end.
type group struct {
	st    starter
	lease string
	cands []*cand
	r     *run
}

func (g *group) start(id, binary, emulation string) *cand {
	return g.startWith(g.st, id, binary, emulation)
}

// startWith starts a candidate with starter st (another kind than the
// group's).
func (g *group) startWith(st starter, id, binary, emulation string) *cand {
	c, err := st.start(g.lease, id, binary, emulation)
	if err != nil {
		g.r.b.Fatal(err)
	}
	g.cands = append(g.cands, c)
	return c
}

func (g *group) stopAll() {
	for _, c := range g.cands {
		if c.alive() {
			c.stop(syscall.SIGTERM)
		}
	}
}

func (g *group) byID(id string) *cand {
	for i := len(g.cands) - 1; i >= 0; i-- {
		if g.cands[i].id == id && g.cands[i].alive() {
			return g.cands[i]
		}
	}
	return nil
}

// three starts a (1.35), b and c (1.36) and waits until one leads and the
// election has settled: the leader is a, or the limit passed.
func three(r *run, st starter, lease string) (*group, string, bool) {
	g := &group{st: st, lease: lease, r: r}
	g.start(lease+"-a", "1.36.0", "1.35.0")
	g.start(lease+"-b", "1.36.0", "1.36.0")
	g.start(lease+"-c", "1.36.0", "1.36.0")
	var leader string
	ok := st.j.wait(0, electionLimit, func(evs []event) bool {
		_, aLeads := leaders(evs)[lease+"-a"]
		if aLeads {
			leader = lease + "-a"
		}
		return aLeads
	})
	pause(settle)
	return g, leader, ok
}

func coldStart(r *run, st starter, lease string) []measure {
	g := &group{st: st, lease: lease, r: r}
	defer g.stopAll()
	begin := time.Now()
	g.start(lease+"-a", "1.36.0", "1.35.0")
	g.start(lease+"-b", "1.36.0", "1.36.0")
	g.start(lease+"-c", "1.36.0", "1.36.0")
	first, ok := st.j.waitStart(0, anyone)
	if !ok {
		return []measure{count("no leader within 90s", 1)}
	}
	wrong := 0
	if first.id != lease+"-a" {
		wrong = 1
	}
	return []measure{seconds("start → first leader starts", first.at.Sub(begin)), count("wrong first leader", wrong)}
}

func gracefulHandover(r *run, st starter, lease string) []measure {
	g, leader, ok := three(r, st, lease)
	defer g.stopAll()
	if !ok {
		return []measure{count("best never led", 1)}
	}
	return handOver(st, g, leader, syscall.SIGTERM)
}

// handOver stops the leader of g with sig, and measures until another
// candidate starts leading: after a SIGTERM, also whether it started before
// the leader's work had returned.
func handOver(st starter, g *group, leader string, sig syscall.Signal) []measure {
	from := st.j.len()
	begin := time.Now()
	g.byID(leader).stop(sig)
	next, ok := st.j.waitStart(from, func(id string) bool { return id != leader })
	if !ok {
		return []measure{count("no successor within 90s", 1)}
	}
	if sig == syscall.SIGKILL {
		return []measure{seconds("SIGKILL → next leader starts", next.at.Sub(begin))}
	}
	evs, _ := st.j.since(from)
	overlap := 0
	if stopped, ok := stopOf(evs, leader); !ok || next.at.Before(stopped.at) {
		overlap = 1
	}
	return []measure{seconds("stop → next leader starts", next.at.Sub(begin)), count("overlap", overlap)}
}

func stopOf(evs []event, id string) (event, bool) {
	for _, e := range evs {
		if e.id == id && e.what == "stopped-leading" {
			return e, true
		}
	}
	return event{}, false
}

func preemption(r *run, st starter, lease string) []measure {
	g := &group{st: st, lease: lease, r: r}
	defer g.stopAll()
	g.start(lease+"-b", "1.36.0", "1.36.0")
	g.start(lease+"-c", "1.36.0", "1.36.0")
	old, ok := st.j.waitStart(0, anyone)
	if !ok {
		return []measure{count("no leader within 90s", 1)}
	}
	pause(settle)
	from := st.j.len()
	begin := time.Now()
	better := lease + "-a"
	g.start(better, "1.36.0", "1.35.0")
	took, ok := st.j.waitStart(from, func(id string) bool { return id == better })
	if !ok {
		return []measure{count("better never led within 90s", 1)}
	}
	evs, _ := st.j.since(from)
	stopped, ok := stopOf(evs, old.id)
	overlap := 0
	ms := []measure{seconds("join → better starts", took.at.Sub(begin))}
	if !ok || took.at.Before(stopped.at) {
		overlap = 1
	} else {
		ms = append(ms, seconds("leaderless gap", took.at.Sub(stopped.at)))
	}
	return append(ms, count("overlap", overlap))
}

func crashFailover(r *run, st starter, lease string) []measure {
	g, leader, ok := three(r, st, lease)
	defer g.stopAll()
	if !ok {
		return []measure{count("best never led", 1)}
	}
	return handOver(st, g, leader, syscall.SIGKILL)
}

// rollingUpgrade replaces three 1.35 replicas by 1.36 ones, one at a time
// (the old one stops, then its successor starts and, once it has run for
// settle, the next one is replaced), as a Deployment with maxSurge 0 does.
func rollingUpgrade(r *run, st starter, lease string) []measure {
	g := &group{st: st, lease: lease, r: r}
	defer g.stopAll()
	ids := []string{lease + "-r0", lease + "-r1", lease + "-r2"}
	for _, id := range ids {
		g.start(id, "1.35.0", "1.35.0")
	}
	if !st.j.wait(0, electionLimit, func(evs []event) bool { return len(leaders(evs)) > 0 }) {
		return []measure{count("no leader within 90s", 1)}
	}
	pause(settle)
	from := st.j.len()
	// The leader is replaced first, on both sides: which replica a
	// Deployment replaces first is arbitrary, and starting with the
	// leader makes both sides hand over as often as their ranking, not
	// their tie-break's luck, makes them.
	settled, _ := st.j.since(0)
	for id := range leaders(settled) {
		if i := slices.Index(ids, id); i > 0 {
			ids[0], ids[i] = ids[i], ids[0]
		}
	}
	begin := time.Now()
	newer := map[string]bool{}
	var oldStopped []time.Time // when each old replica had exited
	for i, id := range ids {
		g.byID(id).stop(syscall.SIGTERM)
		oldStopped = append(oldStopped, time.Now())
		nid := fmt.Sprintf("%s-v2-%d", lease, i)
		g.start(nid, "1.36.0", "1.36.0")
		newer[nid] = true
		pause(settle + retryPeriod)
	}
	// The upgrade is over once a new replica leads.
	if !st.j.wait(from, electionLimit, func(evs []event) bool {
		for id := range leaders(evs) {
			if newer[id] {
				return true
			}
		}
		return false
	}) {
		return []measure{count("no leader after the upgrade within 90s", 1)}
	}
	end := time.Now()
	all, _ := st.j.since(0)
	before, evs := all[:from], all[from:]
	// Walk the events: leaderless time, transitions, and terms of a newer
	// replica begun while an old one still ran.
	lead := map[string]bool{}
	for id := range leaders(before) {
		lead[id] = true
	}
	var leaderless time.Duration
	last := begin
	transitions, tooNew := 0, 0
	for _, e := range evs {
		if len(lead) == 0 {
			leaderless += e.at.Sub(last)
		}
		last = e.at
		switch e.what {
		case "started-leading":
			lead[e.id] = true
			transitions++
			if newer[e.id] && len(oldStopped) > 0 && e.at.Before(oldStopped[len(oldStopped)-1]) {
				tooNew++
			}
		case "stopped-leading":
			delete(lead, e.id)
		}
	}
	if len(lead) == 0 {
		leaderless += end.Sub(last)
	}
	return []measure{
		seconds("total leaderless time", leaderless), count("transitions", transitions),
		count("newer led while an older one ran", tooNew),
	}
}

// pause lets d pass: a quiet spell the scenario calls for, not a wait for a
// state.
func pause(d time.Duration) { time.Sleep(d) }

// writeCost counts the writes to the Lease and LeaseCandidates of a settled
// election of three live candidates, then with a LeaseCandidate that ranks
// best but was left behind by a process that is gone: last renewed five
// minutes ago, it never answers a ping. The controllers' own Leases are not
// counted.
func writeCost(r *run, st starter, lease string) []measure {
	g, _, ok := three(r, st, lease)
	defer g.stopAll()
	if !ok {
		return []measure{count("best never led", 1)}
	}
	client := r.server.Client()
	leases, cands, _ := countWrites(r.ctx, r, st.ns, *steady, named(lease), named(lease))
	ms := []measure{
		{metric: "Lease writes/min, 3 live", unit: "", value: perMinute(leases)},
		{metric: "LeaseCandidate writes/min, 3 live", unit: "", value: perMinute(cands)},
	}
	_, err := client.CoordinationV1beta1().LeaseCandidates(st.ns).Create(r.ctx, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: lease + "-dead"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: lease, BinaryVersion: "1.36.0", EmulationVersion: "1.34.0", Strategy: coordinationv1.OldestEmulationVersion,
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-5 * time.Minute))),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		r.b.Fatal(err)
	}
	from := st.j.len()
	leases, cands, _ = countWrites(r.ctx, r, st.ns, *steady, named(lease), named(lease))
	evs, _ := st.j.since(from)
	changes := starts(evs)
	return append(ms,
		measure{metric: "Lease writes/min, + a dead best", unit: "", value: perMinute(leases)},
		measure{metric: "LeaseCandidate writes/min, + a dead best", unit: "", value: perMinute(cands)},
		count("leader changes, + a dead best", changes),
	)
}

func perMinute(n int) float64 { return float64(n) / steady.Minutes() }

// named matches the name name.
func named(name string) func(string) bool { return func(n string) bool { return n == name } }

// countWrites counts for d the changes that reach a watch, every write that
// changed an object, to the Leases of ns whose name satisfies lease and to
// the LeaseCandidates of ns whose spec.leaseName satisfies cand, and the
// count of each object ("Lease/name", "LeaseCandidate/name").
func countWrites(ctx context.Context, r *run, ns string, d time.Duration, lease, cand func(string) bool) (leases, cands int, each map[string]int) {
	each = map[string]int{}
	client := r.server.Client()
	ll, err := client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.b.Fatal(err)
	}
	cl, err := client.CoordinationV1beta1().LeaseCandidates(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lw, err := client.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: ll.ResourceVersion})
	if err != nil {
		r.b.Fatal(err)
	}
	defer lw.Stop()
	cw, err := client.CoordinationV1beta1().LeaseCandidates(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: cl.ResourceVersion})
	if err != nil {
		r.b.Fatal(err)
	}
	defer cw.Stop()
	for {
		select {
		case <-ctx.Done():
			return leases, cands, each
		case ev := <-lw.ResultChan():
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && lease(l.Name) && isWrite(ev) {
				leases++
				each["Lease/"+l.Name]++
			}
		case ev := <-cw.ResultChan():
			if lc, ok := ev.Object.(*coordinationv1beta1.LeaseCandidate); ok && cand(lc.Spec.LeaseName) && isWrite(ev) {
				cands++
				each["LeaseCandidate/"+lc.Name]++
			}
		}
	}
}

func isWrite(ev watch.Event) bool {
	return ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted
}

// equalRestart: three equal candidates; a standby restarts. Any change of
// leader that follows is needless.
func equalRestart(r *run, st starter, lease string) []measure {
	g := &group{st: st, lease: lease, r: r}
	defer g.stopAll()
	for _, s := range []string{"a", "b", "c"} {
		g.start(lease+"-"+s, "1.36.0", "1.36.0")
	}
	leader, ok := st.j.waitStart(0, anyone)
	if !ok {
		return []measure{count("no leader within 90s", 1)}
	}
	pause(settle)
	standby := lease + "-a"
	if leader.id == standby {
		standby = lease + "-b"
	}
	from := st.j.len()
	g.byID(standby).stop(syscall.SIGTERM)
	g.start(standby, "1.36.0", "1.36.0")
	pause(leaseDuration + 2*retryPeriod) // the window in which a needless change would show
	evs, _ := st.j.since(from)
	changes := starts(evs)
	return []measure{count("needless leader changes", changes)}
}
