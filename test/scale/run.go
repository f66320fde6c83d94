package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

// phase is what was measured of the controller over one stretch of a run.
type phase struct {
	wall     time.Duration
	cpu      time.Duration // controller user+system CPU
	peakRSS  int64         // bytes: the controller's VmHWM, reset at the phase's start
	requests map[request]float64
	fleet    counts // the fleet's counters over the phase (differences)
	apiCPU   time.Duration
	// own are the controller's own counters over the phase (differences),
	// by metric name (see ownCounters).
	own map[string]float64
}

// ownCounters are the controller's counters a phase reports: how much it
// pinged, how many pings its budget held back (its pacing), and its
// registration probes.
var ownCounters = []string{"cle_pings_total", "cle_pings_deferred_total", "cle_registration_probes_total"}

// ownOf reads ownCounters from a scrape.
func ownOf(fams []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range fams {
		if slices.Contains(ownCounters, mf.GetName()) {
			for _, m := range mf.GetMetric() {
				out[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

type request struct{ verb, resource string }

// result is one run's figures.
type result struct {
	leases, candidates, nodes int
	mode, controllerVersion   string
	created                   time.Duration // first candidate created -> last created
	converged                 time.Duration // first candidate created -> every Lease right; 0 if not
	wrong                     []string      // Leases not right at the convergence timeout
	wrongFirst                []string      // a few Leases whose first holder was not their best
	startRSS                  int64         // controller RSS once synced, before any candidate
	podsCreated               time.Duration // --pods: the candidates' Pods created before the controller started
	convergence, steady       phase
	// With a flood: how far behind the server was (the fleet's writes
	// answered while it ran, and after), when it applied writes promptly
	// again, and the wrong first holders told apart (see wrongFirstKinds).
	flood                   *flood
	caughtUp                time.Time
	convergedAt             time.Time
	wrongFirstEarly         int
	wrongFirstBetween       int
	wrongFirstLate          int
	wrongFirstEarlyEx       []string
	latFlood, latAfter      latencySummary
	steadyWrong             int // Leases not right at the end of the steady state
	stalls                  stallCount
	nodeWrites, nodeSkipped int64
}

// runSize runs the benchmark for n Leases on a fresh control plane.
func runSize(ctx context.Context, cfg *config, n int, dir string) (*result, error) {
	logger := klog.FromContext(ctx).WithValues("leases", n)
	ctx = klog.NewContext(ctx, logger)
	native := cfg.mode == "native"
	logger.Info("Starting kube-apiserver and etcd")
	server, err := framework.Start(ctx, framework.Options{
		CoordinatedLeaderElection: native, IdleBuiltinController: native, PortableCRD: !native,
		// Room for the benchmark's own writers and watchers.
		ExtraAPIServerFlags: []string{"--max-requests-inflight=1000", "--max-mutating-requests-inflight=500"},
		Logf:                func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := server.Stop(); err != nil {
			logger.Error(err, "Stopping the control plane")
		}
	}()
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopRun()

	restCfg := server.Config()
	restCfg.UserAgent = "cle-scale"
	clients, err := access.NewClients(restCfg)
	if err != nil {
		return nil, err
	}
	acc, err := access.Detect(ctx, clients, cfg.mode)
	if err != nil {
		return nil, err
	}
	res := &result{leases: n, candidates: n * len(cfg.versions), nodes: cfg.nodes, mode: string(acc.Mode())}

	logger.Info("Creating node Leases", "nodes", cfg.nodes)
	nodeLeases, err := createNodes(ctx, clients.Kube, cfg.nodes, cfg.nodeRenew, 32)
	if err != nil {
		return nil, err
	}
	nodeLeases.run(runCtx, &wg, 64)
	f := newFleet(acc, cfg, n)
	for _, ns := range f.names {
		if _, err := clients.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	if err := f.run(runCtx, &wg, 64); err != nil {
		return nil, err
	}

	if cfg.pods {
		logger.Info("Creating the candidates' Pods", "pods", res.candidates)
		begin := time.Now()
		if err := f.createPods(ctx, clients.Kube, 64); err != nil {
			return nil, err
		}
		res.podsCreated = time.Since(begin)
	}

	ctrl, err := startController(ctx, cfg, server, dir, n)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := ctrl.child.Stop(10 * time.Second); err != nil {
			logger.Error(err, "Stopping cle-controller")
		}
		if cfg.keepLogs != "" {
			if err := os.MkdirAll(cfg.keepLogs, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(cfg.keepLogs, fmt.Sprintf("cle-controller-%d.log", n)), []byte(ctrl.child.Logs()), 0o644)
			}
		}
	}()
	if err := ctrl.waitSynced(ctx); err != nil {
		return res, fmt.Errorf("%w\n%s", err, tail(ctrl.child.Logs(), 40))
	}
	if st, err := readProc(ctrl.child.PID()); err == nil {
		res.startRSS = st.rss
	}

	// Convergence: from the first candidate's creation until every Lease is
	// held by its best candidate.
	logger.Info("Creating candidates", "candidates", res.candidates)
	m := ctrl.begin(server, f)
	profiles := ctrl.profile(runCtx, &wg, cfg, n, "converge", 0, cfg.convergeProfile)
	var floodDone chan struct{}
	if cfg.floodWriters > 0 {
		fl, err := newFlood(restCfg, cfg.floodWriters)
		if err != nil {
			return res, err
		}
		res.flood, floodDone = fl, make(chan struct{})
		logger.Info("Flooding the server", "writers", cfg.floodWriters, "for", cfg.floodFor)
		go func() {
			defer close(floodDone)
			fl.run(runCtx, cfg.floodFor)
		}()
		// Until the writers have the server's queue full.
		if err := sleepCtx(ctx, 2*time.Second); err != nil {
			return res, err
		}
	}
	start := time.Now()
	if err := f.createCandidates(ctx, rand.New(rand.NewPCG(cfg.seed, uint64(n))), 64); err != nil {
		return res, err
	}
	res.created = time.Since(start)
	logger.Info("Candidates created; waiting for every Lease to be held by its best candidate", "after", res.created.Round(time.Millisecond))
	select {
	case <-f.converged:
		res.convergedAt = time.Now()
		res.converged = res.convergedAt.Sub(start)
		logger.Info("Converged", "after", res.converged.Round(time.Millisecond))
	case <-time.After(cfg.convergeLimit - res.created):
		res.wrong = f.wrongHolders(10)
		logger.Info("Did not converge", "after", time.Since(start).Round(time.Second), "examples", res.wrong)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.wrongFirst = f.wrongFirstHolders()
	res.wrongFirstEarly, res.wrongFirstBetween, res.wrongFirstLate, res.wrongFirstEarlyEx = f.wrongFirstKinds()
	if floodDone != nil {
		select {
		case <-floodDone:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	if res.convergence, err = m.end(); err != nil {
		return res, err
	}
	ctrl.heapProfile(ctx, cfg, n, "converge")
	profiles.Wait()

	// Steady state: nothing to elect; holders, candidates and nodes renew.
	logger.Info("Settling before the steady state", "for", cfg.settle)
	if err := sleepCtx(ctx, cfg.settle); err != nil {
		return res, err
	}
	logger.Info("Measuring the steady state", "for", cfg.steady)
	m = ctrl.begin(server, f)
	profiles = ctrl.profile(runCtx, &wg, cfg, n, "steady", (cfg.steady-cfg.steadyProfile)/2, cfg.steadyProfile)
	stallCtx, endStalls := context.WithTimeout(ctx, cfg.steady)
	stalls := make(chan stallCount, 1)
	go func() { stalls <- stallEtcd(stallCtx, server, cfg) }()
	err = sleepCtx(ctx, cfg.steady)
	endStalls()
	res.stalls = <-stalls
	if err != nil {
		return res, err
	}
	if res.stalls.err != nil {
		return res, res.stalls.err
	}
	if res.steady, err = m.end(); err != nil {
		return res, err
	}
	ctrl.heapProfile(ctx, cfg, n, "steady")
	profiles.Wait()
	res.steadyWrong = len(f.wrongHolders(n))
	if fl := res.flood; fl != nil {
		// Read once the settling and the steady state have passed, so
		// that the writes after the flood are in.
		res.caughtUp = f.lat.promptAfter(fl.ended, promptWrite, promptWindow)
		res.latFlood = summarize(f.lat.between(fl.began, fl.ended))
		res.latAfter = summarize(f.lat.between(fl.ended, fl.ended.Add(time.Minute)))
	}
	res.nodeWrites, res.nodeSkipped = nodeLeases.writes.Load(), nodeLeases.errors.Load()
	select {
	case <-ctrl.child.Exited():
		return res, fmt.Errorf("cle-controller exited during the run:\n%s", tail(ctrl.child.Logs(), 40))
	default:
	}
	return res, nil
}

// stallCount is what stallEtcd did.
type stallCount struct {
	n   int
	err error
}

// stallEtcd freezes etcd for cfg.etcdStall every cfg.etcdStallEvery until
// ctx ends (not at all without an etcdStall), and leaves it running.
func stallEtcd(ctx context.Context, server *framework.Server, cfg *config) stallCount {
	var c stallCount
	if cfg.etcdStall <= 0 {
		return c
	}
	logger := klog.FromContext(ctx)
	for {
		if err := sleepCtx(ctx, cfg.etcdStallEvery-cfg.etcdStall); err != nil {
			return c
		}
		logger.Info("Freezing etcd", "for", cfg.etcdStall)
		if err := server.PauseEtcd(); err != nil {
			c.err = fmt.Errorf("freeze etcd: %w", err)
			return c
		}
		c.n++
		// Resumed however the steady state ends: a frozen etcd would
		// hang the rest of the run.
		timer := time.NewTimer(cfg.etcdStall)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
		if err := server.ResumeEtcd(); err != nil {
			c.err = fmt.Errorf("resume etcd: %w", err)
			return c
		}
	}
}

// controllerProc is the cle-controller child process and its endpoints.
type controllerProc struct {
	child            *framework.Child
	metrics, healthz string // base URLs
}

func startController(ctx context.Context, cfg *config, server *framework.Server, dir string, n int) (*controllerProc, error) {
	kubeconfig := filepath.Join(dir, fmt.Sprintf("kubeconfig-%d", n))
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	metricsAddr, healthAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--api-mode=" + cfg.mode,
		"--kube-api-qps=" + strconv.FormatFloat(float64(cfg.qps), 'f', -1, 32),
		"--kube-api-burst=" + strconv.Itoa(cfg.burst),
		"--workers=" + strconv.Itoa(cfg.workers),
		"--metrics-bind-address=" + metricsAddr,
		"--health-probe-bind-address=" + healthAddr,
		"--profiling",
		// Its locks, apart from the built-in controller's (idled in native
		// mode by holding kube-system/leader-election-controller): its own,
		// and in native mode the one it would share with kube-apiserver.
		"--leader-elect-resource-namespace=default", "--leader-elect-resource-name=cle-scale",
	}, cfg.controllerArgs...)
	klog.FromContext(ctx).Info("Starting cle-controller", "args", args)
	child, err := framework.StartProcess("cle-controller", cfg.controllerBin, filepath.Join(dir, fmt.Sprintf("cle-controller-%d.log", n)), args...)
	if err != nil {
		return nil, err
	}
	scrapeToken = server.Config().BearerToken
	return &controllerProc{child: child, metrics: "https://" + metricsAddr, healthz: "http://" + healthAddr}, nil
}

// waitSynced waits until the controller leads, its informers have listed
// and watch, and it reports ready (caches synced).
func (c *controllerProc) waitSynced(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-c.child.Exited():
			return false, errors.New("cle-controller exited")
		default:
		}
		fams, err := c.scrape(ctx)
		if err != nil {
			return false, nil
		}
		if promtest.Value(fams, "leader_election_master_status", "name", "cle-controller") != 1 {
			return false, nil // not leading yet: no informer has started
		}
		resp, err := get(ctx, c.healthz+"/readyz")
		if err != nil {
			return false, nil
		}
		resp.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cle-controller did not become ready: %w", err)
	}
	return nil
}

func (c *controllerProc) scrape(ctx context.Context) ([]*dto.MetricFamily, error) {
	body, err := get(ctx, c.metrics+"/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return promtest.Parse(body)
}

// requestsOf reads client-go's rest_client_requests_total by HTTP method
// and code (as the resource column): what the controller asked of
// kube-apiserver. Which objects it wrote the fleet's own counts tell.
func requestsOf(fams []*dto.MetricFamily) map[request]float64 {
	out := map[request]float64{}
	for _, mf := range fams {
		if mf.GetName() != "rest_client_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var r request
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "method":
					r.verb = l.GetValue()
				case "code":
					r.resource = "code " + l.GetValue()
				}
			}
			out[r] += m.GetCounter().GetValue()
		}
	}
	return out
}

// measurement is a phase being measured.
type measurement struct {
	c        *controllerProc
	server   *framework.Server
	f        *fleet
	start    time.Time
	proc     procStat
	apiProc  procStat
	requests map[request]float64
	own      map[string]float64
	counts   counts
}

// begin starts measuring a phase: it resets the controller's peak RSS, and
// reads its CPU time, its request counters and the fleet's counters.
func (c *controllerProc) begin(server *framework.Server, f *fleet) *measurement {
	pid := c.child.PID()
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	m := &measurement{c: c, server: server, f: f, start: time.Now(), counts: f.snapshot()}
	m.proc, _ = readProc(pid)
	m.apiProc, _ = readProc(server.APIServerPID())
	if fams, err := c.scrape(context.Background()); err == nil {
		m.requests, m.own = requestsOf(fams), ownOf(fams)
	}
	return m
}

func (m *measurement) end() (phase, error) {
	st, err := readProc(m.c.child.PID())
	if err != nil {
		return phase{}, fmt.Errorf("read cle-controller's /proc: %w", err)
	}
	api, _ := readProc(m.server.APIServerPID())
	fams, err := m.c.scrape(context.Background())
	if err != nil {
		return phase{}, fmt.Errorf("scrape cle-controller's metrics: %w", err)
	}
	p := phase{
		wall: time.Since(m.start), cpu: st.cpu - m.proc.cpu, peakRSS: st.hwm,
		apiCPU: api.cpu - m.apiProc.cpu, requests: map[request]float64{}, own: map[string]float64{},
	}
	for name, v := range ownOf(fams) {
		p.own[name] = v - m.own[name]
	}
	for r, v := range requestsOf(fams) {
		if d := v - m.requests[r]; d > 0 {
			p.requests[r] = d
		}
	}
	now := m.f.snapshot()
	p.fleet = counts{
		at: now.at, pings: now.pings - m.counts.pings, pingsToLive: now.pingsToLive - m.counts.pingsToLive, renewals: now.renewals - m.counts.renewals,
		lcOther: now.lcOther - m.counts.lcOther, creates: now.creates - m.counts.creates,
		leaseWrites: now.leaseWrites - m.counts.leaseWrites, conflicts: now.conflicts - m.counts.conflicts, writeErrors: now.writeErrors - m.counts.writeErrors,
		lapsed:     now.lapsed - m.counts.lapsed,
		wrongFirst: now.wrongFirst - m.counts.wrongFirst, holderChanges: now.holderChanges - m.counts.holderChanges,
	}
	return p, nil
}

// profile saves a CPU profile of length d, taken after delay, in the
// background; Wait on the result waits for it.
func (c *controllerProc) profile(ctx context.Context, wg *sync.WaitGroup, cfg *config, n int, name string, delay, d time.Duration) *sync.WaitGroup {
	var done sync.WaitGroup
	if cfg.profileDir == "" || d <= 0 {
		return &done
	}
	done.Add(1)
	wg.Go(func() {
		defer done.Done()
		if sleepCtx(ctx, delay) != nil {
			return
		}
		path := filepath.Join(cfg.profileDir, fmt.Sprintf("cpu-%d-%s.pprof", n, name))
		if err := c.save(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d/time.Second)), path); err != nil {
			klog.FromContext(ctx).Error(err, "CPU profile", "path", path)
		}
	})
	return &done
}

func (c *controllerProc) heapProfile(ctx context.Context, cfg *config, n int, name string) {
	if cfg.profileDir == "" {
		return
	}
	path := filepath.Join(cfg.profileDir, fmt.Sprintf("heap-%d-%s.pprof", n, name))
	if err := c.save(ctx, "/debug/pprof/heap", path); err != nil {
		klog.FromContext(ctx).Error(err, "Heap profile", "path", path)
	}
}

func (c *controllerProc) save(ctx context.Context, path, file string) error {
	body, err := get(ctx, c.metrics+path)
	if err != nil {
		return err
	}
	defer body.Close()
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// get returns the body of a 200 response to GET url.
// scrapeToken authenticates the benchmark to the controller's secure metrics
// address (and its profiles): the admin user's token, which kube-apiserver
// authorizes for any path.
var scrapeToken string

// scrapeClient skips verifying the controller's self-signed certificate.
var scrapeClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a self-signed certificate on loopback
}}

func get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if scrapeToken != "" {
		req.Header.Set("Authorization", "Bearer "+scrapeToken)
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// procStat is what /proc tells of a process.
type procStat struct {
	cpu      time.Duration // user + system
	rss, hwm int64         // bytes
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ), 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

func readProc(pid int) (procStat, error) {
	var st procStat
	if pid == 0 {
		return st, errors.New("no process")
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// The command name in parentheses may hold spaces: fields count from
	// after its closing parenthesis; utime and stime are fields 14 and 15.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return st, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	st.cpu = time.Duration(utime+stime) * clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for line := range strings.Lines(string(status)) {
		key, value, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch key {
		case "VmRSS":
			st.rss = kb << 10
		case "VmHWM":
			st.hwm = kb << 10
		}
	}
	return st, nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
