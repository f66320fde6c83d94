package candidate

import (
	"fmt"
	"net/http"
	"time"

	"github.com/cle-dev/cle/internal/lead"
)

// HealthCheck is a liveness check of a Candidate, in the shape of
// k8s.io/apiserver's healthz.HealthChecker (Name and Check), so it can be
// installed with healthz.InstallHandler or served by hand. It fails when the
// process is wedged with respect to leadership: leader work that does not
// return within the tolerance after it was told to stop, or a leader whose
// renewal loop has not acted for the tolerance past its renew deadline.
// Restarting such a process is the only way to get a healthy leader.
type HealthCheck struct {
	c         *Candidate
	tolerance time.Duration
}

// HealthCheck returns the check with the given tolerance (client-go's
// healthz adaptor uses a similar timeout; 20s is a sensible value).
func (c *Candidate) HealthCheck(tolerance time.Duration) *HealthCheck {
	return &HealthCheck{c: c, tolerance: tolerance}
}

// Name names the check in healthz output.
func (h *HealthCheck) Name() string { return "leader-election" }

// Check returns nil when the Candidate is healthy. Before Run it is, as
// client-go's check is before its elector runs: the process may be starting
// (a controller-runtime manager starts its elector, and so a lock's
// candidate, only once its caches have synced). Once Run has returned it
// is not.
func (h *HealthCheck) Check(*http.Request) error {
	c := h.c
	if !c.started.Load() {
		return nil
	}
	if !c.running.Load() {
		return fmt.Errorf("candidate %s is not running", c.cfg.Identity)
	}
	s := c.state.Load()
	now := c.cfg.Clock.Now()
	if !s.stoppingSince.IsZero() {
		if d := now.Sub(s.stoppingSince); d > h.tolerance {
			return fmt.Errorf("leader work of %s has not returned %s after it was told to stop", c.cfg.Identity, d.Round(time.Millisecond))
		}
	}
	if t := s.term; t != nil {
		if d := lead.Elapsed(now, t.renewedAt) - c.cfg.RenewDeadline; d > h.tolerance {
			return fmt.Errorf("%s still counts itself leader %s past its renew deadline: the renewal loop is stuck", c.cfg.Identity, d.Round(time.Millisecond))
		}
	}
	return nil
}
