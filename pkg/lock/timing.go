package lock

// The elector's timings are checked by lockrule.TimingCheck, from what the
// elector shows of them (see its documentation); the Lock feeds it the
// elector's reads and renewals on the real clock.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// checkTimings checks a renewal of the elector against the candidate's
// timings, on the elector's clock (real time).
func (l *Lock) checkTimings(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	deadline, hasDeadline := ctx.Deadline()
	err, refusedNow := l.timing.Check(ler.LeaseDurationSeconds, deadline, hasDeadline, time.Now())
	if refusedNow {
		l.logger(ctx).Error(err, "Refusing the elector's renewals for good; give the elector the candidate's LeaseDuration, RenewDeadline and RetryPeriod (Lock.Timings)")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", l.Describe(), err)
	}
	return nil
}

// renewed records the outcome of a renewal of the elector: the first
// success is the elector's acquisition, after which it runs leader work in
// the term it acquired.
func (l *Lock) renewed(ok bool) {
	if first := l.timing.Renewed(ok, time.Now()); first {
		token, _ := l.c.Token()
		l.timing.SetTerm(token)
		l.work.started()
	}
}

// Timings returns the LeaseDuration, RenewDeadline and RetryPeriod to give
// the elector: the candidate's LeaseDuration and RenewDeadline, and a
// RetryPeriod that may be shorter than the candidate's (0.65 times it with
// client-go's defaults, 15s/10s/2s: 1.295s). client-go waits up to 2.2 times its
// RetryPeriod between two tries to acquire, and the Lock lets it lead only
// once one gap has shown that its RetryPeriod is not longer than the
// candidate's and a third of the margin; with this one the first gap
// does, so the elector leads at its first try once the Lease names it. It
// also renews that much more often while it leads.
//
// An elector with the candidate's RetryPeriod is accepted too, once one of
// its gaps is short enough (about half of them at client-go's defaults).
func (l *Lock) Timings() (leaseDuration, renewDeadline, retryPeriod time.Duration) {
	ld, rd, _ := l.c.Timings()
	return ld, rd, l.timing.ElectorRetryPeriod()
}

// work follows the elector's leader work (OnStartedLeading), once Callbacks
// wrapped it.
type work struct {
	mu        sync.Mutex
	isTracked bool
	running   int
	idle      chan struct{} // closed while nothing runs
}

func (w *work) track() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.isTracked = true
}

func (w *work) tracked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isTracked
}

// started is told of a term the elector will run leader work for: the
// elector starts OnStartedLeading in a goroutine of its own once it has
// renewed, so the work counts as running from the successful renewal on,
// before that goroutine runs.
func (w *work) started() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.isTracked {
		return
	}
	if w.running == 0 {
		w.idle = make(chan struct{})
	}
	w.running++
}

// returned is told when OnStartedLeading has returned.
func (w *work) returned() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running == 0 {
		return
	}
	w.running--
	if w.running == 0 {
		close(w.idle)
	}
}

// wait waits until no leader work runs, and reports whether that happened
// before ctx ended.
func (w *work) wait(ctx context.Context) bool {
	w.mu.Lock()
	idle := w.idle
	running := w.running
	w.mu.Unlock()
	if running == 0 {
		return true
	}
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}
