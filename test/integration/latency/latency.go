// Package latency measures how fast an election controller elects, on a real
// kube-apiserver, with the same procedure whichever controller runs: cle's or
// the one built into kube-apiserver. The test packages call it from their
// benchmarks, so `make bench` prints both side by side.
//
// Times are taken on this process's clock, from just before the create
// request of the candidate that triggers the election is sent to the moment
// the resulting Lease write arrives on a watch. Candidates are fresh (created
// with renewTime = now) and answer pings at once, as the candidate library
// does. The figures reported are the median and the maximum.
package latency

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ColdElection: a fresh candidate for a Lease that does not exist, until the
// Lease names it.
func ColdElection(b *testing.B, client kubernetes.Interface, ns string) {
	coldElection(b, newRunner(b, client, ns, 0))
}

// SkewedColdElection is ColdElection with a candidate whose clock runs a
// minute behind: its renewTime looks a minute old to anyone who compares it
// with their own clock.
func SkewedColdElection(b *testing.B, client kubernetes.Interface, ns string) {
	coldElection(b, newRunner(b, client, ns, -time.Minute))
}

func coldElection(b *testing.B, r *runner) {
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		lease := fmt.Sprintf("cold-%d", i)
		begin := time.Now()
		r.elect(lease, lease+"-a")
		took = append(took, time.Since(begin))
	}
	report(b, took)
}

// PreferredHolder: a better candidate joins a Lease held by a live candidate,
// until preferredHolder names it.
func PreferredHolder(b *testing.B, client kubernetes.Interface, ns string) {
	r := newRunner(b, client, ns, 0)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		lease := fmt.Sprintf("preferred-%d", i)
		r.elect(lease, lease+"-a")
		begin := time.Now()
		r.createCandidate(lease, lease+"-b", "1.35.0")
		r.waitLease(lease, "preferredHolder "+lease+"-b", func(l *coordinationv1.Lease) bool {
			return ptr.Deref(l.Spec.PreferredHolder, "") == lease+"-b"
		})
		took = append(took, time.Since(begin))
	}
	report(b, took)
}

type runner struct {
	b      *testing.B
	client kubernetes.Interface
	ns     string
	leases watch.Interface
	skew   time.Duration // of the candidates' clock
}

// newRunner watches the namespace's Leases and answers every ping of its
// candidates until the benchmark ends. The candidates' clock is off by skew.
func newRunner(b *testing.B, client kubernetes.Interface, ns string, skew time.Duration) *runner {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := client.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		w.Stop()
		wg.Wait()
	})
	candidates := client.CoordinationV1beta1().LeaseCandidates(ns)
	cw, err := candidates.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	wg.Go(func() {
		defer cw.Stop()
		for ev := range cw.ResultChan() {
			lc, ok := ev.Object.(*coordinationv1beta1.LeaseCandidate)
			if !ok || ev.Type != watch.Modified || lc.Spec.PingTime == nil || (lc.Spec.RenewTime != nil && !lc.Spec.RenewTime.Before(lc.Spec.PingTime)) {
				continue
			}
			renew := metav1.NewMicroTime(time.Now().Add(skew))
			if renew.Before(lc.Spec.PingTime) {
				renew = *lc.Spec.PingTime
			}
			lc.Spec.RenewTime = &renew
			_, _ = candidates.Update(ctx, lc, metav1.UpdateOptions{}) // a conflict means a newer version follows on the watch
		}
	})
	return &runner{b: b, client: client, ns: ns, leases: w, skew: skew}
}

// elect creates the only candidate of a Lease and waits until it holds it.
func (r *runner) elect(lease, name string) {
	r.b.Helper()
	r.createCandidate(lease, name, "1.36.0")
	r.waitLease(lease, "holder "+name, func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == name
	})
}

func (r *runner) createCandidate(lease, name, emulation string) {
	r.b.Helper()
	_, err := r.client.CoordinationV1beta1().LeaseCandidates(r.ns).Create(context.Background(), &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        lease,
			BinaryVersion:    "1.36.0",
			EmulationVersion: emulation,
			Strategy:         coordinationv1.OldestEmulationVersion,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now().Add(r.skew))),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		r.b.Fatalf("create candidate %s: %v", name, err)
	}
}

// waitLease reads the Lease watch until the Lease satisfies cond.
func (r *runner) waitLease(name, what string, cond func(*coordinationv1.Lease) bool) {
	r.b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 0, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case ev, ok := <-r.leases.ResultChan():
			if !ok {
				return false, fmt.Errorf("Lease watch closed")
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			return isLease && l.Name == name && cond(l), nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	})
	if err != nil {
		r.b.Fatalf("Lease %s: %s not reached: %v", name, what, err)
	}
}

func report(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	median := took[len(took)/2]
	if len(took)%2 == 0 {
		median = (took[len(took)/2-1] + took[len(took)/2]) / 2
	}
	b.ReportMetric(float64(median.Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max")
	b.Logf("%d runs: median %s, min %s, max %s", len(took), median, took[0], took[len(took)-1])
}
