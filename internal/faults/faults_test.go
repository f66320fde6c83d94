package faults

import (
	"context"
	"syscall"
	"testing"
)

func TestFailOnSignal(t *testing.T) {
	t.Run("SIGUSR1 while leading panics", func(t *testing.T) {
		s := make(Signals, 1)
		s <- syscall.SIGUSR1
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		panicked := make(chan any, 1)
		started := make(chan struct{})
		go func() {
			defer func() { panicked <- recover() }()
			// The signal above came before leader work: ignored. This one
			// comes during it.
			close(started)
			s.FailOnSignal(ctx)
		}()
		<-started
		s <- syscall.SIGUSR1
		if p := <-panicked; p == nil {
			t.Fatal("leader work returned without panicking")
		}
	})
	t.Run("a signal before leader work is ignored", func(t *testing.T) {
		s := make(Signals, 1)
		s <- syscall.SIGUSR1
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 100 { // a select between a done ctx and a pending signal would pick either
			s.FailOnSignal(ctx)
			select {
			case s <- syscall.SIGUSR1:
			default:
			}
		}
	})
	t.Run("nil never fails", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var s Signals
		s.FailOnSignal(ctx)
	})
}
