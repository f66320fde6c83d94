package electorsim_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/shard"
)

// TestRealShardGroupsUnderFaults runs a shard group (docs/design.md, "Shard
// groups") through the faults of TestRealElectorsUnderFaults: three replicas
// that are the library's own group form (candidate.NewGroup and Run, work
// on each shard on the context OnShardStarted gives, writing with the
// shard's token and through the group's guarded client), and two replicas
// of the whole cle-controller process that assign the shards, against the
// same model API server, in a synctest bubble. Each run draws the group's
// strategy (cle.dev/Shards, or cle.dev/ShardsOldestEmulationVersion with
// the replicas' emulation versions drawn as for an election) and its shard
// count (1, 3, 8 or 32), and its faults may roll out code built for another
// count (the replicas started from then on declare it). Deleting the Lease
// deletes the group Lease, which the controller must rebuild from the
// member Leases.
//
// It checks what a group promises:
//   - no shard is acted on by two processes at once, and no shard of one
//     count while a shard of another count (their keys overlap) is;
//   - each shard's work holds a higher token than the shard's work before,
//     across the group Lease's deletion and the controllers' restarts;
//   - a fenced witness per shard never rejects a write of work that still
//     runs, nor takes one token from two processes; the group's guarded
//     client lets a write through only for a shard its process acts on;
//   - once faults stop, every shard of the count in effect is acted on
//     within 90 s; at the end none has moved for the last minute, the count
//     is the one every replica declares (when they agree), only replicas
//     that may own shards act (under ShardsOldestEmulationVersion, those of
//     the oldest emulation version) and their shard counts differ by at
//     most one.
//
// The seeds are TestRealElectorsUnderFaults' flags'.
func TestRealShardGroupsUnderFaults(t *testing.T) { runElectorSims(t, true) }

// groupCounts are the shard counts a run draws from.
var groupCounts = []int{1, 3, 8, 32}

// simGroup is a group run's record: which work acts on each shard, and
// what the witness accepted. Its fields are under sim.mu.
type simGroup struct {
	strategy coordinationv1.CoordinatedLeaseStrategy
	// declared is the shard count a process started now is built for;
	// rng draws the counts.
	declared int
	rng      *rand.Rand
	// acting is the work that acts on each shard index.
	acting map[int]*shardWork
	// lastToken is each shard's highest token of work started; witness
	// the highest the fenced witness accepted, from witnessBy.
	lastToken, witness map[int]int64
	witnessBy          map[int]*electorProc
	// starts are the instants work on a shard started.
	starts []time.Time
	// ownedAfterQuiet: every shard was acted on at some point after
	// faults stopped.
	ownedAfterQuiet bool
}

// shardWork is one grant's work, in one process.
type shardWork struct {
	p  *electorProc
	sh candidate.Shard
}

// newSimGroup draws a run's group from a stream of its own.
func newSimGroup(seed uint64) *simGroup {
	g := &simGroup{rng: rand.New(rand.NewPCG(seed, 0xa4093822299f31d0)), acting: map[int]*shardWork{},
		lastToken: map[int]int64{}, witness: map[int]int64{}, witnessBy: map[int]*electorProc{}}
	g.strategy = shard.StrategyShards
	if g.rng.IntN(2) == 0 {
		g.strategy = shard.StrategyShardsOldestEmulationVersion
	}
	g.declared = groupCounts[g.rng.IntN(len(groupCounts))]
	return g
}

// newCount makes the processes started from now on declare another shard
// count, and returns it.
func (s *electorSim) newCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.group
	others := slices.DeleteFunc(slices.Clone(groupCounts), func(n int) bool { return n == g.declared })
	g.declared = others[g.rng.IntN(len(others))]
	return g.declared
}

// startReplica starts p as a replica of the group, as docs/library.md tells
// users to write one.
func (s *electorSim) startReplica(p *electorProc, releaseOnCancel bool) {
	s.mu.Lock()
	p.declared = s.group.declared
	p.opts = fmt.Sprintf("emulation %s, a group replica built for %d shards, ReleaseOnCancel %t, work on a shard stops in %s", p.emu, p.declared, releaseOnCancel, p.stopIn)
	s.logLocked("start %s: %s", p.name, p.opts)
	s.mu.Unlock()
	cfg := s.candidateConfig(p)
	cfg.ReleaseOnCancel = &releaseOnCancel
	g, err := candidate.NewGroup(candidate.GroupConfig{Config: cfg, Shards: p.declared, OnShardStarted: p.shardWork})
	if err != nil {
		s.t.Error(err) // not the test's goroutine: no Fatal
		return
	}
	s.runGuarded(p, g.WrapConfig, g.Run)
}

// shardWork is the work on one shard: from the grant's token, a write to
// the shard's witness every 0.3 to 2 s until its context ends, then
// p.stopIn to wind down.
func (p *electorProc) shardWork(ctx context.Context, sh candidate.Shard) {
	s := p.sim
	g := s.group
	if got, ok := candidate.ShardFrom(ctx); !ok || got != sh {
		panic(fmt.Sprintf("OnShardStarted's context carries shard %+v (%t), not %+v", got, ok, sh))
	}
	s.mu.Lock()
	s.works++
	defer func() {
		s.mu.Lock()
		s.works--
		s.mu.Unlock()
	}()
	if p.crashed {
		s.mu.Unlock()
		return
	}
	for _, i := range slices.Sorted(maps.Keys(g.acting)) {
		switch w := g.acting[i]; {
		case i == sh.Index:
			s.failLocked("%s's work on shard %d started (token %d) while %s's (token %d) still runs", p.name, sh.Index, sh.Token, w.p.name, w.sh.Token)
		case w.sh.Count != sh.Count:
			s.failLocked("%s's work on shard %d of %d started while %s acts on shard %d of %d: their keys overlap", p.name, sh.Index, sh.Count, w.p.name, w.sh.Index, w.sh.Count)
		}
	}
	if last := g.lastToken[sh.Index]; sh.Token <= last {
		s.failLocked("%s's work on shard %d started with token %d, not above the shard's last %d", p.name, sh.Index, sh.Token, last)
	}
	w := &shardWork{p: p, sh: sh}
	g.acting[sh.Index] = w
	g.lastToken[sh.Index] = max(g.lastToken[sh.Index], sh.Token)
	g.starts = append(g.starts, time.Now())
	s.res.terms++
	s.logLocked("%s acts on shard %d of %d with token %d", p.name, sh.Index, sh.Count, sh.Token)
	if !s.quietAt.IsZero() && !s.ledAtQuiet && !g.ownedAfterQuiet && g.unowned() == "" {
		g.ownedAfterQuiet = true
		s.res.toLeader, s.res.toLeaderSeed = time.Since(s.quietAt), s.seed
	}
	s.mu.Unlock()

	p.writeUntilDone(ctx, func() bool { return g.fencedWrite(s, w) })
	time.Sleep(p.stopIn)
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.acting[sh.Index] == w {
		delete(g.acting, sh.Index)
		s.logLocked("%s's work on shard %d returned", p.name, sh.Index)
	}
}

// fencedWrite is one write of w to its shard's fenced witness; false once
// its process has crashed.
func (g *simGroup) fencedWrite(s *electorSim, w *shardWork) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, i, token := w.p, w.sh.Index, w.sh.Token
	if p.crashed {
		return false
	}
	running := g.acting[i] == w
	switch by := g.witnessBy[i]; {
	case token < g.witness[i]:
		if running {
			s.failLocked("the witness of shard %d rejected token %d of %s, whose work on it still runs: it accepted %d", i, token, p.name, g.witness[i])
		}
		return true
	case token == g.witness[i] && by != nil && by != p:
		s.failLocked("the witness of shard %d received token %d from %s and from %s", i, token, by.name, p.name)
	}
	g.witness[i], g.witnessBy[i] = token, p
	s.res.writes++
	return true
}

// guardedWrite judges a write of p's that its group's guarded client let
// through, made on ctx; sim.mu is held.
func (g *simGroup) guardedWrite(s *electorSim, p *electorProc, ctx context.Context) {
	sh, ok := candidate.ShardFrom(ctx)
	if !ok {
		s.failLocked("the witness received a guarded write of %s made on no shard's context", p.name)
		return
	}
	if w := g.acting[sh.Index]; w == nil || w.p != p || w.sh != sh {
		s.failLocked("the witness received a guarded write of %s for shard %d (token %d) while %s acts on it", p.name, sh.Index, sh.Token, g.actor(sh.Index))
	}
}

// actor names the process acting on shard i; sim.mu is held.
func (g *simGroup) actor(i int) string {
	if w := g.acting[i]; w != nil {
		return fmt.Sprintf("%s (token %d)", w.p.name, w.sh.Token)
	}
	return "nobody"
}

// crashed ends the work of a process that crashed; sim.mu is held.
func (g *simGroup) crashed(s *electorSim, p *electorProc) {
	for _, i := range slices.Sorted(maps.Keys(g.acting)) {
		if g.acting[i].p == p {
			delete(g.acting, i)
			s.logLocked("%s's work on shard %d ends with the process", p.name, i)
		}
	}
}

// count is the shard count work acts under, 0 when none acts; sim.mu is
// held.
func (g *simGroup) count() int {
	for _, w := range g.acting {
		return w.sh.Count
	}
	return 0
}

// unowned says which shards of the count acted under no work acts on, ""
// when every one is; sim.mu is held.
func (g *simGroup) unowned() string {
	n := g.count()
	if n == 0 {
		return "no shard is acted on"
	}
	var missing []string
	for i := range n {
		if g.acting[i] == nil {
			missing = append(missing, fmt.Sprint(i))
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("shards %s of %d are acted on by nobody", strings.Join(missing, ","), n)
}

// owned says whether every shard of the count acted under is acted on;
// sim.mu is held.
func (g *simGroup) owned() bool { return g.unowned() == "" }

// checkShardsOwned checks, simLeaderBound after faults stopped, that every
// shard is acted on.
func (s *electorSim) checkShardsOwned() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if missing := s.group.unowned(); missing != "" {
		s.failLocked("%s %s after faults stopped", missing, simLeaderBound)
	}
}

// checkGroupSteady checks, at the end, that every shard is acted on and
// none has moved for the last simSteadyWindow; that the count is the one
// every running replica declares, if they agree; and that the replicas
// that may own shards share them within one, and the others own none.
func (s *electorSim) checkGroupSteady() {
	var running []*electorProc
	var names []string
	for slot := range 3 {
		if p := s.current(slot); p != nil {
			running, names = append(running, p), append(names, p.name)
		}
	}
	registered := s.srv.candidates(names)
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.group
	if missing := g.unowned(); missing != "" {
		s.failLocked("%s at the end", missing)
		return
	}
	if len(registered) < len(names) {
		s.failLocked("%d of the %d running replicas are registered at the end", len(registered), len(names))
	}
	if since := time.Since(g.starts[len(g.starts)-1]); since < simSteadyWindow {
		s.failLocked("work on a shard started %s before the end: the assignment had not settled", since)
	}
	n := g.count()
	agree := len(running) > 0
	for _, p := range running {
		agree = agree && p.declared == running[0].declared
	}
	if agree && n != running[0].declared {
		s.failLocked("every running replica declares %d shards, and the group acts on %d", running[0].declared, n)
	}
	oldest := ""
	for _, p := range running {
		if oldest == "" || version.MustParseGeneric(p.emu).LessThan(version.MustParseGeneric(oldest)) {
			oldest = p.emu
		}
	}
	held := map[*electorProc]int{}
	for _, w := range g.acting {
		held[w.p]++
		if !slices.Contains(running, w.p) {
			s.failLocked("%s acts on shard %d at the end, and it is not running", w.p.name, w.sh.Index)
		}
	}
	lo, hi := n, 0
	var spread []string
	for _, p := range running {
		spread = append(spread, fmt.Sprintf("%s=%d", p.name, held[p]))
		if g.strategy == shard.StrategyShardsOldestEmulationVersion && p.emu != oldest {
			if held[p] > 0 {
				s.failLocked("%s (emulation %s) acts on %d shards at the end, while replicas of emulation %s run", p.name, p.emu, held[p], oldest)
			}
			continue
		}
		lo, hi = min(lo, held[p]), max(hi, held[p])
	}
	if hi-lo > 1 {
		s.failLocked("shards per replica at the end: %s: they differ by more than one", strings.Join(spread, " "))
	}
}
