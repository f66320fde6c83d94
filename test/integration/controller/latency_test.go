package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// Election latency on the real server, measured on this process's clock from
// just before the candidate's create request is sent to the moment the Lease
// write arrives on a watch. Run with, e.g.:
//
//	CLE_KUBE_BIN_DIR=$(hack/kube-bin.sh) go test ./test/integration/controller \
//	  -run '^$' -bench Latency -benchtime 9x
//
// Each iteration uses a fresh Lease; the figures reported are the median and
// the maximum over the iterations.

// BenchmarkColdElectionLatency: a fresh candidate for a Lease that does not
// exist, until the Lease is created naming it.
func BenchmarkColdElectionLatency(b *testing.B) {
	e, leases := benchEnv(b)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("cold-%d", i)
		begin := time.Now()
		e.createCandidate(name, cand{name: name + "-a", binary: "1.36.0", emulation: "1.36.0"})
		waitEvent(b, leases, name, func(l *coordinationv1.Lease) bool { return holderIs(name + "-a")(l) })
		took = append(took, time.Since(begin))
	}
	reportLatency(b, took)
}

// BenchmarkPreferredHolderLatency: a better candidate joins a Lease held by a
// live candidate, until preferredHolder names it.
func BenchmarkPreferredHolderLatency(b *testing.B) {
	e, leases := benchEnv(b)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("preferred-%d", i)
		e.createCandidate(name, cand{name: name + "-a", binary: "1.36.0", emulation: "1.36.0"})
		waitEvent(b, leases, name, func(l *coordinationv1.Lease) bool { return holderIs(name + "-a")(l) })
		begin := time.Now()
		e.createCandidate(name, cand{name: name + "-b", binary: "1.36.0", emulation: "1.35.0"})
		waitEvent(b, leases, name, func(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.PreferredHolder, "") == name+"-b" })
		took = append(took, time.Since(begin))
	}
	reportLatency(b, took)
}

// benchEnv starts a controller on a fresh namespace and a watch on its Leases.
func benchEnv(b *testing.B) (*env, watch.Interface) {
	b.Helper()
	ns := server.CreateNamespace(b)
	server.StartController(b, framework.ControllerOptions{Namespaces: []string{ns}, Controller: controller.Options{}})
	client := server.Client()
	w, err := client.CoordinationV1().Leases(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	return &env{t: b, ns: ns, client: client}, w
}

// waitEvent reads the watch until a Lease called name satisfies cond.
func waitEvent(b *testing.B, w watch.Interface, name string, cond func(*coordinationv1.Lease) bool) {
	b.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("Lease watch closed")
			}
			if l, isLease := ev.Object.(*coordinationv1.Lease); isLease && l.Name == name && cond(l) {
				return
			}
		case <-timeout:
			b.Fatalf("Lease %s: condition not reached within 30s", name)
		}
	}
}

func reportLatency(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	median := took[len(took)/2]
	if len(took)%2 == 0 {
		median = (took[len(took)/2-1] + took[len(took)/2]) / 2
	}
	b.ReportMetric(float64(median.Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max")
	b.Logf("%d runs: median %s, min %s, max %s", len(took), median, took[0], took[len(took)-1])
}
