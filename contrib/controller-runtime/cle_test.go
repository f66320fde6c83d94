package cle

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cle-dev/cle/pkg/candidate"
)

func TestManagerOptions(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	var opts manager.Options
	lk, err := ManagerOptions(&opts, cfg, Options{Namespace: "ns", LeaseName: "my-manager", BinaryVersion: "1.36.0", RetryPeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.LeaderElection || opts.LeaderElectionResourceLockInterface != lk || !opts.LeaderElectionReleaseOnCancel {
		t.Errorf("leader election not set up: %+v", opts)
	}
	if opts.LeaderElectionNamespace != "ns" || opts.LeaderElectionID != "my-manager" {
		t.Errorf("Lease %s/%s, want ns/my-manager", opts.LeaderElectionNamespace, opts.LeaderElectionID)
	}
	if _, _, rp := lk.Candidate().Timings(); *opts.LeaseDuration != DefaultLeaseDuration || *opts.RenewDeadline != DefaultRenewDeadline || rp != time.Second {
		t.Errorf("durations %s/%s, candidate's RetryPeriod %s; want the defaults and RetryPeriod 1s", *opts.LeaseDuration, *opts.RenewDeadline, rp)
	}
	if _, _, rp := lk.Timings(); *opts.RetryPeriod != rp || rp > time.Second {
		t.Errorf("the manager's RetryPeriod is %s, want the lock's %s, no longer than the candidate's", *opts.RetryPeriod, rp)
	}
	if msgs := validation.IsDNS1123Subdomain(lk.Identity()); len(msgs) > 0 {
		t.Errorf("default identity %q is not a valid candidate name: %v", lk.Identity(), msgs)
	}
	if lk.Describe() != "ns/my-manager" {
		t.Errorf("Describe() = %q", lk.Describe())
	}

	other, err := ManagerOptions(&manager.Options{}, cfg, Options{Namespace: "ns", LeaseName: "my-manager", BinaryVersion: "1.36.0"})
	if err != nil {
		t.Fatal(err)
	}
	if other.Identity() == lk.Identity() {
		t.Errorf("two managers on one host got the same default identity %q", lk.Identity())
	}

	if _, err := ManagerOptions(&manager.Options{}, cfg, Options{LeaseName: "x", BinaryVersion: "1.36.0"}); !errors.Is(err, candidate.ErrInvalidConfig) {
		t.Errorf("without a namespace: %v, want ErrInvalidConfig", err)
	}
	if *opts.GracefulShutdownTimeout >= 0 {
		t.Errorf("GracefulShutdownTimeout %s: the manager would release while leader runnables may still run", *opts.GracefulShutdownTimeout)
	}
	if _, err := ManagerOptions(nil, cfg, Options{}); err == nil {
		t.Error("nil options accepted")
	}
}

// ManagerOptions reads what the manager's options already say, and refuses
// what contradicts them.
func TestManagerOptionsReadsTheManagersOptions(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	lease, renew, retry, grace := 30*time.Second, 20*time.Second, 4*time.Second, 10*time.Second
	opts := manager.Options{
		LeaderElectionNamespace: "team", LeaderElectionID: "operator-lock",
		LeaseDuration: &lease, RenewDeadline: &renew, RetryPeriod: &retry, GracefulShutdownTimeout: &grace,
	}
	lk, err := ManagerOptions(&opts, cfg, Options{BinaryVersion: "1.36.0"})
	if err != nil {
		t.Fatal(err)
	}
	if lk.Describe() != "team/operator-lock" {
		t.Errorf("Lease %s, want the manager's team/operator-lock", lk.Describe())
	}
	if l, r, p := lk.Candidate().Timings(); l != lease || r != renew || p != retry {
		t.Errorf("candidate timings %s/%s/%s, want the manager's %s/%s/%s", l, r, p, lease, renew, retry)
	}
	if *opts.GracefulShutdownTimeout != grace || !opts.LeaderElectionReleaseOnCancel {
		t.Errorf("GracefulShutdownTimeout %s, release on cancel %v; want the manager's %s kept, and release on", *opts.GracefulShutdownTimeout, opts.LeaderElectionReleaseOnCancel, grace)
	}

	conflicting := manager.Options{LeaderElectionID: "a", RetryPeriod: &retry}
	_, err = ManagerOptions(&conflicting, cfg, Options{Namespace: "ns", LeaseName: "b", RetryPeriod: time.Second, BinaryVersion: "1.36.0"})
	if err == nil || !strings.Contains(err.Error(), "LeaseName") || !strings.Contains(err.Error(), "RetryPeriod") {
		t.Errorf("contradicting options: %v, want both contradictions reported", err)
	}

	dir := t.TempDir()
	serviceAccountNamespace = filepath.Join(dir, "namespace")
	t.Cleanup(func() { serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace" })
	if err := os.WriteFile(serviceAccountNamespace, []byte("pod-ns\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep := false
	inCluster := manager.Options{}
	lk, err = ManagerOptions(&inCluster, cfg, Options{LeaseName: "x", BinaryVersion: "1.36.0", ReleaseOnCancel: &keep})
	if err != nil {
		t.Fatal(err)
	}
	if lk.Describe() != "pod-ns/x" {
		t.Errorf("Lease %s, want the pod's namespace", lk.Describe())
	}
	if inCluster.LeaderElectionReleaseOnCancel || inCluster.GracefulShutdownTimeout != nil {
		t.Errorf("ReleaseOnCancel false: release %v, GracefulShutdownTimeout %v; want neither set", inCluster.LeaderElectionReleaseOnCancel, inCluster.GracefulShutdownTimeout)
	}
}

// TestManagersLoggerAndMetrics: the adapter logs to the manager's logger,
// saying why it waits for leader runnables without a limit, and the
// candidate's metrics go to the registry the options name.
func TestManagersLoggerAndMetrics(t *testing.T) {
	var lines []string
	opts := manager.Options{Logger: funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})}
	reg := prometheus.NewPedanticRegistry()
	if _, err := ManagerOptions(&opts, &rest.Config{Host: "https://127.0.0.1:6443"},
		Options{Namespace: "ns", LeaseName: "my-manager", BinaryVersion: "v0.3.1", Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "GracefulShutdownTimeout is not set") }) {
		t.Errorf("the manager's logger was not told why shutdown waits for leader runnables: %q", lines)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == "cle_candidate_leading" }) {
		t.Error("cle_candidate_leading is not on the registry given")
	}
}
