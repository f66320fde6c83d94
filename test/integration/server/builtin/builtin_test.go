// Package builtin checks the test environment with the election controller
// built into kube-apiserver running (gate on, not idled): it elects a
// candidate. This is the control for the idled case in the native package.
package builtin

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true}, func(s *framework.Server) { server = s })
}

func TestBuiltinControllerElects(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	client := server.Client()
	candidates := client.CoordinationV1beta1().LeaseCandidates(ns)

	begin := time.Now()
	_, err := candidates.Create(ctx, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "c1"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "elected",
			BinaryVersion:    "1.36.0",
			EmulationVersion: "1.36.0",
			Strategy:         coordinationv1.OldestEmulationVersion,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Minute))),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create LeaseCandidate: %v", err)
	}

	// Act as the candidate: answer pings by renewing, until the Lease names
	// it.
	var pinged bool
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := client.CoordinationV1().Leases(ns).Get(ctx, "elected", metav1.GetOptions{})
		if err == nil {
			return ptr.Deref(lease.Spec.HolderIdentity, "") == "c1", nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		lc, err := candidates.Get(ctx, "c1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if lc.Spec.PingTime != nil && (lc.Spec.RenewTime == nil || lc.Spec.RenewTime.Before(lc.Spec.PingTime)) {
			pinged = true
			lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			if _, err := candidates.Update(ctx, lc, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return false, err
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("built-in controller did not elect c1 within 30s (pinged: %v): %v", pinged, err)
	}
	if !pinged {
		t.Errorf("built-in controller elected without pinging the stale candidate")
	}
	t.Logf("built-in controller elected c1 %s after the candidate was created", time.Since(begin).Round(time.Millisecond))
}
