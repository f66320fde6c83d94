package lead

import (
	"errors"
	"testing"
	"time"
)

func TestCountRenewal(t *testing.T) {
	timing := Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	if got := timing.SlowRenewal(); got != time.Second {
		t.Fatalf("SlowRenewal = %s, want 1s", got)
	}
	sent := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		took time.Duration
		slow bool
	}{
		{0, false},
		{time.Second, false},
		{time.Second + time.Nanosecond, true},
		{9 * time.Second, true},
	} {
		err := CountRenewal(timing, sent, sent.Add(tc.took))
		if slow := errors.Is(err, ErrSlowRenewal); slow != tc.slow || (err != nil) != tc.slow {
			t.Errorf("CountRenewal after %s = %v, want slow %v", tc.took, err, tc.slow)
		}
	}
}
