package chaos

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fault is one kind of fault: inject disturbs the system, undoes the
// disturbance if it lasts, and waits for the election to be healthy again.
type fault struct {
	name   string
	inject func(e *env) error
}

var faultKinds = []fault{
	{"leader-sigkill", killLeader(syscall.SIGKILL)},
	{"leader-sigkill-reported", killReported},
	{"leader-sigterm", killLeader(syscall.SIGTERM)},
	{"leader-sigstop", freezeLeader},
	{"apiserver-restart", restartAPIServer},
	{"apiserver-pause", pauseAPIServer},
	{"controller-sigkill", killController},
	{"controller-sigstop", freezeController},
	{"etcd-restart", restartEtcd},
	{"leader-latency", slowLeader},
	{"leader-partition", partitionLeader},
	{"clock-skew", skewClock},
	{"leader-upgrade", upgradeLeader},
	{"shard-replica-sigkill", killReplica},
	{"shard-replica-sigstop", freezeReplica},
	{"shard-replica-partition", partitionReplica},
}

// theLeader is the candidate leading now, which after waitHealthy is the
// best live one.
func (e *env) theLeader() (*proc, error) {
	p := e.leader()
	if p == nil || !p.live() {
		return nil, fmt.Errorf("no live candidate leads")
	}
	return p, nil
}

// killLeader kills the leader with sig (SIGKILL: it vanishes; SIGTERM: it
// stops leader work and lets the Lease go), waits for the next best to take
// over, starts it again, and waits for it to lead again.
func killLeader(sig syscall.Signal) func(e *env) error {
	return func(e *env) error {
		return e.killLeader("leader-"+strings.ToLower(signalName(sig)), sig)
	}
}

func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[sig]
}

// killLeader kills the leader with sig and brings it back, as part of the
// fault name.
func (e *env) killLeader(name string, sig syscall.Signal) error {
	sigName := signalName(sig)
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	e.t.Logf("    %s %s", sigName, p.name)
	from := time.Now()
	if err := p.kill(sig, 15*time.Second); err != nil {
		return err
	}
	e.waitHealthy(name, "the "+sigName+" of "+p.name, from, stuckAfter)
	e.pause(time.Duration(e.rng.IntN(1000)) * time.Millisecond)
	from = time.Now()
	if err := p.start(); err != nil {
		return err
	}
	e.waitHealthy(name, "the restart of "+p.name, from, stuckAfter)
	return nil
}

// freezeLeader stops the leader with SIGSTOP for longer than its lease
// duration: the next best takes over meanwhile; once it runs again, the old
// leader must not act on its lapsed term, and takes the Lease back.
func freezeLeader(e *env) error {
	return e.sidelineLeader("leader-sigstop", "SIGSTOP", (*proc).pause, (*proc).resume)
}

// partitionLeader cuts the leader off from kube-apiserver for longer than
// the lease duration (it can still reach the witness): it must stop acting
// before the next best takes over. Once the partition heals, its requests
// held meanwhile arrive late, and it leads again.
func partitionLeader(e *env) error {
	return e.sidelineLeader("leader-partition", "partition from kube-apiserver", cutOff, reconnect)
}

// cutOff partitions p from kube-apiserver (not from the witness); reconnect
// heals the partition, and the requests held meanwhile arrive late.
func cutOff(p *proc) error    { p.setIsolated(true); p.proxy.partition(true); return nil }
func reconnect(p *proc) error { p.proxy.partition(false); p.setIsolated(false); return nil }

// sidelineLeader takes the leader out with off for longer than the lease
// duration, waits for the next best to lead and act, brings it back with on,
// and waits for it to lead again.
func (e *env) sidelineLeader(fault, what string, off, on func(*proc) error) error {
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	return e.sideline(fault, what, p, off, on, e.waitHealthy)
}

// sideline takes p out with off for longer than the lease duration, waits
// with healthy for the others to make up for it, brings it back with on,
// and waits with healthy again.
func (e *env) sideline(fault, what string, p *proc, off, on func(*proc) error, healthy func(fault, phase string, from time.Time, limit time.Duration)) error {
	lasts := leaseDuration + time.Second + time.Duration(e.rng.IntN(2000))*time.Millisecond
	e.t.Logf("    %s %s for %s", what, p.name, lasts)
	from := time.Now()
	if err := off(p); err != nil {
		return err
	}
	healthy(fault, "the "+what+" of "+p.name, from, stuckAfter)
	e.pause(time.Until(from.Add(lasts)))
	from = time.Now()
	if err := on(p); err != nil {
		return err
	}
	healthy(fault, "the end of the "+what+" of "+p.name, from, stuckAfter)
	return nil
}

func restartAPIServer(e *env) error {
	if err := server.RestartAPIServer(e.ctx); err != nil {
		return err
	}
	e.waitHealthy("apiserver-restart", "kube-apiserver is ready again", time.Now(), stuckAfter)
	return nil
}

// pauseAPIServer freezes kube-apiserver for longer than the renew deadline:
// the leader cannot renew and must stop acting; once the server answers
// again, the best candidate leads again.
func pauseAPIServer(e *env) error {
	frozen := renewDeadline + time.Second + time.Duration(e.rng.IntN(1000))*time.Millisecond
	e.t.Logf("    SIGSTOP kube-apiserver for %s", frozen)
	if err := server.PauseAPIServer(); err != nil {
		return err
	}
	e.pause(frozen)
	if err := server.ResumeAPIServer(); err != nil {
		return err
	}
	e.waitHealthy("apiserver-pause", "kube-apiserver's SIGCONT", time.Now(), stuckAfter)
	return nil
}

// activeController waits until a running controller replica holds the
// controllers' Lease, and returns it.
func (e *env) activeController() (*proc, error) {
	deadline := time.Now().Add(stuckAfter)
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		l, err := server.Client().CoordinationV1().Leases(e.lockNS).Get(e.ctx, ctrlLeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			for _, c := range e.ctrls {
				if c.name == *l.Spec.HolderIdentity && c.live() {
					return c, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no live controller replica holds Lease %s after %s (last error: %v)", ctrlLeaseName, stuckAfter, err)
		}
		select {
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		case <-ticker.C:
		}
	}
}

// killController kills the active controller replica mid-election: the
// leader stops gracefully and lets the Lease go, and the moment the Lease is
// seen released the active replica is SIGKILLed. The standby must take over
// and elect; then both come back.
func killController(e *env) error {
	ctrl, err := e.activeController()
	if err != nil {
		return err
	}
	leader, err := e.theLeader()
	if err != nil {
		return err
	}
	e.t.Logf("    SIGTERM %s, then SIGKILL %s once the Lease is let go", leader.name, ctrl.name)
	from := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- leader.kill(syscall.SIGTERM, 15*time.Second) }()
	for {
		if l, _ := e.rec.current(leaseName); l.holder != leader.name || time.Since(from) > 15*time.Second {
			break
		}
		e.pause(time.Millisecond)
	}
	if err := ctrl.kill(syscall.SIGKILL, 15*time.Second); err != nil {
		return err
	}
	l, _ := e.rec.current(leaseName)
	e.t.Logf("    %s killed %s after the SIGTERM; the Lease named %q", ctrl.name, time.Since(from).Round(time.Millisecond), l.holder)
	if err := <-exited; err != nil {
		return err
	}
	e.waitHealthy("controller-sigkill", "the SIGTERM of "+leader.name+" and the SIGKILL of "+ctrl.name, from, stuckAfter)
	e.pause(time.Duration(e.rng.IntN(2000)) * time.Millisecond)
	from = time.Now()
	if err := ctrl.start(); err != nil {
		return err
	}
	if err := leader.start(); err != nil {
		return err
	}
	e.waitHealthy("controller-sigkill", "the restart of "+ctrl.name+" and "+leader.name, from, stuckAfter)
	return nil
}

// freezeController freezes the active controller replica with SIGSTOP for
// longer than its lease: the standby takes over, and must elect when the
// leader is killed meanwhile. Once the frozen replica runs again, on a stale
// view, the election must stay healthy.
func freezeController(e *env) error {
	ctrl, err := e.activeController()
	if err != nil {
		return err
	}
	e.t.Logf("    SIGSTOP %s", ctrl.name)
	from := time.Now()
	if err := ctrl.pause(); err != nil {
		return err
	}
	standby, err := e.activeController()
	if err != nil {
		return err
	}
	e.t.Logf("    %s took over %s after the SIGSTOP", standby.name, time.Since(from).Round(time.Millisecond))
	if err := e.killLeader("controller-sigstop", syscall.SIGKILL); err != nil {
		return err
	}
	e.pause(time.Duration(e.rng.IntN(1000)) * time.Millisecond)
	e.t.Logf("    SIGCONT %s after %s", ctrl.name, time.Since(from).Round(time.Millisecond))
	from = time.Now()
	if err := ctrl.resume(); err != nil {
		return err
	}
	e.waitHealthy("controller-sigstop", "the SIGCONT of "+ctrl.name, from, stuckAfter)
	return nil
}

// slowLeader delays all traffic between the leader and kube-apiserver by up
// to half the retry period each way for a few seconds: renewals are slow but
// in time, so the leader keeps leading and acting.
func slowLeader(e *env) error {
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	latency := time.Duration(100+e.rng.IntN(400)) * time.Millisecond
	lasts := time.Duration(3000+e.rng.IntN(3000)) * time.Millisecond
	e.t.Logf("    %s latency between %s and kube-apiserver for %s", latency, p.name, lasts)
	from := time.Now()
	p.proxy.setLatency(latency)
	e.waitHealthy("leader-latency", fmt.Sprintf("%s of latency began", latency), from, stuckAfter)
	e.pause(time.Until(from.Add(lasts)))
	p.proxy.setLatency(0)
	e.waitHealthy("leader-latency", "the latency ended", time.Now(), stuckAfter)
	return nil
}

// skewClock restarts the leader (gracefully) with another clock offset, one
// no candidate has run with yet if there is one left.
func skewClock(e *env) error {
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	e.mu.Lock()
	var offset time.Duration
	var fresh []time.Duration
	for _, o := range clockOffsets {
		if !e.offsetsUsed[o] {
			fresh = append(fresh, o)
		}
	}
	if len(fresh) > 0 {
		offset = fresh[0]
	} else {
		offset = clockOffsets[e.rng.IntN(len(clockOffsets))]
	}
	e.mu.Unlock()
	if p.kind == kindControllerRuntime {
		offset = 0 // its option has no clock to offset: a plain restart
	}
	e.t.Logf("    restart %s with its clock %+v off", p.name, offset)
	from := time.Now()
	if err := p.kill(syscall.SIGTERM, 15*time.Second); err != nil {
		return err
	}
	e.waitHealthy("clock-skew", "the SIGTERM of "+p.name, from, stuckAfter)
	if p.kind != kindControllerRuntime {
		p.setArg("clock-offset", offset.String())
	}
	e.setClockOffset(p.name, offset)
	from = time.Now()
	if err := p.start(); err != nil {
		return err
	}
	e.waitHealthy("clock-skew", fmt.Sprintf("the restart of %s %+v off", p.name, offset), from, stuckAfter)
	return nil
}

// restartEtcd restarts etcd under a running kube-apiserver. The fault ends
// when kube-apiserver serves Leases again, as for a restart of
// kube-apiserver: until then nobody can renew or elect. Its readyz, which
// checks etcd through a client of its own, can pass seconds before that: the
// clients that serve Leases reconnect to etcd on their own backoff.
func restartEtcd(e *env) error {
	began := time.Now()
	if err := server.RestartEtcd(e.ctx); err != nil {
		return err
	}
	etcdBack := time.Now()
	// A dry-run create reads the Lease's key from etcd through
	// the client that serves Leases, and writes nothing.
	at, err := e.firstSuccesses(etcdBack, []probe{
		{"kube-apiserver's readyz", func() error {
			_, err := server.Client().Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(e.ctx)
			return err
		}},
		{"a dry-run create of a Lease", func() error {
			_, err := server.Client().CoordinationV1().Leases(e.ns).Create(e.ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: leaseName + "-probe"},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
	})
	if err != nil {
		return err
	}
	ready, from := at[0], at[1]
	e.t.Logf("    etcd down and back in %s; kube-apiserver ready %s later, serving Leases %s later",
		etcdBack.Sub(began).Round(time.Millisecond), ready.Sub(etcdBack).Round(time.Millisecond), from.Sub(etcdBack).Round(time.Millisecond))
	e.waitHealthy("etcd-restart", "kube-apiserver serves Leases again", from, stuckAfter)
	return nil
}

// probe is one request that fails until a fault is over.
type probe struct {
	what string
	try  func() error
}

// firstSuccesses tries each probe every 50 ms, each in a goroutine of its
// own so that a request the server holds delays no other, and returns when
// each first succeeded; it gives up stuckAfter after from, or when the test
// is cancelled.
func (e *env) firstSuccesses(from time.Time, probes []probe) ([]time.Time, error) {
	at := make([]time.Time, len(probes))
	errs := make([]error, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { at[i], errs[i] = e.until(from, p) })
	}
	wg.Wait()
	return at, errors.Join(errs...)
}

// until tries p every 50 ms until it succeeds, and returns when it did.
func (e *env) until(from time.Time, p probe) (time.Time, error) {
	for {
		err := p.try()
		switch {
		case err == nil:
			return time.Now(), nil
		case e.ctx.Err() != nil:
			return time.Time{}, fmt.Errorf("%s: %w", p.what, e.ctx.Err())
		case time.Since(from) > stuckAfter:
			return time.Time{}, fmt.Errorf("%s still failing %s on: %w", p.what, stuckAfter, err)
		}
		e.pause(50 * time.Millisecond)
	}
}

// upgradeLeader is one step of a rolling upgrade: the leader stops
// gracefully and comes back at a newer emulation version than every other
// candidate, so the next best leads on. Over a run, leadership goes round
// every candidate and every kind of program.
func upgradeLeader(e *env) error {
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	newest := 0
	for _, c := range e.cands {
		newest = max(newest, emulationRank(c.emulation))
	}
	version := fmt.Sprintf("1.34.%d", newest+1)
	e.t.Logf("    upgrade %s (%s) from emulation version %s to %s", p.name, p.kind, p.emulation, version)
	from := time.Now()
	if err := p.kill(syscall.SIGTERM, 15*time.Second); err != nil {
		return err
	}
	e.setEmulation(p, version)
	e.waitHealthy("leader-upgrade", "the SIGTERM of "+p.name, from, stuckAfter)
	from = time.Now()
	if err := p.start(); err != nil {
		return err
	}
	e.waitHealthy("leader-upgrade", "the restart of "+p.name+" at "+version, from, stuckAfter)
	return nil
}
