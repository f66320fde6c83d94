package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one child process (etcd or kube-apiserver) with its output
// appended to a log file.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

func newProcess(name, path, logPath string, args []string) *process {
	return &process{name: name, path: path, args: args, logPath: logPath}
}

// start launches the process. Pdeathsig kills it if the test binary dies
// without running its cleanup (a panic in a test, a timeout).
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.name, err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "==== %s starting at %s: %s %v\n", p.name, time.Now().Format(time.RFC3339Nano), p.path, p.args)

	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	done := p.done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited reports whether the process has exited. Callers hold p.mu.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Exited returns a channel closed when the current run of the process exits.
func (p *process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// signal sends sig to the running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, p.name, err)
	}
	return nil
}

// pause stops the process with SIGSTOP and returns once every thread of it
// has stopped.
func (p *process) pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	if err := waitStopped(context.Background(), p.pid(), 10*time.Second); err != nil {
		return fmt.Errorf("pause %s: %w", p.name, err)
	}
	return nil
}

// stop sends SIGTERM (after SIGCONT, in case it is paused), waits up to
// grace, then kills it. It returns once the process has exited.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	if p.cmd == nil || p.exited() {
		p.mu.Unlock()
		return nil
	}
	proc, done := p.cmd.Process, p.done
	p.mu.Unlock()

	_ = proc.Signal(syscall.SIGCONT)
	if err := proc.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("terminate %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	}
	if err := proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, proc.Pid)
	}
}
