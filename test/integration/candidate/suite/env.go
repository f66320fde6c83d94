// Package suite holds the integration tests of the candidate library as
// functions over an Env, so that the same cases run under every election
// controller (cle-controller, the one built into kube-apiserver) and every API
// mode. Each test package picks the environment and calls the cases.
package suite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// Env is where the cases run.
type Env struct {
	Server *framework.Server
	// Controller names the election controller, for messages.
	Controller string
	// Setup prepares one test: it creates a namespace and makes sure an
	// election controller serves it until the test ends.
	Setup func(t *testing.T) string
	// SetupStale is Setup with an election controller that counts a
	// candidate alive without a ping only for a short while after it last
	// saw it written, and returns that while: a candidate idle longer is
	// pinged before it is elected.
	SetupStale func(t *testing.T) (ns string, staleAfter time.Duration)
	// APIMode is passed to the candidates; "" means auto.
	APIMode string
	// ElectionAllowance is how much longer than cle's the controller may
	// take to name the next holder of a Lease just released: kube-apiserver's
	// may name the departed candidate again from a stale cache, for its
	// 5-second lease, and waits 5 s for a candidate it pinged.
	ElectionAllowance time.Duration

	accessOnce sync.Once
	acc        access.Interface
	accErr     error
}

// access is the access layer of env.APIMode, detected once: the cases read
// LeaseCandidates and the coordinated fields of Leases through it, so that
// one assertion holds in every mode.
func (env *Env) access(t *testing.T) access.Interface {
	t.Helper()
	env.accessOnce.Do(func() {
		clients, err := access.NewClients(env.Server.Config())
		if err != nil {
			env.accErr = err
			return
		}
		env.acc, env.accErr = access.Detect(context.Background(), clients, orDefault(env.APIMode, access.ModeAuto))
	})
	if env.accErr != nil {
		t.Fatalf("access layer for API mode %q: %v", orDefault(env.APIMode, access.ModeAuto), env.accErr)
	}
	return env.acc
}

// Timings of the in-process candidates: short, so that failures are detected
// in seconds, and loose enough for a loaded two-core machine.
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 5 * time.Second
	retryPeriod   = time.Second
	// waitLong bounds any wait for an election, generous for the built-in
	// controller (seconds per election) on a loaded machine.
	waitLong = 90 * time.Second
)

// timeline records leadership instants of in-process candidates on this
// process's monotonic clock.
type timeline struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	who  string
	kind string // "start" or "stop"
	at   time.Time
}

func (tl *timeline) add(who, kind string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, event{who: who, kind: kind, at: time.Now()})
}

func (tl *timeline) first(who, kind string) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if e.who == who && e.kind == kind {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// checkNoOverlap fails if two candidates' leadership intervals overlap:
// every start must come after the previous leader's stop.
func (tl *timeline) checkNoOverlap(t *testing.T) {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	events := slices.Clone(tl.events)
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	leading := map[string]bool{}
	for _, e := range events {
		switch e.kind {
		case "start":
			for other, on := range leading {
				if on && other != e.who {
					t.Errorf("%s started leading at %s while %s had not stopped: two leaders", e.who, e.at.Format(time.StampMicro), other)
				}
			}
			leading[e.who] = true
		case "stop":
			leading[e.who] = false
		}
	}
}

// member is an in-process candidate.
type member struct {
	*candidate.Candidate
	id      string
	started time.Time // when Run was called
	cancel  context.CancelFunc
	done    chan struct{}
	// working: its leader work runs. The library starts OnStartedLeading
	// on a goroutine of its own once it leads, so IsLeader can be true a
	// moment before leader work starts (and records its start).
	working atomic.Bool
}

type memberOpts struct {
	binary, emulation string
	tweak             func(*candidate.Config)
}

// run starts an in-process candidate for lease until the test ends (or
// until stop is called).
func (env *Env) run(t *testing.T, tl *timeline, ns, lease, id string, o memberOpts) *member {
	t.Helper()
	if o.binary == "" {
		o.binary = "1.36.0"
	}
	clients, err := access.NewClients(env.Server.Config())
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, done: make(chan struct{})}
	cfg := candidate.Config{
		Clients:          clients,
		APIMode:          env.APIMode,
		Namespace:        ns,
		LeaseName:        lease,
		Identity:         id,
		BinaryVersion:    o.binary,
		EmulationVersion: o.emulation,
		LeaseDuration:    leaseDuration,
		RenewDeadline:    renewDeadline,
		RetryPeriod:      retryPeriod,
		Callbacks: candidate.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				tl.add(id, "start")
				m.working.Store(true)
				<-ctx.Done()
				m.working.Store(false)
				tl.add(id, "stop")
			},
		},
	}
	if o.tweak != nil {
		o.tweak(&cfg)
	}
	c, err := candidate.New(cfg)
	if err != nil {
		t.Fatalf("candidate.New(%s): %v", id, err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	m.Candidate, m.started, m.cancel = c, time.Now(), cancel
	go func() {
		defer close(m.done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run(%s): %v", id, err)
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// stop cancels Run and waits until it has returned (the Lease released).
func (m *member) stop() {
	m.cancel()
	<-m.done
}

// until polls cond every 50ms for at most timeout.
func until(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

func (env *Env) lease(t *testing.T, ns, name string) *coordinationv1.Lease {
	t.Helper()
	lease, err := env.Server.Client().CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// waitLeader waits until m leads, its leader work runs and the Lease names
// it.
func (env *Env) waitLeader(t *testing.T, ns, lease string, m *member) {
	t.Helper()
	until(t, waitLong, m.id+" leads under "+env.Controller, func() (bool, error) {
		return m.IsLeader() && m.working.Load() && holderOf(env.lease(t, ns, lease)) == m.Identity(), nil
	})
}

// ---- child processes ----

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// exampleBinary builds examples/candidate once per test process, into the
// server's directory, which is removed with the server.
func (env *Env) exampleBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		out := filepath.Join(env.Server.Dir(), "bin", "candidate")
		cmd := framework.GoBuild("-o", out, "github.com/cle-dev/cle/examples/candidate")
		if msg, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build examples/candidate: %w\n%s", err, msg)
			return
		}
		built = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// child is a running examples/candidate process.
type child struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out []string // stdout lines
	eof chan struct{}
}

// startChild runs examples/candidate with args until the test ends; it is
// killed if this process dies.
func (env *Env) startChild(t *testing.T, args ...string) *child {
	t.Helper()
	bin := env.exampleBinary(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--kubeconfig=" + kubeconfig, "--api-mode=" + orDefault(env.APIMode, "auto")}, args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, eof: make(chan struct{})}
	go func() {
		defer close(c.eof)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.out = append(c.out, sc.Text())
			c.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { <-c.eof; _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		stderr.Close()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil {
				t.Logf("child %v stderr:\n%s", args, data)
			}
		}
	})
	return c
}

func (c *child) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.out)
}

// find returns the first line at or after index from that starts with
// prefix and contains every part.
func (c *child) find(from int, prefix string, parts ...string) (int, string, bool) {
	lines := c.lines()
	for i := from; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], prefix) {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(lines[i], p)
		}
		if ok {
			return i, lines[i], true
		}
	}
	return 0, "", false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// field reads key=value out of an event line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// ---- the Lease as stored ----

// coordinatedFields reads a Lease's strategy and preferred holder as the
// server stores them in one API mode, bypassing the access layer's mapping,
// so that a case can check what actually reached the server.
type coordinatedFields func(*coordinationv1.Lease) (strategy, preferred string)

// storedFields returns the reader of the coordinated fields for mode. The
// annotation keys are spelled out rather than taken from pkg/access: they
// are the portable mode's wire format, which the test pins down.
func storedFields(mode access.Mode) coordinatedFields {
	if mode == access.ModePortable {
		return func(l *coordinationv1.Lease) (string, string) {
			return l.Annotations["cle.dev/strategy"], l.Annotations["cle.dev/preferred-holder"]
		}
	}
	return func(l *coordinationv1.Lease) (string, string) {
		return string(ptr.Deref(l.Spec.Strategy, "")), ptr.Deref(l.Spec.PreferredHolder, "")
	}
}

// leaseRecorder keeps every version of one Lease, in the order the server
// stored them, as seen by a watch of the plain typed client.
type leaseRecorder struct {
	mu       sync.Mutex
	versions []*coordinationv1.Lease
}

// recordLease starts recording the Lease ns/name; call it before anything
// writes the Lease, so that no version is missed. Recording ends with the
// test.
func (env *Env) recordLease(t *testing.T, ns, name string) *leaseRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	leases := env.Server.Client().CoordinationV1().Leases(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := leases.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		cancel()
		t.Fatalf("Lease %s/%s exists before the recording starts", ns, name)
	}
	// A retry watcher resumes from the last version seen if the server
	// closes the watch, so the recording has no gaps.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return leases.Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rec := &leaseRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				if lease, ok := ev.Object.(*coordinationv1.Lease); ok {
					rec.mu.Lock()
					rec.versions = append(rec.versions, lease)
					rec.mu.Unlock()
				}
			case watch.Error:
				t.Errorf("watch of Lease %s/%s: %v", ns, name, apierrors.FromObject(ev.Object))
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	return rec
}

func (r *leaseRecorder) snapshot() []*coordinationv1.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.versions)
}

// isRenewal reports whether cur is a renewal of prev: the same holder in
// the same term, with a new renewTime.
func isRenewal(prev, cur *coordinationv1.Lease) bool {
	return holderOf(prev) != "" && holderOf(cur) == holderOf(prev) &&
		ptr.Deref(cur.Spec.LeaseTransitions, 0) == ptr.Deref(prev.Spec.LeaseTransitions, 0) &&
		!cur.Spec.RenewTime.Equal(prev.Spec.RenewTime)
}

// renewals counts the recorded renewals by holder.
func (r *leaseRecorder) renewals(holder string) int {
	versions := r.snapshot()
	n := 0
	for i := 1; i < len(versions); i++ {
		if holderOf(versions[i]) == holder && isRenewal(versions[i-1], versions[i]) {
			n++
		}
	}
	return n
}

const (
	// staleFreshness is cle-controller's candidate freshness window under
	// SetupStale: short, so that candidates age past it within a test.
	staleFreshness = time.Second
	// builtinFreshness is how long kube-apiserver's controller counts a
	// candidate alive after its renewTime (its electionDuration); it pings
	// one idle longer before electing.
	builtinFreshness = 5 * time.Second
)

// Main runs a test package of the cases on one server started with opts.
// With startController, cle-controller (in env.APIMode) serves each test's
// namespace; without, the controller built into kube-apiserver does.
func Main(m *testing.M, opts framework.Options, env *Env, startController bool) {
	framework.Main(m, opts, func(s *framework.Server) {
		env.Server = s
		env.Setup = func(t *testing.T) string {
			ns := s.CreateNamespace(t)
			if startController {
				s.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: env.APIMode})
			}
			return ns
		}
		env.SetupStale = func(t *testing.T) (string, time.Duration) {
			ns := s.CreateNamespace(t)
			if !startController {
				return ns, builtinFreshness
			}
			s.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: env.APIMode,
				Controller: controller.Options{CandidateFreshness: staleFreshness}})
			return ns, staleFreshness
		}
	})
}

// Run runs every case in env, each as a subtest named after it.
func Run(t *testing.T, env *Env) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, *Env)
	}{
		{"ElectsBestCandidate", ElectsBestCandidate},
		{"Preemption", func(t *testing.T, env *Env) { Preemption(t, env) }},
		{"GracefulHandover", func(t *testing.T, env *Env) { GracefulHandover(t, env) }},
		{"BlockedRenewals", BlockedRenewals},
		{"PausedProcess", PausedProcess},
		{"RestartRefreshesCandidate", RestartRefreshesCandidate},
		{"SharedHost", SharedHost},
		{"WrapConfig", WrapConfig},
		{"RenewalsKeepCoordinatedFields", RenewalsKeepCoordinatedFields},
		{"LockElectsBest", LockElectsBest},
		{"LockPreemption", func(t *testing.T, env *Env) { LockPreemption(t, env) }},
		{"LockReleaseOnCancel", func(t *testing.T, env *Env) { LockReleaseOnCancel(t, env) }},
		{"Latency", func(t *testing.T, env *Env) { Latency(t, env, 5) }},
		{"StaleLatency", func(t *testing.T, env *Env) { StaleLatency(t, env, 5) }},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, env) })
	}
}
