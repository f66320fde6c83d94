// Package gateoff checks the test environment with the
// CoordinatedLeaderElection gate off, as on most clusters: kube-apiserver
// drops the coordinated election fields of a Lease.
package gateoff

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{}, func(s *framework.Server) { server = s })
}

func TestLeaseCoordinatedFieldsStripped(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	leases := server.Client().CoordinationV1().Leases(ns)

	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "fields"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:  ptr.To("a"),
			Strategy:        ptr.To(coordinationv1.OldestEmulationVersion),
			PreferredHolder: ptr.To("b"),
		},
	}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Lease: %v", err)
	}
	got, err := leases.Get(ctx, "fields", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease: %v", err)
	}
	if got.Spec.Strategy != nil || got.Spec.PreferredHolder != nil {
		t.Errorf("gate off: stored strategy = %v, preferredHolder = %v; want both stripped", ptr.Deref(got.Spec.Strategy, ""), ptr.Deref(got.Spec.PreferredHolder, ""))
	}
	if ptr.Deref(got.Spec.HolderIdentity, "") != "a" {
		t.Errorf("holderIdentity = %q, want a", ptr.Deref(got.Spec.HolderIdentity, ""))
	}

	// The fields are dropped on update too, not only on create.
	got.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
	got.Spec.PreferredHolder = ptr.To("b")
	updated, err := leases.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update Lease: %v", err)
	}
	if updated.Spec.Strategy != nil || updated.Spec.PreferredHolder != nil {
		t.Errorf("gate off: updated strategy = %v, preferredHolder = %v; want both stripped", ptr.Deref(updated.Spec.Strategy, ""), ptr.Deref(updated.Spec.PreferredHolder, ""))
	}
}
