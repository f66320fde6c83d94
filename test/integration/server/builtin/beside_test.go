package builtin

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/strategy"
	"github.com/cle-dev/cle/test/integration/framework"
)

// TestCleBesideTheBuiltinController runs cle-controller in native mode on a
// server whose built-in election controller runs, as on a cluster with the
// CoordinatedLeaderElection gate on: kube-apiserver holds the lock they
// share and elects the Lease of OldestEmulationVersion, and cle-controller,
// under its own lock, elects the Leases of cle.dev/Priority and
// cle.dev/OldestEmulationVersion. Each Lease gets its best candidate, only
// its own controller elects it, and nothing flaps; the same once
// kube-apiserver has been restarted, which takes its lock back.
func TestCleBesideTheBuiltinController(t *testing.T) {
	ctx := t.Context()
	client := server.Client()
	before := waitBuiltinHoldsItsLock(t, "")

	ns := server.CreateNamespace(t)
	c, kubeconfig := startCleController(t, ns)
	addr := framework.ServingAddress(t, c, "/metrics")
	scrape := func(ctx context.Context) ([]*dto.MetricFamily, error) {
		return framework.Scrape(ctx, "https://"+addr+"/metrics", server.Config().BearerToken)
	}

	// Both act: kube-apiserver holds its lock, cle-controller its own.
	var last string
	bothAct := func(ctx context.Context) (bool, error) {
		fams, err := scrape(ctx)
		if err != nil && ctx.Err() == nil {
			t.Logf("scrape: %v", err)
		}
		last = fmt.Sprintf("acting{kube-apiserver}=%v acting{cle}=%v master{cle-controller}=%v master{%s}=%v (scrape: %v)",
			promtest.Value(fams, "cle_election_controller_acting", "controller", access.ActingKubeAPIServer),
			promtest.Value(fams, "cle_election_controller_acting", "controller", access.ActingCle),
			promtest.Value(fams, "leader_election_master_status", "name", "cle-controller"), access.NativeControllerLock,
			promtest.Value(fams, "leader_election_master_status", "name", access.NativeControllerLock), err)
		return err == nil &&
			promtest.Value(fams, "cle_election_controller_acting", "controller", access.ActingKubeAPIServer) == 1 &&
			promtest.Value(fams, "cle_election_controller_acting", "controller", access.ActingCle) == 1 &&
			promtest.Value(fams, "leader_election_master_status", "name", "cle-controller") == 1 &&
			promtest.Value(fams, "leader_election_master_status", "name", access.NativeControllerLock) == 0, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, bothAct); err != nil {
		t.Fatalf("cle_election_controller_acting never said that both controllers act, each under its own lock: %v; last %s", err, last)
	}

	// Three Leases, two candidates each: the one that emulates 1.35 is the
	// best under every strategy (all priorities are 0).
	leases := map[string]coordinationv1.CoordinatedLeaseStrategy{
		"by-kube-apiserver": coordinationv1.OldestEmulationVersion,
		"by-cle-priority":   strategy.PriorityName,
		"by-cle-oldest":     strategy.OldestEmulationVersionByCleName,
	}
	for lease, strat := range leases {
		for _, emulation := range []string{"1.35.0", "1.36.0"} {
			framework.RunCandidate(t, candidate.Config{
				RestConfig: server.Config(), APIMode: string(access.ModeNative), Namespace: ns, LeaseName: lease,
				Identity: lease + "-" + emulation, BinaryVersion: "1.36.0", EmulationVersion: emulation, Strategy: strat,
				LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			})
		}
	}
	settled := func(phase string) map[string]int32 {
		t.Helper()
		var terms map[string]int32
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			terms = map[string]int32{}
			for lease := range leases {
				l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
				if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != lease+"-1.35.0" || l.Spec.PreferredHolder != nil {
					return false, nil
				}
				terms[lease] = ptr.Deref(l.Spec.LeaseTransitions, 0)
			}
			return true, nil
		}); err != nil {
			t.Fatalf("%s: the Leases never all had their best candidate as holder: %v", phase, err)
		}
		// Nothing flaps: for three lease durations every holder keeps its
		// term.
		end := time.Now().Add(12 * time.Second)
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			for lease, term := range terms {
				l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
				if err != nil {
					continue
				}
				if holder, now := ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0); holder != lease+"-1.35.0" || now != term {
					t.Errorf("%s: Lease %s moved to %q, term %d (was term %d of %s-1.35.0)", phase, lease, holder, now, term, lease)
					return true, nil
				}
			}
			return time.Now().After(end), nil
		})
		return terms
	}
	settled("first elections")
	checkWhoElected(t, ns, leases)
	fams, err := scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for lease, want := range map[string]string{"by-kube-apiserver": "unmanaged", "by-cle-priority": "optimal", "by-cle-oldest": "optimal"} {
		if v := promtest.Value(fams, "cle_lease_state", "namespace", ns, "lease", lease, "state", want); v != 1 {
			t.Errorf("cle_lease_state{lease=%q, state=%q} = %v, want 1", lease, want, v)
		}
	}

	// kubectl cle status says who elects what.
	kubectlCle := framework.BuildCommand(t, "github.com/cle-dev/cle/cmd/kubectl-cle")
	out, err := exec.CommandContext(ctx, kubectlCle, "status", "--kubeconfig", kubeconfig, "-n", ns).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl cle status: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Election controller: kube-apiserver (holder " + before + ")",
		"Election controller of cle.dev strategies: cle (holder ",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl cle status does not say %q:\n%s", want, out)
		}
	}

	// kube-apiserver restarts: its new process takes its lock back once the
	// old one's has run out; cle-controller, which defers to it, keeps to
	// cle's strategies throughout.
	if err := server.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	if after := waitBuiltinHoldsItsLock(t, before); after == before {
		t.Fatalf("kube-apiserver's lock still names %s, the process before the restart", before)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, bothAct); err != nil {
		t.Fatalf("after the restart, cle_election_controller_acting never said that both controllers act again: %v; last %s", err, last)
	}
	settled("after kube-apiserver's restart")
	checkWhoElected(t, ns, leases)
	l, err := client.CoordinationV1().Leases(access.ProbeNamespace).Get(ctx, access.NativeControllerLock, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Labels[access.ControllerHolderLabel]; ok {
		t.Errorf("cle-controller held %s at some point: it carries %s", access.NativeControllerLock, access.ControllerHolderLabel)
	}
}

// waitBuiltinHoldsItsLock waits until kube-apiserver's election controller
// holds its lock, under another identity than not, and returns the holder.
func waitBuiltinHoldsItsLock(t *testing.T, not string) string {
	t.Helper()
	var holder string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := server.Client().CoordinationV1().Leases(access.ProbeNamespace).Get(ctx, access.NativeControllerLock, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		// A label cle-controller once put on the lock stays when
		// kube-apiserver's elector takes it: who holds it now is the
		// label's hash of the holder.
		return holder != "" && holder != not && !access.HeldByCle(l), nil
	}); err != nil {
		t.Fatalf("the built-in controller never held %s (other than %q): %v", access.NativeControllerLock, not, err)
	}
	return holder
}

// checkWhoElected checks, from the LeaderElected Events cle-controller
// reports, that it elected each Lease of cle's strategies and never the one
// of OldestEmulationVersion.
func checkWhoElected(t *testing.T, ns string, leases map[string]coordinationv1.CoordinatedLeaseStrategy) {
	t.Helper()
	evs, err := server.Client().EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	elected := map[string]int{}
	for _, ev := range evs.Items {
		if ev.Reason == controller.ReasonLeaderElected && ev.ReportingController == "cle-controller" && ev.Regarding.Kind == "Lease" {
			elected[ev.Regarding.Name]++
		}
	}
	for lease, strat := range leases {
		switch n := elected[lease]; {
		case strategy.Builtin(strat) && n > 0:
			t.Errorf("cle-controller elected Lease %s of %s (%d LeaderElected Events) while kube-apiserver's controller acted", lease, strat, n)
		case !strategy.Builtin(strat) && n == 0:
			t.Errorf("cle-controller never elected Lease %s of %s", lease, strat)
		}
	}
	t.Logf("LeaderElected Events of cle-controller: %s", fmt.Sprint(elected))
}

// TestBuiltinControllerOnCleLeases shows what kube-apiserver's election
// controller does to a Lease of cle's strategies while no cle-controller
// runs: it pings the candidates, then creates the Lease with their strategy
// and no holder. cle-controller, started then, elects it.
func TestBuiltinControllerOnCleLeases(t *testing.T) {
	ctx := t.Context()
	client := server.Client()
	waitBuiltinHoldsItsLock(t, "")
	ns := server.CreateNamespace(t)
	candidates := client.CoordinationV1beta1().LeaseCandidates(ns)
	const lease = "by-cle"
	for name, priority := range map[string]string{"hi": "10", "lo": "0"} {
		if _, err := candidates.Create(ctx, &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{strategy.PriorityAnnotation: priority}},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: lease, BinaryVersion: "1.36.0", EmulationVersion: "1.36.0", Strategy: strategy.PriorityName,
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Minute))),
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	acc, err := server.Access(ctx, "native")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hi", "lo"} {
		framework.AnswerPings(t, acc.LeaseCandidates(ns), name)
	}

	var created *coordinationv1.Lease
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		created = l
		return true, nil
	}); err != nil {
		t.Fatalf("kube-apiserver's controller did not create Lease %s within 30s: %v", lease, err)
	}
	if s := ptr.Deref(created.Spec.Strategy, ""); s != strategy.PriorityName || created.Spec.HolderIdentity != nil {
		t.Errorf("kube-apiserver's controller created Lease %s with strategy %q and holder %v; want %s and no holder", lease, s, created.Spec.HolderIdentity, strategy.PriorityName)
	}
	for _, name := range []string{"hi", "lo"} {
		lc, err := candidates.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if lc.Spec.PingTime == nil {
			t.Errorf("kube-apiserver's controller created the Lease without pinging %s", name)
		}
	}

	startCleController(t, ns)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == "hi", nil
	}); err != nil {
		t.Fatalf("cle-controller did not name hi the holder of the Lease kube-apiserver's controller created: %v", err)
	}
}

// startCleController runs cle-controller in native mode, electing in ns,
// with its locks in kube-system and short timings; it returns the process
// and its kubeconfig.
func startCleController(t *testing.T, ns string) (*framework.Child, string) {
	t.Helper()
	bin := framework.BuildCommand(t, "github.com/cle-dev/cle/cmd/cle-controller")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	c := framework.StartChild(t, "cle-controller", bin, "--kubeconfig="+kubeconfig, "--api-mode=native", "--namespaces="+ns,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "-v=2")
	return c, kubeconfig
}
