package controller

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/cle-dev/cle/pkg/strategy"
)

// Swarm runs. A run's faults are drawn from the fifteen kinds strike
// knows, every 5 to 40 s alike; then every kind is a small share of every
// run, and what needs one fault many times over (outage upon outage, a
// watch expiring again and again while a holder is partitioned) is rare.
// Swarm testing (Groce et al., ISSTA 2012) draws, per run, which kinds are
// on, their weights against each other and how far apart faults come, so
// that some runs are dominated by one or two kinds and strike far more
// often. A failing swarm run says its mix in its violation, so that a
// search tells which mixes find what.

// simSwarmEvery: one run in so many (of those neither spaced nor with
// kube-apiserver's controller) is a swarm run, drawn from a stream of its
// own so that the other runs draw what they drew before.
const simSwarmEvery = 2

// simFaultKinds names strike's kinds of fault by their number.
var simFaultKinds = [...]string{
	0: "pause", 1: "pause", 2: "crash", 3: "stop", 4: "delete-lease", 5: "delete-candidate",
	6: "controller-failover", 7: "api-outage", 8: "watch-lag", 9: "controller-pause",
	10: "recreate-lease", 11: "watch-expired", 12: "partition", 13: "watch-stall", 14: "annotate-priority",
}

// simSwarmGaps are the spacings a swarm run draws its faults' from: the
// uniform runs' own, dense and sparse.
var simSwarmGaps = []struct {
	name     string
	min, max time.Duration
}{
	{"dense", time.Second, 8 * time.Second},
	{"usual", 5 * time.Second, 40 * time.Second},
	{"sparse", 20 * time.Second, 90 * time.Second},
}

// simSwarm is a swarm run's mix of faults.
type simSwarm struct {
	// weights[k] is kind k's weight against the others; 0, off.
	weights [len(simFaultKinds)]int
	total   int
	gap     int // index into simSwarmGaps
}

// swarmRun draws seed's swarm, or nil when its run is not one. A run
// asking for the priority strategy may draw operators' annotations, others
// cannot (they would do nothing).
func swarmRun(seed uint64, strategyName string) *simSwarm {
	if spacedRun(seed) || builtinRun(seed) {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0x71374491b5c0fbcf))
	if rng.IntN(simSwarmEvery) != 0 {
		return nil
	}
	s := &simSwarm{gap: rng.IntN(len(simSwarmGaps))}
	kinds := []int{0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	if strategyName == string(strategy.PriorityName) {
		kinds = append(kinds, 14)
	}
	// A third of the swarms have one kind, a third two, the rest each kind
	// with even odds (at least one).
	var on []int
	switch rng.IntN(3) {
	case 0, 1:
		n := 1 + rng.IntN(2)
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		on = kinds[:n]
	default:
		for _, k := range kinds {
			if rng.IntN(2) == 0 {
				on = append(on, k)
			}
		}
		if len(on) == 0 {
			on = append(on, kinds[rng.IntN(len(kinds))])
		}
	}
	for _, k := range on {
		s.weights[k] = 1 << rng.IntN(4) // 1, 2, 4 or 8
		s.total += s.weights[k]
	}
	return s
}

// kind draws the kind of the next fault.
func (s *simSwarm) kind(rng *rand.Rand) int {
	n := rng.IntN(s.total)
	for k, w := range s.weights {
		if n < w {
			return k
		}
		n -= w
	}
	panic("unreachable")
}

// gapBetween draws the time to the next fault.
func (s *simSwarm) gapBetween(w *simWorld) time.Duration {
	g := simSwarmGaps[s.gap]
	return w.DurationBetween(g.min, g.max)
}

// String is the mix, as "partition*8+api-outage*1/dense".
func (s *simSwarm) String() string {
	var parts []string
	for k, wt := range s.weights {
		if wt > 0 {
			parts = append(parts, fmt.Sprintf("%s*%d", simFaultKinds[k], wt))
		}
	}
	return strings.Join(parts, "+") + "/" + simSwarmGaps[s.gap].name
}
