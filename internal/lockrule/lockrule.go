// Package lockrule holds the rules of package lock, the client-go resource
// lock backed by the candidate library. How the elector is shown the Lease
// (RecordOf) and what the elector's release does with the Lease
// (ReleaseFor) are pure functions. TimingCheck is a record of the elector's
// calls, updated under its own lock from the instants the lock passes it,
// from which the elector's timings are read and checked. Nothing here reads
// a clock or starts a goroutine, so the simulation in pkg/controller runs
// the lock's own rules.
package lockrule

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Forever is the lease duration reported for a Lease held by another: as
// long as client-go can count, so that it never counts it expired.
const Forever = math.MaxInt32

// NoHolder is the holder the elector sees (GetLeader, OnNewLeader) while the
// Lease does not exist or has no holder: the election controller has not
// named one yet.
const NoHolder = "(none: the election controller has not named a holder)"

// RecordOf is lease as the elector of identity must see it: as it is when it
// names identity and nobody else is preferred; otherwise held, for ever, by
// its holder, or by the preferred holder when the Lease names identity. A
// Lease that does not exist (nil) or has no holder is held by NoHolder.
//
// One exception keeps a leading elector able to release: while the elector
// leads in the term whose fencing token is term (leading), a Lease that
// still names identity in that term is shown as it is although another
// holder is preferred. client-go releases (ReleaseOnCancel) only a Lease it
// observes naming itself, and a preempted elector is told to stop
// (Lock.ElectorContext) and must then hand the Lease to the preferred holder
// at once; its renewals fail all the same, so it leads no longer than its
// renew deadline allows.
func RecordOf(lease *coordinationv1.Lease, identity string, term int32, leading bool) *resourcelock.LeaderElectionRecord {
	if lease == nil {
		// Reported as held, so that the elector waits quietly instead of
		// trying to create the Lease, and logging it, every RetryPeriod.
		return &resourcelock.LeaderElectionRecord{HolderIdentity: NoHolder, LeaseDurationSeconds: Forever}
	}
	r := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	if r.PreferredHolder == identity {
		r.PreferredHolder = ""
	}
	if r.HolderIdentity == identity && (r.PreferredHolder == "" || leading && int32(r.LeaderTransitions) == term) {
		return r
	}
	if r.HolderIdentity == identity {
		r.HolderIdentity = r.PreferredHolder
	}
	if r.HolderIdentity == "" {
		r.HolderIdentity = NoHolder
	}
	r.LeaseDurationSeconds = Forever
	return r
}

// Release is what the lock does with the Lease on the elector's release.
type Release int

const (
	// LeaveToExpire: nothing tells that leader work has returned; the
	// Lease goes to the next holder LeaseDuration after the last renewal.
	LeaveToExpire Release = iota
	// HandOverNow: leader work has returned; the Lease goes to the
	// preferred holder, or nobody, before the release is answered.
	HandOverNow
	// HandOverOnceWorkReturned: the lock follows leader work (its
	// callbacks are wrapped); the Lease goes once it has returned, if it
	// does within the lease duration.
	HandOverOnceWorkReturned
)

// ReleaseFor is what the elector's release does. client-go sends it when
// its renew loop ends, which is not after leader work has returned: on
// shutdown it cancels leader work at the same moment, and after a lost term
// only later. So the Lease moves at once only when the elector promises that
// it releases after leader work (afterWork, controller-runtime with a
// negative GracefulShutdownTimeout) and the release ends a sound term (see
// TimingCheck.SoundRelease); once leader work has returned when the lock
// follows it (tracked); and otherwise not at all.
func ReleaseFor(afterWork, sound, tracked bool) Release {
	switch {
	case afterWork && sound:
		return HandOverNow
	case tracked:
		return HandOverOnceWorkReturned
	default:
		return LeaveToExpire
	}
}

// ErrTimingMismatch is the error of a renewal from an elector whose
// LeaseDuration, RenewDeadline or RetryPeriod is longer than the
// candidate's (package lock re-exports it).
var ErrTimingMismatch = errors.New("the elector's timings do not match the candidate's")

// ErrRetryPeriodUnconfirmed is the error of an acquisition before the
// elector has shown that its RetryPeriod is not longer than the candidate's
// (and the margin): the elector tries again, and one of the next tries
// comes soon enough.
var ErrRetryPeriodUnconfirmed = errors.New("the elector has not yet waited less than the candidate's RetryPeriod and the margin between two tries to acquire the Lease; it leads once it has (give it Lock.Timings' RetryPeriod, and it does at its first try)")

// AcquireJitter is client-go's JitterFactor: before it leads, the elector
// waits RetryPeriod to (1 + JitterFactor) * RetryPeriod between two tries to
// acquire.
const AcquireJitter = 1.2

// DeadlineTolerance is how much further than RenewDeadline the deadline of
// a renewal may be: clocks are read at different moments.
const DeadlineTolerance = 50 * time.Millisecond

// TimingCheck compares the elector's timings with the candidate's, from
// what the elector shows of them: the LeaseDurationSeconds it writes, the
// deadline of the context it renews with (client-go renews within a poll
// that ends RenewDeadline after it began), and how long it waits between two
// tries to acquire the Lease (at least RetryPeriod). Longer timings than the
// candidate's would let the elector lead after the election controller,
// which counts the candidate's lease duration, has named another holder.
//
// A gap between two tries bounds the elector's RetryPeriod from above, and
// client-go draws each gap between RetryPeriod and (1 + AcquireJitter) times
// it. The elector is therefore given a RetryPeriod short enough that every
// gap is within the limit (ElectorRetryPeriod): its first gap proves its
// RetryPeriod, and it leads at its first try once the Lease names it.
//
// Set the durations before use; it is safe for concurrent use.
type TimingCheck struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Margin is a third of what the timings leave after the elector has
	// given up, LeaseDuration - RenewDeadline - RetryPeriod: as much may
	// the elector's retry period exceed the candidate's.
	Margin time.Duration

	mu sync.Mutex
	// lastRead is when the elector's last read of the Lease returned
	// before it led, and minGap and maxGap the shortest and longest time
	// from such a return to the next read (zero: none yet). Each try to
	// acquire reads the Lease once, and client-go waits its jittered
	// RetryPeriod between the end of a try and the start of the next; what
	// a try does besides its read before it leads takes no time to speak
	// of while the Lock refuses its updates (the first for want of a gap).
	// An update the Lock lets through is a request that may take up to the
	// renew deadline, so the gap it falls in (renewing) is not counted.
	lastRead       time.Time
	renewing       bool
	minGap, maxGap time.Duration
	// lastOKAt is when the last successful renewal returned, and
	// succeeded whether one ever did (the elector's acquisition).
	lastOKAt  time.Time
	succeeded bool
	// term is the fencing token of the term the elector acquired.
	term int32
	// refused is the mismatch found, for good; gapRefused says that a
	// too long gap was reported.
	refused    error
	gapRefused bool
}

// Limit is the longest RetryPeriod the elector may have: the candidate's and
// the margin.
func (c *TimingCheck) Limit() time.Duration { return c.RetryPeriod + c.Margin }

// ElectorRetryPeriod is the RetryPeriod the elector is given: the longest
// whose every jittered gap, and a twentieth of the limit for the elector's
// own work between two tries, is within the limit; and never longer than
// the candidate's.
func (c *TimingCheck) ElectorRetryPeriod() time.Duration {
	limit := c.Limit()
	rp := time.Duration(float64(limit-limit/20) / (1 + AcquireJitter)).Truncate(time.Millisecond)
	return min(rp, c.RetryPeriod)
}

// StandByWait bounds how long the lock's Get waits for the holder to change
// while the elector stands by; the elector then reads again after its
// RetryPeriod, and a change in that pause waits for that read.
const StandByWait = 5 * time.Minute

// WakesStandBy reports whether a Lease whose record names holder ends the
// wait of an elector standing by that last saw reported: a new holder does,
// but not a Lease gone vacant (NoHolder), which the elector cannot take, and
// which the election controller fills at once after a release; waking for
// it would leave the elector in its pause when the next holder is named.
func WakesStandBy(holder, reported string) bool {
	return holder != reported && holder != NoHolder
}

// StandsBy reports whether a read of the Lease by the elector of identity,
// whose last read reported holder reported, waits for a new holder
// (WakesStandBy) instead of answering at once: the elector has not acquired
// the Lease, its last read showed another holder, and a gap between two of
// its tries has shown its RetryPeriod within the limit, so that it may lead
// as soon as the Lease names it.
func (c *TimingCheck) StandsBy(reported, identity string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.succeeded && reported != "" && reported != identity && c.minGap != 0 && c.minGap <= c.Limit()
}

// ObserveGet records a read of the Lease by the elector at now.
func (c *TimingCheck) ObserveGet(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.succeeded {
		return // the gaps of interest are those of the acquire loop
	}
	renewing := c.renewing
	c.renewing = false
	if !c.lastRead.IsZero() && !renewing {
		gap := now.Sub(c.lastRead)
		if c.minGap == 0 || gap < c.minGap {
			c.minGap = gap
		}
		c.maxGap = max(c.maxGap, gap)
	}
}

// ReadReturned records that a read of the Lease by the elector returns at
// now.
func (c *TimingCheck) ReadReturned(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastRead = now
}

// Check checks a renewal sent at now that writes leaseDurationSeconds,
// within a context whose deadline is deadline (hasDeadline false: none). It
// returns an error wrapping ErrTimingMismatch when the renewal shows timings
// longer than the candidate's (refusedNow is true the first time), and
// ErrRetryPeriodUnconfirmed for an acquisition that must wait.
//
// A LeaseDuration or RenewDeadline longer than the candidate's is refused
// for good. Every gap is at least the elector's RetryPeriod, so one gap
// within the limit proves it, whatever other gaps show: a gap longer than
// (1 + AcquireJitter) times the limit means a longer RetryPeriod only while
// no gap has proved it, since a stop of the process (SIGSTOP, a VM pause)
// between two tries makes one gap long too.
func (c *TimingCheck) Check(leaseDurationSeconds int, deadline time.Time, hasDeadline bool, now time.Time) (err error, refusedNow bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused != nil {
		return c.refused, false
	}
	limit := c.Limit()
	switch {
	case leaseDurationSeconds != int(c.LeaseDuration/time.Second):
		err = fmt.Errorf("%w: the elector's LeaseDuration is %ds, the candidate's %s", ErrTimingMismatch, leaseDurationSeconds, c.LeaseDuration)
	case hasDeadline && deadline.Sub(now) > c.RenewDeadline+DeadlineTolerance:
		err = fmt.Errorf("%w: the elector renews with a deadline %s away, so its RenewDeadline is longer than the candidate's %s",
			ErrTimingMismatch, deadline.Sub(now).Round(time.Millisecond), c.RenewDeadline)
	case c.succeeded:
		return nil, false
	case c.minGap != 0 && c.minGap <= limit:
		c.renewing = true
		return nil, false
	case float64(c.maxGap) > (1+AcquireJitter)*float64(limit):
		first := !c.gapRefused
		c.gapRefused = true
		return fmt.Errorf("%w: the elector waited %s between two tries to acquire the Lease, so its RetryPeriod is longer than %s (the candidate's %s and the margin)",
			ErrTimingMismatch, c.maxGap.Round(time.Millisecond), limit, c.RetryPeriod), first
	default:
		return ErrRetryPeriodUnconfirmed, false
	}
	c.refused = err
	return err, true
}

// Renewed records that a renewal returned at now, successfully or not, and
// reports whether it is the first success.
func (c *TimingCheck) Renewed(ok bool, now time.Time) (first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first = ok && !c.succeeded
	c.succeeded = c.succeeded || ok
	if ok {
		c.lastOKAt = now
	}
	return first
}

// SoundRelease reports whether a release the elector sends at now ends a
// sound term: it comes less than RenewDeadline after the elector's last
// successful renewal returned. client-go's renew loop gives up on its own
// RetryPeriod + RenewDeadline after that at the earliest (it waits
// RetryPeriod, then polls for RenewDeadline), so such a release comes from a
// cancelled context: a shutdown, or a preemption that Lock.ElectorContext
// passed on, both of which a controller-runtime manager sends only after its
// leader runnables have stopped. The renewals in between may have failed:
// the controller then prefers another holder, or the API did not answer,
// and the Lease is this process's for a lease duration after the last
// renewal it accepted either way. A renewal that a shutdown cut short
// (failed with the cancelled context) changes nothing either.
func (c *TimingCheck) SoundRelease(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.succeeded && now.Sub(c.lastOKAt) < c.RenewDeadline
}

// SetTerm records the fencing token of the term the elector acquired.
func (c *TimingCheck) SetTerm(token int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.term = token
}

// Term is the token of the term the elector acquired, once it has
// (leading): its renewals renew that term and no other.
func (c *TimingCheck) Term() (token int32, leading bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term, c.succeeded
}
