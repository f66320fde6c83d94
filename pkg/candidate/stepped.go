package candidate

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/internal/stepped"
	"github.com/cle-dev/cle/pkg/access"
)

func init() {
	stepped.New = func(cfg any) (stepped.Loops, error) { return newStepped(cfg) }
	stepped.NewExternal = newSteppedExternal
	stepped.SetAccess = func(cfg any, a access.Interface) any {
		c := cfg.(Config)
		c.access = a
		return c
	}
	stepped.SetNudge = func(cfg any, h nudge.Hook) any {
		c := cfg.(Config)
		c.nudge = h
		return c
	}
}

// steppedLoops are a Candidate's loops driven by a simulation (see package
// internal/stepped): the same elector, registrar and shutdown as Run's,
// without their goroutines and timers.
type steppedLoops struct {
	c   *Candidate
	el  *elector
	reg *registrar
	// base and logged: the context the simulation last passed and it with
	// the candidate's logger, which Run makes once and the simulation's
	// steps, given the same context each time, would make at every step.
	base, logged context.Context
}

// withLogger is Candidate.withLogger, made once per context.
func (s *steppedLoops) withLogger(ctx context.Context) context.Context {
	if ctx != s.base {
		s.base, s.logged = ctx, s.c.withLogger(ctx)
	}
	return s.logged
}

func newStepped(cfg any) (*steppedLoops, error) {
	config, err := steppedConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := New(config)
	if err != nil {
		return nil, err
	}
	return steppedOf(c), nil
}

func steppedConfig(cfg any) (Config, error) {
	config, ok := cfg.(Config)
	if !ok || config.access == nil || config.Clock == nil {
		return Config{}, fmt.Errorf("%w: stepped loops need a Config with an access layer (stepped.WithAccess) and a Clock", ErrInvalidConfig)
	}
	return config, nil
}

func steppedOf(c *Candidate) *steppedLoops {
	el, reg := c.loops(c.cfg.access, c.cfg.Writer)
	return &steppedLoops{c: c, el: el, reg: reg}
}

// steppedExternal are an External's loops driven by a simulation, with the
// loop's part of each of its calls.
type steppedExternal struct {
	*steppedLoops
	x *External
}

func newSteppedExternal(cfg any) (stepped.ExternalLoops, error) {
	config, err := steppedConfig(cfg)
	if err != nil {
		return nil, err
	}
	x, err := NewExternal(config)
	if err != nil {
		return nil, err
	}
	return &steppedExternal{steppedLoops: steppedOf(x.c), x: x}, nil
}

func (s *steppedExternal) Renew(ctx context.Context, token *int32) error {
	// The caller's context only ends requests, which the simulation does.
	sent, err := s.x.renewInLoop(s.withLogger(ctx), context.Background(), s.el, token)
	if err != nil {
		return err
	}
	return s.x.counted(sent)
}

func (s *steppedExternal) Lease() *coordinationv1.Lease { return leaseOf(s.el) }
func (s *steppedExternal) Resign()                      { s.x.x.resigned.Store(true) }

func (s *steppedExternal) ResignInLoop(ctx context.Context) {
	resignInLoop(s.withLogger(ctx), s.el)
}

func (s *steppedExternal) Changed() <-chan struct{} { return *s.x.x.changed.Load() }

func (s *steppedLoops) Start(ctx context.Context) error {
	return s.c.start(s.withLogger(ctx), s.c.cfg.access, s.reg)
}

func (s *steppedLoops) StepElector(ctx context.Context) time.Duration {
	return s.el.step(s.withLogger(ctx))
}

func (s *steppedLoops) StepRegistrar(ctx context.Context) time.Duration {
	return s.reg.step(s.withLogger(ctx))
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
	ctx = s.withLogger(ctx)
	s.el.stepDown(ctx, "shutting down")
	s.c.shutdown(ctx, s.el, s.reg)
}

func (s *steppedLoops) IsLeader() bool       { return s.c.IsLeader() }
func (s *steppedLoops) Token() (int32, bool) { return s.c.Token() }

func (s *steppedLoops) Peek() (int32, bool) {
	if t := s.c.leading(); s.c.mayAct(t) {
		return t.token, true
	}
	return 0, false
}

func (s *steppedLoops) WrapConfig(cfg *rest.Config) *rest.Config { return s.c.WrapConfig(cfg) }

func (s *steppedLoops) Termed() bool { return s.c.leading() != nil }

func (s *steppedLoops) SeenBefore() int32 {
	if t := s.c.leading(); t != nil {
		return t.seenBefore
	}
	return 0
}
