// Package flapping checks that cle's informers keep up with a kube-apiserver
// that restarts again and again, where client-go's reflector alone falls
// up to a minute behind.
package flapping

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{PortableCRD: true}, func(s *framework.Server) { server = s })
}

// restarts is how many times kube-apiserver is restarted back to back: each
// one refuses connections for a few seconds and expires every watch, and
// client-go's reflector backs off a step or more for each.
const restarts = 8

// seenBound is the longest cle's informers may take to show a change made
// once kube-apiserver is back: a retry at most 3 s after it is ready, a list
// and a watch, with room to spare on a loaded machine.
const seenBound = 15 * time.Second

// TestInformersRideOutRestarts restarts kube-apiserver again and again while
// cle's Lease and LeaseCandidate informers (portable mode) run, then changes
// a Lease and a LeaseCandidate: cle's informers show both within seenBound.
// A plain client-go Lease informer runs alongside for comparison; how long
// it takes is logged, not asserted.
func TestInformersRideOutRestarts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := server.CreateNamespace(t)
	clients, err := access.NewClients(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.NewPortable(clients)
	if err != nil {
		t.Fatal(err)
	}
	leases := server.Client().CoordinationV1().Leases(ns)
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cands := acc.LeaseCandidates(ns)
	lc, err := cands.Create(ctx, candidate("probe"))
	if err != nil {
		t.Fatal(err)
	}

	leaseInf := acc.NewLeaseInformer(ns, 0, nil)
	candInf := acc.NewCandidateInformer(ns, 0, nil)
	plain := informers.NewSharedInformerFactoryWithOptions(server.Client(), 0, informers.WithNamespace(ns)).Coordination().V1().Leases().Informer()
	for _, inf := range []cache.SharedIndexInformer{leaseInf, candInf, plain} {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), leaseInf.HasSynced, candInf.HasSynced, plain.HasSynced) {
		t.Fatal("informers did not sync")
	}

	for i := range restarts {
		if err := server.RestartAPIServer(ctx); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
		// A write between restarts moves etcd's revision on, so that
		// every watch resumed after the next restart has expired.
		if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("noise-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("write after restart %d: %v", i+1, err)
		}
	}

	changed := time.Now()
	l, err := leases.Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("after-restarts")
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if lc, err = cands.Get(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	lc.Spec.BinaryVersion = "1.36.0"
	if _, err := cands.Update(ctx, lc); err != nil {
		t.Fatal(err)
	}

	holderIs := func(inf cache.SharedIndexInformer) func() bool {
		return func() bool {
			obj, ok, _ := inf.GetStore().GetByKey(ns + "/probe")
			l, _ := obj.(*coordinationv1.Lease)
			return ok && ptr.Deref(l.Spec.HolderIdentity, "") == "after-restarts"
		}
	}
	candUpdated := func() bool {
		obj, ok, _ := candInf.GetStore().GetByKey(ns + "/probe")
		c, _ := obj.(*coordinationv1beta1.LeaseCandidate)
		return ok && c.Spec.BinaryVersion == "1.36.0"
	}
	var leaseAfter, candAfter, plainAfter time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { leaseAfter = seenAfter(ctx, changed, holderIs(leaseInf)) })
	wg.Go(func() { candAfter = seenAfter(ctx, changed, candUpdated) })
	wg.Go(func() { plainAfter = seenAfter(ctx, changed, holderIs(plain)) })
	wg.Wait()
	t.Logf("after %d restarts of kube-apiserver, a change is seen by: cle's Lease informer %s, cle's LeaseCandidate informer %s, client-go's Lease informer %s",
		restarts, describe(leaseAfter), describe(candAfter), describe(plainAfter))
	if leaseAfter < 0 || candAfter < 0 {
		t.Errorf("cle's informers did not show the changes within %s", seenBound)
	}
}

// seenAfter polls cond until it holds or seenBound has passed since start,
// and returns how long after start it held (-1 if it did not).
func seenAfter(ctx context.Context, start time.Time, cond func() bool) time.Duration {
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, seenBound-time.Since(start), true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		return -1
	}
	return time.Since(start)
}

func describe(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("not within %s", seenBound)
	}
	return d.Round(time.Millisecond).String()
}

func candidate(name string) *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        "probe",
			BinaryVersion:    "1.35.0",
			EmulationVersion: "1.35.0",
			Strategy:         coordinationv1.OldestEmulationVersion,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
}
