// Package bench measures the whole life of an election side by side, in one
// run on one kube-apiserver: cle (cle-controller and the candidate library)
// and its peer, the coordinated election built into Kubernetes (the election
// controller of kube-apiserver with client-go's LeaseCandidate and
// Coordinated LeaderElector). Both sides use client-go's default timings
// (15s/10s/2s), and every time is taken on this process's monotonic clock
// from the candidates' own report of the moment their leader work starts and
// returns (test/bench/cand), not from the Lease.
//
// Run it with `make bench` (hack/bench.sh), which writes the table to
// docs/benchmarks.md; `make bench QUICK=1` runs each scenario once.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/test/integration/framework"
)

var (
	reps      = flag.Int("bench.reps", 5, "repetitions of each scenario on each side")
	outFile   = flag.String("bench.out", "", "write the markdown table to this file as well")
	scenarios = flag.String("bench.scenarios", "", "comma-separated scenarios to run (default: all)")
	steady    = flag.Duration("bench.steady", time.Minute, "how long the write cost is counted")
	keepDir   = flag.String("bench.dir", "", "keep the logs of the run in this directory (default: a temporary one, removed at the end)")
)

// The candidate timings of both sides: client-go's defaults.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// run is one benchmark run: the server, the binaries, the sides.
type run struct {
	b          *testing.B
	ctx        context.Context
	server     *framework.Server
	kubeconfig string
	dir        string
	candBin    string
	mgrBin     string
	schedBin   string
	ctrlBin    string
	results    []*row
	rows       map[string]*row // by scenario and metric
}

// side is what elects: cle's controller or the one built into
// kube-apiserver, and the candidate kind that goes with it.
type side struct {
	name, kind string
}

var sides = []side{{"cle", "cle"}, {"peer", "peer"}}

func BenchmarkElections(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := startRun(ctx, b)
	// The controller-runtime candidate is built in its own module, which
	// holds controller-runtime.
	build := exec.Command("go", "build", "-o", r.dir+"/", "./test/benchmanager")
	build.Dir = filepath.Join(moduleRoot(b), "contrib", "controller-runtime")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build benchmanager: %v\n%s", err, out)
	}
	r.mgrBin = filepath.Join(r.dir, "benchmanager")
	var err error
	if r.schedBin, err = framework.Binary("kube-scheduler"); err != nil {
		b.Fatal(err)
	}

	for b.Loop() {
		for _, sc := range allScenarios {
			if *scenarios != "" && !slices.Contains(strings.Split(*scenarios, ","), sc.name) {
				continue
			}
			r.scenario(sc)
		}
	}
	table := r.table("peer")
	fmt.Println(table)
	if *outFile != "" {
		if err := os.WriteFile(*outFile, []byte(table), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// startRun starts a benchmark run: its directory (--bench.dir, or a
// temporary one), kube-apiserver with the built-in election controller idled,
// a kubeconfig for it, and cle-controller and test/bench/cand built into the
// directory.
func startRun(ctx context.Context, b *testing.B) *run {
	r := &run{b: b, ctx: ctx, dir: *keepDir}
	if r.dir == "" {
		r.dir = b.TempDir()
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var err error
	r.server, err = framework.Start(ctx, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: true, Logf: b.Logf})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if *keepDir != "" {
			// kube-apiserver's log holds the built-in controller's side of
			// the story; Stop removes it.
			if log, err := os.ReadFile(filepath.Join(r.server.Dir(), "kube-apiserver.log")); err == nil {
				_ = os.WriteFile(filepath.Join(r.dir, "kube-apiserver.log"), log, 0o644)
			}
		}
		_ = r.server.Stop()
	})
	r.kubeconfig = filepath.Join(r.dir, "kubeconfig")
	if err := r.server.WriteKubeconfig(r.kubeconfig); err != nil {
		b.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", r.dir+"/", "github.com/cle-dev/cle/cmd/cle-controller", "github.com/cle-dev/cle/test/bench/cand")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	r.ctrlBin, r.candBin = filepath.Join(r.dir, "cle-controller"), filepath.Join(r.dir, "cand")
	return r
}

// scenario runs sc's repetitions on each side, each side's in a namespace
// of its own, with its controller acting and the other one idle.
func (r *run) scenario(sc scenario) {
	for _, s := range sides {
		ns := r.server.CreateNamespace(r.b)
		var watched []string
		if sc.system {
			watched = []string{metav1.NamespaceSystem}
		}
		stop := r.activate(s, ns, watched)
		logDir := filepath.Join(r.dir, sc.name+"-"+s.name)
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			r.b.Fatal(err)
		}
		for i := range *reps {
			if i > 0 && sc.system && s.name == "cle" {
				// A Lease deleted while held is elected again only
				// after its holder's term, and the controller would
				// remember the last repetition's: a repetition on a
				// Lease of fixed name starts with a new controller.
				stop()
				stop = r.activate(s, ns, watched)
			}
			j := newJournal()
			st := starter{bin: r.candBin, kind: s.kind, kubeconfig: r.kubeconfig, ns: ns, logDir: logDir, j: j, side: s.name, rep: i}
			begin := time.Now()
			out := sc.run(r, st, fmt.Sprintf("%s-%d", sc.name, i))
			r.b.Logf("%s %s #%d (%s): %s", sc.name, s.name, i+1, time.Since(begin).Round(time.Second), out)
			r.record(sc.title, s.name, out)
		}
		stop()
	}
}

// record adds the measures of a repetition on side to the rows of the
// scenario titled title.
func (r *run) record(title, side string, ms []measure) {
	if r.rows == nil {
		r.rows = map[string]*row{}
	}
	for _, m := range ms {
		key := title + "\x00" + m.metric
		if r.rows[key] == nil {
			r.rows[key] = &row{scenario: title, metric: m.metric, unit: m.unit, order: len(r.rows)}
			r.results = append(r.results, r.rows[key])
		}
		r.rows[key].add(side, m)
	}
}

// activate makes s's controller the acting one for namespace ns (and the
// namespaces watched, for cle-controller), and returns a function that
// stops it.
func (r *run) activate(s side, ns string, watched []string) func() {
	r.b.Helper()
	switch s.name {
	case "cle":
		if err := r.server.IdleBuiltinController(r.ctx); err != nil {
			r.b.Fatal(err)
		}
		// Appended to: scenario 9 starts a controller per repetition.
		log, err := os.OpenFile(filepath.Join(r.dir, "cle-controller-"+ns+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			r.b.Fatal(err)
		}
		cmd := exec.Command(r.ctrlBin, "--kubeconfig="+r.kubeconfig, "--api-mode=native", "--namespaces="+strings.Join(append([]string{ns}, watched...), ","),
			"--leader-elect-resource-namespace="+ns, "--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:0", "-v=2")
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			r.b.Fatal(err)
		}
		// It acts once it holds its own Lease (in ns, named as the
		// built-in controller's is in kube-system).
		if err := wait.PollUntilContextTimeout(r.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := r.server.Client().CoordinationV1().Leases(ns).Get(ctx, framework.BuiltinControllerLeaseName, metav1.GetOptions{})
			return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "", nil
		}); err != nil {
			r.b.Fatalf("cle-controller did not start leading: %v", err)
		}
		return func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			log.Close()
		}
	default:
		if err := r.server.WakeBuiltinController(r.ctx); err != nil {
			r.b.Fatal(err)
		}
		return func() {}
	}
}

// moduleRoot is the root of the cle module: go test runs in the package's
// directory, test/bench.
func moduleRoot(b *testing.B) string {
	wd, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

// machine describes where the run happened.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %d GiB", (kb+512*1024)/(1024*1024))
		}
	}
	return fmt.Sprintf("%d cores%s, %s, %s/%s, %s", runtime.NumCPU(), mem, model, runtime.GOOS, runtime.GOARCH, runtime.Version())
}
