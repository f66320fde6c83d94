package controller

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cle-dev/cle/internal/simworld"
)

// Highly available control planes. A cluster's kube-apiservers share etcd,
// and each keeps a watch cache of its own: a write is in etcd at once, but
// it reaches the watches of each replica when that replica's cache has
// caught up with it, and one replica's cache can fall seconds behind the
// others' (a slow etcd watch, a busy replica). Each process is connected
// to one replica, all its watches and lists through it, and moves to
// another when its watches end and it lists again (a load balancer's
// choice). Then the controller may see a holder's renewal seconds before
// the holder's rival does, or the other way round, on the same server.

// simHAEvery: one run in so many (not the spaced ones) has two or three
// kube-apiservers, drawn from a stream of their own.
const simHAEvery = 4

// simHA is an HA run's control plane.
type simHA struct {
	frontends []*simworld.Frontend
	// rng draws who connects where and when a cache falls behind.
	rng *rand.Rand
}

// haRun draws seed's control plane, or nil for a run with one
// kube-apiserver.
func haRun(seed uint64) *simHA {
	rng := rand.New(rand.NewPCG(seed, 0xa54ff53a5f1d36f1))
	if spacedRun(seed) || rng.IntN(simHAEvery) != 0 {
		return nil
	}
	ha := &simHA{rng: rng}
	for i := range 2 + rng.IntN(2) {
		ha.frontends = append(ha.frontends, &simworld.Frontend{Name: fmt.Sprintf("apiserver-%d", i)})
	}
	return ha
}

// connect draws the kube-apiserver that watchers (one process's) are
// connected to from now on; nothing in a run with one.
func (w *simWorld) connect(watchers ...*simworld.Watcher) {
	if w.ha == nil {
		return
	}
	f := w.ha.frontends[w.ha.rng.IntN(len(w.ha.frontends))]
	for _, sw := range watchers {
		sw.Frontend = f
	}
}

// scheduleFallBehind draws, over the fault phase, the times a replica's
// watch cache falls behind.
func (w *simWorld) scheduleFallBehind(seed uint64) {
	w.scheduleOwn(seed, 0x1f83d9abfb41bd6c, 10*time.Second, 60*time.Second, w.fallBehind)
}

// fallBehind makes one replica's watch cache 0.5 to 8 s late for 5 to
// 60 s; the faults' end brings it up to date (see heal).
func (w *simWorld) fallBehind(rng *rand.Rand) {
	if !w.Faulty {
		return
	}
	f := w.ha.frontends[rng.IntN(len(w.ha.frontends))]
	if f.Behind > 0 {
		return
	}
	f.Behind = simworld.DurationBetween(rng, 500*time.Millisecond, 8*time.Second)
	w.Fault("apiserver-behind")
	w.Tracef("%s's watch cache falls %s behind", f.Name, f.Behind)
	w.After(simworld.DurationBetween(rng, 5*time.Second, 60*time.Second), func() {
		if f.Behind > 0 {
			f.Behind = 0
			w.Tracef("%s's watch cache has caught up", f.Name)
		}
	})
}

// catchUp brings every replica's watch cache up to date: what is on its
// way still arrives as late as it was sent.
func (w *simWorld) catchUp() {
	if w.ha == nil {
		return
	}
	for _, f := range w.ha.frontends {
		f.Behind = 0
	}
}
