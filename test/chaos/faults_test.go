package chaos

import (
	"fmt"
	"strings"
	"syscall"
	"time"
)

// fault is one kind of fault: inject disturbs the system, undoes the
// disturbance if it lasts, and waits for the election to be healthy again.
type fault struct {
	name   string
	inject func(e *env) error
}

var faultKinds = []fault{
	{"leader-sigkill", killLeader(syscall.SIGKILL)},
	{"leader-sigterm", killLeader(syscall.SIGTERM)},
	{"leader-sigstop", freezeLeader},
	{"apiserver-restart", restartAPIServer},
	{"apiserver-pause", pauseAPIServer},
	{"controller-sigkill", killController},
	{"etcd-restart", restartEtcd},
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
		sigName := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[sig]
		name := "leader-" + strings.ToLower(sigName)
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
}

// freezeLeader stops the leader with SIGSTOP for longer than its lease
// duration: the next best takes over meanwhile; once it runs again, the old
// leader must not act on its lapsed term, and takes the Lease back.
func freezeLeader(e *env) error {
	p, err := e.theLeader()
	if err != nil {
		return err
	}
	frozen := leaseDuration + time.Second + time.Duration(e.rng.IntN(2000))*time.Millisecond
	e.t.Logf("    SIGSTOP %s for %s", p.name, frozen)
	from := time.Now()
	if err := p.pause(); err != nil {
		return err
	}
	e.waitHealthy("leader-sigstop", "the SIGSTOP of "+p.name, from, stuckAfter)
	e.pause(time.Until(from.Add(frozen)))
	from = time.Now()
	if err := p.resume(); err != nil {
		return err
	}
	e.waitHealthy("leader-sigstop", "the SIGCONT of "+p.name, from, stuckAfter)
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

func killController(e *env) error {
	if err := e.ctrl.kill(syscall.SIGKILL, 15*time.Second); err != nil {
		return err
	}
	e.pause(time.Duration(e.rng.IntN(2000)) * time.Millisecond)
	from := time.Now()
	if err := e.ctrl.start(); err != nil {
		return err
	}
	e.waitHealthy("controller-sigkill", "the controller's restart", from, stuckAfter)
	return nil
}

func restartEtcd(e *env) error {
	if err := server.RestartEtcd(e.ctx); err != nil {
		return err
	}
	e.waitHealthy("etcd-restart", "etcd is healthy again", time.Now(), stuckAfter)
	return nil
}
