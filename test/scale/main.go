// Command scale is cle-controller's scale benchmark (make bench-scale). On a
// real kube-apiserver and etcd on loopback, started by
// test/integration/framework, it runs the cle-controller binary as a child
// process and drives, from this process, N Leases with one candidate per
// emulation version each, plus node-heartbeat Leases in kube-node-lease. For
// each N it prints how long it takes until every Lease is held by its best
// candidate, the controller's CPU seconds and peak RSS (read from
// /proc/<pid>) while converging and over a steady state, the controller's
// API requests by HTTP method and code (from client-go's
// rest_client_requests_total), and
// the LeaseCandidate writes per minute in steady state (from a watch).
//
// The candidates are not processes but behave as pkg/candidate does: each
// creates its LeaseCandidate, answers a ping at once from a watch (renewTime
// = max(now, pingTime)), renews it every --candidate-renew-interval; a
// candidate the Lease names renews it at once (starting its term) and then
// every --holder-renew-interval, and hands the Lease over when
// preferredHolder names another candidate. Node Leases are renewed every
// --node-renew-interval, as kubelets do.
//
// With --profile-dir it saves CPU and heap profiles of the controller
// (served with --profiling) for convergence and steady state.
//
// Everything it starts is stopped and every temporary directory removed
// before it exits; the whole run is bounded by --timeout.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/cmd/cle-controller/app"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/test/integration/framework"
)

// config is the benchmark's flags.
type config struct {
	sizes          []int
	mode           string
	namespaces     int
	order          string
	versions       []string
	binaryVersion  string
	nodes          int
	nodeRenew      time.Duration
	holderRenew    time.Duration
	holderDuration time.Duration
	candidateRenew time.Duration
	steady         time.Duration
	settle         time.Duration
	// etcdStall: etcd is frozen that long every etcdStallEvery in the
	// steady state.
	etcdStall, etcdStallEvery time.Duration
	// floodWriters write without pause for floodFor from just before the
	// first candidate is created: the server falls behind on purpose.
	floodWriters  int
	floodFor      time.Duration
	convergeLimit time.Duration
	timeout       time.Duration
	seed          uint64
	pods          bool

	controllerBin  string
	controllerArgs []string
	qps            float32
	burst          int
	workers        int

	profileDir      string
	convergeProfile time.Duration
	steadyProfile   time.Duration
	keepLogs        string
}

func main() {
	defaults := app.NewOptions()
	cfg := &config{}
	fs := pflag.NewFlagSet("scale", pflag.ExitOnError)
	fs.IntSliceVar(&cfg.sizes, "leases", []int{1000, 10000}, "Numbers of Leases to run with, one run (and one fresh control plane) each.")
	fs.StringVar(&cfg.mode, "api-mode", "portable", "API mode of the controller and the candidates: portable (the CRD, gate off) or native (gate on, built-in controller idled).")
	fs.StringVar(&cfg.order, "order", "grouped", "Order in which candidates are created: grouped (Leases in a random order, the candidates of each one together, as the replicas of a component start together) or random (all candidates shuffled: a Lease's candidates arrive up to the whole creation time apart, and most Leases are first elected to a worse candidate, then preempted).")
	fs.IntVar(&cfg.namespaces, "namespaces", 10, "Namespaces the Leases are spread over.")
	fs.StringSliceVar(&cfg.versions, "emulation-versions", []string{"1.34.0", "1.35.0", "1.36.0"}, "Emulation versions of each Lease's candidates, one candidate each, created in random order; the lowest should lead.")
	fs.StringVar(&cfg.binaryVersion, "binary-version", "1.36.0", "Binary version of every candidate.")
	fs.IntVar(&cfg.nodes, "nodes", 5000, "Node-heartbeat Leases in kube-node-lease.")
	fs.DurationVar(&cfg.nodeRenew, "node-renew-interval", 10*time.Second, "How often each node Lease is renewed (the kubelet's default is 10s).")
	fs.DurationVar(&cfg.holderRenew, "holder-renew-interval", 10*time.Second, "How often a holder renews its Lease (the library's default is 2s; two cores cannot absorb 5,000 renewals a second).")
	fs.DurationVar(&cfg.holderDuration, "holder-lease-duration", 40*time.Second, "leaseDurationSeconds a holder writes when it renews (4 renew intervals, as node Leases).")
	fs.DurationVar(&cfg.candidateRenew, "candidate-renew-interval", candidate.DefaultCandidateRenewInterval, "How often a candidate renews its LeaseCandidate when nobody pings it (the library's default).")
	fs.DurationVar(&cfg.steady, "steady", 5*time.Minute, "Length of the steady state measured after convergence.")
	fs.DurationVar(&cfg.etcdStall, "etcd-stall", 0, "In the steady state, freeze etcd (SIGSTOP) for this long every --etcd-stall-every, as a disk that stops answering does: every client's writes, the holders' renewals and the controller's own among them, are late at once. 0: never.")
	fs.DurationVar(&cfg.etcdStallEvery, "etcd-stall-every", 30*time.Second, "How often etcd is frozen in the steady state (see --etcd-stall).")
	fs.IntVar(&cfg.floodWriters, "flood-writers", 0, "Saturate the server while the candidates are created: this many writers, each with one Lease update in flight at all times (in kube-node-lease, which the controller does not watch), for --flood-for from just before the first candidate is created. Every other client's writes then wait behind theirs, on any machine; the report says how far behind the server was and how soon every Lease was right once it applied writes promptly again. 0: no flood.")
	fs.DurationVar(&cfg.floodFor, "flood-for", 60*time.Second, "How long the flood of --flood-writers lasts.")
	fs.DurationVar(&cfg.settle, "settle", 10*time.Second, "Pause between convergence and the steady-state measurement, for the writes of convergence to drain.")
	fs.DurationVar(&cfg.convergeLimit, "converge-timeout", 10*time.Minute, "Give up waiting for convergence after this long (the run goes on to the steady state and reports the miss).")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "Bound on the whole benchmark. 0: computed from the other durations.")
	fs.Uint64Var(&cfg.seed, "seed", 1, "Seed of the random creation order and renewal phases.")
	fs.BoolVar(&cfg.pods, "pods", false, "Give each candidate a Pod (created before the controller starts, Pending: nothing schedules it), registered on its LeaseCandidate and stamped on its holder's renewals as the library does in a Pod. --controller-args=--proof-of-death makes the controller watch them.")
	fs.StringVar(&cfg.controllerBin, "controller", "", "cle-controller binary. Empty: built with go build.")
	fs.StringSliceVar(&cfg.controllerArgs, "controller-args", nil, "More flags for cle-controller (comma-separated).")
	fs.Float32Var(&cfg.qps, "kube-api-qps", defaults.KubeAPIQPS, "cle-controller's --kube-api-qps.")
	fs.IntVar(&cfg.burst, "kube-api-burst", defaults.KubeAPIBurst, "cle-controller's --kube-api-burst.")
	fs.IntVar(&cfg.workers, "workers", defaults.Workers, "cle-controller's --workers.")
	fs.StringVar(&cfg.profileDir, "profile-dir", "", "Save the controller's CPU and heap profiles (convergence and steady state) here. Empty: no profiles.")
	fs.DurationVar(&cfg.convergeProfile, "converge-profile", 30*time.Second, "Length of the CPU profile taken from the first candidate's creation.")
	fs.DurationVar(&cfg.steadyProfile, "steady-profile", 60*time.Second, "Length of the CPU profile taken in the middle of the steady state.")
	fs.StringVar(&cfg.keepLogs, "keep-logs", "", "Copy the controller's log of each run here. Empty: logs are shown only when a run fails.")
	klogFlags := pflag.NewFlagSet("klog", pflag.ExitOnError)
	klog.InitFlags(nil)
	klogFlags.AddGoFlagSet(nil)
	fs.AddFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "scale: %v\n", err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

func (c *config) validate() error {
	var errs []error
	if c.mode != "portable" && c.mode != "native" {
		errs = append(errs, fmt.Errorf("--api-mode=%q: want portable or native", c.mode))
	}
	if c.order != "grouped" && c.order != "random" {
		errs = append(errs, fmt.Errorf("--order=%q: want grouped or random", c.order))
	}
	if len(c.sizes) == 0 || len(c.versions) == 0 || c.namespaces < 1 {
		errs = append(errs, errors.New("--leases, --emulation-versions and --namespaces must not be empty"))
	}
	if c.floodWriters < 0 || c.floodWriters > 0 && c.floodFor <= 0 {
		errs = append(errs, errors.New("--flood-writers must not be negative, and --flood-for must be positive with a flood"))
	}
	for _, d := range []time.Duration{c.nodeRenew, c.holderRenew, c.holderDuration, c.candidateRenew, c.steady, c.convergeLimit} {
		if d <= 0 {
			errs = append(errs, errors.New("durations must be positive"))
			break
		}
	}
	if c.holderDuration%time.Second != 0 || c.holderDuration <= c.holderRenew {
		errs = append(errs, fmt.Errorf("--holder-lease-duration=%s must be whole seconds and longer than --holder-renew-interval", c.holderDuration))
	}
	if c.etcdStall < 0 || (c.etcdStall > 0 && c.etcdStall >= c.etcdStallEvery) {
		errs = append(errs, fmt.Errorf("--etcd-stall=%s must be 0, or positive and shorter than --etcd-stall-every=%s", c.etcdStall, c.etcdStallEvery))
	}
	if c.timeout == 0 {
		per := 5*time.Minute + c.convergeLimit + c.settle + c.steady + c.floodFor
		c.timeout = time.Duration(len(c.sizes)) * per
	}
	return errors.Join(errs...)
}

func run(cfg *config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	logger := klog.Background().WithName("scale")
	ctx = klog.NewContext(ctx, logger)

	dir, err := os.MkdirTemp("", "cle-scale-")
	if err != nil {
		logger.Error(err, "Cannot create a temporary directory")
		return 1
	}
	defer os.RemoveAll(dir)
	if cfg.controllerBin == "" {
		cfg.controllerBin = filepath.Join(dir, "cle-controller")
		logger.Info("Building cle-controller", "output", cfg.controllerBin)
		out, err := exec.CommandContext(ctx, "go", "build", "-o", cfg.controllerBin, "github.com/cle-dev/cle/cmd/cle-controller").CombinedOutput()
		if err != nil {
			logger.Error(err, "Cannot build cle-controller", "output", string(out))
			return 1
		}
	}
	version, err := exec.CommandContext(ctx, cfg.controllerBin, "--version").Output()
	if err != nil {
		logger.Error(err, "Cannot run cle-controller --version", "binary", cfg.controllerBin)
		return 1
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			logger.Error(err, "Cannot create the profile directory")
			return 1
		}
	}

	code := 0
	for _, n := range cfg.sizes {
		res, err := runSize(ctx, cfg, n, dir)
		if res != nil {
			res.controllerVersion = strings.TrimSpace(string(version))
			res.print(os.Stdout, cfg)
		}
		if err != nil {
			logger.Error(err, "Run failed", "leases", n)
			code = 1
			if ctx.Err() != nil {
				break
			}
		}
	}
	children, err := framework.LiveChildren()
	if err != nil || len(children) > 0 {
		logger.Error(err, "Child processes left running", "children", children)
		code = 1
	}
	return code
}
