package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/strategy"
	"github.com/cle-dev/cle/test/integration/framework"
)

// The portable bundle's controller, and the examples' election.
const (
	cleNamespace     = "cle-system"
	cleDeployment    = "cle-controller"
	exampleNamespace = "cle-example"
	exampleLease     = "example"
	exampleName      = "example-candidate"
)

// TestPortableRelease installs the portable bundle and the example
// candidates as a user would, upgrades the candidates, deletes the leader
// and uninstalls it all again.
func TestPortableRelease(t *testing.T) {
	n := cluster
	ctx := context.Background()

	begin := time.Now()
	// As a user applies it from the release's downloads (the stand-in of
	// GitHub's), its image pulled from the registry it was published to.
	portable := n.assetsURL + "/cle-portable.yaml"
	n.kubectl(t, "", "apply", "-f", portable)
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "-f", portable, "--ignore-not-found", "--wait=true", "--timeout=3m")
		n.waitNamespaceGone(t, cleNamespace)
	})
	pods := n.waitDeploymentReady(t, cleNamespace, cleDeployment)
	t.Logf("portable bundle applied; cle-controller's %d Pods Ready in %s", len(pods), time.Since(begin).Round(100*time.Millisecond))

	// The namespace enforces the restricted profile, so that the Pods
	// running in it passed it.
	ns, err := n.client.CoreV1().Namespaces().Get(ctx, cleNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace %s enforces Pod Security %q, want restricted", cleNamespace, got)
	}
	// A Pod with no security context at all is not restricted.
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: n.release.tagRef()}}},
	}
	_, err = n.client.CoreV1().Pods(cleNamespace).Create(ctx, plain, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Fatalf("a Pod without a security context in %s: got %v, want Pod Security admission to forbid it", cleNamespace, err)
	}

	for _, p := range pods {
		c := p.Spec.Containers[0]
		if c.Image != n.release.tagRef()+"@"+n.release.digest {
			t.Errorf("Pod %s runs image %s, want the release's %s@%s", p.Name, c.Image, n.release.tagRef(), n.release.digest)
		}
		if st := p.Status.ContainerStatuses; len(st) == 0 || !strings.HasSuffix(st[0].ImageID, n.release.digest) {
			t.Errorf("Pod %s: container status %+v, want the image ID to be the release's digest", p.Name, st)
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("Pod %s: Ready without readiness and liveness probes", p.Name)
		}
		for _, a := range append(c.Command, c.Args...) {
			if strings.HasPrefix(a, "--kubeconfig") {
				t.Errorf("Pod %s runs with %s, want the in-cluster configuration", p.Name, a)
			}
		}
		if p.Spec.ServiceAccountName != cleDeployment || !hasTokenVolume(p) {
			t.Errorf("Pod %s: ServiceAccount %q, token volume %v; want cle-controller's token mounted", p.Name, p.Spec.ServiceAccountName, hasTokenVolume(p))
		}
	}
	// One replica acts, through its token and the shipped RBAC: it holds
	// its lock in kube-system (identity: its host name, the Pod's name, and
	// a suffix).
	lock := n.waitLease(t, metav1.NamespaceSystem, access.PortableControllerLock, func(holder string) bool {
		for _, p := range pods {
			if strings.HasPrefix(holder, p.Name+"_") {
				return true
			}
		}
		return false
	})
	t.Logf("cle-controller replica %s acts", lock)

	// The candidates, first at 1.35.
	examples, err := os.ReadFile(n.release.bundle("cle-examples.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	old := strings.NewReplacer("--binary-version=1.36.0", "--binary-version=1.35.0", "--emulation-version=1.36.0", "--emulation-version=1.35.0").Replace(string(examples))
	if strings.Count(old, "=1.35.0") != 2 {
		t.Fatalf("cle-examples.yaml no longer runs its candidates at --binary-version=1.36.0 --emulation-version=1.36.0")
	}
	begin = time.Now()
	n.kubectl(t, old, "apply", "-f", "-")
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "-f", n.release.bundle("cle-examples.yaml"), "--ignore-not-found", "--wait=true", "--timeout=3m")
		n.waitNamespaceGone(t, exampleNamespace)
	})
	n.waitDeploymentReady(t, exampleNamespace, exampleName)
	live := func(holder string) bool {
		p, err := n.client.CoreV1().Pods(exampleNamespace).Get(ctx, holder, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp == nil
	}
	first := n.waitLease(t, exampleNamespace, exampleLease, live)
	t.Logf("3 candidates at 1.35 Ready, %s elected, in %s", first, time.Since(begin).Round(100*time.Millisecond))

	// The upgrade: the release's bundle, at 1.36, rolls one Pod at a time.
	rec := n.record(t, exampleNamespace, exampleLease)
	begin = time.Now()
	n.kubectl(t, string(examples), "apply", "-f", "-")
	n.kubectl(t, "", "rollout", "status", "-n", exampleNamespace, "deployment/"+exampleName, "--timeout=5m")
	upgraded := n.waitLease(t, exampleNamespace, exampleLease, func(holder string) bool {
		return live(holder) && rec.version(holder) == "1.36.0"
	})
	t.Logf("rolled to 1.36 in %s; %s leads", time.Since(begin).Round(100*time.Millisecond), upgraded)
	if err := rec.check(t); err != nil {
		t.Fatal(err)
	}

	// The leader's Pod deleted: its candidate hands over on SIGTERM.
	begin = time.Now()
	n.kubectl(t, "", "delete", "pod", "-n", exampleNamespace, upgraded, "--wait=false")
	next := n.waitLease(t, exampleNamespace, exampleLease, func(holder string) bool { return holder != upgraded && live(holder) })
	t.Logf("leader Pod %s deleted: %s leads after %s", upgraded, next, time.Since(begin).Round(100*time.Millisecond))
	n.waitDeploymentReady(t, exampleNamespace, exampleName)

	t.Logf("kubectl cle status -n %s:\n%s", exampleNamespace, n.kubectl(t, "", "cle", "status", "-n", exampleNamespace))
	// On this gate-on server kubectl cle tells from the controllers' locks
	// and the candidates that these elections run in portable mode.
	if out := n.kubectl(t, "", "cle", "status", "-n", exampleNamespace, exampleLease, "-o", "jsonpath={.items[0].apiMode} {.items[0].holder} {.items[0].state}"); out != "portable "+next+" optimal" {
		t.Errorf("kubectl cle status says %q, want portable mode, holder %s, optimal", out, next)
	}
}

// TestStaticPodNative runs cle-controller as a static Pod from the release's
// static-Pod bundle, in native mode on this gate-on server, and has it
// elect among real kube-scheduler candidates.
func TestStaticPodNative(t *testing.T) {
	n := cluster
	ctx := context.Background()

	begin := time.Now()
	mirror := n.startStaticPod(t)
	// The built-in controller stood by from the start (idled, as make run
	// does); its Lease now goes to cle-controller, which renews it.
	if err := n.server.HandBuiltinControllerLease(ctx, staticPodIdentity); err != nil {
		t.Fatal(err)
	}
	n.waitPodReady(t, metav1.NamespaceSystem, mirror)
	t.Logf("static Pod %s/%s Ready and holding %s/%s in %s", metav1.NamespaceSystem, mirror,
		framework.BuiltinControllerLeaseNamespace, framework.BuiltinControllerLeaseName, time.Since(begin).Round(100*time.Millisecond))

	begin = time.Now()
	schedulers, byVersion := n.startSchedulers(t)
	oldest := n.waitLease(t, metav1.NamespaceSystem, "kube-scheduler", func(holder string) bool { return byVersion("1.35")[holder] })
	t.Logf("kube-scheduler candidates started; the 1.35 one, %s, elected in %s", oldest, time.Since(begin).Round(100*time.Millisecond))
	t.Logf("kubectl cle status -n kube-system:\n%s", n.kubectl(t, "", "cle", "status", "-n", metav1.NamespaceSystem))
	if out := n.kubectl(t, "", "cle", "status", "-n", metav1.NamespaceSystem, "kube-scheduler", "-o", "jsonpath={.items[0].apiMode} {.items[0].holder} {.items[0].state}"); out != "native "+oldest+" optimal" {
		t.Errorf("kubectl cle status says %q, want native mode, holder %s, optimal", out, oldest)
	}

	lease, err := n.client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "kube-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := ptr.Deref(lease.Spec.Strategy, ""); s != "OldestEmulationVersion" {
		t.Errorf("Lease kube-system/kube-scheduler has strategy %q, want OldestEmulationVersion", s)
	}
	// cle elected it, not the built-in controller: cle-controller's Event,
	// and the built-in controller's Lease still held by cle.
	n.waitElectedEvent(t, metav1.NamespaceSystem, "kube-scheduler", oldest)
	builtin, err := n.client.CoordinationV1().Leases(framework.BuiltinControllerLeaseNamespace).Get(ctx, framework.BuiltinControllerLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(builtin.Spec.HolderIdentity, ""); h != staticPodIdentity {
		t.Fatalf("the built-in election controller's Lease is held by %q, want cle-controller (%s)", h, staticPodIdentity)
	}

	// The leader stops; the controller elects a 1.36 one.
	begin = time.Now()
	leaderProc := stopScheduler(t, schedulers, "1.35")
	next := n.waitLease(t, metav1.NamespaceSystem, "kube-scheduler", func(holder string) bool { return byVersion("1.36")[holder] })
	// kube-scheduler leaves its LeaseCandidate behind: the controller pings
	// it, and elects another once the ping times out; kubectl cle passes it
	// over too.
	t.Logf("%s stopped: %s (1.36) elected after %s", leaderProc, next, time.Since(begin).Round(100*time.Millisecond))
	if out := n.kubectl(t, "", "cle", "status", "-n", metav1.NamespaceSystem, "kube-scheduler", "-o", "jsonpath={.items[0].holder} {.items[0].best} {.items[0].state}"); out != next+" "+next+" optimal" {
		t.Errorf("kubectl cle status says %q, want %s holding and best, optimal", out, next)
	}
	t.Logf("kubectl cle status -n kube-system kube-scheduler -o wide:\n%s", n.kubectl(t, "", "cle", "status", "-n", metav1.NamespaceSystem, "kube-scheduler", "-o", "wide"))
}

// TestStaticPodBesideBuiltin runs cle-controller's static Pod, as shipped,
// in native mode beside the election controller of kube-apiserver, as on
// any cluster with the gate on: kube-apiserver keeps its lock and elects
// kube-scheduler's Lease (OldestEmulationVersion), while cle-controller,
// under its own lock, elects a cle.dev/Priority election and a
// cle.dev/OldestEmulationVersion one among library candidates in Pods.
// Nothing flaps, before or after kube-apiserver restarts mid-run, and cle
// still elects the next leader of its Leases at once afterwards.
func TestStaticPodBesideBuiltin(t *testing.T) {
	n := cluster
	ctx := context.Background()
	// kube-apiserver's controller acts from here on: idled from the start
	// (when this test runs alone) or handed over by TestStaticPodNative,
	// whose cle-controller released the Lease on its way out.
	if err := n.server.WakeBuiltinController(ctx); err != nil {
		t.Fatal(err)
	}
	before := n.waitBuiltinHoldsItsLock(t, "")

	begin := time.Now()
	mirror := n.startStaticPod(t)
	n.waitPodReady(t, metav1.NamespaceSystem, mirror)
	n.waitLease(t, metav1.NamespaceSystem, access.PortableControllerLock, func(holder string) bool { return holder == staticPodIdentity })
	t.Logf("static Pod %s/%s Ready and holding its own lock %s/%s in %s; kube-apiserver (%s) holds %s/%s", metav1.NamespaceSystem, mirror,
		metav1.NamespaceSystem, access.PortableControllerLock, time.Since(begin).Round(100*time.Millisecond),
		before, framework.BuiltinControllerLeaseNamespace, framework.BuiltinControllerLeaseName)

	// kube-scheduler's election, left to kube-apiserver.
	begin = time.Now()
	schedulers, byVersion := n.startSchedulers(t)
	oldest := n.waitLease(t, metav1.NamespaceSystem, "kube-scheduler", func(holder string) bool { return byVersion("1.35")[holder] })
	t.Logf("kube-scheduler candidates started; the 1.35 one, %s, elected in %s", oldest, time.Since(begin).Round(100*time.Millisecond))

	// Two elections of cle's strategies, each among library candidates
	// emulating 1.35 (in Deployment best) and 1.36 (two in next).
	type cleElection struct {
		election
		strategy coordinationv1.CoordinatedLeaseStrategy
	}
	cleElections := []cleElection{
		{n.candNamespace(t, "cle-priority"), strategy.PriorityName},
		{n.candNamespace(t, "cle-oldest"), strategy.OldestEmulationVersionByCleName},
	}
	inDeployment := func(e cleElection, deploy string) func(string) bool {
		return func(holder string) bool {
			p, err := n.client.CoreV1().Pods(e.ns).Get(ctx, holder, metav1.GetOptions{})
			return err == nil && p.DeletionTimestamp == nil && p.Labels["app"] == deploy
		}
	}
	for i := range cleElections {
		e := &cleElections[i]
		begin = time.Now()
		args := []string{"--kind=cle", "--api-mode=native", "--strategy=" + string(e.strategy)}
		n.addCands(t, &e.election, "best", 1, candImage, append(args, "--emulation-version=1.35.0")...)
		n.addCands(t, &e.election, "next", 2, candImage, args...)
		holder := n.waitLease(t, e.ns, e.lease, inDeployment(*e, "best"))
		n.waitElectedEvent(t, e.ns, e.lease, holder)
		t.Logf("%s election %s/%s: candidates Ready and %s elected by cle-controller in %s", e.strategy, e.ns, e.lease, holder, time.Since(begin).Round(100*time.Millisecond))
	}

	leases := []struct{ ns, name string }{{metav1.NamespaceSystem, "kube-scheduler"}}
	for _, e := range cleElections {
		leases = append(leases, struct{ ns, name string }{e.ns, e.lease})
	}
	// steady checks that for window no Lease changes holder or term (from
	// those of was, if given), that kube-apiserver keeps its lock and
	// cle-controller its own, and that kube-apiserver, not cle-controller,
	// elected kube-scheduler. It returns the holders and terms.
	steady := func(phase string, restarted bool, was map[string]term) map[string]term {
		t.Helper()
		read := func() (map[string]term, error) {
			terms := map[string]term{}
			for _, l := range leases {
				lease, err := n.client.CoordinationV1().Leases(l.ns).Get(ctx, l.name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				terms[l.ns+"/"+l.name] = term{ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseTransitions, 0)}
			}
			return terms, nil
		}
		first, err := read()
		if err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		// A holder whose renewals failed for its renew deadline while
		// kube-apiserver restarted ends its term, and takes the Lease it
		// still holds in a new one once the server answers (its leader
		// work stops in between: the fencing token must change). The same
		// holder in a later term is that only if the holder's own log
		// says it started leading with that token.
		renewed := func(l string, was, now term) bool {
			if !restarted || now.holder != was.holder || now.n <= was.n {
				return false
			}
			ns, _, _ := strings.Cut(l, "/")
			if !n.libraryStartedTerm(t, ns, now.holder, now.n) {
				return false
			}
			t.Logf("%s: %s's holder %s took a new term itself (%d, was %d): its renewals failed for its renew deadline during the restart", phase, l, now.holder, now.n, was.n)
			return true
		}
		for l, before := range was {
			if first[l] != before && !renewed(l, before, first[l]) {
				n.moved(t, phase, l, before, first[l])
			}
		}
		const window = 20 * time.Second
		end := time.Now().Add(window)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for ; time.Now().Before(end); <-tick.C {
			now, err := read()
			if err == nil {
				for l, was := range first {
					switch {
					case now[l] == was:
					case renewed(l, was, now[l]):
						first[l] = now[l]
					default:
						n.moved(t, phase, l, was, now[l])
					}
				}
			}
			builtin, err := n.client.CoordinationV1().Leases(framework.BuiltinControllerLeaseNamespace).Get(ctx, framework.BuiltinControllerLeaseName, metav1.GetOptions{})
			if err == nil && access.HeldByCle(builtin) {
				t.Fatalf("%s: cle-controller took kube-apiserver's lock (%s)", phase, ptr.Deref(builtin.Spec.HolderIdentity, ""))
			}
			own, err := n.client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, access.PortableControllerLock, metav1.GetOptions{})
			if err == nil && ptr.Deref(own.Spec.HolderIdentity, "") != staticPodIdentity {
				t.Fatalf("%s: cle-controller's lock is held by %q", phase, ptr.Deref(own.Spec.HolderIdentity, ""))
			}
		}
		if n := n.cleElectedEvents(t, metav1.NamespaceSystem, "kube-scheduler"); n > 0 {
			t.Errorf("%s: cle-controller elected kube-scheduler's Lease (%d LeaderElected Events) while kube-apiserver's controller acted", phase, n)
		}
		t.Logf("%s: no holder or term changed for %s (%v)", phase, window, first)
		return first
	}
	terms := steady("first elections", false, nil)

	out := n.kubectl(t, "", "cle", "status", "-n", metav1.NamespaceSystem)
	t.Logf("kubectl cle status -n kube-system:\n%s", out)
	for _, want := range []string{
		"Election controller: kube-apiserver (holder " + before + ")",
		"Election controller of cle.dev strategies: cle (holder " + staticPodIdentity + ")",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl cle status does not say %q", want)
		}
	}

	// kube-apiserver restarts: its new process takes its lock back, and
	// every election keeps its holder and term throughout.
	begin = time.Now()
	if err := n.server.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	after := n.waitBuiltinHoldsItsLock(t, before)
	t.Logf("kube-apiserver restarted; its new process %s holds its lock %s after the restart began", after, time.Since(begin).Round(100*time.Millisecond))
	steady("after kube-apiserver's restart", true, terms)

	// Each leader goes: cle-controller elects the next of its Leases at
	// once, kube-apiserver the next kube-scheduler.
	for _, e := range cleElections {
		leader, err := n.client.CoordinationV1().Leases(e.ns).Get(ctx, e.lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		was := ptr.Deref(leader.Spec.HolderIdentity, "")
		begin = time.Now()
		n.kubectl(t, "", "delete", "pod", "-n", e.ns, was, "--wait=false")
		next := n.waitLease(t, e.ns, e.lease, inDeployment(e, "next"))
		took := time.Since(begin)
		n.waitElectedEvent(t, e.ns, e.lease, next)
		t.Logf("%s election: leader Pod %s deleted, %s elected by cle-controller after %s", e.strategy, was, next, took.Round(100*time.Millisecond))
		if d := time.Duration(ptr.Deref(leader.Spec.LeaseDurationSeconds, 0)) * time.Second; took > d {
			t.Errorf("%s election: the next leader took %s, longer than the Lease's %s", e.strategy, took.Round(100*time.Millisecond), d)
		}
	}
	begin = time.Now()
	leaderProc := stopScheduler(t, schedulers, "1.35")
	next := n.waitLease(t, metav1.NamespaceSystem, "kube-scheduler", func(holder string) bool { return byVersion("1.36")[holder] })
	t.Logf("%s stopped: %s (1.36) elected by kube-apiserver after %s", leaderProc, next, time.Since(begin).Round(100*time.Millisecond))
	if n := n.cleElectedEvents(t, metav1.NamespaceSystem, "kube-scheduler"); n > 0 {
		t.Errorf("cle-controller elected kube-scheduler's Lease (%d LeaderElected Events) while kube-apiserver's controller acted", n)
	}
}

// term is a Lease's holder and leaseTransitions.
type term struct {
	holder string
	n      int32
}

// moved fails the test: Lease l (namespace/name) changed holder or term.
// It logs first what tells who moved it: the Events of its namespace and
// the lines of cle-controller's static Pod's log that name it.
func (n *node) moved(t *testing.T, phase, l string, was, now term) {
	t.Helper()
	ns, _, _ := strings.Cut(l, "/")
	n.describe(t, ns)
	lines, err := n.podLog(context.Background(), metav1.NamespaceSystem, staticPodIdentity, false)
	if err != nil {
		t.Logf("cle-controller's log: %v", err)
	}
	for _, line := range lines {
		if strings.Contains(line, l) {
			t.Logf("cle-controller: %s", line)
		}
	}
	t.Fatalf("%s: Lease %s moved from %s (term %d) to %q (term %d)", phase, l, was.holder, was.n, now.holder, now.n)
}

// libraryStartedTerm reports whether the log of candidate Pod ns/pod (the
// library's own lines, on stderr) says it started leading with token, and
// logs the lines of its log on leading. The renewal that started the term
// is on the server before its answer reaches the process, which logs the
// start then: the log is read again for a few seconds.
func (n *node) libraryStartedTerm(t *testing.T, ns, pod string, token int32) bool {
	t.Helper()
	var lines []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		all, err := n.podLog(ctx, ns, pod, false)
		if err != nil {
			t.Logf("the log of %s/%s: %v", ns, pod, err)
			return false, nil
		}
		lines = lines[:0]
		started := false
		for _, line := range all {
			if strings.Contains(line, "leading") {
				lines = append(lines, line)
				started = started || strings.Contains(line, `"Started leading"`) && slices.Contains(strings.Fields(line), fmt.Sprintf("token=%d", token))
			}
		}
		return started, nil
	})
	for _, line := range lines {
		t.Logf("%s: %s", pod, line)
	}
	return err == nil
}

// waitBuiltinHoldsItsLock waits until kube-apiserver's election controller
// holds its lock, under another identity than not, and returns the holder.
func (n *node) waitBuiltinHoldsItsLock(t *testing.T, not string) string {
	t.Helper()
	return n.waitLeaseWhere(t, framework.BuiltinControllerLeaseNamespace, framework.BuiltinControllerLeaseName, func(l *coordinationv1.Lease) bool {
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != not && holder != framework.IdlerIdentity && !access.HeldByCle(l)
	})
}

// cleElectedEvents counts cle-controller's LeaderElected Events on the Lease
// as it is now (by its UID: a Lease deleted and created again by an earlier
// test had Events of its own).
func (n *node) cleElectedEvents(t *testing.T, ns, lease string) int {
	t.Helper()
	ctx := context.Background()
	l, err := n.client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := n.client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, e := range list.Items {
		if e.Regarding.Kind == "Lease" && e.Regarding.UID == l.UID && e.ReportingController == "cle-controller" && e.Reason == "LeaderElected" {
			count++
		}
	}
	return count
}

// staticPodIdentity is the leader-election identity the node tests give
// cle-controller's static Pod, so that the built-in controller's Lease can
// be handed to it (TestStaticPodNative) or checked not to be its.
const staticPodIdentity = "cle-controller-" + nodeName

// startStaticPod runs cle-controller as the release's static-Pod bundle
// installs it (its RBAC, its kubeconfig and the Pod as shipped, with
// staticPodIdentity), until the test ends; it returns the mirror Pod's
// name in kube-system. The Pod may not be Ready yet.
func (n *node) startStaticPod(t *testing.T) string {
	t.Helper()
	n.kubectl(t, "", "apply", "-f", n.release.bundle("cle-static-pod-rbac.yaml"))
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "-f", n.release.bundle("cle-static-pod-rbac.yaml"), "--ignore-not-found")
	})
	// The kubeconfig the bundle names, for the user its RBAC binds, readable
	// by the Pod's user only.
	conf := filepath.Join(etcKubernetes, "cle-controller.conf")
	if err := n.writeStaticPodKubeconfig(conf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(conf) })

	data, err := os.ReadFile(n.release.bundle("cle-static-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("cle-static-pod.yaml: %v", err)
	}
	if pod.Namespace != metav1.NamespaceSystem {
		t.Fatalf("cle-static-pod.yaml runs in %q, want kube-system", pod.Namespace)
	}
	pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "--leader-elect-identity="+staticPodIdentity)
	out, err := yaml.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(n.staticPods, "cle-controller.yaml")
	if err := writeFile(manifest, string(out)); err != nil {
		t.Fatal(err)
	}
	mirror := pod.Name + "-" + nodeName
	t.Cleanup(func() {
		os.Remove(manifest)
		n.waitPodGone(t, pod.Namespace, mirror)
	})
	return mirror
}

// startSchedulers starts three kube-schedulers of this release emulating
// 1.35, 1.36 and 1.36, the gate on: each registers a LeaseCandidate for
// kube-system/kube-scheduler and waits to be named. Their leases are twice
// kube-scheduler's defaults (30 s, renewed within 25 s): the test restarts
// kube-apiserver and wants every holder kept, and on a loaded machine the
// restart alone can outlast the default 10 s renew deadline (13 s once, beside
// the integration tests), after which the leader gives its Lease up itself. It returns them by
// name, and a function giving the names of the LeaseCandidates whose
// emulation version starts with a prefix.
func (n *node) startSchedulers(t *testing.T) (map[string]*framework.Child, func(prefix string) map[string]bool) {
	t.Helper()
	sched, err := framework.Binary("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	schedulers := map[string]*framework.Child{}
	for i, v := range []string{"1.35", "1.36", "1.36"} {
		name := fmt.Sprintf("kube-scheduler-%s-%d", v, i)
		schedulers[name] = framework.StartChild(t, name, sched,
			"--kubeconfig="+n.kubeconfig, "--authentication-kubeconfig="+n.kubeconfig, "--authorization-kubeconfig="+n.kubeconfig,
			"--feature-gates=CoordinatedLeaderElection=true", "--emulated-version="+v,
			"--leader-elect=true", "--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=25s",
			"--secure-port=0", "--v=2")
	}
	t.Cleanup(func() {
		_ = n.client.CoordinationV1().Leases(metav1.NamespaceSystem).Delete(context.Background(), "kube-scheduler", metav1.DeleteOptions{})
		_ = n.client.CoordinationV1beta1().LeaseCandidates(metav1.NamespaceSystem).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	byVersion := func(prefix string) map[string]bool {
		names := map[string]bool{}
		list, err := n.client.CoordinationV1beta1().LeaseCandidates(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return names
		}
		for _, c := range list.Items {
			if c.Spec.LeaseName == "kube-scheduler" && strings.HasPrefix(c.Spec.EmulationVersion, prefix) {
				names[c.Name] = true
			}
		}
		return names
	}
	return schedulers, byVersion
}

// stopScheduler stops the kube-scheduler started by startSchedulers that
// emulates version.
func stopScheduler(t *testing.T, schedulers map[string]*framework.Child, version string) string {
	t.Helper()
	for name, c := range schedulers {
		if strings.HasPrefix(name, "kube-scheduler-"+version+"-") {
			if err := c.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			return name
		}
	}
	t.Fatalf("no kube-scheduler emulating %s", version)
	return ""
}

// kubectl runs kubectl, with the release's kubectl-cle on PATH, as the
// admin, and returns its standard output; stdin, when not empty, is its
// input. It fails the test on error.
func (n *node) kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	stdout, _ := n.kubectlStreams(t, stdin, args...)
	return stdout
}

// kubectlStreams is kubectl, and returns what it wrote on stderr as well.
func (n *node) kubectlStreams(t *testing.T, stdin string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.binDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.kubeconfig, "PATH="+n.pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// waitDeploymentReady waits until every replica of the Deployment is
// updated and Ready, and returns its Pods.
func (n *node) waitDeploymentReady(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := n.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		last = fmt.Sprintf("%d replicas, %d updated, %d ready, %d in all", want, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.Replicas)
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.ReadyReplicas != want || d.Status.Replicas != want {
			return false, nil
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return false, err
		}
		list, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				pods = append(pods, p)
			}
		}
		return int32(len(pods)) == want && len(list.Items) == len(pods), nil
	})
	if err != nil {
		n.describe(t, ns)
		t.Fatalf("Deployment %s/%s not Ready: %s", ns, name, last)
	}
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTokenVolume(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

func (n *node) waitPodReady(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && podReady(p), nil
	})
	if err != nil {
		n.describe(t, ns)
		t.Fatalf("Pod %s/%s not Ready: %v", ns, name, err)
	}
}

func (n *node) waitPodGone(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := n.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("Pod %s/%s still there: %v", ns, name, err)
	}
}

func (n *node) waitNamespaceGone(t *testing.T, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := n.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s still there after the uninstall: %v", ns, err)
	}
}

// waitLease waits until the Lease names a holder ok accepts, and returns it.
func (n *node) waitLease(t *testing.T, ns, name string, ok func(holder string) bool) string {
	t.Helper()
	return n.waitLeaseWhere(t, ns, name, func(l *coordinationv1.Lease) bool { return ok(ptr.Deref(l.Spec.HolderIdentity, "")) })
}

// waitLeaseWhere waits until the Lease names a holder and ok accepts the
// Lease as read, and returns the holder.
func (n *node) waitLeaseWhere(t *testing.T, ns, name string, ok func(*coordinationv1.Lease) bool) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := n.client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != "" && ok(l), nil
	})
	if err != nil {
		n.describe(t, ns)
		t.Fatalf("Lease %s/%s: holder %q, never the one expected: %v", ns, name, holder, err)
	}
	return holder
}

// waitElectedEvent waits for cle-controller's LeaderElected Event on the
// Lease naming holder.
func (n *node) waitElectedEvent(t *testing.T, ns, lease, holder string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := n.client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range list.Items {
			if e.Regarding.Kind != "Lease" || e.Regarding.Name != lease {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s: %s", e.ReportingController, e.Reason, e.Note))
			if e.ReportingController == "cle-controller" && e.Reason == "LeaderElected" && strings.Contains(e.Note, "Elected "+holder+" ") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no LeaderElected Event from cle-controller for %s on Lease %s/%s; Events on it: %q", holder, ns, lease, seen)
	}
}

// writeStaticPodKubeconfig writes the static Pod's kubeconfig for the user
// the static-Pod RBAC binds, the CA embedded (the Pod mounts only this
// file), mode 0600 and owned by the Pod's user, as docs/install.md says.
func (n *node) writeStaticPodKubeconfig(path string) error {
	cfg, err := n.server.UserConfig(staticPodUser)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(n.server.CAFile())
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca}
	kc.AuthInfos[staticPodUser] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: staticPodUser}
	kc.CurrentContext = "e2e"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return os.Chown(path, 65532, 65532)
}

// staticPodUser is the user manifests/static-pod/rbac binds.
const staticPodUser = "cle-controller"

// describe logs the namespace's Pods and Events, for a failure.
func (n *node) describe(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if pods, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("Pod %s: phase %s, conditions %+v, containers %+v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	}
	if events, err := n.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range events.Items {
			t.Logf("Event %s/%s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// recorder keeps every change of the examples' Pods and Lease from a point
// on, to check after the upgrade, in etcd's order, that the leader was never
// newer than a live replica.
type recorder struct {
	cancel  context.CancelFunc
	done    chan struct{}
	events  []change
	initial []change
	err     error

	mu       sync.Mutex
	versions map[string]string // Pod -> its --emulation-version
}

// change is one Pod or Lease write, at its resourceVersion (etcd's revision,
// a total order across both resources on one etcd).
type change struct {
	rv      uint64
	pod     string // or the Lease when empty
	live    bool   // the Pod exists and is not being deleted
	version string
	holder  string
}

func (n *node) record(t *testing.T, ns, lease string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{cancel: cancel, done: make(chan struct{}), versions: map[string]string{}}
	pods, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		r.initial = append(r.initial, r.podChange(&pods.Items[i], false))
	}
	leases, err := n.client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + lease})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		r.initial = append(r.initial, change{holder: ptr.Deref(l.Spec.HolderIdentity, "")})
	}
	pw, err := n.client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := n.client.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: leases.ResourceVersion, FieldSelector: "metadata.name=" + lease})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		defer pw.Stop()
		defer lw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-pw.ResultChan():
				if !ok {
					r.err = fmt.Errorf("the Pod watch ended early")
					return
				}
				if p, ok := ev.Object.(*corev1.Pod); ok {
					r.events = append(r.events, r.podChange(p, ev.Type == watch.Deleted))
				}
			case ev, ok := <-lw.ResultChan():
				if !ok {
					r.err = fmt.Errorf("the Lease watch ended early")
					return
				}
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					rv, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
					holder := ""
					if ev.Type != watch.Deleted {
						holder = ptr.Deref(l.Spec.HolderIdentity, "")
					}
					r.events = append(r.events, change{rv: rv, holder: holder})
				}
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *recorder) podChange(p *corev1.Pod, deleted bool) change {
	v := ""
	for _, a := range p.Spec.Containers[0].Args {
		if s, ok := strings.CutPrefix(a, "--emulation-version="); ok {
			v = s
		}
	}
	r.mu.Lock()
	r.versions[p.Name] = v
	r.mu.Unlock()
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	return change{rv: rv, pod: p.Name, live: !deleted && p.DeletionTimestamp == nil, version: v}
}

func (r *recorder) stop() {
	r.cancel()
	<-r.done
}

// version is a Pod's emulation version, once recorded.
func (r *recorder) version(pod string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.versions[pod]
}

// check replays the changes in etcd's order and fails if at any point the
// holder's emulation version was newer than a live replica's.
func (r *recorder) check(t *testing.T) error {
	r.stop()
	if r.err != nil {
		return r.err
	}
	events := append([]change(nil), r.events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].rv < events[j].rv })
	live := map[string]string{}
	holder := ""
	apply := func(c change) {
		switch {
		case c.pod == "":
			holder = c.holder
		case c.live:
			live[c.pod] = c.version
		default:
			delete(live, c.pod)
		}
	}
	for _, c := range r.initial {
		apply(c)
	}
	history := []string{fmt.Sprintf("%s (%s)", holder, r.version(holder))}
	violations := 0
	for _, c := range events {
		before := holder
		apply(c)
		if c.pod == "" && holder != before {
			if holder == "" {
				history = append(history, "none")
			} else {
				history = append(history, fmt.Sprintf("%s (%s)", holder, r.version(holder)))
			}
		}
		if holder == "" {
			continue
		}
		hv := r.version(holder)
		for pod, v := range live {
			newer, err := strategy.CompareVersions(hv, v)
			if err != nil {
				return fmt.Errorf("at resourceVersion %d, leader %s and replica %s: %w", c.rv, holder, pod, err)
			}
			if newer > 0 {
				violations++
				t.Errorf("at resourceVersion %d the leader %s runs %s while replica %s runs %s", c.rv, holder, hv, pod, v)
			}
		}
	}
	t.Logf("upgrade: %d Pod and Lease changes replayed in etcd's order; leaders in turn: %s", len(events), strings.Join(history, " → "))
	if violations > 0 {
		return fmt.Errorf("the leader was newer than a live replica %d times", violations)
	}
	return nil
}
