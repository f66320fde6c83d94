// Package faults makes a candidate's leader work fail on a signal, for the
// fault-injection tests of the examples and the benchmark's candidates: a
// panic (SIGUSR1) or an out-of-memory kill (SIGUSR2: leader work allocates
// memory until the kernel kills the process at its memory limit).
package faults

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signals are the fault signals a process has received and not yet acted
// on. The zero value (nil) never fails.
type Signals chan os.Signal

// Notify routes SIGUSR1 and SIGUSR2 to the returned Signals from now on.
func Notify() Signals {
	s := make(Signals, 1)
	signal.Notify(s, syscall.SIGUSR1, syscall.SIGUSR2)
	return s
}

// FailOnSignal waits for ctx to be done; a fault signal meanwhile makes it
// fail: SIGUSR1 panics, SIGUSR2 allocates memory until the process is killed.
// Signals received before the call (while not leading) are ignored.
func (s Signals) FailOnSignal(ctx context.Context) {
	select {
	case <-s:
	default:
	}
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-s:
			if sig == syscall.SIGUSR1 {
				panic("leader work: fault injected by SIGUSR1")
			}
			exhaustMemory()
		}
	}
}

// exhaustMemory allocates and touches memory until the kernel kills the
// process.
func exhaustMemory() {
	var held [][]byte
	for {
		b := make([]byte, 16<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touched, so that it counts against the limit
		}
		held = append(held, b)
	}
}
