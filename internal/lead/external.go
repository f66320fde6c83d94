package lead

import (
	"errors"
	"fmt"
	"time"
)

// ErrSlowRenewal is the error of an external elector's renewal that renewed
// the Lease but whose answer took longer than SlowRenewal (package candidate
// re-exports it).
var ErrSlowRenewal = errors.New("the renewal is not counted")

// SlowRenewal is how long an external elector's renewal may take, from the
// moment it is sent to the moment the elector is told it succeeded, and
// still count: a third of the margin the timings leave, (LeaseDuration -
// RenewDeadline - RetryPeriod) / 3. client-go gives up at most RetryPeriod +
// RenewDeadline after the last successful renewal returned; package lock
// lets its RetryPeriod be another third longer, and the last third is left
// for leader work to return.
func (t Timing) SlowRenewal() time.Duration {
	return (t.LeaseDuration - t.RenewDeadline - t.RetryPeriod) / 3
}

// CountRenewal says whether an external elector's renewal, sent at sent and
// answered at answered, counts: nil when it does, otherwise an error
// wrapping ErrSlowRenewal. The elector counts its renew deadline from the
// answer while the election controller counts the lease duration from when
// it saw the renewal, which may be as much earlier as the renewal took;
// counting a slow one would let the elector lead past the Lease's expiry as
// the controller judges it.
func CountRenewal(t Timing, sent, answered time.Time) error {
	if took, limit := answered.Sub(sent), t.SlowRenewal(); took > limit {
		return fmt.Errorf("%w: the renewal took %s, longer than %s", ErrSlowRenewal, took.Round(time.Millisecond), limit)
	}
	return nil
}
