package lead

import (
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Ownership tells whether a Lease naming this identity may be taken by this
// process. The name alone does not say it: two processes started with the
// same Identity would both renew the Lease and both lead. A Lease naming this
// identity may be taken when
//   - its renewTime is one this process wrote (its own term, possibly lapsed),
//   - or it was named to this identity and nobody has renewed it since: a
//     controller's naming sets acquireTime equal to renewTime (cle-controller),
//     or the informer saw the holder change to this identity (the controller
//     in kube-apiserver) and no renewal by another process followed,
//   - or (decided by the elector) it has not changed for a lease duration on
//     this process's clock, so whoever renewed it has stopped.
//
// The informer's event handler feeds it every change in order, which the
// elector, reading only the newest state, could miss. It is shared between
// that handler and the elector's loop, hence the lock.
type Ownership struct {
	// Identity is the candidate's identity.
	Identity string

	mu sync.Mutex
	// sent holds the renewTimes of this process's recent renewals, but for
	// those the server certainly refused: one that timed out may have been
	// written, and the informer may deliver a renewal late.
	sent []instantKey
	// named is set when the Lease was seen named to this identity and not
	// renewed since; namedRenew is the renewTime of that naming.
	named      bool
	namedRenew time.Time
	// foreignRenewals counts renewals by another process under this
	// identity, for the elector to report.
	foreignRenewals int
}

// instantKey is an instant as a comparable value: equal for equal
// instants, whatever their location or monotonic reading (as time.Equal).
type instantKey struct {
	sec  int64
	nsec int
}

func keyOf(t time.Time) instantKey { return instantKey{t.Unix(), t.Nanosecond()} }

// maxSent bounds the renewals remembered: several renew deadlines' worth at
// the usual timings.
const maxSent = 32

// Wrote records the renewTime of a renewal about to be sent.
func (o *Ownership) Wrote(renew time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.sent) == maxSent {
		o.sent = o.sent[1:]
	}
	o.sent = append(o.sent, keyOf(renew))
}

// Refused forgets a renewal the server certainly did not make: one attempt,
// the latest with that renewTime. Attempts based on the same stored version
// by a process whose clock is behind it carry the same renewTime (see
// RenewTimeFor), and an earlier one may have been written although its
// answer was an error.
func (o *Ownership) Refused(renew time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := keyOf(renew)
	for i := len(o.sent) - 1; i >= 0; i-- {
		if o.sent[i] == n {
			o.sent = slices.Delete(o.sent, i, i+1)
			return
		}
	}
}

// Mine reports whether this process wrote the Lease's renewTime.
func (o *Ownership) Mine(lease *coordinationv1.Lease) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mineLocked(RenewTimeOf(lease))
}

func (o *Ownership) mineLocked(renew time.Time) bool {
	return !renew.IsZero() && slices.Contains(o.sent, keyOf(renew))
}

// MayTake reports whether a Lease naming this identity may be taken now
// without waiting for it to stay unchanged (see the type's doc).
func (o *Ownership) MayTake(lease *coordinationv1.Lease) bool {
	if FreshlyNamed(lease) {
		return true
	}
	renew := RenewTimeOf(lease)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mineLocked(renew) || (o.named && o.namedRenew.Equal(renew))
}

// Observe follows one change of the Lease as the informer delivers it; old
// is nil for an addition, initial is true for the informer's initial list.
func (o *Ownership) Observe(old, lease *coordinationv1.Lease, initial bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if HolderOf(lease) != o.Identity {
		o.named = false
		return
	}
	renew := RenewTimeOf(lease)
	switch {
	case o.mineLocked(renew):
	case FreshlyNamed(lease),
		old == nil && !initial, // created naming this identity
		old != nil && HolderOf(old) != o.Identity:
		o.named, o.namedRenew = true, renew
	case old != nil && !RenewTimeOf(old).Equal(renew):
		// Renewed, but not by this process.
		o.named = false
		o.foreignRenewals++
	}
}

// TakeForeignRenewals returns and resets the count of renewals by another
// process.
func (o *Ownership) TakeForeignRenewals() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.foreignRenewals
	o.foreignRenewals = 0
	return n
}

// FreshlyNamed reports a Lease that has not been renewed since a controller
// named its holder: cle-controller names a holder with acquireTime equal to
// renewTime, which a renewal never writes (see Renewal); a Lease with no
// renewTime has never been renewed at all.
func FreshlyNamed(lease *coordinationv1.Lease) bool {
	if lease == nil {
		return false
	}
	s := lease.Spec
	return s.RenewTime == nil || (s.AcquireTime != nil && s.AcquireTime.Time.Equal(s.RenewTime.Time))
}

// RenewTimeOf is the Lease's renewTime at the precision the API stores
// (microseconds), zero when unset.
func RenewTimeOf(lease *coordinationv1.Lease) time.Time {
	if lease == nil || lease.Spec.RenewTime == nil {
		return time.Time{}
	}
	return AtMicro(lease.Spec.RenewTime.Time)
}

// AtMicro is t as the API stores a MicroTime: truncated to microseconds,
// without a monotonic clock reading.
func AtMicro(t time.Time) time.Time {
	return t.Round(0).Truncate(time.Microsecond)
}

// RenewTimeFor is the renewTime a write at now stores over the stored one
// (zero when there is none): now at the API's precision, or a microsecond
// after the stored one when that is not earlier, as happens when it came from
// a clock ahead of this process's. So a write never moves renewTime back,
// which a party comparing it with a ping or with its own clock would read as
// no renewal at all, and every write changes it.
func RenewTimeFor(now, stored time.Time) time.Time {
	renew := AtMicro(now)
	if stored = AtMicro(stored); !stored.IsZero() && !renew.After(stored) {
		return stored.Add(time.Microsecond)
	}
	return renew
}
