package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// event is a line a candidate process printed, stamped with this process's
// monotonic clock when it was read; a shard's event carries the time its
// replica printed it instead (on the wall clock all processes share).
type event struct {
	id, what string // what: started-leading or stopped-leading, started-shard or stopped-shard
	at       time.Time
	shard    int
}

// journal collects the events of every candidate of a run, in the order
// they were read.
type journal struct {
	mu      sync.Mutex
	events  []event
	changed chan struct{} // closed and replaced on every event
}

func newJournal() *journal { return &journal{changed: make(chan struct{})} }

func (j *journal) add(e event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, e)
	close(j.changed)
	j.changed = make(chan struct{})
}

// since returns the events from index from on, and a channel closed at the
// next event.
func (j *journal) since(from int) ([]event, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]event(nil), j.events[min(from, len(j.events)):]...), j.changed
}

func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.events)
}

// wait waits until find, given the events from index from on, returns true,
// or timeout passes.
func (j *journal) wait(from int, timeout time.Duration, find func([]event) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		evs, changed := j.since(from)
		if find(evs) {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			evs, _ := j.since(from)
			return find(evs)
		}
	}
}

// firstStart is the first started-leading event among evs whose identity
// satisfies ok.
func firstStart(evs []event, ok func(id string) bool) (event, bool) {
	for _, e := range evs {
		if e.what == "started-leading" && ok(e.id) {
			return e, true
		}
	}
	return event{}, false
}

func anyone(string) bool { return true }

// waitStart waits until, from index from on, a candidate whose identity
// satisfies ok starts leading, and returns that event; false when the
// election limit passed first.
func (j *journal) waitStart(from int, ok func(id string) bool) (event, bool) {
	var e event
	found := j.wait(from, electionLimit, func(evs []event) bool {
		var started bool
		e, started = firstStart(evs, ok)
		return started
	})
	return e, found
}

// starts counts the started-leading events among evs.
func starts(evs []event) int {
	n := 0
	for _, e := range evs {
		if e.what == "started-leading" {
			n++
		}
	}
	return n
}

// leaders returns who leads after evs: started without a later stop.
func leaders(evs []event) map[string]time.Time {
	l := map[string]time.Time{}
	for _, e := range evs {
		switch e.what {
		case "started-leading":
			l[e.id] = e.at
		case "stopped-leading":
			delete(l, e.id)
		}
	}
	return l
}

// cand is one candidate process.
type cand struct {
	id, emulation string
	cmd           *exec.Cmd
	exited        chan struct{}
}

// starter starts candidate processes of one kind for one Lease: bin is
// test/bench/cand or contrib/controller-runtime/test/benchmanager, which
// take the same flags.
type starter struct {
	bin, kind, kubeconfig, ns, logDir string
	j                                 *journal
	// side is the side the repetition runs on, for scenarios that pick
	// their candidates' kinds by side; rep is the repetition's number.
	side string
	rep  int
}

func (s starter) start(lease, id, binary, emulation string) (*cand, error) {
	cmd := exec.Command(s.bin, "--kind="+s.kind, "--kubeconfig="+s.kubeconfig, "--namespace="+s.ns, "--lease="+lease,
		"--identity="+id, "--binary-version="+binary, "--emulation-version="+emulation, "-v=2")
	return s.launch(id, emulation, cmd, false, reportedEvent)
}

// reportedEvent reads a line of cand or benchmanager: the event is its
// first word.
func reportedEvent(line string) (event, bool) {
	what, _, _ := strings.Cut(line, " ")
	return event{what: what}, what == "started-leading" || what == "stopped-leading"
}

// launch starts cmd as candidate id, appending its output to the log of id,
// and journals every line of its stdout (stderr when fromStderr) that parse
// turns into an event, stamped when it was read unless parse stamped it.
func (s starter) launch(id, emulation string, cmd *exec.Cmd, fromStderr bool, parse func(line string) (event, bool)) (*cand, error) {
	logf, err := os.OpenFile(filepath.Join(s.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var pipe io.ReadCloser
	if fromStderr {
		cmd.Stdout = logf
		pipe, err = cmd.StderrPipe()
	} else {
		cmd.Stderr = logf
		pipe, err = cmd.StdoutPipe()
	}
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	c := &cand{id: id, emulation: emulation, cmd: cmd, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			at := time.Now()
			if e, ok := parse(sc.Text()); ok {
				e.id = id
				if e.at.IsZero() {
					e.at = at
				}
				s.j.add(e)
			}
			fmt.Fprintf(logf, "%s %s\n", at.Format(time.RFC3339Nano), sc.Text())
		}
		_ = cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
	return c, nil
}

// stop sends sig and waits for the process to exit (SIGKILL after 40s).
func (c *cand) stop(sig syscall.Signal) {
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(40 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func (c *cand) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}
