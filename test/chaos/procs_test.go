package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/test/integration/framework"
)

// binaries are the programs of a chaos run.
type binaries struct {
	controller string
	// byKind is the candidate program of each kind of candidate.
	byKind map[string]string
}

// buildBinaries builds cle-controller and the candidate programs into dir:
// examples/candidate (the library), examples/lock-elector (client-go's
// LeaderElector on pkg/lock) and the controller-runtime example (its own
// module).
func buildBinaries(dir string) (binaries, error) {
	manager := framework.GoBuild("-o", filepath.Join(dir, "controller-runtime-manager"), "./example")
	manager.Dir = "../../contrib/controller-runtime"
	for _, cmd := range []*exec.Cmd{
		framework.GoBuild("-o", dir+"/", "github.com/cle-dev/cle/cmd/cle-controller", "github.com/cle-dev/cle/examples/candidate", "github.com/cle-dev/cle/examples/lock-elector"),
		manager,
	} {
		if out, err := cmd.CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("%s: %w\n%s", cmd, err, out)
		}
	}
	return binaries{controller: filepath.Join(dir, "cle-controller"), byKind: map[string]string{
		kindLibrary:           filepath.Join(dir, "candidate"),
		kindLock:              filepath.Join(dir, "lock-elector"),
		kindControllerRuntime: filepath.Join(dir, "controller-runtime-manager"),
	}}, nil
}

// proc is a supervised child process: one that exits when nobody stopped it
// is a violation, and is started again, as a kubelet restarts a container.
type proc struct {
	name, bin, logPath string
	args               []string
	v                  *violations
	proxy              *proxy // between a candidate and kube-apiserver
	// kind is a candidate's program: kindLibrary, kindLock or
	// kindControllerRuntime; "" for a controller.
	kind string
	// emulation is a candidate's emulation version, which ranks it.
	emulation string
	// messageDir, for a candidate in a Pod, holds the termination message
	// file of each of its runs (a new one each run, as the kubelet makes
	// one per container instance); messageFile is the current run's.
	messageDir, messageFile string

	mu       sync.Mutex
	child    *framework.Child
	logFrom  int64 // size of the log when the current run started
	started  time.Time
	expected bool // an exit is expected (we killed or stopped it)
	paused   bool
	isolated bool // cut off from kube-apiserver by its proxy
	closed   bool
	starts   int
	// lostTerms counts the exits after a lost term of a program that
	// exits then (client-go and controller-runtime components do), and
	// rejoined is when the last of them was started again.
	lostTerms int
	rejoined  time.Time
}

// leaderElectionLost is what the adopters log when they exit after losing
// their term.
const leaderElectionLost = "leader election lost"

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if info, err := os.Stat(p.logPath); err == nil {
		p.logFrom = info.Size()
	}
	args := p.args
	if p.messageDir != "" {
		p.messageFile = filepath.Join(p.messageDir, fmt.Sprintf("%s-%d", p.name, p.starts+1))
		if err := os.WriteFile(p.messageFile, nil, 0o600); err != nil {
			return err
		}
		args = append(slices.Clone(args), "--termination-message-path="+p.messageFile)
	}
	c, err := framework.StartProcess(p.name, p.bin, p.logPath, args...)
	if err != nil {
		return err
	}
	p.child, p.started, p.expected, p.paused = c, time.Now(), false, false
	p.starts++
	go p.supervise(c)
	return nil
}

func (p *proc) supervise(c *framework.Child) {
	<-c.Exited()
	p.mu.Lock()
	unexpected := !p.expected && !p.closed && p.child == c
	p.mu.Unlock()
	if _, current := p.logs(); unexpected && p.kind != kindLibrary && p.kind != "" && strings.Contains(current, leaderElectionLost) {
		// The elector exits once it lost its term, as client-go and
		// controller-runtime components do; restarted, it is a
		// candidate again.
		p.mu.Lock()
		p.lostTerms++
		p.rejoined = time.Now()
		p.mu.Unlock()
		if err := p.start(); err != nil {
			p.v.add("restart %s: %v", p.name, err)
		}
		return
	}
	if unexpected {
		p.v.add("%s exited by itself; restarting it", p.name)
		if err := p.start(); err != nil {
			p.v.add("restart %s: %v", p.name, err)
		}
	}
}

// kill sends sig (SIGKILL or SIGTERM) and waits until the process has exited.
func (p *proc) kill(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	c := p.child
	p.expected = true
	p.mu.Unlock()
	_ = c.Signal(syscall.SIGCONT)
	if err := c.Signal(sig); err != nil {
		return err
	}
	select {
	case <-c.Exited():
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s of %s", p.name, timeout, sig)
	}
}

func (p *proc) pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	return p.child.Pause()
}

func (p *proc) resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	return p.child.Signal(syscall.SIGCONT)
}

// live reports whether the process runs, is not frozen and can reach
// kube-apiserver.
func (p *proc) live() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused || p.isolated || p.child == nil {
		return false
	}
	select {
	case <-p.child.Exited():
		return false
	default:
		return true
	}
}

// setIsolated records whether the process is cut off from kube-apiserver.
func (p *proc) setIsolated(isolated bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isolated = isolated
}

// setArg replaces the value of --name for the next start.
func (p *proc) setArg(name, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prefix := "--" + name + "="
	for i, a := range p.args {
		if strings.HasPrefix(a, prefix) {
			p.args[i] = prefix + value
			return
		}
	}
	p.args = append(p.args, prefix+value)
}

// stop ends the process for good.
func (p *proc) stop() error {
	p.mu.Lock()
	p.closed = true
	c := p.child
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Stop(10 * time.Second)
}

// logs is everything the process wrote, across its restarts; current is
// what its current run wrote.
func (p *proc) logs() (all, current string) {
	p.mu.Lock()
	from := p.logFrom
	p.mu.Unlock()
	b, _ := os.ReadFile(p.logPath)
	if int64(len(b)) < from {
		from = 0
	}
	return string(b), string(b[from:])
}

var panicRE = regexp.MustCompile(`(?m)^(panic: |fatal error: |WARNING: DATA RACE)|Observed a panic`)

// panics returns the lines of the process's log that report a panic.
func (p *proc) panics() []string {
	all, _ := p.logs()
	var found []string
	for _, line := range strings.Split(all, "\n") {
		if panicRE.MatchString(line) {
			found = append(found, line)
		}
	}
	return found
}

var metricsRE = regexp.MustCompile(`"Serving" address="([^"]+)" paths=\["/metrics"`)

// metricsAddr is where the current run of the controller serves /metrics.
func (p *proc) metricsAddr() string {
	_, current := p.logs()
	m := metricsRE.FindAllStringSubmatch(current, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// procStats are the controller's own figures from /metrics.
type procStats struct {
	goroutines, rss float64
	leading         bool // the active replica (leader_election_master_status)
}

func scrape(ctx context.Context, addr string) (procStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return procStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return procStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return procStats{}, fmt.Errorf("/metrics: %s: %s", resp.Status, b)
	}
	fams, err := promtest.Parse(resp.Body)
	if err != nil {
		return procStats{}, err
	}
	return procStats{
		goroutines: promtest.Value(fams, "go_goroutines"),
		rss:        promtest.Value(fams, "process_resident_memory_bytes"),
		leading:    promtest.Value(fams, "leader_election_master_status", "name", "cle-controller") == 1,
	}, nil
}
