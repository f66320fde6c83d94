package app

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
)

func actingValues(t *testing.T, w *actingWatch) (cle, apiserver float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(w.collector()); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return promtest.Value(fams, "cle_election_controller_acting", "controller", "cle"),
		promtest.Value(fams, "cle_election_controller_acting", "controller", "kube-apiserver")
}

// TestActingMetric: the lock's holder acts while its renewals keep coming,
// by this process's clock; a replica without leader election acts whatever
// the lock says.
func TestActingMetric(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	w := newActingWatch(fake.NewClientset(), access.ModeNative, "kube-system", access.NativeControllerLock)
	w.now = func() time.Time { return now }
	if cle, api := actingValues(t, w); cle != 0 || api != 0 {
		t.Errorf("no lock: cle %v, kube-apiserver %v; want 0 and 0", cle, api)
	}
	lock := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("apiserver-a"), LeaseDurationSeconds: ptr.To[int32](15)}}
	w.observe(lock)
	if cle, api := actingValues(t, w); cle != 0 || api != 1 {
		t.Errorf("kube-apiserver holds the lock: cle %v, kube-apiserver %v; want 0 and 1", cle, api)
	}
	w.observe(lock.DeepCopy()) // a resync: nothing renewed
	now = now.Add(15 * time.Second)
	if cle, api := actingValues(t, w); cle != 0 || api != 0 {
		t.Errorf("no renewal for the lease duration: cle %v, kube-apiserver %v; want 0 and 0", cle, api)
	}
	w.alwaysCle = true
	if cle, _ := actingValues(t, w); cle != 1 {
		t.Errorf("--leader-elect=false: cle %v, want 1", cle)
	}
}

// TestActingMetricBesideKubeAPIServer: in native mode cle-controller's own
// lock says whether cle acts, and the lock it shares with kube-apiserver's
// controller whether kube-apiserver does: both may at once.
func TestActingMetricBesideKubeAPIServer(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	w := newActingWatch(fake.NewClientset(), access.ModePortable, "kube-system", access.PortableControllerLock)
	w.shared = newActingWatch(fake.NewClientset(), access.ModeNative, "kube-system", access.NativeControllerLock)
	w.now, w.shared.now = clock, clock
	held := func(holder string, cle bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15)}}
		if cle {
			l.Labels = map[string]string{access.ControllerHolderLabel: access.ControllerHolderHash(holder)}
		}
		return l
	}
	w.observe(held("cle-a", false))
	w.shared.observe(held("apiserver-a", false))
	if cle, api := actingValues(t, w); cle != 1 || api != 1 {
		t.Errorf("cle holds its lock, kube-apiserver the shared one: cle %v, kube-apiserver %v; want 1 and 1", cle, api)
	}
	w.shared.observe(held("cle-a", true))
	if cle, api := actingValues(t, w); cle != 1 || api != 0 {
		t.Errorf("cle holds both locks: cle %v, kube-apiserver %v; want 1 and 0", cle, api)
	}
	now = now.Add(15 * time.Second)
	w.shared.observe(held("apiserver-b", false))
	if cle, api := actingValues(t, w); cle != 0 || api != 1 {
		t.Errorf("cle's lock not renewed for its lease duration, kube-apiserver holds the shared one: cle %v, kube-apiserver %v; want 0 and 1", cle, api)
	}
}
