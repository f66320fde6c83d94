package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// The goals a run is held to (issue 10), printed next to the figures.
const (
	goalConverge    = 60 * time.Second
	goalRSS         = 300 << 20
	goalSteadyCPU   = 0.02 // of a core
	goalSteadyLCMin = 100
)

func (r *result) print(w io.Writer, cfg *config) {
	fmt.Fprintf(w, "\n== %d Leases × %d candidates (%s mode), %d node Leases renewed every %s; holders renew every %s, candidates every %s; %s, --kube-api-qps=%g --kube-api-burst=%d --workers=%d\n",
		r.leases, len(cfg.versions), r.mode, r.nodes, cfg.nodeRenew, cfg.holderRenew, cfg.candidateRenew, r.controllerVersion, cfg.qps, cfg.burst, cfg.workers)
	if cfg.pods {
		fmt.Fprintf(w, "%d Pods (one per candidate) created in %s before the controller started; cle-controller %s\n", r.candidates, r.podsCreated.Round(time.Millisecond), strings.Join(cfg.controllerArgs, " "))
	}
	fmt.Fprintf(w, "controller RSS once synced with the node Leases, before any candidate: %s\n", mb(r.startRSS))

	c := r.convergence
	fmt.Fprintf(w, "convergence:\n")
	fmt.Fprintf(w, "  %d LeaseCandidates created in %s (%.0f/s)\n", r.candidates, r.created.Round(time.Millisecond), float64(r.candidates)/r.created.Seconds())
	if r.converged > 0 {
		fmt.Fprintf(w, "  every Lease held by its best candidate %s after the first candidate was created (%s after the last)\n",
			r.converged.Round(time.Millisecond), (r.converged - r.created).Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "  NOT converged within %s; for instance:\n", cfg.convergeLimit)
		for _, l := range r.wrong {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	fmt.Fprintf(w, "  Leases whose first holder was not their best candidate: %d; holder changes after the first: %d\n", c.fleet.wrongFirst, c.fleet.holderChanges)
	for _, l := range r.wrongFirst {
		fmt.Fprintf(w, "    %s\n", l)
	}
	fmt.Fprintf(w, "  of those, the best candidate's registration applied before the Lease was created: %d; after, before its first holder was named: %d; after that: %d\n", r.wrongFirstEarly, r.wrongFirstBetween, r.wrongFirstLate)
	for _, l := range r.wrongFirstEarlyEx {
		fmt.Fprintf(w, "    %s\n", l)
	}
	if fl := r.flood; fl != nil {
		fmt.Fprintf(w, "  flood: %d writers, %d Lease updates in %s (%.0f/s), %d errors; the fleet's writes during it: %s; in the minute after: %s\n",
			fl.writers, fl.writes.Load(), fl.ended.Sub(fl.began).Round(time.Second), float64(fl.writes.Load())/fl.ended.Sub(fl.began).Seconds(), fl.errors.Load(), r.latFlood, r.latAfter)
		switch {
		case r.caughtUp.IsZero():
			fmt.Fprintf(w, "  the server never answered every write of the fleet within %s for %s after the flood\n", promptWrite, promptWindow)
		case r.converged > 0 && r.convergedAt.Before(r.caughtUp):
			fmt.Fprintf(w, "  the server caught up %s after the flood ended (every write answered within %s for %s); every Lease was right %s before that\n",
				r.caughtUp.Sub(fl.ended).Round(time.Millisecond), promptWrite, promptWindow, r.caughtUp.Sub(r.convergedAt).Round(time.Millisecond))
		case r.converged == 0:
			fmt.Fprintf(w, "  the server caught up %s after the flood ended (every write answered within %s for %s); NOT converged\n", r.caughtUp.Sub(fl.ended).Round(time.Millisecond), promptWrite, promptWindow)
		default:
			fmt.Fprintf(w, "  the server caught up %s after the flood ended (every write answered within %s for %s); every Lease right %s after that\n",
				r.caughtUp.Sub(fl.ended).Round(time.Millisecond), promptWrite, promptWindow, r.convergedAt.Sub(r.caughtUp).Round(time.Millisecond))
		}
	}
	r.printPhase(w, c)

	s := r.steady
	fmt.Fprintf(w, "steady state (%s):\n", s.wall.Round(time.Second))
	min := s.wall.Minutes()
	if r.stalls.n > 0 {
		fmt.Fprintf(w, "  etcd frozen %d times, %s each (every %s)\n", r.stalls.n, cfg.etcdStall, cfg.etcdStallEvery)
	}
	fmt.Fprintf(w, "  LeaseCandidate writes: %.0f/min (candidates' renewals %.0f/min, controller's pings %.0f/min, other %.0f/min)\n",
		float64(s.fleet.renewals+s.fleet.pings+s.fleet.lcOther)/min, float64(s.fleet.renewals)/min, float64(s.fleet.pings)/min, float64(s.fleet.lcOther)/min)
	fmt.Fprintf(w, "  holder changes: %d; Leases not held by their best candidate at the end: %d; holders' Lease writes %.0f/min (%.0f/min due); fleet writes refused for a stale resourceVersion %.0f/min\n",
		s.fleet.holderChanges, r.steadyWrong, float64(s.fleet.leaseWrites)/min, float64(r.leases)*time.Minute.Seconds()/cfg.holderRenew.Seconds(), float64(s.fleet.conflicts)/min)
	fmt.Fprintf(w, "  holders' renewals that landed after their Lease had run out (an election was really due): %.0f/min\n", float64(s.fleet.lapsed)/min)
	fmt.Fprintf(w, "  controller's pings to a holder whose renewal had landed and not run out when the ping was sent: %d\n", s.fleet.pingsToLive)
	r.printPhase(w, s)
	fmt.Fprintf(w, "node heartbeats over the whole run: %d written, %d skipped because the writers were behind\n", r.nodeWrites, r.nodeSkipped)

	lcPerMin := float64(s.fleet.renewals+s.fleet.pings+s.fleet.lcOther) / min
	fmt.Fprintf(w, "goals:\n")
	goal(w, "every Lease right", fmt.Sprintf("≤ %s", goalConverge), r.converged > 0 && r.converged <= goalConverge, r.converged.Round(time.Millisecond).String())
	goal(w, "controller peak RSS", fmt.Sprintf("≤ %s", mb(goalRSS)), max(c.peakRSS, s.peakRSS) <= goalRSS, mb(max(c.peakRSS, s.peakRSS)))
	steadyCPU := s.cpu.Seconds() / s.wall.Seconds()
	goal(w, "steady controller CPU", fmt.Sprintf("≤ %.0f%% of a core", goalSteadyCPU*100), steadyCPU <= goalSteadyCPU, fmt.Sprintf("%.2f%%", steadyCPU*100))
	goal(w, "steady LeaseCandidate writes", fmt.Sprintf("≤ %d/min", goalSteadyLCMin), lcPerMin <= goalSteadyLCMin, fmt.Sprintf("%.0f/min", lcPerMin))
	goal(w, "steady pings to live holders", "0", s.fleet.pingsToLive == 0, fmt.Sprint(s.fleet.pingsToLive))
}

func (r *result) printPhase(w io.Writer, p phase) {
	fmt.Fprintf(w, "  controller: CPU %.1f s (%.1f%% of a core over %s), peak RSS %s; kube-apiserver CPU %.1f s\n",
		p.cpu.Seconds(), 100*p.cpu.Seconds()/p.wall.Seconds(), p.wall.Round(time.Second), mb(p.peakRSS), p.apiCPU.Seconds())
	reqs := slices.SortedFunc(maps.Keys(p.requests), func(a, b request) int {
		return cmp.Or(cmp.Compare(p.requests[b], p.requests[a]), cmp.Compare(a.resource, b.resource), cmp.Compare(a.verb, b.verb))
	})
	total := 0.0
	for _, v := range p.requests {
		total += v
	}
	fmt.Fprintf(w, "  controller: %.0f pings, %.0f held back by the ping budget (sent later), %.0f registration probes\n",
		p.own["cle_pings_total"], p.own["cle_pings_deferred_total"], p.own["cle_registration_probes_total"])
	fmt.Fprintf(w, "  controller API requests: %.0f (%.1f/s)\n", total, total/p.wall.Seconds())
	for _, q := range reqs {
		fmt.Fprintf(w, "    %-8s %-40s %8.0f\n", q.verb, q.resource, p.requests[q])
	}
}

func goal(w io.Writer, what, want string, ok bool, got string) {
	verdict := "met"
	if !ok {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "  %-30s %-18s %-8s %s\n", what, want, verdict, got)
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }
