package controller

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/cle-dev/cle/internal/simworld"
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
	gap     int // index into simSwarmGaps
	// reactive: faults also follow the code's own events (see react),
	// drawn from rng, at most simSwarmReactions of them.
	reactive  bool
	reactions int
	rng       *rand.Rand
	// slow draws, from a stream of its own, the reactions to a holder's
	// renewal that follow the answer (see holdAnswer), at most
	// simSwarmReactions of them too.
	slow      *rand.Rand
	slowTimes int
}

// simSwarmReactions bounds the faults one run's reactions strike.
const simSwarmReactions = 6

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
	s := &simSwarm{gap: rng.IntN(len(simSwarmGaps)), rng: rng}
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
	}
	s.reactive = rng.IntN(2) == 0
	s.slow = rand.New(rand.NewPCG(seed, 0x3956c25bf348b538))
	return s
}

// between draws a duration in [lo, hi) from the swarm's own stream.
func (s *simSwarm) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// react lets a reactive swarm run's faults follow what the code just did:
// the server has applied a write of by to e's Lease (rv "": a create),
// whose answer is still on its way. A fault then strikes at that instant,
// before the writer hears back, where a fault drawn at random times
// almost never lands:
//   - the controller created the Lease: its watches expire (it relists
//     later), and kubectl may delete and re-create that Lease meanwhile;
//   - the controller wrote the Lease: it pauses (SIGSTOP) before the
//     answer, perhaps past its lock, and a standby takes over;
//   - a holder renewed: it is cut off from the API server just after.
func (w *simWorld) react(e *simElection, written *coordinationv1.Lease, rv, by string) {
	s := w.swarm
	if s == nil || !s.reactive || s.reactions >= simSwarmReactions || !w.Faulty || written == nil {
		return
	}
	controller := strings.HasPrefix(by, "controller ")
	switch {
	case controller && rv == "" && s.rng.IntN(2) == 0:
		s.reactions++
		d := s.between(time.Second, 14*time.Second)
		recreate := s.rng.IntN(2) == 0
		at := s.between(0, min(d, 3*time.Second))
		w.After(0, func() {
			sc := w.ctrl
			if sc == nil || sc.leaseWatch.Expired || !w.Faulty {
				return
			}
			w.Fault("watch-expired-after-create")
			sc.expireWatches(d)
			if !recreate {
				return
			}
			w.After(at, func() {
				if l := e.lease(); l != nil && w.Faulty {
					w.Fault("recreate-lease")
					_, _ = w.writeLease(e, nil, l.ResourceVersion, "kubectl")
					_, _ = w.writeLease(e, &coordinationv1.Lease{}, "", "kubectl")
				}
			})
		})
	case controller && s.rng.IntN(8) == 0:
		s.reactions++
		d := s.between(time.Second, 40*time.Second)
		w.After(0, func() {
			if w.Faulty {
				w.pauseController(d)
			}
		})
	case !controller && s.rng.IntN(16) == 0:
		holder := renewingHolder(e, written, by)
		if holder == nil {
			return
		}
		s.reactions++
		d := s.between(time.Second, 40*time.Second)
		w.After(0, func() {
			if w.Faulty {
				w.partition(holder, d)
			}
		})
	}
}

// holdRenewalAnswer holds up the answer to the write of e's Lease the
// server just applied (see holdAnswer) when it is its holder's renewal.
func (w *simWorld) holdRenewalAnswer(e *simElection, written *coordinationv1.Lease, by string) {
	if w.swarm == nil || written == nil {
		return
	}
	if c := renewingHolder(e, written, by); c != nil {
		c.proc.answerHeld += w.holdAnswer()
	}
}

// renewingHolder is the candidate of e whose running library process by
// wrote written, a Lease naming it: its holder renewing; nil for any other
// write.
func renewingHolder(e *simElection, written *coordinationv1.Lease, by string) *simCandidate {
	for _, c := range e.cands {
		if p := c.proc; p != nil && c.name == holderIdentity(written) && p.lib != nil && by == p.lib.who() {
			return c
		}
	}
	return nil
}

// slowReaction is the run's swarm when it may still react to a holder's
// renewal after its answer (see holdAnswer): a reactive swarm, during the
// faults, short of simSwarmReactions of those; nil otherwise.
func (w *simWorld) slowReaction() *simSwarm {
	if s := w.swarm; s != nil && s.reactive && s.slowTimes < simSwarmReactions && w.Faulty {
		return s
	}
	return nil
}

// holdAnswer lets a reactive swarm run hold up the answer to a holder's
// renewal that the server has just applied, by 3 to 9 s (a response stuck
// on a slow connection): the controller saw the renewal at once, the holder
// learns of it late. It returns how much longer the answer takes.
func (w *simWorld) holdAnswer() time.Duration {
	s := w.slowReaction()
	if s == nil || s.slow.IntN(8) != 0 {
		return 0
	}
	s.slowTimes++
	w.World.Fault("renewal-answer-held")
	return simworld.DurationBetween(s.slow, 3*time.Second, 9*time.Second)
}

// reactToSlowRenewal lets a reactive swarm run cut an adopter off from the
// API server right after a renewal of its that took longer than
// lead.Timing.SlowRenewal to be answered (a held answer, a pause, a slow
// server): its elector, whose renew deadline counts from the answer, must
// not lead on past the Lease's expiry, which the controller counts from the
// renewal it saw, seconds earlier, now that no renewal follows.
func (w *simWorld) reactToSlowRenewal(p *simProcess, took time.Duration) {
	s := w.slowReaction()
	if s == nil || took <= simTiming.SlowRenewal() || s.slow.IntN(2) != 0 {
		return
	}
	s.slowTimes++
	d := simworld.DurationBetween(s.slow, 5*time.Second, 40*time.Second)
	w.After(0, func() {
		if w.Faulty && p.c.proc == p && !p.dead {
			w.World.Fault("partition-after-slow-renewal")
			w.partition(p.c, d)
		}
	})
}

// kind draws the kind of the next fault.
func (s *simSwarm) kind(rng *rand.Rand) int {
	total := 0
	for _, w := range s.weights {
		total += w
	}
	n := rng.IntN(total)
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

// landsAfterDeath draws whether a request a controller replica sent before
// it was stopped or replaced still reaches the server (its bytes were on
// the wire, or in a proxy's buffer): in half of the cases in swarm runs,
// drawn from the swarm's stream; in the other runs such a request is lost
// with the replica's connection, as it always was, so that their schedules
// stay as they were.
func (w *simWorld) landsAfterDeath() bool {
	if w.swarm == nil || w.swarm.rng.IntN(2) != 0 {
		return false
	}
	w.Fault("controller-write-after-death")
	return true
}
