package cle

import (
	"errors"
	"testing"
	"time"

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
	if *opts.LeaseDuration != DefaultLeaseDuration || *opts.RenewDeadline != DefaultRenewDeadline || *opts.RetryPeriod != time.Second {
		t.Errorf("durations %s/%s/%s, want the defaults and RetryPeriod 1s", *opts.LeaseDuration, *opts.RenewDeadline, *opts.RetryPeriod)
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
	if _, err := ManagerOptions(nil, cfg, Options{}); err == nil {
		t.Error("nil options accepted")
	}
}
