package controller

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/internal/simworld"
)

// Nudged runs. Production code asks a Hook at the places where timing or
// ordering decides which of several correct things it does (package
// nudge): a renewal made early, a read the cache made unnecessary, a ping
// answered late. A nudged run gives every process a Hook that takes some
// of those branches, drawn per run as swarm runs draw faults: one point,
// or several, each at odds of its own, so that a branch production takes
// once in a long while runs in the simulation again and again. Nudges
// stop with the faults, so that the liveness checks judge the code as it
// runs unsteered.

// simNudgeEvery: one run in so many is nudged, drawn from a stream of its
// own so that the other runs draw what they drew before.
const simNudgeEvery = 3

// simNudgeOdds are the odds a nudged point is taken at when asked.
var simNudgeOdds = []float64{0.02, 0.2, 0.6}

// simNudges are a nudged run's odds per point (0: never taken).
type simNudges struct {
	odds [nudge.Points]float64
	rng  *rand.Rand
}

// nudgeRun draws seed's nudges, or nil when its run is not nudged.
func nudgeRun(seed uint64) *simNudges {
	rng := rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b))
	if rng.IntN(simNudgeEvery) != 0 {
		return nil
	}
	n := &simNudges{rng: rng}
	odds := func() float64 { return simNudgeOdds[rng.IntN(len(simNudgeOdds))] }
	if rng.IntN(2) == 0 {
		// Half steer one point only.
		n.odds[rng.IntN(int(nudge.Points))] = odds()
		return n
	}
	on := 0
	for p := range nudge.Points {
		if rng.IntN(2) == 0 {
			n.odds[p] = odds()
			on++
		}
	}
	if on == 0 {
		n.odds[rng.IntN(int(nudge.Points))] = odds()
	}
	return n
}

// hook is the Hook of one process of w's run: nil in a run that is not
// nudged; otherwise it takes a point at its odds while faults last, and
// counts what it took in the run's result. At nudge.BeforeNaming it takes
// no branch but stops the process (stop, nil for a process that has no
// such point) for 1 to 30 s.
func (n *simNudges) hook(w *simWorld, stop func(time.Duration)) nudge.Hook {
	if n == nil {
		return nil
	}
	return func(p nudge.Point) bool {
		if !w.Faulty || n.odds[p] == 0 || n.rng.Float64() >= n.odds[p] {
			return false
		}
		if w.res.nudged == nil {
			w.res.nudged = map[string]int{}
		}
		w.res.nudged[p.String()]++
		if p == nudge.BeforeNaming {
			if stop != nil {
				stop(simworld.DurationBetween(n.rng, time.Second, 30*time.Second))
			}
			return false
		}
		return true
	}
}

func (n *simNudges) String() string {
	var on []string
	for p, odds := range n.odds {
		if odds > 0 {
			on = append(on, fmt.Sprintf("%s %.2f", nudge.Point(p), odds))
		}
	}
	return strings.Join(on, ", ")
}

// TestNudgesReachEveryPoint runs nudged seeds until each point of package
// nudge has steered the code of some run: a point that production code no
// longer asks at, or that the simulation cannot reach, fails it.
func TestNudgesReachEveryPoint(t *testing.T) {
	const most = 100 // nudged runs; every point was reached within 5 when it was written
	taken := map[string]int{}
	runs := 0
	for seed := uint64(1); runs < most && len(taken) < int(nudge.Points); seed++ {
		if nudgeRun(seed) == nil {
			continue
		}
		runs++
		r := runSim(seed, false)
		if r.violation != "" {
			t.Fatalf("seed %d: %s", seed, r.violation)
		}
		for p, n := range r.nudged {
			taken[p] += n
		}
	}
	for p := range nudge.Points {
		if taken[p.String()] == 0 {
			t.Errorf("no run of %d nudged ones took %s", runs, p)
		}
	}
	t.Logf("every point taken within %d nudged runs: %v", runs, taken)
}
