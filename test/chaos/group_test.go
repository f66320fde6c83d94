package chaos

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// The shard group: three replicas of examples/candidate --shards, each behind
// its own proxy to kube-apiserver and on a clock of its own, over groupShards
// shards. Each shard's owner writes to the witness with the shard and its
// grant's token. Every fault of the run strikes the group too (the API
// server's and etcd's, the controller's); the shard-replica faults strike one
// replica.
const (
	groupName   = "chaos-shards"
	groupShards = 8
	kindGroup   = "shard group"
	// groupEmulation is every replica's emulation version: all of them act.
	groupEmulation = "1.34.0"
)

var groupSpecs = []struct {
	identity    string
	clockOffset time.Duration
}{
	{"shard-x", -10 * time.Minute},
	{"shard-y", 10 * time.Second},
	{"shard-z", 0},
}

// groupArgs are the arguments of replica identity, reaching kube-apiserver
// through kubeconfig.
func (e *env) groupArgs(identity, kubeconfig string, offset time.Duration) []string {
	return []string{
		"--kubeconfig=" + kubeconfig, "--api-mode=native", "--namespace=" + e.ns, "--lease=" + groupName,
		"--shards=" + fmt.Sprint(groupShards), "--identity=" + identity,
		"--binary-version=" + candidateBinaryVersion, "--emulation-version=" + groupEmulation,
		"--lease-duration=" + leaseDuration.String(), "--renew-deadline=" + renewDeadline.String(),
		"--retry-period=" + retryPeriod.String(), "--witness-url=" + e.witness.URL(),
		"--clock-offset=" + offset.String(), "-v=2",
	}
}

// setUpGroup makes the group's replicas (not started yet).
func (e *env) setUpGroup(dir, kubeconfig, bin string) {
	for _, spec := range groupSpecs {
		px, err := newProxy(strings.TrimPrefix(server.URL(), "https://"))
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(px.Close)
		proxied := filepath.Join(dir, spec.identity+".kubeconfig")
		if err := writeProxiedKubeconfig(kubeconfig, proxied, "https://"+px.Addr()); err != nil {
			e.t.Fatal(err)
		}
		e.setClockOffset(spec.identity, spec.clockOffset)
		e.group = append(e.group, &proc{name: spec.identity, kind: kindGroup, emulation: groupEmulation, bin: bin,
			logPath: filepath.Join(dir, spec.identity+".log"), v: e.v, proxy: px,
			args: e.groupArgs(spec.identity, proxied, spec.clockOffset)})
	}
}

// groupBound is how soon after a fault every shard must be acted on by one
// live replica, spread evenly: a replica that vanished is known dead once
// its member Lease has run out (renewed every retry period, for a lease
// duration), then its shards are granted at once; and the slack.
func (e *env) groupBound() time.Duration { return leaseDuration + retryPeriod + e.slack }

// liveReplicas are the names of the replicas that run, are not frozen and
// reach kube-apiserver.
func (e *env) liveReplicas() []string {
	var names []string
	for _, p := range e.group {
		if p.live() {
			names = append(names, p.name)
		}
	}
	return names
}

// waitGroupHealthy waits until the group Lease spreads every shard evenly
// over the live replicas, nothing moving, and each shard's owner has written
// to the witness with the shard's token since from; it records how long
// that took. Longer than groupBound is a violation (not for the first
// assignment); longer than limit ends the test.
func (e *env) waitGroupHealthy(fault, phase string, from time.Time, limit time.Duration) {
	e.t.Helper()
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	var why string
	for {
		live := e.liveReplicas()
		g, _, ok := e.rec.currentGroup()
		switch {
		case !ok:
			why = "no group Lease seen"
		case len(live) == 0:
			why = "no live replica"
		default:
			var balanced bool
			if balanced, why = framework.GroupBalanced(g, live...); balanced {
				if took, ok := e.shardsActedOn(g, from); ok {
					bound := e.groupBound()
					e.mu.Lock()
					e.groupRecoveries = append(e.groupRecoveries, recovery{fault: fault, phase: phase, leader: g.DescribeOwners(), took: took, bound: bound})
					e.mu.Unlock()
					e.t.Logf("    %s: every shard acted on, spread evenly (%s), %s after %s", fault, g.DescribeOwners(), took.Round(time.Millisecond), phase)
					if fault != "start" && took > bound {
						e.v.add("%s: the group took %s to act on every shard, spread evenly, after %s (bound %s)", fault, took.Round(time.Millisecond), phase, bound)
					}
					return
				}
				why = "not every owner has written with its shard's token yet"
			}
		}
		e.nextPoll(ticker, from, limit, func() string {
			return fmt.Sprintf("%s: the group is not healthy %s after %s: %s (live replicas %v)", fault, limit, phase, why, live)
		})
	}
}

// shardsActedOn reports whether each shard's owner in g has had a write
// with the shard's token accepted since from, and the latest of those first
// writes, from from.
func (e *env) shardsActedOn(g shard.Group, from time.Time) (time.Duration, bool) {
	var took time.Duration
	for s, o := range g.Owners {
		w, ok := e.witness.acceptedAfter(s, o.Member, g.Tokens[s], from)
		if !ok {
			return 0, false
		}
		took = max(took, w.received.Sub(from))
	}
	return took, true
}

// aReplica is a live replica, chosen by the run's random generator.
func (e *env) aReplica() (*proc, error) {
	var live []*proc
	for _, p := range e.group {
		if p.live() {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil, fmt.Errorf("no live replica of the group")
	}
	return live[e.rng.IntN(len(live))], nil
}

// killReplica SIGKILLs a replica: its shards go to the others once its
// member Lease has run out; started again, it joins in a new epoch and gets
// its share back.
func killReplica(e *env) error {
	const name = "shard-replica-sigkill"
	p, err := e.aReplica()
	if err != nil {
		return err
	}
	e.t.Logf("    SIGKILL %s", p.name)
	from := time.Now()
	if err := p.kill(syscall.SIGKILL, 15*time.Second); err != nil {
		return err
	}
	e.waitGroupHealthy(name, "the SIGKILL of "+p.name, from, stuckAfter)
	from = time.Now()
	if err := p.start(); err != nil {
		return err
	}
	e.waitGroupHealthy(name, "the restart of "+p.name, from, stuckAfter)
	return nil
}

// freezeReplica stops a replica with SIGSTOP for longer than the lease
// duration: its shards go to the others, and once it runs again it must not
// act on them, and gets its share back.
func freezeReplica(e *env) error {
	return e.sidelineReplica("shard-replica-sigstop", "SIGSTOP", (*proc).pause, (*proc).resume)
}

// partitionReplica cuts a replica off from kube-apiserver (not from the
// witness) for longer than the lease duration: it must stop acting on its
// shards before they go to the others.
func partitionReplica(e *env) error {
	return e.sidelineReplica("shard-replica-partition", "partition from kube-apiserver", cutOff, reconnect)
}

// sidelineReplica takes a replica out with off for longer than the lease
// duration, waits for the others to act on every shard, brings it back with
// on, and waits for its share to come back.
func (e *env) sidelineReplica(fault, what string, off, on func(*proc) error) error {
	p, err := e.aReplica()
	if err != nil {
		return err
	}
	return e.sideline(fault, what, p, off, on, e.waitGroupHealthy)
}

// groupKeys are the witness's fences of the group's shards.
func groupKeys() []int { return groupKeysOf(groupShards) }

// groupKeysOf are the witness's fences of a group of n shards.
func groupKeysOf(n int) []int {
	keys := make([]int, n)
	for i := range keys {
		keys[i] = i
	}
	return keys
}

// summarizeGroup writes the group's figures to b: its writes at the
// witness, grants and moves, the longest a shard went without a write, and
// the longest recovery after a fault. In a long run every replica must have
// acted on some shard.
func (e *env) summarizeGroup(b *strings.Builder, duration time.Duration) {
	keys := groupKeys()
	ws := e.witness.stats(keys...)
	byIdentity := e.witness.byIdentity(keys...)
	e.mu.Lock()
	var maxRec recovery
	for _, r := range e.groupRecoveries {
		if r.fault != "start" && r.took > maxRec.took {
			maxRec = r
		}
	}
	gapDuring := "no fault"
	for _, w := range e.windows {
		if !ws.maxGapAt.Before(w.start) && ws.maxGapAt.Before(w.end) {
			gapDuring = w.fault
		}
	}
	e.mu.Unlock()
	fmt.Fprintf(b, "  shard group %s (%d shards, %d replicas): grants at the witness %d, moves %d, writes %d, refused (stale token) %d, of which delivered late %d\n",
		groupName, groupShards, len(e.group), ws.terms, e.rec.moves(), ws.writes, ws.refused, ws.late)
	fmt.Fprintf(b, "  group: max recovery after a fault: %s (%s, %s; bound %s); longest a shard went without a write: %s (shard %d, began at +%s, during %s)\n",
		maxRec.took.Round(time.Millisecond), maxRec.fault, maxRec.phase, maxRec.bound,
		ws.maxGap.Round(time.Millisecond), ws.maxGapKey, ws.maxGapAt.Sub(e.v.start).Round(time.Second), gapDuring)
	for _, p := range e.group {
		p.mu.Lock()
		starts := p.starts
		p.mu.Unlock()
		w := byIdentity[p.name]
		fmt.Fprintf(b, "  %s (%s): %d runs, %d grants and %d writes accepted at the witness\n", p.name, p.kind, starts, w.terms, w.writes)
		if w.terms == 0 {
			e.v.add("%s never acted on a shard", p.name)
		}
	}
}
