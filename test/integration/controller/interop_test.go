package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// leadership records when client-go electors started and stopped leading, on
// this process's monotonic clock.
type leadership struct {
	mu      sync.Mutex
	started map[string]time.Time
	stopped map[string]time.Time
}

func (l *leadership) record(m *map[string]time.Time, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if *m == nil {
		*m = map[string]time.Time{}
	}
	(*m)[id] = time.Now()
}

func (l *leadership) get(id string) (started, stopped time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started[id], l.stopped[id]
}

// runClientGoCandidate runs client-go's own coordinated leader election for
// id: a LeaseCandidate from leaderelection.NewCandidate and an elector with
// Coordinated set, which never takes a Lease itself.
func runClientGoCandidate(ctx context.Context, t *testing.T, e *env, wg *sync.WaitGroup, rec *leadership, lease, id, emulation string) {
	t.Helper()
	lc, sync, err := leaderelection.NewCandidate(e.client, e.ns, id, lease, "1.36.0", emulation, coordinationv1.OldestEmulationVersion)
	if err != nil {
		t.Fatalf("NewCandidate %s: %v", id, err)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.ns, Name: lease},
			Client:     e.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RetryPeriod:   250 * time.Millisecond,
		Coordinated:   true,
		Name:          id,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { rec.record(&rec.started, id) },
			OnStoppedLeading: func() { rec.record(&rec.stopped, id) },
		},
	})
	if err != nil {
		t.Fatalf("NewLeaderElector %s: %v", id, err)
	}
	wg.Go(func() { lc.Run(ctx) })
	wg.Go(func() {
		sync.WaitForCacheSync(ctx.Done())
		le.Run(ctx)
	})
}

// TestClientGoCoordinatedElectors: client-go's own coordinated candidates are
// elected by emulation version, and a better one joining preempts the holder
// through preferredHolder, which client-go's elector honours by no longer
// renewing.
func TestClientGoCoordinatedElectors(t *testing.T) {
	e := startController(t, modes[0], controller.Options{LeaseDuration: 3 * time.Second})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	rec := &leadership{}
	leading := func(id string) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			started, _ := rec.get(id)
			return !started.IsZero(), nil
		}
	}

	runClientGoCandidate(ctx, t, e, &wg, rec, "interop", "v136", "1.36.0")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, leading("v136")); err != nil {
		t.Fatalf("the only candidate v136 never led: %v", err)
	}

	runClientGoCandidate(ctx, t, e, &wg, rec, "interop", "v135", "1.35.0")
	runClientGoCandidate(ctx, t, e, &wg, rec, "interop", "v134", "1.34.0")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 60*time.Second, true, leading("v134")); err != nil {
		t.Fatalf("v134 (oldest emulation) never led: %v", err)
	}
	_, v136Stopped := rec.get("v136")
	v134Started, _ := rec.get("v134")
	if v136Stopped.IsZero() || !v136Stopped.Before(v134Started) {
		t.Errorf("v136 stopped leading at %v, v134 started at %v: want the old leader stopped first", v136Stopped, v134Started)
	}
	if started, _ := rec.get("v135"); !started.IsZero() {
		t.Errorf("v135 led at %v; it is never the best candidate once v134 exists", started)
	}
	lease := e.waitLease("interop", 10*time.Second, "held by v134, no preferredHolder", func(l *coordinationv1.Lease) bool {
		return holderIs("v134")(l) && l.Spec.PreferredHolder == nil
	})
	// v134 keeps renewing, and the controller leaves it alone.
	w := e.watchControllerWrites(t)
	e.waitLease("interop", 10*time.Second, "v134 renewing", func(l *coordinationv1.Lease) bool {
		return holderIs("v134")(l) && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(lease.Spec.RenewTime.Time)
	})
	if n := w.countFor(2 * time.Second); n != 0 {
		t.Errorf("controller wrote the Lease %d times while the best candidate held and renewed it, want 0", n)
	}
}

// TestKubeSchedulers: three real kube-scheduler processes with the
// CoordinatedLeaderElection gate, one emulating the release before theirs
// and two their own (1.36, 1.37 and 1.37 for 1.37 binaries): the older one
// leads kube-system/kube-scheduler.
func TestKubeSchedulers(t *testing.T) {
	bin, err := framework.Binary("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	minor, err := framework.BinaryMinor("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	older, own := fmt.Sprintf("1.%d", minor-1), fmt.Sprintf("1.%d", minor)
	const ns, leaseName = metav1.NamespaceSystem, "kube-scheduler"
	client := server.Client()
	cleanup := func() {
		ctx := context.Background()
		if err := client.CoordinationV1().Leases(ns).Delete(ctx, leaseName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete Lease: %v", err)
		}
		cands, err := client.CoordinationV1beta1().LeaseCandidates(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("list candidates: %v", err)
			return
		}
		for _, lc := range cands.Items {
			if lc.Spec.LeaseName == leaseName {
				_ = client.CoordinationV1beta1().LeaseCandidates(ns).Delete(ctx, lc.Name, metav1.DeleteOptions{})
			}
		}
	}
	cleanup() // a previous run (-count) may have left them
	// Cleanups run last-in first-out: the schedulers stop, then the
	// controller, and only then are their objects deleted.
	t.Cleanup(cleanup)
	server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}})

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	for i, emulated := range []string{older, own, own} {
		framework.StartChild(t, fmt.Sprintf("kube-scheduler-%d-%s", i, emulated), bin,
			"--kubeconfig="+kubeconfig,
			"--authentication-kubeconfig="+kubeconfig,
			"--authorization-kubeconfig="+kubeconfig,
			"--feature-gates=CoordinatedLeaderElection=true",
			"--emulated-version="+emulated,
			"--leader-elect=true",
			"--leader-elect-lease-duration=4s",
			"--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=500ms",
			"--secure-port=0",
			"-v=2",
		)
	}

	// The candidate that emulates the older release is the one to lead: find
	// its identity.
	e := newEnv(t, modes[0], ns)
	var want string
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		cands, err := client.CoordinationV1beta1().LeaseCandidates(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, lc := range cands.Items {
			if lc.Spec.LeaseName != leaseName {
				continue
			}
			n++
			if lc.Spec.EmulationVersion == older+".0" {
				want = lc.Name
			}
		}
		return n == 3 && want != "", nil
	}); err != nil {
		t.Fatalf("three kube-scheduler candidates, one emulating %s.0, never registered: %v", older, err)
	}
	lease := e.waitLease(leaseName, 90*time.Second, "held by the "+older+" scheduler "+want, func(l *coordinationv1.Lease) bool {
		return holderIs(want)(l) && l.Spec.PreferredHolder == nil
	})
	// It leads for real: it renews the Lease itself.
	e.waitLease(leaseName, 30*time.Second, "renewed by "+want, func(l *coordinationv1.Lease) bool {
		return holderIs(want)(l) && l.Spec.RenewTime != nil && lease.Spec.RenewTime != nil && l.Spec.RenewTime.After(lease.Spec.RenewTime.Time)
	})
	if got := ptr.Deref(lease.Spec.Strategy, ""); got != coordinationv1.OldestEmulationVersion {
		t.Errorf("strategy = %q, want %q", got, coordinationv1.OldestEmulationVersion)
	}
}
