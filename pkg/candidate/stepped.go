package candidate

import (
	"context"
	"fmt"
	"time"

	"github.com/cle-dev/cle/internal/stepped"
)

func init() { stepped.New = newStepped }

// steppedLoops are a Candidate's loops driven by a simulation (see package
// internal/stepped): the same elector, registrar and shutdown as Run's,
// without their goroutines and timers.
type steppedLoops struct {
	c   *Candidate
	el  *elector
	reg *registrar
}

func newStepped(cfg any) (stepped.Loops, error) {
	config, ok := cfg.(Config)
	if !ok || config.Access == nil || config.Clock == nil {
		return nil, fmt.Errorf("%w: stepped loops need a Config with Access and Clock", ErrInvalidConfig)
	}
	c, err := New(config)
	if err != nil {
		return nil, err
	}
	el, reg := c.loops(config.Access, config.Writer)
	return &steppedLoops{c: c, el: el, reg: reg}, nil
}

func (s *steppedLoops) Start(ctx context.Context) error {
	return s.c.start(s.c.withLogger(ctx), s.c.cfg.Access, s.reg)
}

func (s *steppedLoops) StepElector(ctx context.Context) time.Duration {
	return s.el.step(s.c.withLogger(ctx))
}

func (s *steppedLoops) StepRegistrar(ctx context.Context) time.Duration {
	return s.reg.step(s.c.withLogger(ctx))
}

func (s *steppedLoops) Woken() (elector, registrar bool) {
	return drained(s.el.wake), drained(s.reg.wake)
}

// drained empties a loop's wake channel and reports whether it held a
// wake-up.
func drained(wake chan struct{}) bool {
	select {
	case <-wake:
		return true
	default:
		return false
	}
}

func (s *steppedLoops) Shutdown(ctx context.Context) {
	ctx = s.c.withLogger(ctx)
	s.el.stepDown(ctx, "shutting down")
	s.c.shutdown(ctx, s.el, s.reg)
}

func (s *steppedLoops) IsLeader() bool       { return s.c.IsLeader() }
func (s *steppedLoops) Token() (int32, bool) { return s.c.Token() }

func (s *steppedLoops) Termed() bool { return s.c.leading() != nil }
