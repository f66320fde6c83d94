package framework

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Child is a process a test runs, such as a component under test. Its output
// goes to a log file that is printed if the test fails; it is stopped when the
// test ends.
type Child struct {
	p *process
}

// StartChild starts path with args; name labels it in logs. The child is
// stopped (SIGTERM, then SIGKILL after 5s) when the test ends, and dies with
// the test binary if that is killed.
func StartChild(t testing.TB, name, path string, args ...string) *Child {
	t.Helper()
	c, err := StartProcess(name, path, filepath.Join(t.TempDir(), name+".log"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(5 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("---- %s output ----\n%s", name, c.Logs())
		}
	})
	return c
}

// StartProcess starts path with args for a program that is not a test (a
// benchmark, say), its output appended to logPath. It dies with the calling
// process; stopping it otherwise is the caller's job.
func StartProcess(name, path, logPath string, args ...string) (*Child, error) {
	c := &Child{p: newProcess(name, path, logPath, args)}
	if err := c.p.start(); err != nil {
		return nil, err
	}
	return c, nil
}

// Signal sends sig to the child.
func (c *Child) Signal(sig syscall.Signal) error { return c.p.signal(sig) }

// Pause stops the child with SIGSTOP and returns once every thread of it
// has stopped (a SIGSTOP stops them one by one, as each is next scheduled).
func (c *Child) Pause() error { return c.p.pause() }

// Stop sends SIGTERM (after SIGCONT, in case it is stopped), waits up to
// grace and then kills it. It returns once the child has exited.
func (c *Child) Stop(grace time.Duration) error { return c.p.stop(grace) }

// Exited is closed when the child exits.
func (c *Child) Exited() <-chan struct{} { return c.p.Exited() }

// PID is the child's process ID.
func (c *Child) PID() int { return c.p.pid() }

// Logs returns the child's output so far.
func (c *Child) Logs() string {
	b, err := os.ReadFile(c.p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}
