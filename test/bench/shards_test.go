package bench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
)

var (
	shardCount  = flag.Int("bench.shards", 32, "shards (Knative: buckets) of the group that joins, leaves and crashes")
	costCounts  = flag.String("bench.cost-shards", "32,128", "comma-separated shard counts whose steady write cost is counted with 3 replicas")
	stepLimit   = flag.Duration("bench.step-limit", time.Minute, "how long a step of BenchmarkShards waits for a balanced, fully owned assignment")
	knativeSide = side{"knative", "knative"}
)

// BenchmarkShards measures shard groups side by side with Knative's buckets
// (knative.dev/pkg/leaderelection, the real module, built by test/bench/knative),
// in one run on one kube-apiserver: a group of --bench.shards shards whose
// replicas start (3), join (3 → 5), leave (5 → 3, SIGTERM) and crash (the
// replica acting on the most shards is SIGKILLed, 3 → 2), then the steady
// write cost of 3 replicas at each of --bench.cost-shards. Both sides use
// client-go's default timings (15s/10s/2s). Every figure comes from the
// replicas' own reports of the moment a shard's work starts and returns
// (test/bench/cand --shards and test/bench/knative print the same lines).
//
// Run it with `make bench-shards` (hack/bench-shards.sh), which writes the
// table to docs/benchmarks.md.
func BenchmarkShards(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts, err := parseCounts(*costCounts)
	if err != nil {
		b.Fatal(err)
	}
	r := startRun(ctx, b)
	// Knative's side is a module of its own (knative.dev/pkg pins its own
	// client-go).
	build := exec.Command("go", "build", "-o", r.dir+"/", ".")
	build.Dir = filepath.Join(moduleRoot(b), "test", "bench", "knative")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the Knative replica: %v\n%s", err, out)
	}
	knativeBin := filepath.Join(r.dir, "knative")

	for b.Loop() {
		for _, s := range []side{sides[0], knativeSide} {
			bin := r.candBin
			if s == knativeSide {
				bin = knativeBin
			}
			for i := range *reps {
				ns := r.server.CreateNamespace(b)
				stop := func() {}
				if s.name == "cle" {
					stop = r.activate(s, ns, nil)
				}
				logDir := filepath.Join(r.dir, fmt.Sprintf("shards-%s-%d", s.name, i))
				if err := os.MkdirAll(logDir, 0o755); err != nil {
					b.Fatal(err)
				}
				st := starter{bin: bin, kind: s.kind, kubeconfig: r.kubeconfig, ns: ns, logDir: logDir, j: newJournal(), side: s.name, rep: i}
				begin := time.Now()
				for _, step := range r.shardSteps(st, *shardCount) {
					r.b.Logf("%s %s #%d: %s", step.title, s.name, i+1, step.ms)
					r.record(step.title, s.name, step.ms)
				}
				for _, n := range counts {
					st.j = newJournal()
					m := r.shardCost(st, n)
					r.b.Logf("steady %s #%d: %s", s.name, i+1, m)
					r.record("steady state (3 replicas)", s.name, []measure{m})
				}
				r.b.Logf("shards %s #%d took %s", s.name, i+1, time.Since(begin).Round(time.Second))
				stop()
			}
		}
	}
	table := r.table(knativeSide.name)
	fmt.Println(table)
	if *outFile != "" {
		if err := os.WriteFile(*outFile, []byte(table), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func parseCounts(s string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--bench.cost-shards: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// startReplica starts replica id of the group (Knative: the component)
// named group, of n shards.
func (s starter) startReplica(group, id string, n int) (*cand, error) {
	args := []string{"--kubeconfig=" + s.kubeconfig, "--namespace=" + s.ns, "--lease=" + group, "--identity=" + id,
		fmt.Sprintf("--shards=%d", n), "--lease-duration=" + leaseDuration.String(),
		"--renew-deadline=" + renewDeadline.String(), "--retry-period=" + retryPeriod.String()}
	if s.kind != knativeSide.kind {
		args = append(args, "--kind="+s.kind, "--strategy="+shard.StrategyShards, "-v=2")
	}
	return s.launch(id, "", exec.Command(s.bin, args...), false, shardEvent)
}

// shardEvent reads a replica's line: started-shard or stopped-shard, the
// shard and the time the replica printed it.
func shardEvent(line string) (event, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || (f[0] != "started-shard" && f[0] != "stopped-shard") {
		return event{}, false
	}
	e := event{what: f[0], shard: -1}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "shard":
			e.shard, _ = strconv.Atoi(v)
		case "at":
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return event{}, false
			}
			e.at = time.Unix(0, ns)
		}
	}
	return e, e.shard >= 0 && !e.at.IsZero()
}

// stepMeasures are the figures of one step of a group's life.
type stepMeasures struct {
	title string
	ms    []measure
}

// shardSteps runs a group of n shards through a cold start, a join, a leave
// and a crash, and measures each step.
func (r *run) shardSteps(st starter, n int) []stepMeasures {
	const name = "shards"
	g := &group{st: st, lease: name, r: r}
	defer g.stopAll()
	start := func(id string) {
		c, err := st.startReplica(name, id, n)
		if err != nil {
			r.b.Fatal(err)
		}
		g.cands = append(g.cands, c)
	}
	var out []stepMeasures
	step := func(title string, t0 time.Time, live []string) {
		out = append(out, stepMeasures{title, r.shardStep(st.j, n, t0, live)})
	}

	t0 := time.Now()
	for _, id := range []string{"r1", "r2", "r3"} {
		start(id)
	}
	step("cold start (3 replicas)", t0, []string{"r1", "r2", "r3"})

	t0 = time.Now()
	start("r4")
	start("r5")
	step("join (3 → 5 replicas)", t0, []string{"r1", "r2", "r3", "r4", "r5"})

	t0 = time.Now()
	var wg sync.WaitGroup
	for _, id := range []string{"r4", "r5"} {
		wg.Go(func() { g.byID(id).stop(syscall.SIGTERM) })
	}
	wg.Wait()
	step("leave (5 → 3, SIGTERM)", t0, []string{"r1", "r2", "r3"})

	// The replica acting on the most shards is killed: where a crash
	// costs most.
	evs, _ := st.j.since(0)
	acting := actingAt(evs, n, time.Now())
	victim, most := "r1", -1
	for _, id := range []string{"r1", "r2", "r3"} {
		if c := countActing(acting, id); c > most {
			victim, most = id, c
		}
	}
	t0 = time.Now()
	g.byID(victim).stop(syscall.SIGKILL)
	gone := time.Now()
	// A killed process prints nothing more: its shards stopped when it
	// exited.
	evs, _ = st.j.since(0)
	for s, ids := range actingAt(evs, n, gone) {
		if ids[victim] {
			st.j.add(event{id: victim, what: "stopped-shard", shard: s, at: gone})
		}
	}
	var rest []string
	for _, id := range []string{"r1", "r2", "r3"} {
		if id != victim {
			rest = append(rest, id)
		}
	}
	step("crash (SIGKILL of the busiest, 3 → 2)", t0, rest)
	return out
}

// shardStep waits until the assignment is balanced and fully owned by the
// replicas live (or --bench.step-limit passed), lets it settle, and
// measures the step from t0.
func (r *run) shardStep(j *journal, n int, t0 time.Time, live []string) []measure {
	j.wait(0, *stepLimit, func(evs []event) bool {
		return replay(evs, n, live, t0, time.Now()).balancedIn >= 0
	})
	pause(settle)
	evs, _ := j.since(0)
	res := replay(evs, n, live, t0, time.Now())
	sinceOrNever := func(metric string, d time.Duration) measure {
		if d < 0 {
			return measure{metric: metric, unit: "s", value: math.Inf(1)}
		}
		return seconds(metric, d)
	}
	return []measure{
		sinceOrNever("→ every shard owned by a live replica", res.ownedIn),
		sinceOrNever("→ balanced (spread ≤ 1) and fully owned", res.balancedIn),
		seconds("longest a shard was unowned", res.longestUnowned),
		count("shards acted on by two replicas at once", res.doubled),
		{metric: "shards started (moves)", value: float64(res.starts)},
		{metric: "spread after (max − min shards per live replica)", value: float64(res.spread)},
	}
}

// stepResult is what replay finds of a step.
type stepResult struct {
	// ownedIn, balancedIn: how long after t0 every shard had exactly one
	// acting replica, a live one (and the spread was at most one); -1 when
	// that did not happen by the end.
	ownedIn, balancedIn time.Duration
	longestUnowned      time.Duration
	doubled, starts     int
	spread              int // at the end
}

// replay plays evs in the order of their times and judges the step from t0
// to end with the replicas of live.
func replay(evs []event, n int, live []string, t0, end time.Time) stepResult {
	evs, acting := playUntil(evs, n, t0)
	i := slices.IndexFunc(evs, func(e event) bool { return e.at.After(t0) }) // the first not played
	if i < 0 {
		i = len(evs)
	}
	res := stepResult{ownedIn: -1, balancedIn: -1}
	unownedSince := make([]time.Time, n)
	doubled := make([]bool, n)
	for s := range acting {
		if len(acting[s]) == 0 {
			unownedSince[s] = t0
		}
	}
	judge := func(at time.Time) {
		owned, spread := judgeAssignment(acting, live)
		if owned && res.ownedIn < 0 {
			res.ownedIn = at.Sub(t0)
		}
		if owned && spread <= 1 && res.balancedIn < 0 {
			res.balancedIn = at.Sub(t0)
		}
	}
	judge(t0)
	for ; i < len(evs) && !evs[i].at.After(end); i++ {
		e := evs[i]
		if !apply(acting, e) {
			continue
		}
		s := e.shard
		switch {
		case e.what == "started-shard":
			res.starts++
			if !unownedSince[s].IsZero() {
				res.longestUnowned = max(res.longestUnowned, e.at.Sub(unownedSince[s]))
				unownedSince[s] = time.Time{}
			}
			if len(acting[s]) > 1 {
				doubled[s] = true
			}
		case len(acting[s]) == 0:
			unownedSince[s] = e.at
		}
		judge(e.at)
	}
	for s := range unownedSince {
		if !unownedSince[s].IsZero() {
			res.longestUnowned = max(res.longestUnowned, end.Sub(unownedSince[s]))
		}
		if doubled[s] {
			res.doubled++
		}
	}
	_, res.spread = judgeAssignment(acting, live)
	return res
}

// judgeAssignment says whether every shard has exactly one acting replica,
// a live one, and the spread of the shards over the live replicas.
func judgeAssignment(acting []map[string]bool, live []string) (owned bool, spread int) {
	per := map[string]int{}
	for _, id := range live {
		per[id] = 0
	}
	owned = true
	for _, ids := range acting {
		if len(ids) != 1 {
			owned = false
		}
		for id := range ids {
			if _, ok := per[id]; !ok {
				owned = false
				continue
			}
			per[id]++
		}
	}
	lo, hi := math.MaxInt, 0
	for _, c := range per {
		lo, hi = min(lo, c), max(hi, c)
	}
	return owned, hi - lo
}

// actingAt is who acts on each shard after the events up to t.
func actingAt(evs []event, n int, t time.Time) []map[string]bool {
	_, acting := playUntil(evs, n, t)
	return acting
}

// playUntil orders evs by their times and plays those up to t: who acts on
// each of the n shards then. It returns the ordered events too.
func playUntil(evs []event, n int, t time.Time) ([]event, []map[string]bool) {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	acting := make([]map[string]bool, n)
	for s := range acting {
		acting[s] = map[string]bool{}
	}
	for _, e := range evs {
		if e.at.After(t) {
			break
		}
		apply(acting, e)
	}
	return evs, acting
}

// apply plays e on acting, and says whether e is about one of its shards.
func apply(acting []map[string]bool, e event) bool {
	if e.shard < 0 || e.shard >= len(acting) {
		return false
	}
	if e.what == "started-shard" {
		acting[e.shard][e.id] = true
	} else {
		delete(acting[e.shard], e.id)
	}
	return true
}

func countActing(acting []map[string]bool, id string) int {
	c := 0
	for _, ids := range acting {
		if ids[id] {
			c++
		}
	}
	return c
}

// shardCost starts 3 replicas of a group of n shards, waits until every
// shard is owned, and counts the writes to the namespace's Leases and
// LeaseCandidates (cle-controller's own locks aside) over --bench.steady.
func (r *run) shardCost(st starter, n int) measure {
	name := fmt.Sprintf("cost%d", n)
	g := &group{st: st, lease: name, r: r}
	defer g.stopAll()
	live := []string{"c1", "c2", "c3"}
	t0 := time.Now()
	for _, id := range live {
		c, err := st.startReplica(name, id, n)
		if err != nil {
			r.b.Fatal(err)
		}
		g.cands = append(g.cands, c)
	}
	st.j.wait(0, *stepLimit, func(evs []event) bool { return replay(evs, n, live, t0, time.Now()).ownedIn >= 0 })
	pause(settle)
	notController := func(name string) bool {
		return name != access.PortableControllerLock && name != access.NativeControllerLock
	}
	leases, cands, each := countWrites(r.ctx, r, st.ns, *steady, notController, func(string) bool { return true })
	r.b.Logf("steady writes of %s, %d shards, by object: %v", st.side, n, each)
	return measure{metric: fmt.Sprintf("writes/min, %d shards", n), value: perMinute(leases + cands)}
}
