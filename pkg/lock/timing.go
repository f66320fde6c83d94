package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// timingCheck compares the elector's timings with the candidate's, from
// what the elector shows of them: the LeaseDurationSeconds it writes, the
// deadline of the context it renews with (client-go renews within a poll
// that ends RenewDeadline after it began), and how long it waits between two
// tries to acquire the Lease (at least RetryPeriod). Longer timings than the
// candidate's would let the elector lead after the election controller,
// which counts the candidate's lease duration, has named another holder.
//
// A gap between two tries bounds the elector's RetryPeriod from above, and
// client-go draws each gap between RetryPeriod and (1 + acquireJitter) times
// it. The elector is therefore given a RetryPeriod short enough that every
// gap is within the limit (electorRetryPeriod): its first gap proves its
// RetryPeriod, and it leads at its first try once the Lease names it.
type timingCheck struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
	// margin is a third of what the timings leave after the elector has
	// given up, LeaseDuration - RenewDeadline - RetryPeriod: as much may
	// the elector's retry period exceed the candidate's.
	margin time.Duration

	mu sync.Mutex
	// lastRead is when the elector's last read of the Lease returned
	// before it led, and minGap and maxGap the shortest and longest time
	// from such a return to the next read (zero: none yet). Each try to
	// acquire reads the Lease once, and client-go waits its jittered
	// RetryPeriod between the end of a try and the start of the next; what
	// a try does besides its read before it leads (updates the Lock
	// refuses, the first for want of a gap) takes no time to speak of.
	lastRead       time.Time
	minGap, maxGap time.Duration
	// lastOK is whether the last renewal succeeded, and succeeded whether
	// one ever did (the elector's acquisition).
	lastOK    bool
	succeeded bool
	// term is the fencing token of the term the elector acquired.
	term int32
	// refused is the mismatch found, for good.
	refused error
}

// acquireJitter is client-go's JitterFactor: before it leads, the elector
// waits RetryPeriod to (1 + JitterFactor) * RetryPeriod between two tries to
// acquire.
const acquireJitter = 1.2

// limit is the longest RetryPeriod the elector may have: the candidate's and
// the margin.
func (c *timingCheck) limit() time.Duration { return c.retryPeriod + c.margin }

// electorRetryPeriod is the RetryPeriod the elector is given: the longest
// whose every jittered gap, and a twentieth of the limit for the elector's
// own work between two tries, is within the limit; and never longer than
// the candidate's.
func (c *timingCheck) electorRetryPeriod() time.Duration {
	limit := c.limit()
	rp := time.Duration(float64(limit-limit/20) / (1 + acquireJitter)).Truncate(time.Millisecond)
	return min(rp, c.retryPeriod)
}

// deadlineTolerance is how much further than RenewDeadline the deadline of
// a renewal may be: clocks are read at different moments.
const deadlineTolerance = 50 * time.Millisecond

// errRetryPeriodUnconfirmed is the error of an acquisition before the
// elector has shown that its RetryPeriod is not longer than the candidate's
// (and the margin): the elector tries again, and one of the next tries
// comes soon enough.
var errRetryPeriodUnconfirmed = errors.New("the elector has not yet waited less than the candidate's RetryPeriod and the margin between two tries to acquire the Lease; it leads once it has (give it Lock.Timings' RetryPeriod, and it does at its first try)")

// observeGet records a read of the Lease by the elector at now.
func (c *timingCheck) observeGet(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.succeeded {
		return // the gaps of interest are those of the acquire loop
	}
	if !c.lastRead.IsZero() {
		gap := now.Sub(c.lastRead)
		if c.minGap == 0 || gap < c.minGap {
			c.minGap = gap
		}
		c.maxGap = max(c.maxGap, gap)
	}
}

// readReturned records that a read of the Lease by the elector returns
// now.
func (c *timingCheck) readReturned(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastRead = now()
}

// check returns an error wrapping ErrTimingMismatch when ler, a renewal sent
// with ctx at now, shows timings longer than the candidate's, and
// errRetryPeriodUnconfirmed for an acquisition that must wait.
func (c *timingCheck) check(ctx context.Context, ler resourcelock.LeaderElectionRecord, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused != nil {
		return c.refused
	}
	var err error
	limit := c.limit()
	switch dl, ok := ctx.Deadline(); {
	case ler.LeaseDurationSeconds != int(c.leaseDuration/time.Second):
		err = fmt.Errorf("%w: the elector's LeaseDuration is %ds, the candidate's %s", ErrTimingMismatch, ler.LeaseDurationSeconds, c.leaseDuration)
	case ok && dl.Sub(now) > c.renewDeadline+deadlineTolerance:
		err = fmt.Errorf("%w: the elector renews with a deadline %s away, so its RenewDeadline is longer than the candidate's %s",
			ErrTimingMismatch, dl.Sub(now).Round(time.Millisecond), c.renewDeadline)
	case c.succeeded:
		return nil
	case float64(c.maxGap) > (1+acquireJitter)*float64(limit):
		err = fmt.Errorf("%w: the elector waited %s between two tries to acquire the Lease, so its RetryPeriod is longer than %s (the candidate's %s and the margin)",
			ErrTimingMismatch, c.maxGap.Round(time.Millisecond), limit, c.retryPeriod)
	case c.minGap == 0 || c.minGap > limit:
		return errRetryPeriodUnconfirmed
	default:
		return nil
	}
	c.refused = err
	klog.FromContext(ctx).Error(err, "Refusing the elector's renewals for good; give the elector the candidate's LeaseDuration, RenewDeadline and RetryPeriod (Lock.Timings)")
	return err
}

// renewed records that a renewal returned, successfully or not, and reports
// whether it is the first success.
func (c *timingCheck) renewed(ok bool) (first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first = ok && !c.succeeded
	c.succeeded = c.succeeded || ok
	c.lastOK = ok
	return first
}

// setElectorTerm records the fencing token of the term the elector
// acquired.
func (c *timingCheck) setElectorTerm(token int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.term = token
}

// electorTerm is the token of the term the elector acquired, once it has.
func (c *timingCheck) electorTerm() (token int32, leading bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term, c.succeeded
}

// lastRenewalSucceeded reports whether the elector's last renewal
// succeeded.
func (c *timingCheck) lastRenewalSucceeded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastOK
}

// checkTimings checks a renewal of the elector against the candidate's
// timings, on the elector's clock (real time).
func (l *Lock) checkTimings(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.timing.check(ctx, ler, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", l.Describe(), err)
	}
	return nil
}

// renewed records the outcome of a renewal of the elector: the first
// success is the elector's acquisition, after which it runs leader work in
// the term it acquired.
func (l *Lock) renewed(ok bool) {
	if first := l.timing.renewed(ok); first {
		token, _ := l.c.Token()
		l.timing.setElectorTerm(token)
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
	return ld, rd, l.timing.electorRetryPeriod()
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
