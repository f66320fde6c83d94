package framework

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cle-dev/cle/pkg/access"
)

// AnswerPings acts as the process of candidate name until the test ends:
// it renews the candidate whenever the controller pings it, as the
// candidate library does. A candidate created by a test and never renewed
// is one whose process registered and died: the controller does not ask a
// live holder to hand over to it.
func AnswerPings(t testing.TB, candidates access.CandidateClient, name string) {
	ActAsCandidate(t, candidates, name, 20*time.Millisecond, true)
}

// ActAsCandidate renews candidate name every period, or only when it is
// pinged (onlyWhenPinged), with renewTime = max(now, pingTime), until the
// test ends, which waits for it to stop.
func ActAsCandidate(t testing.TB, candidates access.CandidateClient, name string, period time.Duration, onlyWhenPinged bool) {
	EveryPeriod(t, period, true, func(ctx context.Context) {
		lc, err := candidates.Get(ctx, name)
		if err != nil {
			return
		}
		pinged := lc.Spec.PingTime != nil && (lc.Spec.RenewTime == nil || lc.Spec.RenewTime.Before(lc.Spec.PingTime))
		if onlyWhenPinged && !pinged {
			return
		}
		renew := metav1.NewMicroTime(time.Now())
		if lc.Spec.PingTime != nil && renew.Before(lc.Spec.PingTime) {
			renew = *lc.Spec.PingTime
		}
		lc.Spec.RenewTime = &renew
		_, _ = candidates.Update(ctx, lc)
	})
}

// EveryPeriod calls f every period (and at once if immediate) until the
// test ends, which waits for it to stop.
func EveryPeriod(t testing.TB, period time.Duration, immediate bool, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, period, immediate, func(ctx context.Context) (bool, error) {
			f(ctx)
			return false, nil
		})
	}()
}
