package controller

import (
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cle-dev/cle/internal/simworld"
)

// Candidates' relists: a candidate process's watches end (kube-apiserver
// restarted, or the process resumed past the server's watch window, 410
// Gone) and its informers list again once they can reach the server. What
// was written meanwhile reaches the process only through that list: a
// change as one update from the last copy it saw, a deletion as a
// DeletedFinalStateUnknown carrying that copy, however old, and a Lease
// deleted and created again as the new object alone. The controllers'
// watches expire among the faults of every run (watch-expired); these are
// the library's.

// simRelistsEvery: one run in so many has candidates' relists.
const simRelistsEvery = 3

// scheduleRelists draws, from a stream of their own, candidates' relists
// over the fault phase: the rest of the run's schedule is drawn as in a
// run without them.
func (w *simWorld) scheduleRelists(seed uint64) {
	w.scheduleOwn(seed, 0x510e527fade682d1, 5*time.Second, 40*time.Second, w.relistFault)
}

// relistFault ends the watches of a running candidate process, the
// holder's half the time, for up to 10 s.
func (w *simWorld) relistFault(rng *rand.Rand) {
	if !w.Faulty {
		return
	}
	p := w.pickProcess(rng, func(p *simProcess) bool { return !p.dead && p.lib != nil && p.lib.started && !p.leaseWatch.Expired })
	if p == nil {
		return
	}
	w.faultOn(p.c, "candidate-watch-expired")
	p.expireWatches(simworld.DurationBetween(rng, 0, 10*time.Second))
}

// expireWatches ends the process's watches; after d it watches again and
// its informers relist, once it can reach the server (tried each second).
func (p *simProcess) expireWatches(d time.Duration) {
	w := p.c.w
	p.leaseWatch.Expire()
	p.candWatch.Expire()
	w.Tracef("%s/%d's watches expire for %s", p.c.shown(), p.id, d)
	w.Late(w.Now.Add(d))
	var rewatch func()
	rewatch = func() {
		if p.dead {
			return
		}
		if w.Now.Before(p.partitionedUntil) {
			// Its list fails until it reaches the server again; the
			// reflector tries again a second later (a partition may heal
			// before its time when the faults stop).
			w.After(time.Second, rewatch)
			return
		}
		p.leaseWatch.Expired, p.candWatch.Expired = false, false
		w.connect(p.leaseWatch, p.candWatch)
		var lease, self []runtime.Object
		if l := p.c.e.lease(); l != nil {
			lease = append(lease, l.DeepCopy())
		}
		if lc := w.Candidate(p.c.key()); lc != nil {
			self = append(self, lc.DeepCopy())
		}
		simworld.ListAt(w.World, w.Now.Add(w.LagVia(p.leaseWatch.Frontend)), func() {
			p.act(func() {
				if p.dead {
					return
				}
				l := p.lib
				w.Tracef("%s/%d relists", p.c.shown(), p.id)
				l.sync()
				l.leases.relist(lease)
				l.cands.relist(self)
				l.woken()
			})
		}, p.leaseWatch, p.candWatch)
	}
	w.After(d, rewatch)
}
