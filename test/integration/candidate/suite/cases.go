package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/test/integration/framework"
)

// ElectsBestCandidate: of three candidates at different emulation versions,
// the oldest ends up leading, and it alone.
func ElectsBestCandidate(t *testing.T, env *Env) {
	ns := env.Setup(t)
	tl := &timeline{}
	members := []*member{
		env.run(t, tl, ns, "best", "newest", memberOpts{emulation: "1.36.0"}),
		env.run(t, tl, ns, "best", "oldest", memberOpts{emulation: "1.34.0"}),
		env.run(t, tl, ns, "best", "middle", memberOpts{emulation: "1.35.0"}),
	}
	env.waitLeader(t, ns, "best", members[1])
	for _, m := range []*member{members[0], members[2]} {
		if m.IsLeader() {
			t.Errorf("%s is leader too", m.id)
		}
	}
	tl.checkNoOverlap(t)
}

// Preemption measures, and checks, the preemption of a leader by a better
// candidate: the old leader's stop comes strictly before the new one's start.
// It returns the time from the better candidate's start to its leading.
func Preemption(t *testing.T, env *Env) time.Duration {
	ns := env.Setup(t)
	return env.preempt(t, ns, "preempt", 0)
}

// preempt runs one preemption on lease. With staleAfter > 0, the leader's
// LeaseCandidate is left idle for longer than that before the better
// candidate starts, so that the controller has to judge it stale.
func (env *Env) preempt(t *testing.T, ns, lease string, staleAfter time.Duration) time.Duration {
	tl := &timeline{}
	worse := env.run(t, tl, ns, lease, "worse", memberOpts{emulation: "1.36.0"})
	env.waitLeader(t, ns, lease, worse)
	env.waitStale(t, ns, staleAfter, "worse")
	better := env.run(t, tl, ns, lease, "better", memberOpts{emulation: "1.35.0"})
	env.waitLeader(t, ns, lease, better)
	if worse.IsLeader() {
		t.Error("the preempted leader still counts itself leader")
	}
	stop, ok1 := tl.first("worse", "stop")
	start, ok2 := tl.first("better", "start")
	if !ok1 || !ok2 || !stop.Before(start) {
		t.Errorf("old leader stopped at %v (recorded %v), new leader started at %v (recorded %v): want stop strictly before start",
			stop.Format(time.StampMicro), ok1, start.Format(time.StampMicro), ok2)
	}
	tl.checkNoOverlap(t)
	worse.stop()
	better.stop()
	return start.Sub(better.started)
}

// GracefulHandover: a leader that shuts down lets the next candidate lead at
// once, stops before it starts, and deletes its LeaseCandidate. It returns the
// time from the shutdown to the next leader's start.
func GracefulHandover(t *testing.T, env *Env) time.Duration {
	ns := env.Setup(t)
	d, _ := env.handover(t, ns, "handover", 0)
	return d
}

// handover runs one handover on lease and returns how long it took and
// whether the next leader was pinged during it. With staleAfter > 0, both
// LeaseCandidates are left idle for longer than that before the leader
// shuts down, so that the controller has to ping the next one.
func (env *Env) handover(t *testing.T, ns, lease string, staleAfter time.Duration) (time.Duration, bool) {
	tl := &timeline{}
	first := env.run(t, tl, ns, lease, "first", memberOpts{emulation: "1.34.0"})
	env.waitLeader(t, ns, lease, first)
	next := env.run(t, tl, ns, lease, "next", memberOpts{emulation: "1.35.0"})
	// next must be registered (and known to the controller) before the
	// handover, or there is nobody to hand over to.
	until(t, waitLong, "next registered", func() (bool, error) {
		_, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), "next")
		return err == nil, nil
	})
	env.waitStale(t, ns, staleAfter, "first", "next")
	renewed := env.renewTime(t, ns, "next")
	begin := time.Now()
	first.stop()
	env.waitLeader(t, ns, lease, next)
	pinged := env.pingedAfter(t, ns, "next", renewed)
	stop, _ := tl.first("first", "stop")
	start, _ := tl.first("next", "start")
	if !stop.Before(start) {
		t.Errorf("first stopped at %s, next started at %s: want stop first", stop.Format(time.StampMicro), start.Format(time.StampMicro))
	}
	tl.checkNoOverlap(t)
	_, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), "first")
	if !apierrors.IsNotFound(err) {
		t.Errorf("the departed leader's LeaseCandidate: %v, want NotFound", err)
	}
	next.stop()
	return start.Sub(begin), pinged
}

// waitStale waits until none of the named LeaseCandidates has been written
// for longer than staleAfter, and a margin for the controller to have
// observed the last write; nothing when staleAfter is 0. The candidates
// write their renewTime on this machine's clock.
func (env *Env) waitStale(t *testing.T, ns string, staleAfter time.Duration, names ...string) {
	t.Helper()
	if staleAfter == 0 {
		return
	}
	const margin = 500 * time.Millisecond
	for _, name := range names {
		until(t, staleAfter+waitLong, name+" idle for "+(staleAfter+margin).String(), func() (bool, error) {
			lc, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), name)
			if err != nil || lc.Spec.RenewTime == nil {
				return false, err
			}
			return time.Since(lc.Spec.RenewTime.Time) > staleAfter+margin, nil
		})
	}
}

// renewTime is the renewTime of the LeaseCandidate name.
func (env *Env) renewTime(t *testing.T, ns, name string) time.Time {
	t.Helper()
	lc, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), name)
	if err != nil || lc.Spec.RenewTime == nil {
		t.Fatalf("LeaseCandidate %s: %v, renewTime %v", name, err, lc.Spec.RenewTime)
	}
	return lc.Spec.RenewTime.Time
}

// pingedAfter reports whether the LeaseCandidate name was pinged after the
// renewal at renewed: its pingTime is later (a controller pings at its own
// time, or just after the candidate's renewTime).
func (env *Env) pingedAfter(t *testing.T, ns, name string, renewed time.Time) bool {
	t.Helper()
	lc, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatalf("LeaseCandidate %s: %v", name, err)
	}
	return lc.Spec.PingTime != nil && lc.Spec.PingTime.Time.After(renewed)
}

// BlockedRenewals: a leader whose renewals are denied (by a
// ValidatingAdmissionPolicy) stops acting within its renew deadline, stays
// running, and leads again once renewals go through.
func BlockedRenewals(t *testing.T, env *Env) {
	ns := env.Setup(t)
	tl := &timeline{}
	m := env.run(t, tl, ns, "blocked", "blocked", memberOpts{emulation: "1.35.0"})
	env.waitLeader(t, ns, "blocked", m)

	client := env.Server.Client()
	ctx := context.Background()
	name := "deny-renewals-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					ResourceNames: []string{"blocked"},
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"},
						},
					},
				}},
			},
			// A renewal keeps the holder; any other change goes through.
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!(has(oldObject.spec.holderIdentity) && oldObject.spec.holderIdentity == 'blocked' && has(object.spec.holderIdentity) && object.spec.holderIdentity == 'blocked')",
				Message:    "renewals of blocked are denied by the test",
			}},
		},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			},
		},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unblock := func() {
		_ = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	}
	t.Cleanup(unblock)

	until(t, waitLong, "the blocked leader stops", func() (bool, error) {
		_, stopped := tl.first("blocked", "stop")
		return stopped && !m.IsLeader(), nil
	})
	stop, _ := tl.first("blocked", "stop")
	if last := env.lease(t, ns, "blocked"); last != nil && last.Spec.RenewTime != nil {
		// renewTime was written by this process's clock: comparable here.
		t.Logf("the blocked leader stopped %s after its last successful renewal (renew deadline %s, lease duration %s)",
			stop.Sub(last.Spec.RenewTime.Time).Round(time.Millisecond), renewDeadline, leaseDuration)
		if holderOf(last) == "blocked" && stop.Sub(last.Spec.RenewTime.Time) >= leaseDuration {
			t.Errorf("stopped only after the Lease expired for everybody else")
		}
	}
	select {
	case <-m.done:
		t.Fatal("Run returned after losing leadership; it must go back to candidacy")
	default:
	}
	unblock()
	until(t, waitLong, "the unblocked candidate leads again", func() (bool, error) {
		return m.IsLeader(), nil
	})
	tl.checkNoOverlap(t)
}

// PausedProcess: a leader process stopped with SIGSTOP for longer than its
// lease duration loses the Lease to another candidate, and after SIGCONT none
// of its writes lands: its write-guarded client refuses them.
func PausedProcess(t *testing.T, env *Env) {
	ns := env.Setup(t)
	client := env.Server.Client()
	ctx := context.Background()

	// Watch the ConfigMap both leaders write, from before the first write:
	// the watch gives the order in which the writes landed.
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		landed []string // writer/token of each write that landed, in order
	)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type != watch.Deleted && cm.Name == "fenced" {
				mu.Lock()
				landed = append(landed, cm.Data["writer"]+"/"+cm.Data["token"])
				mu.Unlock()
			}
		}
	}()
	defer func() { w.Stop(); <-watched }()

	paused := env.startChild(t, "--namespace="+ns, "--lease=paused", "--identity=paused",
		"--binary-version=1.36.0", "--emulation-version=1.35.0",
		"--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms",
		"--write-configmap=fenced", "--write-interval=100ms",
		// Its leader work keeps writing for a while after it is told to
		// stop, so that after SIGCONT writes are certainly attempted: the
		// guarded client must refuse every one.
		"--stop-delay=1s")
	var token string
	until(t, waitLong, "the child leads and writes", func() (bool, error) {
		_, line, ok := paused.find(0, "write ", "result=ok")
		token = field(line, "token")
		return ok, nil
	})

	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	stopped := true
	defer func() {
		if stopped {
			_ = paused.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()

	// A better candidate in this process takes over once the paused
	// leader's Lease expires, and writes the ConfigMap itself.
	tl := &timeline{}
	successor := env.run(t, tl, ns, "paused", "successor", memberOpts{emulation: "1.34.0"})
	env.waitLeader(t, ns, "paused", successor)
	guarded := kubernetes.NewForConfigOrDie(successor.WrapConfig(env.Server.Config()))
	newToken, _ := successor.Token()
	if _, err := guarded.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fenced"},
		Data:       map[string]string{"writer": "successor", "token": strconv.Itoa(int(newToken))},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("successor's guarded write: %v", err)
	}
	t.Logf("successor leads %s after the pause began", time.Since(pausedAt).Round(time.Millisecond))

	mark := len(paused.lines())
	// A write sent before this moment was sent before the pause: the
	// process was frozen since. One may have been in flight then, and be
	// answered (ok) after SIGCONT; every write sent after must be refused.
	resumedAt := time.Now()
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// stopped-leading comes after its leader work returned, i.e. after the
	// last write it attempts in this term.
	until(t, waitLong, "the resumed child stops leading", func() (bool, error) {
		_, _, ok := paused.find(mark, "stopped-leading")
		return ok, nil
	})
	refused := 0
	for _, l := range paused.lines()[mark:] {
		if field(l, "result") == "refused" {
			refused++
		}
	}
	for _, l := range paused.lines()[mark:] {
		if field(l, "result") != "ok" {
			continue
		}
		sent, err := strconv.ParseInt(field(l, "sent"), 10, 64)
		if err != nil {
			t.Fatalf("a write line without its send time: %s", l)
		}
		if time.Unix(0, sent).Before(resumedAt) {
			t.Logf("a write sent before the pause was answered after SIGCONT: %s", l)
			continue
		}
		t.Errorf("after SIGCONT the deposed leader's write went through: %s", l)
	}
	if refused == 0 {
		t.Errorf("after SIGCONT the deposed leader attempted no write; its output: %v", paused.lines()[mark:])
	}
	mu.Lock()
	defer mu.Unlock()
	idx := slices.Index(landed, "successor/"+strconv.Itoa(int(newToken)))
	if idx < 0 {
		t.Fatalf("the successor's write never landed; landed: %v", landed)
	}
	for _, wr := range landed[idx+1:] {
		if wr == "paused/"+token {
			t.Errorf("a write of the paused leader's term landed after the successor's: %v", landed[idx:])
		}
	}
	t.Logf("after SIGCONT the deposed leader had %d writes refused by its guarded client, and none landed", refused)
	if !successor.IsLeader() {
		t.Error("the successor lost leadership to the resumed process")
	}
}

// RestartRefreshesCandidate: a candidate restarting with the same identity
// and new versions updates its LeaseCandidate in place.
func RestartRefreshesCandidate(t *testing.T, env *Env) {
	ns := env.Setup(t)
	tl := &timeline{}
	keep := func(c *candidate.Config) { c.DeleteCandidateOnExit = ptr.To(false) }
	lcs := env.access(t).LeaseCandidates(ns)
	first := env.run(t, tl, ns, "restart", "restarter", memberOpts{binary: "1.35.0", emulation: "1.34.0", tweak: keep})
	var uid string
	until(t, waitLong, "registered", func() (bool, error) {
		lc, err := lcs.Get(context.Background(), "restarter")
		if err != nil {
			return false, nil
		}
		uid = string(lc.UID)
		return lc.Spec.BinaryVersion == "1.35.0", nil
	})
	first.stop()
	env.run(t, tl, ns, "restart", "restarter", memberOpts{binary: "1.36.0", emulation: "1.35.0", tweak: keep})
	until(t, waitLong, "refreshed with the new versions", func() (bool, error) {
		lc, err := lcs.Get(context.Background(), "restarter")
		if err != nil {
			return false, err
		}
		if string(lc.UID) != uid {
			return false, errors.New("LeaseCandidate re-created instead of updated")
		}
		return lc.Spec.BinaryVersion == "1.36.0" && lc.Spec.EmulationVersion == "1.35.0", nil
	})
}

// SharedHost: two components on one host in one namespace (host-network
// static Pods in kube-system, say) that leave Identity to its default each
// get a LeaseCandidate of their own, and each leads its Lease. One that
// names another Lease's LeaseCandidate as its Identity is refused at once,
// with the reason, instead of failing to write it forever (its leaseName is
// immutable).
func SharedHost(t *testing.T, env *Env) {
	ns := env.Setup(t)
	tl := &timeline{}
	byDefault := memberOpts{tweak: func(c *candidate.Config) { c.Identity = "" }}
	scheduler := env.run(t, tl, ns, "scheduler", "scheduler", byDefault)
	manager := env.run(t, tl, ns, "controller-manager", "controller-manager", byDefault)
	if scheduler.Identity() == manager.Identity() {
		t.Fatalf("both components have the Identity %q", scheduler.Identity())
	}
	env.waitLeader(t, ns, "scheduler", scheduler)
	env.waitLeader(t, ns, "controller-manager", manager)

	clients, err := access.NewClients(env.Server.Config())
	if err != nil {
		t.Fatal(err)
	}
	clash, err := candidate.New(candidate.Config{
		Clients: clients, APIMode: env.APIMode, Namespace: ns, LeaseName: "third", Identity: scheduler.Identity(),
		BinaryVersion: "1.36.0", Callbacks: candidate.Callbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := clash.Run(ctx); !errors.Is(err, candidate.ErrIdentityInUse) {
		t.Errorf("Run with the Identity of the scheduler's LeaseCandidate = %v, want ErrIdentityInUse", err)
	}
	if !scheduler.IsLeader() {
		t.Error("the scheduler stopped leading")
	}
}

// WrapConfig: the guarded client refuses a write while not leader, lets reads
// through, and allows writes while leader.
func WrapConfig(t *testing.T, env *Env) {
	ns := env.Setup(t)
	tl := &timeline{}
	leader := env.run(t, tl, ns, "guard", "leader", memberOpts{emulation: "1.34.0"})
	env.waitLeader(t, ns, "guard", leader)
	follower := env.run(t, tl, ns, "guard", "follower", memberOpts{emulation: "1.35.0"})
	until(t, waitLong, "follower registered", func() (bool, error) {
		_, err := env.access(t).LeaseCandidates(ns).Get(context.Background(), "follower")
		return err == nil, nil
	})
	ctx := context.Background()
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	fc := kubernetes.NewForConfigOrDie(follower.WrapConfig(env.Server.Config()))
	if _, err := fc.CoreV1().ConfigMaps(ns).Create(ctx, cm("from-follower"), metav1.CreateOptions{}); !errors.Is(err, candidate.ErrNotLeader) {
		t.Errorf("follower's write = %v, want ErrNotLeader", err)
	}
	if _, err := fc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("follower's read: %v", err)
	}
	if _, err := env.Server.Client().CoreV1().ConfigMaps(ns).Get(ctx, "from-follower", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused write reached the server: %v", err)
	}
	lc := kubernetes.NewForConfigOrDie(leader.WrapConfig(env.Server.Config()))
	if _, err := lc.CoreV1().ConfigMaps(ns).Create(ctx, cm("from-leader"), metav1.CreateOptions{}); err != nil {
		t.Errorf("leader's write: %v", err)
	}
}

// Latency repeats handover and preemption and logs the medians.
func Latency(t *testing.T, env *Env, runs int) {
	ns := env.Setup(t)
	var handovers, preemptions []time.Duration
	for i := range runs {
		d, _ := env.handover(t, ns, "handover-"+strconv.Itoa(i), 0)
		handovers = append(handovers, d)
		preemptions = append(preemptions, env.preempt(t, ns, "preempt-"+strconv.Itoa(i), 0))
	}
	t.Logf("%s: handover (leader shuts down -> next leader starts): median %s of %d runs %v",
		env.Controller, framework.Median(handovers), runs, handovers)
	t.Logf("%s: preemption (better candidate starts -> it leads, old leader stopped first): median %s of %d runs %v",
		env.Controller, framework.Median(preemptions), runs, preemptions)
}

// StaleLatency is Latency with stale-but-alive candidates: the controller
// counts a candidate alive without a ping only briefly (SetupStale), and the
// candidates, which renew their LeaseCandidates only every few minutes, are
// left idle past that before each handover and preemption. A handover then
// costs a ping of the next leader and its answer; both must stay in
// milliseconds.
func StaleLatency(t *testing.T, env *Env, runs int) {
	ns, staleAfter := env.SetupStale(t)
	var handovers, preemptions []time.Duration
	for i := range runs {
		d, pinged := env.handover(t, ns, "stale-handover-"+strconv.Itoa(i), staleAfter)
		if !pinged {
			t.Errorf("handover %d: the stale next leader was elected without a ping", i)
		}
		handovers = append(handovers, d)
		preemptions = append(preemptions, env.preempt(t, ns, "stale-preempt-"+strconv.Itoa(i), staleAfter))
	}
	t.Logf("%s, candidates idle past %s: handover (leader shuts down -> next leader, pinged first, starts): median %s of %d runs %v",
		env.Controller, staleAfter, framework.Median(handovers), runs, handovers)
	t.Logf("%s, leader's candidate idle past %s: preemption (better candidate starts -> it leads, old leader stopped first): median %s of %d runs %v",
		env.Controller, staleAfter, framework.Median(preemptions), runs, preemptions)
}

// RenewalsKeepCoordinatedFields: a holder's renewals never drop the
// coordinated election fields from the Lease. Every version the server
// stores, read from a raw watch rather than through the access layer, keeps
// the strategy while first a worse and then a better candidate lead and
// renew; the preferred holder the controller sets during the preemption is
// on the Lease until the handover clears it, and no renewal drops it.
func RenewalsKeepCoordinatedFields(t *testing.T, env *Env) {
	ns := env.Setup(t)
	const lease, renewals = "renewals", 3
	stored := storedFields(env.access(t).Mode())
	rec := env.recordLease(t, ns, lease)

	tl := &timeline{}
	worse := env.run(t, tl, ns, lease, "worse", memberOpts{emulation: "1.36.0"})
	env.waitLeader(t, ns, lease, worse)
	until(t, waitLong, "worse renews the Lease", func() (bool, error) {
		return rec.renewals("worse") >= renewals, nil
	})
	better := env.run(t, tl, ns, lease, "better", memberOpts{emulation: "1.35.0"})
	env.waitLeader(t, ns, lease, better)
	until(t, waitLong, "better renews the Lease", func() (bool, error) {
		return rec.renewals("better") >= renewals, nil
	})
	tl.checkNoOverlap(t)

	versions := rec.snapshot()
	want := string(coordinationv1.OldestEmulationVersion)
	preferredAt, handoverAt := -1, -1
	for i, v := range versions {
		strategy, preferred := stored(v)
		desc := fmt.Sprintf("version %d (resourceVersion %s, holder %q, transitions %d)",
			i, v.ResourceVersion, holderOf(v), ptr.Deref(v.Spec.LeaseTransitions, 0))
		if strategy != want {
			t.Errorf("%s: stored strategy %q, want %q", desc, strategy, want)
		}
		if i > 0 && isRenewal(versions[i-1], v) {
			if _, before := stored(versions[i-1]); preferred != before {
				t.Errorf("%s: a renewal by %s changed the stored preferred holder from %q to %q", desc, holderOf(v), before, preferred)
			}
		}
		switch {
		case preferredAt < 0 && holderOf(v) == "worse" && preferred == "better":
			preferredAt = i
		case preferredAt >= 0 && handoverAt < 0 && holderOf(v) == "better":
			handoverAt = i
		}
		if handoverAt >= 0 && preferred != "" {
			t.Errorf("%s: stored preferred holder %q after the handover, want none", desc, preferred)
		}
	}
	if preferredAt < 0 {
		t.Fatalf("no stored version of the Lease names better preferred holder while worse holds it; %d versions recorded", len(versions))
	}
	if handoverAt < 0 {
		t.Fatalf("no stored version after the preemption names better holder; %d versions recorded", len(versions))
	}
	if from, to := ptr.Deref(versions[preferredAt].Spec.LeaseTransitions, 0), ptr.Deref(versions[handoverAt].Spec.LeaseTransitions, 0); to <= from {
		t.Errorf("the handover kept leaseTransitions at %d (was %d): not a new term", to, from)
	}
	t.Logf("%s (%s mode): %d stored versions of the Lease, %d renewals by worse and %d by better all kept strategy %q; preferred holder set at version %d, cleared by the handover at version %d",
		env.Controller, env.access(t).Mode(), len(versions), rec.renewals("worse"), rec.renewals("better"), want, preferredAt, handoverAt)
}
