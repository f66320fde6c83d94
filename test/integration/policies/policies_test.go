package policies

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// TestRogueCandidate is the attack the policies exist for: a user whom RBAC
// lets create LeaseCandidates, and nothing else, registers a candidate with
// the oldest emulation version for a Lease a legitimate candidate holds.
// Without the policies the controller prefers it and the holder hands the
// Lease over to it; with them its write is denied and the Lease stays.
func TestRogueCandidate(t *testing.T) {
	forEachMode(t, func(t *testing.T, m *apiMode) {
		ctx := context.Background()
		disablePolicies(t, m)
		without, with := m.server.CreateNamespace(t), m.server.CreateNamespace(t)
		grantCandidates(t, m, without, "app")
		grantCandidates(t, m, with, "app")
		m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{without, with}, APIMode: m.name, User: controllerUser})
		admin, mallory := accessAs(t, m, framework.AdminUser), accessAs(t, m, malloryUser)
		rogue := func(ns string) *coordinationv1beta1.LeaseCandidate {
			return &coordinationv1beta1.LeaseCandidate{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: malloryUser},
				Spec: coordinationv1beta1.LeaseCandidateSpec{
					LeaseName: "app", BinaryVersion: "1.36.0", EmulationVersion: "0.0.1",
					Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NowMicro()),
				},
			}
		}

		// Without the policies.
		a := startCandidate(t, m, appUser, without, "app", "a", "1.36.0")
		waitHolder(t, admin, without, "app", "a")
		if _, err := mallory.LeaseCandidates(without).Create(ctx, rogue(without)); err != nil {
			t.Fatalf("without the policies, %s's candidate: %v", malloryUser, err)
		}
		// Her process answers the controller's ping, as a live one would.
		framework.AnswerPings(t, mallory.LeaseCandidates(without), malloryUser)
		waitHolder(t, admin, without, "app", malloryUser)
		if a.c.IsLeader() {
			t.Error("a still leads after the Lease went to the rogue candidate")
		}

		// With the policies.
		enablePolicies(t, m)
		a = startCandidate(t, m, appUser, with, "app", "a", "1.36.0")
		waitHolder(t, admin, with, "app", "a")
		_, err := mallory.LeaseCandidates(with).Create(ctx, rogue(with))
		if !isPolicyDenial(err, policyNames[0]) || !strings.Contains(err.Error(), malloryUser+" may not be a candidate for the Lease "+with+"/app") {
			t.Fatalf("with the policies, %s's candidate: %v; want it denied by %s", malloryUser, err, policyNames[0])
		}
		// Nor may it make the legitimate candidate look dead or worse.
		for what, edit := range map[string]func(*coordinationv1beta1.LeaseCandidate){
			"ping": func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.PingTime = ptr.To(metav1.NowMicro()) },
			"raise its emulation": func(lc *coordinationv1beta1.LeaseCandidate) {
				lc.Spec.BinaryVersion, lc.Spec.EmulationVersion = "9.9.9", "9.9.9"
			},
			"take it over": func(lc *coordinationv1beta1.LeaseCandidate) {
				lc.Annotations = map[string]string{access.WriterAnnotation: malloryUser}
			},
		} {
			if err := updateCandidate(ctx, admin, mallory, with, "a", edit); !isPolicyDenial(err, policyNames[0]) {
				t.Errorf("%s: %s a's candidate: %v; want it denied by %s", malloryUser, what, err, policyNames[0])
			}
		}
		if _, err := admin.LeaseCandidates(with).Get(ctx, malloryUser); !apierrors.IsNotFound(err) {
			t.Fatalf("the rogue candidate exists after its create was denied: %v", err)
		}
		checkHolderStays(t, admin, with, "app", "a", 3*time.Second)
		if !a.c.IsLeader() {
			t.Error("a does not lead")
		}
		if denied := a.deniedWrites(); denied != "" {
			t.Errorf("writes of the legitimate candidate were denied:\n%s", denied)
		}
	})
}

// TestElectionUnderPolicies runs an election through its whole life with
// the policies in force: the controller, as the shipped ClusterRole's user,
// pings candidates (every election, with a freshness window of a
// millisecond) and names holders; candidates running as two users register,
// answer pings, hand the Lease over to the better one, release it on a
// graceful stop and delete their LeaseCandidates. No write is denied.
func TestElectionUnderPolicies(t *testing.T) {
	forEachMode(t, func(t *testing.T, m *apiMode) {
		ctx := context.Background()
		enablePolicies(t, m)
		ns := m.server.CreateNamespace(t)
		grantCandidates(t, m, ns, "app")
		rc := m.server.StartController(t, framework.ControllerOptions{
			Namespaces: []string{ns}, APIMode: m.name, User: controllerUser,
			Controller: controller.Options{CandidateFreshness: time.Millisecond},
		})
		admin := accessAs(t, m, framework.AdminUser)

		a := startCandidate(t, m, appUser, ns, "app", "a", "1.36.0")
		waitHolder(t, admin, ns, "app", "a")
		lc, err := admin.LeaseCandidates(ns).Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if got := lc.Annotations[access.WriterAnnotation]; got != appUser {
			t.Errorf("a's candidate is annotated %s=%q, want the user it runs as, %q", access.WriterAnnotation, got, appUser)
		}

		// A better candidate, running as another user: a hands over.
		b := startCandidate(t, m, otherAppUser, ns, "app", "b", "1.35.0")
		waitHolder(t, admin, ns, "app", "b")
		checkAnsweredPing(t, admin, ns, "b", nil)
		lc, err = admin.LeaseCandidates(ns).Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		pingedBefore := lc.Spec.PingTime

		// b stops: it deletes its candidate and releases; a is pinged and
		// named again.
		b.stop(t)
		if _, err := admin.LeaseCandidates(ns).Get(ctx, "b"); !apierrors.IsNotFound(err) {
			t.Errorf("b's candidate after b stopped: %v, want it deleted", err)
		}
		waitHolder(t, admin, ns, "app", "a")
		checkAnsweredPing(t, admin, ns, "a", pingedBefore)

		// a stops: the Lease is released.
		a.stop(t)
		waitHolder(t, admin, ns, "app", "")
		if _, err := admin.LeaseCandidates(ns).Get(ctx, "a"); !apierrors.IsNotFound(err) {
			t.Errorf("a's candidate after a stopped: %v, want it deleted", err)
		}

		if pings, timeouts := promtest.Counter(rc.Metrics.Pings), promtest.Counter(rc.Metrics.PingTimeouts); pings < 2 || timeouts != 0 {
			t.Errorf("controller: %v pings, %v ping timeouts; want at least 2 pings, all answered", pings, timeouts)
		}
		for _, c := range []*runningCandidate{a, b} {
			if denied := c.deniedWrites(); denied != "" {
				t.Errorf("writes of candidate %s were denied:\n%s", c.c.Identity(), denied)
			}
		}
		events, err := m.server.Client().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Reason == "PingFailed" {
				t.Errorf("the controller could not ping: %s", e.Note)
			}
		}
	})
}

// checkAnsweredPing waits until the candidate shows a ping later than
// before (nil: any) and its answer. With a freshness window of a millisecond
// the controller may ping again at any election step, so the latest ping may
// still be on its way to an answer when first read.
func checkAnsweredPing(t *testing.T, acc access.Interface, ns, name string, before *metav1.MicroTime) {
	t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lc, err := acc.LeaseCandidates(ns).Get(ctx, name)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ping, renew := lc.Spec.PingTime, lc.Spec.RenewTime
		last = fmt.Sprintf("pingTime %v, renewTime %v", ping, renew)
		return ping != nil && (before == nil || before.Before(ping)) && renew != nil && !renew.Before(ping), nil
	}); err != nil {
		t.Errorf("candidate %s: want a ping after %v, answered; last seen %s", name, before, last)
	}
}

// TestPolicyRules checks each rule of the policies with one write allowed
// and the writes next to it denied, as the users of a cluster would make
// them.
func TestPolicyRules(t *testing.T) {
	forEachMode(t, func(t *testing.T, m *apiMode) {
		ctx := context.Background()
		enablePolicies(t, m)
		ns := m.server.CreateNamespace(t)
		grantCandidates(t, m, ns, "app", "plain")
		admin := accessAs(t, m, framework.AdminUser)
		app, other, mallory, ctrl := accessAs(t, m, appUser), accessAs(t, m, otherAppUser), accessAs(t, m, malloryUser), accessAs(t, m, controllerUser)
		candidates := policyNames[0]
		newCandidate := func(name, lease, writer string) *coordinationv1beta1.LeaseCandidate {
			lc := &coordinationv1beta1.LeaseCandidate{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: coordinationv1beta1.LeaseCandidateSpec{
					LeaseName: lease, BinaryVersion: "1.36.0", EmulationVersion: "1.36.0",
					Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NowMicro()),
				},
			}
			if writer != "" {
				lc.Annotations = map[string]string{access.WriterAnnotation: writer}
			}
			return lc
		}
		create := func(acc access.Interface, lc *coordinationv1beta1.LeaseCandidate) error {
			_, err := acc.LeaseCandidates(ns).Create(ctx, lc)
			return err
		}
		update := func(acc access.Interface, name string, edit func(*coordinationv1beta1.LeaseCandidate)) error {
			return updateCandidate(ctx, admin, acc, ns, name, edit)
		}
		del := func(acc access.Interface, name string) error { return acc.LeaseCandidates(ns).Delete(ctx, name, nil) }
		ping := func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.PingTime = ptr.To(metav1.NowMicro()) }
		renew := func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.RenewTime = ptr.To(metav1.NowMicro()) }
		emulate := func(v string) func(*coordinationv1beta1.LeaseCandidate) {
			return func(lc *coordinationv1beta1.LeaseCandidate) { lc.Spec.EmulationVersion = v }
		}
		writtenBy := func(user string) func(*coordinationv1beta1.LeaseCandidate) {
			return func(lc *coordinationv1beta1.LeaseCandidate) {
				if user == "" {
					delete(lc.Annotations, access.WriterAnnotation)
					return
				}
				if lc.Annotations == nil {
					lc.Annotations = map[string]string{}
				}
				lc.Annotations[access.WriterAnnotation] = user
			}
		}

		t.Run("candidates", func(t *testing.T) {
			for _, step := range []struct {
				what   string
				write  func() error
				denial string // "" when allowed
			}{
				{"app registers c1 as itself", func() error { return create(app, newCandidate("c1", "app", appUser)) }, ""},
				{"app registers a candidate naming other-app", func() error { return create(app, newCandidate("c2", "app", otherAppUser)) }, "must name the user creating it, app, not other-app"},
				{"mallory registers for a Lease it may not update", func() error { return create(mallory, newCandidate("m", "app", malloryUser)) }, "mallory may not be a candidate for the Lease " + ns + "/app"},
				{"app registers for a Lease it may not update", func() error { return create(app, newCandidate("c3", "elsewhere", appUser)) }, "app may not be a candidate for the Lease " + ns + "/elsewhere"},
				{"app renews c1", func() error { return update(app, "c1", renew) }, ""},
				{"app lowers c1's emulation version", func() error { return update(app, "c1", emulate("1.35.0")) }, ""},
				{"other-app changes c1", func() error { return update(other, "c1", emulate("1.34.0")) }, "is written by app: other-app may not change it"},
				{"other-app pings c1", func() error { return update(other, "c1", ping) }, "is written by app: other-app may not change it"},
				{"mallory pings c1", func() error { return update(mallory, "c1", ping) }, "mallory may not be a candidate"},
				{"the controller pings c1", func() error { return update(ctrl, "c1", ping) }, ""},
				{"the controller changes c1's versions", func() error { return update(ctrl, "c1", emulate("1.34.0")) }, "the election controller may change only its spec.pingTime"},
				{"app hands c1 to other-app", func() error { return update(app, "c1", writtenBy(otherAppUser)) }, "does not change once set (from app to other-app)"},
				{"app removes c1's writer", func() error { return update(app, "c1", writtenBy("")) }, "does not change once set (from app to none)"},
				{"other-app deletes c1", func() error { return del(other, "c1") }, "is written by app: other-app may not delete it"},
				{"the controller deletes c1", func() error { return del(ctrl, "c1") }, ""},
				// A candidate without the annotation (client-go's) is open
				// to every user that may update its Lease, until claimed.
				{"app registers u without a writer", func() error { return create(app, newCandidate("u", "app", "")) }, ""},
				{"other-app changes u", func() error { return update(other, "u", emulate("1.35.0")) }, ""},
				{"mallory changes u", func() error { return update(mallory, "u", emulate("1.34.0")) }, "mallory may not be a candidate"},
				{"other-app claims u", func() error { return update(other, "u", writtenBy(otherAppUser)) }, ""},
				{"app changes u", func() error { return update(app, "u", renew) }, "is written by other-app: app may not change it"},
				{"app deletes u", func() error { return del(app, "u") }, "is written by other-app: app may not delete it"},
				{"other-app deletes u", func() error { return del(other, "u") }, ""},
			} {
				checkOutcome(t, step.what, step.write(), candidates, step.denial)
			}
		})

		t.Run("coordinated Lease", func(t *testing.T) {
			leases := policyNames[1]
			now := metav1.NowMicro()
			if _, err := ctrl.Leases(ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To("c1"), Strategy: ptr.To(coordinationv1.OldestEmulationVersion),
					LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To[int32](1), AcquireTime: &now, RenewTime: &now,
				},
			}); err != nil {
				t.Fatalf("the controller creates the Lease: %v", err)
			}
			edit := func(acc access.Interface, f func(*coordinationv1.LeaseSpec)) error {
				lease, err := admin.Leases(ns).Get(ctx, "app")
				if err != nil {
					return err
				}
				f(&lease.Spec)
				_, err = acc.Leases(ns).Update(ctx, lease)
				return err
			}
			holder := func(h string) func(*coordinationv1.LeaseSpec) {
				return func(s *coordinationv1.LeaseSpec) {
					s.HolderIdentity, s.PreferredHolder = ptr.To(h), nil
					s.LeaseTransitions = ptr.To(ptr.Deref(s.LeaseTransitions, 0) + 1)
				}
			}
			prefer := func(h string) func(*coordinationv1.LeaseSpec) {
				return func(s *coordinationv1.LeaseSpec) { s.PreferredHolder = ptr.To(h) }
			}
			renewLease := func(s *coordinationv1.LeaseSpec) { s.RenewTime = ptr.To(metav1.NowMicro()) }
			for _, step := range []struct {
				what   string
				write  func() error
				denial string
			}{
				{"the holder renews", func() error { return edit(app, renewLease) }, ""},
				{"a candidate makes another holder", func() error { return edit(app, holder("c9")) }, "may change holderIdentity from c1 only to release it ('')"},
				{"a candidate sets the preferred holder", func() error { return edit(app, prefer("c9")) }, "only the election controller sets the preferred holder"},
				{"a candidate changes the strategy", func() error {
					return edit(app, func(s *coordinationv1.LeaseSpec) {
						s.Strategy = ptr.To[coordinationv1.CoordinatedLeaseStrategy]("example.com/Other")
					})
				}, "only the election controller changes the strategy"},
				{"the controller prefers c2", func() error { return edit(ctrl, prefer("c2")) }, ""},
				{"the holder hands over to another than the preferred", func() error { return edit(app, holder("c9")) }, "or to hand it over to c2, not to c9"},
				{"the holder hands over to the preferred holder", func() error { return edit(app, holder("c2")) }, ""},
				{"the holder releases", func() error { return edit(other, holder("")) }, ""},
				{"a candidate takes the vacant Lease", func() error { return edit(app, holder("c1")) }, "may change holderIdentity only when there is a holder"},
				{"the controller names c1", func() error { return edit(ctrl, holder("c1")) }, ""},
			} {
				checkOutcome(t, step.what, step.write(), leases, step.denial)
			}
			// client-go's elector drops spec.strategy when it releases;
			// a portable Lease's annotation never goes.
			err := edit(app, func(s *coordinationv1.LeaseSpec) {
				s.HolderIdentity, s.Strategy = ptr.To(""), nil
			})
			if m.name == string(access.ModeNative) {
				checkOutcome(t, "the holder releases as client-go does", err, leases, "")
			} else {
				checkOutcome(t, "the holder releases and drops the strategy annotation", err, leases, "only the election controller changes the strategy")
			}
		})

		t.Run("namespace being deleted", func(t *testing.T) {
			// The namespace controller deletes what is left in a namespace
			// being deleted, whoever wrote it.
			gone := m.server.CreateNamespace(t)
			grantCandidates(t, m, gone, "app")
			lc := newCandidate("t1", "app", appUser)
			lc.Namespace = gone
			if _, err := app.LeaseCandidates(gone).Create(ctx, lc); err != nil {
				t.Fatal(err)
			}
			if err := other.LeaseCandidates(gone).Delete(ctx, "t1", nil); !isPolicyDenial(err, candidates) {
				t.Fatalf("other-app deletes t1 in a live namespace: %v; want it denied", err)
			}
			if err := m.server.Client().CoreV1().Namespaces().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// The policy sees the namespace through an informer: poll.
			var last error
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				last = other.LeaseCandidates(gone).Delete(ctx, "t1", nil)
				return last == nil, nil
			}); err != nil {
				t.Errorf("other-app deletes t1 in a namespace being deleted: %v; want it allowed", last)
			}
		})

		t.Run("Lease deletes", func(t *testing.T) {
			deletes := policyNames[2]
			kube := m.server.Client().CoordinationV1().Leases(ns)
			for _, l := range []*coordinationv1.Lease{
				{ObjectMeta: metav1.ObjectMeta{Name: "group.r1", Annotations: map[string]string{shard.GroupAnnotation: "group"}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "other.r1", Annotations: map[string]string{shard.GroupAnnotation: "group"}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "heartbeat"}},
			} {
				if _, err := kube.Create(ctx, l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			del := func(acc access.Interface, name string) error { return acc.Leases(ns).Delete(ctx, name, nil) }
			for _, step := range []struct {
				what   string
				write  func() error
				denial string
			}{
				{"the controller deletes a Lease of no group", func() error { return del(ctrl, "heartbeat") }, "deletes only the member Leases of shard groups, and " + ns + "/heartbeat is not one"},
				{"the controller deletes a Lease whose name is not its group's", func() error { return del(ctrl, "other.r1") }, "is not one"},
				{"the controller deletes a member Lease", func() error { return del(ctrl, "group.r1") }, ""},
				{"an administrator deletes a Lease of no group", func() error { return del(admin, "heartbeat") }, ""},
			} {
				checkOutcome(t, step.what, step.write(), deletes, step.denial)
			}
			// A delete of a collection names no Lease in the request (the
			// namespace controller's, as a namespace goes): each Lease is
			// judged by itself, and this user is not the controller.
			for _, name := range []string{"left.r1", "left.r2"} {
				if _, err := kube.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			err := kube.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			checkOutcome(t, "an administrator deletes every Lease of the namespace", err, deletes, "")
		})

		t.Run("ordinary Lease", func(t *testing.T) {
			kube := m.server.Client().CoordinationV1().Leases(ns)
			if _, err := kube.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "plain"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone")},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cfg, err := m.server.UserConfig(appUser)
			if err != nil {
				t.Fatal(err)
			}
			asApp := framework.MustClient(cfg).CoordinationV1().Leases(ns)
			lease, err := asApp.Get(ctx, "plain", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lease.Spec.HolderIdentity = ptr.To("app")
			_, err = asApp.Update(ctx, lease, metav1.UpdateOptions{})
			checkOutcome(t, "app takes a Lease not under coordinated election", err, policyNames[1], "")
		})
	})
}

// checkOutcome checks that a write was allowed (denial "") or denied by the
// policy with a message containing denial.
func checkOutcome(t *testing.T, what string, err error, policy, denial string) {
	t.Helper()
	switch {
	case denial == "" && err != nil:
		t.Errorf("%s: %v; want it allowed", what, err)
	case denial != "" && (!isPolicyDenial(err, policy) || !strings.Contains(err.Error(), denial)):
		t.Errorf("%s: %v; want it denied by %s saying %q", what, err, policy, denial)
	}
}

// updateCandidate reads the candidate as reader, applies edit, and writes it
// as writer.
func updateCandidate(ctx context.Context, reader, writer access.Interface, ns, name string, edit func(*coordinationv1beta1.LeaseCandidate)) error {
	// The candidate's own writes (a renewal, the record of its term's
	// token as it starts to lead) may come between the read and the
	// update: read again, as a client would.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lc, err := reader.LeaseCandidates(ns).Get(ctx, name)
		if err != nil {
			return err
		}
		edit(lc)
		_, err = writer.LeaseCandidates(ns).Update(ctx, lc)
		return err
	})
}

// runningCandidate is a candidate of the library, run as a user of the
// server, whose log is kept to find denied writes.
type runningCandidate struct {
	c      *candidate.Candidate
	logs   ktesting.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

// startCandidate runs a candidate as user until the test ends (or stop).
func startCandidate(t *testing.T, m *apiMode, user, ns, lease, id, emulation string) *runningCandidate {
	t.Helper()
	cfg, err := m.server.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := candidate.New(candidate.Config{
		RestConfig: cfg, APIMode: m.name, Namespace: ns, LeaseName: lease, Identity: id,
		BinaryVersion: "1.36.0", EmulationVersion: emulation,
		Callbacks: candidate.Callbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }},
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	r := &runningCandidate{c: c, logs: logger.GetSink().(ktesting.Underlier).GetBuffer(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("candidate %s: %v", id, err)
		}
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the candidate and waits for Run to return: it has released
// the Lease and deleted its LeaseCandidate by then.
func (r *runningCandidate) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		t.Fatalf("candidate %s did not stop within a minute", r.c.Identity())
	}
}

// deniedWrites returns the log lines of the candidate that report a write
// denied by an admission policy.
func (r *runningCandidate) deniedWrites() string {
	var denied []string
	for _, line := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(line, "ValidatingAdmissionPolicy") {
			denied = append(denied, line)
		}
	}
	return strings.Join(denied, "\n")
}
